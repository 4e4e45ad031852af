use chrono::TimeZone;
use serde_json::json;

use super::*;
use crate::settings::PatrolSettings;

fn at(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 8, 22, h, m, 0).unwrap()
}

/// The documented shape: a plus account, 5-hour in primary, weekly in secondary.
fn plus(used_5h: &str, used_weekly: &str, observed: &str) -> Value {
    json!({
        "observed_at": observed,
        "signals": {
            "X-Codex-Plan-Type": "plus",
            "X-Codex-Primary-Used-Percent": used_5h,
            "X-Codex-Primary-Window-Minutes": "300",
            "X-Codex-Primary-Reset-At": "1787400000",
            "X-Codex-Secondary-Used-Percent": used_weekly,
            "X-Codex-Secondary-Window-Minutes": "10080",
            "X-Codex-Secondary-Reset-After-Seconds": "86400"
        }
    })
}

fn policy() -> QuotaPolicy {
    QuotaPolicy::site(&PatrolSettings::default())
}

fn window(e: &PassiveEvidence, kind: WindowKind) -> &crate::quota::QuotaWindow {
    let r = e.report.as_ref().expect("a report");
    r.main_windows().find(|w| w.kind == kind).expect("window")
}

#[test]
fn the_documented_shape_reads_into_the_windows_a_probe_gives() {
    let e = read(Some(&plus("58", "12", "2026-08-22T00:00:00Z"))).unwrap();
    assert_eq!(e.observed_at, Some(at(0, 0)));
    let r = e.report.as_ref().unwrap();
    assert_eq!(r.plan_type.as_deref(), Some("plus"));
    let five = window(&e, WindowKind::FiveHour);
    assert_eq!(
        (five.id.as_str(), five.used_percent),
        ("main:primary", Some(58.0))
    );
    assert_eq!(five.limit_window_seconds, Some(18_000));
    assert_eq!(five.reset_at, DateTime::from_timestamp(1_787_400_000, 0));
    let weekly = window(&e, WindowKind::Weekly);
    assert_eq!(
        (weekly.id.as_str(), weekly.used_percent),
        ("main:secondary", Some(12.0))
    );
    // Reset-after counts from the observation.
    assert_eq!(weekly.reset_at, Some(at(0, 0) + Duration::days(1)));
}

#[test]
fn windows_are_classified_by_minutes_never_by_slot() {
    // A weekly-only account puts 10080 in primary; a month of 31 days is monthly.
    let q = json!({"observed_at": "2026-08-22T00:00:00Z", "signals": {
        "x-codex-primary-used-percent": "40", "x-codex-primary-window-minutes": "10080",
        "X-CODEX-SECONDARY-USED-PERCENT": "5", "X-Codex-Secondary-Window-Minutes": "44640"}});
    let e = read(Some(&q)).unwrap();
    assert_eq!(window(&e, WindowKind::Weekly).id, "main:primary");
    let monthly = window(&e, WindowKind::Monthly);
    assert_eq!(
        (monthly.id.as_str(), monthly.label.as_str()),
        ("main:secondary", "monthly")
    );
}

#[test]
fn a_named_limit_is_an_additional_group_not_a_main_window() {
    let q = json!({"observed_at": "2026-08-22T00:00:00Z", "signals": {
        "X-Codex-Primary-Used-Percent": "10", "X-Codex-Primary-Window-Minutes": "300",
        "X-Codex-Spark-Primary-Used-Percent": "100", "X-Codex-Spark-Primary-Window-Minutes": "300",
        "X-Codex-Spark-Limit-Name": "GPT-5.3-Codex-Spark"}});
    let e = read(Some(&q)).unwrap();
    let r = e.report.as_ref().unwrap();
    assert_eq!(r.main_windows().count(), 1);
    let spark = r.windows.iter().find(|w| w.group != MAIN_GROUP).unwrap();
    assert_eq!(spark.group, "additional:GPT-5.3-Codex-Spark");
    assert_eq!(spark.used_percent, Some(100.0));
    // The model-scoped limit at 100 % does not exhaust the account.
    assert_eq!(
        judge(&e, None, &policy(), at(0, 5), DEFAULT_MAX_AGE),
        PassiveVerdict::SpareProbe
    );
}

#[test]
fn absence_of_the_feature_is_none_and_empty_signals_are_not_seen() {
    assert_eq!(read(None), None);
    assert_eq!(read(Some(&json!(null))), None);
    assert_eq!(
        read(Some(&json!({"observed_at": "2026-08-22T00:00:00Z"}))),
        None
    );
    assert_eq!(read(Some(&json!({"signals": ["x"]}))), None);
    let empty = read(Some(&json!({"signals": {}}))).unwrap();
    assert_eq!((empty.observed_at, empty.report.clone()), (None, None));
    // Only handshake headers (WebSocket): no window, never "0 %".
    let handshake = json!({"observed_at": "2026-08-22T00:00:00Z",
        "signals": {"X-Codex-Plan-Type": "plus", "Retry-After": "3"}});
    let e = read(Some(&handshake)).unwrap();
    assert_eq!(e.report, None);
    assert_eq!(
        judge(&e, None, &policy(), at(0, 1), DEFAULT_MAX_AGE),
        PassiveVerdict::Unused(Unused::NoWindows)
    );
}

#[test]
fn garbage_values_are_dropped_field_by_field() {
    let q = json!({"observed_at": "yesterday", "signals": {
        "X-Codex-Primary-Used-Percent": "lots", "X-Codex-Primary-Window-Minutes": "-5",
        "X-Codex-Secondary-Used-Percent": 7, "X-Codex-Secondary-Window-Minutes": "NaN"}});
    let e = read(Some(&q)).unwrap();
    assert_eq!(e.observed_at, None, "an unreadable observed_at is no time");
    assert_eq!(
        e.report, None,
        "without a time the windows cannot be placed"
    );
    let q = json!({"observed_at": "2026-08-22T00:00:00.123456789+02:00", "signals": {
        "X-Codex-Primary-Used-Percent": "lots", "X-Codex-Primary-Window-Minutes": "300",
        "X-Codex-Secondary-Used-Percent": "37.5", "X-Codex-Secondary-Window-Minutes": "10080",
        "X-Codex-Secondary-Reset-At": "soon"}});
    let e = read(Some(&q)).unwrap();
    assert_eq!(
        e.observed_at,
        Some(at(0, 0) - Duration::hours(2) + Duration::nanoseconds(123_456_789))
    );
    let five = window(&e, WindowKind::FiveHour);
    assert_eq!(five.used_percent, None);
    let weekly = window(&e, WindowKind::Weekly);
    assert_eq!((weekly.used_percent, weekly.reset_at), (Some(37.5), None));
}

#[test]
fn a_missing_observed_at_is_never_used() {
    let mut q = plus("10", "10", "2026-08-22T00:00:00Z");
    q.as_object_mut().unwrap().remove("observed_at");
    let e = read(Some(&q)).unwrap();
    assert_eq!(
        judge(&e, None, &policy(), at(0, 1), DEFAULT_MAX_AGE),
        PassiveVerdict::Unused(Unused::NoTime)
    );
}

#[test]
fn fresh_evidence_well_below_the_thresholds_spares_the_probe() {
    let e = read(Some(&plus("30", "84", "2026-08-22T00:00:00Z"))).unwrap();
    // Default thresholds 95 %: 84 is 11 points below.
    let verdict = judge(
        &e,
        Some(at(0, 0) - Duration::hours(3)),
        &policy(),
        at(0, 20),
        DEFAULT_MAX_AGE,
    );
    assert_eq!(verdict, PassiveVerdict::SpareProbe);
}

#[test]
fn evidence_near_the_threshold_neither_spares_nor_calls_a_probe() {
    let e = read(Some(&plus("30", "86", "2026-08-22T00:00:00Z"))).unwrap();
    assert_eq!(
        judge(&e, None, &policy(), at(0, 20), DEFAULT_MAX_AGE),
        PassiveVerdict::Unused(Unused::NearThreshold)
    );
}

#[test]
fn evidence_at_a_threshold_makes_the_probe_due_and_never_acts_itself() {
    for (five, weekly) in [("95", "10"), ("10", "95"), ("10", "100")] {
        let e = read(Some(&plus(five, weekly, "2026-08-22T00:00:00Z"))).unwrap();
        // Even old evidence calls the probe, if it is newer than the last probe.
        let verdict = judge(
            &e,
            Some(at(0, 0) - Duration::hours(1)),
            &policy(),
            at(5, 0),
            DEFAULT_MAX_AGE,
        );
        assert_eq!(verdict, PassiveVerdict::ProbeNow, "{five}/{weekly}");
    }
    let reached = json!({"observed_at": "2026-08-22T00:00:00Z", "signals": {
        "X-Codex-Primary-Used-Percent": "20", "X-Codex-Primary-Window-Minutes": "10080",
        "X-Codex-Primary-Reset-At": "1787400000", "X-Codex-Limit-Reached": "True"}});
    let e = read(Some(&reached)).unwrap();
    assert_eq!(
        judge(&e, None, &policy(), at(0, 1), DEFAULT_MAX_AGE),
        PassiveVerdict::ProbeNow
    );
}

#[test]
fn evidence_older_than_the_last_probe_or_too_old_is_unused() {
    let e = read(Some(&plus("10", "10", "2026-08-22T00:00:00Z"))).unwrap();
    assert_eq!(
        judge(&e, Some(at(0, 0)), &policy(), at(0, 5), DEFAULT_MAX_AGE),
        PassiveVerdict::Unused(Unused::OlderThanProbe)
    );
    let over = read(Some(&plus("10", "99", "2026-08-22T00:00:00Z"))).unwrap();
    assert_eq!(
        judge(&over, Some(at(1, 0)), &policy(), at(1, 5), DEFAULT_MAX_AGE),
        PassiveVerdict::Unused(Unused::OlderThanProbe),
        "the probe's body outranks an older header"
    );
    assert_eq!(
        judge(&e, None, &policy(), at(0, 31), DEFAULT_MAX_AGE),
        PassiveVerdict::Unused(Unused::Stale)
    );
    assert_eq!(Unused::Stale.as_str(), "stale");
}

#[test]
fn a_max_age_of_zero_spares_nothing_even_for_evidence_from_ahead_of_the_clock() {
    let e = read(Some(&plus("10", "10", "2026-08-22T00:00:00Z"))).unwrap();
    for now in [at(0, 0), at(0, 0) - Duration::minutes(5)] {
        assert_eq!(
            judge(&e, None, &policy(), now, Duration::zero()),
            PassiveVerdict::Unused(Unused::Stale),
            "{now}"
        );
        assert_eq!(
            judge(&e, None, &policy(), now, DEFAULT_MAX_AGE),
            PassiveVerdict::SpareProbe,
            "evidence from ahead counts as just observed: {now}"
        );
    }
}
