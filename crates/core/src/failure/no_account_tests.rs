//! Tests of the all-excluded answer (docs/rules/router.md §4).

use chrono::Duration;

use super::*;
use crate::failure::testkit::*;

// --- the all-excluded answer ------------------------------------------------------------------

fn quota(secs: Option<i64>) -> ExcludedEnd {
    ExcludedEnd {
        quota: true,
        until: secs.map(|s| now() + Duration::seconds(s)),
    }
}

fn other(secs: Option<i64>) -> ExcludedEnd {
    ExcludedEnd {
        quota: false,
        until: secs.map(|s| now() + Duration::seconds(s)),
    }
}

#[test]
fn an_all_quota_pool_answers_429_all_accounts_exhausted_with_the_earliest_reset() {
    let a = no_account(&[quota(Some(5 * 3600)), quota(Some(3 * 3600))], now());
    assert_eq!(a.status, 429);
    assert_eq!(
        (a.code, a.kind),
        ("all_accounts_exhausted", "usage_limit_reached")
    );
    assert_eq!(a.retry_after_seconds, Some(3 * 3600));
    assert_eq!(a.resets_at, Some(NOW_UNIX + 3 * 3600));
    assert_eq!(a.resets_in_seconds, Some(3 * 3600));
    assert!(
        !a.message.to_lowercase().contains("cooling"),
        "{}",
        a.message
    );
    assert_eq!(
        a.body(),
        serde_json::json!({"error": {
            "message": a.message,
            "type": "usage_limit_reached",
            "code": "all_accounts_exhausted",
            "resets_at": NOW_UNIX + 3 * 3600,
            "resets_in_seconds": 3 * 3600,
        }})
    );
}

#[test]
fn the_exhausted_message_names_the_reset_in_whole_seconds() {
    // A reset observed with sub-second precision (a cooldown set at `now` + a float
    // `Retry-After`) is named to the second: Codex shows the message to a person.
    let reset = now() + Duration::milliseconds(3 * 3_600_000 + 123);
    let a = no_account(
        &[ExcludedEnd {
            quota: true,
            until: Some(reset),
        }],
        now(),
    );
    assert!(
        a.message.contains("resets at 2026-") && a.message.contains(":00+00:00 (in"),
        "{}",
        a.message
    );
    assert!(!a.message.contains(".123"), "{}", a.message);
}

#[test]
fn a_quota_pool_with_disabled_accounts_is_still_exhausted_not_unhealthy() {
    let a = no_account(&[quota(Some(7200)), other(None), quota(None)], now());
    assert_eq!((a.status, a.code), (429, "all_accounts_exhausted"));
    assert_eq!(a.resets_at, Some(NOW_UNIX + 7200));
    let unknown = no_account(&[quota(None), quota(None)], now());
    assert_eq!(
        (unknown.status, unknown.code),
        (429, "all_accounts_exhausted")
    );
    assert_eq!(
        (unknown.retry_after_seconds, unknown.resets_at),
        (None, None),
        "no reset invented"
    );
    assert!(unknown.body()["error"].get("resets_at").is_none());
}

#[test]
fn a_mixed_pool_answers_429_no_healthy_account_with_the_earliest_end() {
    let a = no_account(
        &[quota(Some(4 * 3600)), other(Some(30)), other(None)],
        now(),
    );
    assert_eq!(a.status, 429);
    assert_eq!(
        (a.code, a.kind),
        ("no_healthy_account", "rate_limit_exceeded")
    );
    assert_eq!(a.retry_after_seconds, Some(30));
    assert_eq!((a.resets_at, a.resets_in_seconds), (None, None));
    let body = a.body();
    assert_eq!(body["error"]["code"], "no_healthy_account");
    assert!(body["error"].get("resets_at").is_none());
    let ms = ExcludedEnd {
        quota: false,
        until: Some(now() + Duration::milliseconds(1200)),
    };
    assert_eq!(
        no_account(&[ms], now()).retry_after_seconds,
        Some(2),
        "rounded up"
    );
}

#[test]
fn no_known_end_answers_503() {
    for exclusions in [
        vec![],
        vec![other(None), other(None)],
        vec![other(Some(-5))],
    ] {
        let a = no_account(&exclusions, now());
        assert_eq!(
            (a.status, a.code),
            (503, "no_healthy_account"),
            "{exclusions:?}"
        );
        assert_eq!(a.retry_after_seconds, None);
        assert_eq!(a.body()["error"]["type"], "server_error");
    }
}
