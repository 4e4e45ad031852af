//! Tests of the IP-level throttle detector.

use chrono::Duration;

use super::*;
use crate::failure::testkit::*;

// --- throttle detector ------------------------------------------------------------------------

#[test]
fn every_account_429_within_2s_cools_the_pool_at_most_10s() {
    let mut d = ThrottleDetector::new(3);
    let t = now();
    assert_eq!(d.rate_limited(0, Some(Duration::seconds(3)), t), None);
    assert_eq!(
        d.rate_limited(1, None, t + Duration::milliseconds(900)),
        None
    );
    assert_eq!(
        d.rate_limited(
            2,
            Some(Duration::seconds(4)),
            t + Duration::milliseconds(1900)
        ),
        Some(Duration::seconds(4)),
        "the largest Retry-After"
    );
    assert_eq!(
        d.rate_limited(0, None, t + Duration::seconds(2)),
        None,
        "firing starts a new round"
    );
    let mut d = ThrottleDetector::new(2);
    d.rate_limited(0, None, t);
    assert_eq!(
        d.rate_limited(1, None, t),
        Some(Duration::seconds(5)),
        "default 5 s"
    );
    let mut d = ThrottleDetector::new(2);
    d.rate_limited(0, Some(Duration::minutes(10)), t);
    assert_eq!(
        d.rate_limited(1, None, t),
        Some(Duration::seconds(10)),
        "at most 10 s"
    );
}

#[test]
fn rate_limits_spread_over_more_than_2s_or_a_success_are_no_throttle() {
    let t = now();
    let mut d = ThrottleDetector::new(2);
    d.rate_limited(0, None, t);
    assert_eq!(
        d.rate_limited(1, None, t + Duration::milliseconds(2001)),
        None
    );
    let mut d = ThrottleDetector::new(2);
    d.rate_limited(0, None, t);
    d.success(0);
    assert_eq!(d.rate_limited(1, None, t), None);
    let mut single = ThrottleDetector::new(1);
    assert_eq!(
        single.rate_limited(0, None, t),
        None,
        "one account is no pool throttle"
    );
    assert_eq!(d.rate_limited(9, None, t), None, "unknown index ignored");
}
