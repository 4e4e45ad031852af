//! The one backoff of the crate: capped exponential delays, with the jitter passed in by the
//! caller (randomness is injected, like the clock). Used by probe back-off (`freshness`), alert
//! delivery retries (`alerting`) and the pause after CPA management failures; the router will
//! use it for in-route retries (router.md §3).

use chrono::Duration;

/// A capped exponential backoff: `base`, `2·base`, `4·base` … at most `cap`; each delay is
/// shortened by up to `spread` (a fraction, 0 = no jitter) times the caller's `jitter`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    /// Share of a delay that jitter may take off (0.0 ..= 1.0).
    pub spread: f64,
}

impl Backoff {
    /// A backoff from `base` doubling up to `cap`, without jitter.
    pub const fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            spread: 0.0,
        }
    }

    /// The delay after `failures` failures in a row (0 and 1 ⇒ `base`), with `jitter` in
    /// `0.0..=1.0` (clamped; 0 ⇒ the full delay). Never above `cap`, never negative, and for a
    /// fixed jitter never shorter for more failures.
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        let exp = failures.saturating_sub(1).min(30);
        let nominal = self
            .base
            .checked_mul(1_i32 << exp.min(30))
            .unwrap_or(self.cap)
            .min(self.cap);
        let cut = self.spread.clamp(0.0, 1.0) * jitter.clamp(0.0, 1.0);
        let ms = nominal.num_milliseconds() as f64 * (1.0 - cut);
        Duration::milliseconds(ms.round() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn delays_double_from_the_base_up_to_the_cap() {
        let b = Backoff::new(Duration::minutes(1), Duration::minutes(30));
        let got: Vec<i64> = (0..=7).map(|n| b.delay(n, 0.0).num_minutes()).collect();
        assert_eq!(got, vec![1, 1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(b.delay(u32::MAX, 0.0), Duration::minutes(30));
    }

    #[test]
    fn jitter_takes_off_at_most_the_spread() {
        let b = Backoff {
            spread: 0.5,
            ..Backoff::new(Duration::seconds(2), Duration::minutes(5))
        };
        assert_eq!(b.delay(1, 0.0), Duration::seconds(2));
        assert_eq!(b.delay(1, 1.0), Duration::seconds(1));
        assert_eq!(b.delay(1, 7.0), Duration::seconds(1), "jitter is clamped");
    }

    proptest! {
        #[test]
        fn backoff_is_capped_and_non_decreasing(
            n in 0u32..10_000,
            jitter in 0.0f64..=1.0,
            spread in 0.0f64..=1.0,
        ) {
            let b = Backoff { spread, ..Backoff::new(Duration::seconds(2), Duration::minutes(5)) };
            let d = b.delay(n, jitter);
            prop_assert!(d >= Duration::zero() && d <= Duration::minutes(5));
            prop_assert!(b.delay(n + 1, jitter) >= d);
        }
    }
}
