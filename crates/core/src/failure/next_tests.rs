//! Tests of the next step after a failed attempt.

use chrono::Duration;

use super::*;
use crate::failure::testkit::*;
use crate::failure::*;
use proptest::prelude::*;

// --- next step ------------------------------------------------------------------------------

#[test]
fn transient_failures_are_retried_on_the_same_account_then_moved_on() {
    let t = verdict(FailureClass::Transient, None);
    let ms = |n: u64| Next::RetrySameAfter(std::time::Duration::from_millis(n));
    assert_eq!(next_step(&t, 0, 2, 0.0), ms(500));
    assert_eq!(next_step(&t, 1, 2, 0.0), ms(1000));
    assert_eq!(next_step(&t, 2, 2, 0.0), Next::NextAccount);
    assert_eq!(next_step(&t, 0, 0, 0.0), Next::NextAccount, "max_retries 0");
    assert_eq!(
        next_step(&t, 0, 2, 1.0),
        ms(450),
        "jitter takes up to 10 % off"
    );
    assert_eq!(next_step(&t, 10, 20, 0.0), ms(10_000), "capped at 10 s");
}

#[test]
fn a_transient_retry_after_below_the_cap_is_honoured_above_it_moves_on() {
    let below = verdict(FailureClass::Transient, Some(Duration::milliseconds(700)));
    assert_eq!(
        next_step(&below, 1, 2, 1.0),
        Next::RetrySameAfter(std::time::Duration::from_millis(700)),
        "exactly the Retry-After, no jitter"
    );
    let above = verdict(FailureClass::Transient, Some(Duration::seconds(120)));
    assert_eq!(next_step(&above, 0, 2, 0.0), Next::NextAccount);
    let at_cap = verdict(FailureClass::Transient, Some(Duration::seconds(10)));
    assert_eq!(next_step(&at_cap, 0, 2, 0.0), Next::NextAccount);
}

#[test]
fn other_classes_never_retry_on_the_same_account() {
    for class in [
        FailureClass::Quota,
        FailureClass::RateLimit,
        FailureClass::SessionDead,
    ] {
        let v = verdict(class, Some(Duration::seconds(1)));
        assert_eq!(next_step(&v, 0, 2, 0.0), Next::NextAccount, "{class:?}");
    }
    let v = verdict(FailureClass::RequestError, None);
    assert_eq!(next_step(&v, 0, 2, 0.0), Next::ReturnToClient);
}

proptest! {
    #[test]
    fn in_route_and_rate_limit_backoffs_are_capped_and_non_decreasing(
        n in 0u32..10_000,
        jitter in 0.0f64..=1.0,
    ) {
        for (b, cap) in [(IN_ROUTE_RETRY, Duration::seconds(10)), (RATE_LIMIT_BACKOFF, Duration::minutes(5))] {
            let d = b.delay(n, jitter);
            prop_assert!(d > Duration::zero() && d <= cap);
            prop_assert!(b.delay(n + 1, jitter) >= d);
        }
    }
}
