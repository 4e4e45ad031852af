//! Tests of the reset and Retry-After hints.

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::failure::testkit::*;
use proptest::prelude::*;

// --- reset parsing --------------------------------------------------------------------------

fn reset(body: &str) -> Option<DateTime<Utc>> {
    parse_reset(&serde_json::from_str(body).unwrap(), now())
}

#[test]
fn resets_at_wins_over_resets_in_seconds_when_they_disagree() {
    let body = format!(
        r#"{{"error":{{"resets_at":{},"resets_in_seconds":60}}}}"#,
        NOW_UNIX + 5000
    );
    assert_eq!(reset(&body), Some(at(NOW_UNIX + 5000)));
    assert_eq!(
        reset(r#"{"error":{"resets_in_seconds":90}}"#),
        Some(now() + Duration::seconds(90))
    );
    assert_eq!(
        reset(&format!(r#"{{"resetsAt":"{}"}}"#, NOW_UNIX + 10)),
        Some(at(NOW_UNIX + 10)),
        "top level, camelCase, numeric string"
    );
    assert_eq!(
        reset(r#"{"error":{"resets_at":"2026-05-26T13:00:00Z"}}"#),
        Some(at(NOW_UNIX + 3600)),
        "RFC 3339"
    );
}

#[test]
fn resets_at_above_1e11_is_milliseconds() {
    let ms = (NOW_UNIX + 120) * 1000;
    assert_eq!(
        reset(&format!(r#"{{"error":{{"resets_at":{ms}}}}}"#)),
        Some(at(NOW_UNIX + 120))
    );
}

#[test]
fn past_resets_are_ignored_and_far_ones_capped_at_31_days() {
    let past = format!(r#"{{"error":{{"resets_at":{}}}}}"#, NOW_UNIX - 10);
    assert_eq!(reset(&past), None);
    let past_then_in = format!(
        r#"{{"error":{{"resets_at":{},"resets_in_seconds":30}}}}"#,
        NOW_UNIX - 10
    );
    assert_eq!(
        reset(&past_then_in),
        Some(now() + Duration::seconds(30)),
        "an unusable resets_at does not hide resets_in_seconds"
    );
    assert_eq!(reset(r#"{"error":{"resets_in_seconds":-5}}"#), None);
    let far = format!(r#"{{"error":{{"resets_at":{}}}}}"#, NOW_UNIX + 90 * 86_400);
    assert_eq!(reset(&far), Some(now() + Duration::days(31)));
    assert_eq!(
        reset(r#"{"error":{"resets_in_seconds":1e300}}"#),
        Some(now() + Duration::days(31))
    );
    assert_eq!(reset(r#"{"error":{"message":"no hint"}}"#), None);
    assert_eq!(reset("[1,2]"), None);
}

proptest! {
    #[test]
    fn a_parsed_reset_is_after_now_and_within_31_days(
        at_s in proptest::option::of(-10_000_000_000_000i64..10_000_000_000_000),
        in_s in proptest::option::of(-1_000_000_000i64..1_000_000_000),
    ) {
        let mut error = serde_json::Map::new();
        if let Some(a) = at_s { error.insert("resets_at".into(), a.into()); }
        if let Some(i) = in_s { error.insert("resets_in_seconds".into(), i.into()); }
        let body = serde_json::json!({ "error": error });
        if let Some(t) = parse_reset(&body, now()) {
            prop_assert!(t > now() && t <= now() + Duration::days(31));
        }
    }
}

// --- Retry-After ------------------------------------------------------------------------------

#[test]
fn retry_after_takes_seconds_and_http_dates() {
    let p = |s| parse_retry_after(s, now());
    assert_eq!(p("120"), Some(Duration::seconds(120)));
    assert_eq!(p(" 0 "), Some(Duration::zero()));
    assert_eq!(p("1.5"), Some(Duration::milliseconds(1500)));
    assert_eq!(
        p("Tue, 26 May 2026 12:00:30 GMT"),
        Some(Duration::seconds(30)),
        "IMF-fixdate"
    );
    assert_eq!(
        p("Tuesday, 26-May-26 12:01:00 GMT"),
        Some(Duration::seconds(60)),
        "RFC 850"
    );
    assert_eq!(
        p("Tue May 26 12:00:05 2026"),
        Some(Duration::seconds(5)),
        "asctime"
    );
    assert_eq!(
        p("Tue, 26 May 2026 11:00:00 GMT"),
        Some(Duration::zero()),
        "a past date: retry now"
    );
}

#[test]
fn retry_after_garbage_and_negatives_are_none_and_huge_is_capped() {
    let p = |s| parse_retry_after(s, now());
    for garbage in [
        "",
        "soon",
        "-5",
        "-0.5",
        "NaN",
        "inf",
        "12s",
        "0x10",
        "Tue, 99 Foo",
    ] {
        assert_eq!(p(garbage), None, "{garbage:?}");
    }
    assert_eq!(p("99999999999999999999999"), Some(Duration::days(31)));
    assert_eq!(p("4000000000"), Some(Duration::days(31)));
    assert_eq!(p("Fri, 01 Jan 2100 00:00:00 GMT"), Some(Duration::days(31)));
}

proptest! {
    #[test]
    fn retry_after_never_panics_and_stays_within_bounds(s in "\\PC{0,40}") {
        if let Some(d) = parse_retry_after(&s, now()) {
            prop_assert!(d >= Duration::zero() && d <= Duration::days(31));
        }
    }

    #[test]
    fn integer_retry_after_is_those_seconds(n in 0u64..2_678_400) {
        prop_assert_eq!(
            parse_retry_after(&n.to_string(), now()),
            Some(Duration::seconds(n as i64))
        );
    }
}
