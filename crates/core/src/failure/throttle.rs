//! The IP-level throttle detector (docs/rules/router.md §3): the whole pool answering plain 429s at once.

use chrono::{DateTime, Duration, Utc};

/// Window in which every account of a pool must answer a plain 429 (docs/rules/router.md §3: 2 s).
pub const THROTTLE_WINDOW: Duration = Duration::seconds(2);
/// Pool cooldown when no `Retry-After` was given (5 s).
pub const THROTTLE_DEFAULT: Duration = Duration::seconds(5);
/// Longest pool cooldown (10 s).
pub const THROTTLE_MAX: Duration = Duration::seconds(10);

/// Detects an IP-level throttle (docs/rules/router.md §3): every account of a pool answered a plain 429
/// within 2 s ⇒ a pool cooldown of the largest `Retry-After` given, else 5 s, at most 10 s.
/// A pool of one account is never taken for throttled (its 429 cannot be told from the
/// account's own limit). Firing forgets the 429s seen, so the next detection needs a full new
/// round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThrottleDetector {
    /// Per account: when it last answered a plain 429, with its Retry-After.
    last: Vec<Option<(DateTime<Utc>, Option<Duration>)>>,
}

impl ThrottleDetector {
    /// A detector over a pool of `accounts` accounts (indexes 0..accounts).
    pub fn new(accounts: usize) -> Self {
        Self {
            last: vec![None; accounts],
        }
    }

    /// Account `index` answered a plain 429 at `now`; returns the pool cooldown when that makes
    /// every account of the pool rate-limited within the last 2 s. Out-of-range indexes are
    /// ignored.
    pub fn rate_limited(
        &mut self,
        index: usize,
        retry_after: Option<Duration>,
        now: DateTime<Utc>,
    ) -> Option<Duration> {
        *self.last.get_mut(index)? = Some((now, retry_after));
        if self.last.len() < 2 {
            return None;
        }
        let since = now - THROTTLE_WINDOW;
        let mut largest: Option<Duration> = None;
        for seen in &self.last {
            let (at, ra) = (*seen)?;
            if at < since {
                return None;
            }
            largest = largest.max(ra);
        }
        self.last.iter_mut().for_each(|s| *s = None);
        Some(
            largest
                .unwrap_or(THROTTLE_DEFAULT)
                .clamp(Duration::zero(), THROTTLE_MAX),
        )
    }

    /// Account `index` answered 2xx: its 429 no longer counts.
    pub fn success(&mut self, index: usize) {
        if let Some(s) = self.last.get_mut(index) {
            *s = None;
        }
    }
}

#[cfg(test)]
#[path = "throttle_tests.rs"]
mod tests;
