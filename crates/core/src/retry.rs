//! The one backoff of the crate: capped exponential delays, with the jitter passed in by the
//! caller (randomness is injected, like the clock). Used by probe back-off (`freshness`), alert
//! delivery retries (`alerting`), the pause after CPA management failures and the in-round
//! probe retries ([`retry`], [`PROBE_RETRY`]); the router will use it for in-route retries
//! (docs/rules/router.md §3). The jitter is a fraction the caller draws from its injected random source
//! (`crate::random::Random`), so a fixed source gives a fixed delay sequence.

use std::future::Future;

use chrono::Duration;

/// Share of a background backoff's delay that jitter may take off: ±10 % as docs/rules/router.md §3
/// names for its retries, applied downwards only so that the cap holds. Background loops back
/// off with jitter (ARCHITECTURE.md) so that failures of many accounts do not retry in step.
pub const JITTER_SPREAD: f64 = 0.1;

/// In-round retries of a transiently failed probe (docs/rules/patrol.md §2 `retryCount`: "exponential
/// backoff and jitter"): 500 ms doubling up to 10 s, [`JITTER_SPREAD`].
pub const PROBE_RETRY: Backoff =
    Backoff::new(Duration::milliseconds(500), Duration::seconds(10)).with_spread(JITTER_SPREAD);

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

    /// The same backoff with `spread` (a fraction, 0.0 ..= 1.0) of each delay open to jitter.
    pub const fn with_spread(self, spread: f64) -> Self {
        Self { spread, ..self }
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

/// Runs `attempt` until it succeeds, fails for good (`should_retry` says no), or `retries`
/// retries are spent; before retry `k` (1-based) it awaits `sleep(backoff.delay(k, jitter()))`.
/// So `attempt` runs at most `retries + 1` times. Returns the first success or the last error.
/// Runtime-agnostic: the caller passes the sleep (tokio's in jobs) and the jitter (its injected
/// random source), which keeps this pure and testable without a clock.
pub async fn retry<T, E, A, S>(
    backoff: &Backoff,
    retries: u32,
    mut attempt: impl FnMut() -> A,
    mut should_retry: impl FnMut(&E) -> bool,
    mut jitter: impl FnMut() -> f64,
    mut sleep: impl FnMut(Duration) -> S,
) -> Result<T, E>
where
    A: Future<Output = Result<T, E>>,
    S: Future<Output = ()>,
{
    let mut retried = 0;
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if retried >= retries || !should_retry(&e) => return Err(e),
            Err(_) => {
                retried += 1;
                sleep(backoff.delay(retried, jitter())).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::RefCell;

    /// Polls a future that never waits (the sleeps below return at once) to its end.
    fn run<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    /// Runs [`retry`] over an attempt that fails `fail_first` times with a transient error;
    /// returns the result, the number of attempts and the delays slept.
    fn retry_run(retries: u32, fail_first: u32, jitter: f64) -> (Result<u32, u32>, u32, Vec<i64>) {
        let attempts = RefCell::new(0u32);
        let slept = RefCell::new(Vec::new());
        let res = run(retry(
            &PROBE_RETRY,
            retries,
            || {
                *attempts.borrow_mut() += 1;
                let n = *attempts.borrow();
                async move { if n <= fail_first { Err(n) } else { Ok(n) } }
            },
            |_| true,
            || jitter,
            |d| {
                slept.borrow_mut().push(d.num_milliseconds());
                async {}
            },
        ));
        (res, attempts.into_inner(), slept.into_inner())
    }

    #[test]
    fn the_retry_loop_is_capped_at_retries_plus_one_attempts() {
        let (res, attempts, slept) = retry_run(3, u32::MAX, 0.0);
        assert_eq!(res, Err(4), "the last error comes back");
        assert_eq!(attempts, 4);
        assert_eq!(slept, vec![500, 1000, 2000]);
        let (res, attempts, slept) = retry_run(0, u32::MAX, 0.0);
        assert_eq!(
            (res, attempts, slept.len()),
            (Err(1), 1, 0),
            "0 retries: one attempt"
        );
        let (res, attempts, _) = retry_run(5, 2, 0.0);
        assert_eq!((res, attempts), (Ok(3), 3), "stops at the first success");
    }

    #[test]
    fn a_permanent_error_is_not_retried() {
        let attempts = RefCell::new(0u32);
        let res: Result<(), &str> = run(retry(
            &PROBE_RETRY,
            5,
            || {
                *attempts.borrow_mut() += 1;
                async { Err("401") }
            },
            |e| *e != "401",
            || 0.0,
            |_| async {},
        ));
        assert_eq!((res, attempts.into_inner()), (Err("401"), 1));
    }

    #[test]
    fn a_fixed_jitter_gives_a_fixed_delay_sequence() {
        let (_, _, slept) = retry_run(7, u32::MAX, 1.0);
        // 500 ms doubling to the 10 s cap, each cut by the full 10 % spread.
        assert_eq!(slept, vec![450, 900, 1800, 3600, 7200, 9000, 9000]);
        assert_eq!(
            retry_run(7, u32::MAX, 1.0).2,
            slept,
            "same jitter, same delays"
        );
    }

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
