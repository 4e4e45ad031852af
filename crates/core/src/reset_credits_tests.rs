use chrono::TimeZone;
use serde_json::json;

use super::*;

fn at(d: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 9, d, 12, 0, 0).unwrap()
}

#[test]
fn the_usage_hint_is_read_and_its_absence_is_unknown_not_zero() {
    let body = json!({"plan_type": "plus", "rate_limit_reset_credits":
        {"available_count": 2, "applicable_available_count": "1"}});
    assert_eq!(
        hint(&body),
        Some(CreditHint {
            available: Some(2),
            applicable: Some(1)
        })
    );
    assert_eq!(hint(&json!({"plan_type": "plus"})), None);
    assert_eq!(
        hint(&json!({"rate_limit_reset_credits": {"available_count": -1}})),
        Some(CreditHint::default()),
        "a negative count is unreadable, not zero"
    );
    // Paid credit is unrelated.
    assert_eq!(hint(&json!({"credits": {"has_credits": true}})), None);
}

#[test]
fn the_list_trusts_available_count_and_keeps_unknown_statuses() {
    let body = r#"{"available_count": 3, "credits": [
        {"id": "RateLimitResetCredit_a", "reset_type": "codex_rate_limits", "status": "available",
         "granted_at": "2026-08-20T00:00:00Z", "expires_at": "2026-09-19T00:00:00Z", "redeemed_at": null},
        {"id": "RateLimitResetCredit_b", "status": "frozen"},
        {"id": "", "status": "available"},
        {"status": "available"}]}"#;
    let list = read_list(body).unwrap();
    assert_eq!(list.available_count, 3);
    assert_eq!(list.credits.len(), 2);
    assert_eq!(list.credits[1].status, CreditStatus::Other("frozen".into()));
    let null = read_list(r#"{"available_count": 1, "credits": null}"#).unwrap();
    assert!(null.credits.is_empty() && null.available_count == 1);
    assert!(read_list("<html>").is_err());
    assert!(read_list(r#"{"credits": []}"#).is_err());
}

#[test]
fn the_soonest_expiring_available_credit_comes_first_and_lapsed_ones_never() {
    let credit = |id: &str, status: CreditStatus, expires: Option<DateTime<Utc>>| Credit {
        id: id.into(),
        status,
        granted_at: None,
        expires_at: expires,
    };
    let list = CreditList {
        available_count: 4,
        credits: vec![
            credit("late", CreditStatus::Available, Some(at(20))),
            credit("lapsed", CreditStatus::Available, Some(at(1))),
            credit("unknown", CreditStatus::Available, None),
            credit("spent", CreditStatus::Redeemed, Some(at(3))),
            credit("soon", CreditStatus::Available, Some(at(5))),
        ],
    };
    assert_eq!(list.soonest_expiring(at(2)).unwrap().id, "soon");
    assert_eq!(list.soonest_expiring(at(21)).unwrap().id, "unknown");
}

#[test]
fn consume_answers_are_classified_and_only_reset_or_already_redeemed_is_success() {
    let reset = classify_consume(
        200,
        r#"{"code":"reset","credit":{"status":"redeemed"},"windows_reset":1}"#,
    );
    assert_eq!(
        reset,
        ConsumeOutcome::Reset {
            windows_reset: Some(1)
        }
    );
    assert!(reset.redeemed());
    assert!(classify_consume(200, r#"{"code":"already_redeemed"}"#).redeemed());
    for (body, name) in [
        (r#"{"code":"nothing_to_reset"}"#, "nothing_to_reset"),
        (r#"{"code":"no_credit"}"#, "no_credit"),
        (r#"{"code":"maybe_later"}"#, "refused"),
    ] {
        let o = classify_consume(200, body);
        assert_eq!(o.as_str(), name);
        assert!(!o.redeemed() && !o.ambiguous());
    }
    // The consume may have happened: retry with the same id.
    for (status, body) in [
        (502, r#"{"error":"request failed"}"#),
        (0, ""),
        (503, ""),
        (200, "not json"),
    ] {
        assert!(
            classify_consume(status, body).ambiguous(),
            "{status} {body}"
        );
    }
    for status in [401, 403, 409, 429] {
        assert_eq!(classify_consume(status, "{}").as_str(), "refused");
    }
}

fn guard(id: &str, until: DateTime<Utc>, settled: Option<&str>) -> RedeemGuard {
    RedeemGuard {
        chatgpt_account_id: id.into(),
        window_reset_at: until,
        redeem_request_id: format!("req-{id}"),
        settled: settled.map(str::to_owned),
    }
}

#[test]
fn a_window_is_redeemed_once_and_an_unknown_answer_is_retried_with_the_same_id() {
    let until = at(10);
    assert_eq!(guard_decision(&[], "acc", until), GuardDecision::Proceed);
    let pending = [guard("acc", until, None)];
    assert_eq!(
        guard_decision(&pending, "acc", until),
        GuardDecision::Retry {
            redeem_request_id: "req-acc".into()
        }
    );
    // After a reset the re-probe may still read 100 %: the window stays settled.
    let done = [guard("acc", until, Some("reset"))];
    assert!(matches!(
        guard_decision(&done, "acc", until),
        GuardDecision::Settled { .. }
    ));
    // The next window is a new one.
    assert_eq!(guard_decision(&done, "acc", at(17)), GuardDecision::Proceed);
    assert_eq!(unsettled(&pending).count(), 1);
    assert_eq!(unsettled(&done).count(), 0);
}

fn facts(name: &str, expiry: Option<DateTime<Utc>>) -> CandidateFacts {
    CandidateFacts {
        name: name.into(),
        chatgpt_account_id: Some(format!("id-{name}")),
        enabled_or_standby: true,
        limited_until: Some(at(10)),
        applicable: Some(1),
        never_act: false,
        soonest_expiry: expiry,
    }
}

#[test]
fn the_candidate_is_limited_applicable_acting_and_soonest_expiring() {
    let mut accounts = vec![
        facts("b-late", Some(at(25))),
        facts("c-soon", Some(at(12))),
        facts("a-unknown", None),
    ];
    let (best, d) = pick_candidate(&accounts, &[]).unwrap();
    assert_eq!((best.name.as_str(), d), ("c-soon", GuardDecision::Proceed));

    // Each exclusion in turn removes c-soon.
    let excluded: [fn(&mut CandidateFacts); 5] = [
        |a| a.never_act = true,
        |a| a.enabled_or_standby = false,
        |a| a.applicable = Some(0),
        |a| a.limited_until = None,
        |a| a.chatgpt_account_id = None,
    ];
    for exclude in excluded {
        let mut v = accounts.clone();
        exclude(&mut v[1]);
        assert_eq!(pick_candidate(&v, &[]).unwrap().0.name, "b-late");
    }
    // Settled in this window: skipped; unknown answer elsewhere: retried first.
    let guards = [
        guard("id-c-soon", at(10), Some("reset")),
        guard("id-a-unknown", at(10), None),
    ];
    let (best, d) = pick_candidate(&accounts, &guards).unwrap();
    assert_eq!(best.name, "a-unknown");
    assert_eq!(
        d,
        GuardDecision::Retry {
            redeem_request_id: "req-id-a-unknown".into()
        }
    );
    accounts.iter_mut().for_each(|a| a.applicable = None);
    assert_eq!(
        pick_candidate(&accounts, &[]),
        None,
        "an unknown count is not a credit"
    );
}

#[test]
fn a_site_needs_a_credit_below_its_min_active_count_or_with_none_usable() {
    assert!(site_needs_credit(0, 0));
    assert!(site_needs_credit(1, 2));
    assert!(!site_needs_credit(2, 2));
    assert!(!site_needs_credit(1, 0));
}

/// The hint of a usage body given as a JSON value.
fn hint(usage: &Value) -> Option<CreditHint> {
    read_hint_object(usage.as_object()?)
}
