//! Passive quota evidence end to end (docs/rules/patrol.md §4.7, docs/rules/cpa.md §9): the
//! simulated CPA lists each account's last upstream rate-limit headers; fresh evidence well
//! below the thresholds spares an activity probe, evidence at or over one makes the probe due
//! and the probe decides; stale, absent, empty and garbage evidence change nothing.

use chrono::Duration;
use quota_patrol::core::inspect::Action;
use quota_patrol_sim::{SimAccount, SimConfig};
use serde_json::json;

use crate::helpers::*;

/// The app against a CPA that lists passive quota (`passive` = the sim's switch).
async fn app(accounts: Vec<SimAccount>, passive: bool) -> TestApp {
    let sim = SimConfig {
        management_key: Some(MGMT_KEY.into()),
        accounts,
        ban_after_failures: None,
        version: "v7.2.140".into(),
        passive_quota: passive,
        ..Default::default()
    };
    spawn_app_sim(sim, fast_settings(), false, Default::default()).await
}

/// Two Plus accounts (5 h 10 %, weekly 40 %), both probed once at t0; ten minutes later `busy`
/// serves traffic (counters grow and, when switched on, CPA observes its headers).
async fn busy_after_a_round(passive: bool) -> TestApp {
    let t = app(
        vec![
            plus("busy@example.com", 10.0, 40.0),
            plus("idle@example.com", 10.0, 40.0),
        ],
        passive,
    )
    .await;
    assert_eq!(t.inspect().await.probed_count, 2);
    t.clock.advance(Duration::minutes(10));
    t.sim.add_traffic(&t.name_of("busy@example.com"), 3);
    t
}

#[tokio::test]
async fn fresh_evidence_well_below_the_thresholds_spares_the_probe_until_the_age_rule() {
    let t = busy_after_a_round(true).await;
    let busy = t.name_of("busy@example.com");
    let r = t.inspect().await;
    assert_eq!(r.probed_count, 0, "{r:?}");
    assert!(t.decision(&r, "busy@example.com").from_cache);
    assert!(t.decision(&r, "busy@example.com").spared_by_passive);
    assert!(!t.decision(&r, "idle@example.com").spared_by_passive);
    let m = t.get("/metrics").await.text().await.unwrap();
    assert!(
        m.lines()
            .any(|l| l.starts_with("quota_patrol_probes_skipped_total")
                && l.contains(r#"reason="passive""#)
                && l.contains(r#"site="test""#)),
        "{m}"
    );

    let quotas = t
        .get("/api/quotas")
        .await
        .json::<serde_json::Value>()
        .await
        .unwrap();
    let row = quotas
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["accountName"] == busy.as_str())
        .cloned()
        .unwrap();
    assert_eq!(
        row["cacheReason"],
        quota_patrol::core::freshness::PASSIVE_SPARED,
        "{row}"
    );
    // The evidence is shown beside the probe's snapshot, with its source and age.
    assert_eq!(row["source"], "probe", "{row}");
    assert_eq!(row["ageSeconds"], 600, "{row}");
    assert_eq!(row["passive"]["source"], "passive", "{row}");
    assert_eq!(row["passive"]["ageSeconds"], 0, "{row}");
    assert_eq!(row["passive"]["newerThanProbe"], true, "{row}");
    assert_eq!(row["passive"]["weeklyUsedPercent"], 40.0, "{row}");
    assert_eq!(row["passive"]["fiveHourUsedPercent"], 10.0, "{row}");
    let idle = t.name_of("idle@example.com");
    let idle_row = quotas
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["accountName"] == idle.as_str());
    assert_eq!(idle_row.unwrap()["passive"], serde_json::Value::Null);

    // The 10-hour rule still makes a real probe due (8 h + a spread offset ≤ 110 min).
    t.clock.advance(Duration::hours(10));
    t.sim.add_traffic(&busy, 1);
    let r = t.inspect().await;
    assert!(!t.decision(&r, "busy@example.com").from_cache);
    assert!(r.probed_count >= 1);
}

#[tokio::test]
async fn absent_field_changes_nothing_traffic_is_probed_as_today() {
    let t = busy_after_a_round(false).await;
    let r = t.inspect().await;
    assert_eq!(r.probed_count, 1);
    assert!(!t.decision(&r, "busy@example.com").from_cache);
    assert!(t.decision(&r, "idle@example.com").from_cache);
}

#[tokio::test]
async fn stale_evidence_leaves_the_activity_probe_due() {
    let t = busy_after_a_round(true).await;
    // Default passiveMaxAgeMinutes = 30: 31 minutes later the evidence is stale.
    t.clock.advance(Duration::minutes(31));
    let r = t.inspect().await;
    assert_eq!(r.probed_count, 1);
    assert!(!t.decision(&r, "busy@example.com").from_cache);
}

#[tokio::test]
async fn empty_missing_time_or_garbage_evidence_is_unused_and_the_probe_runs() {
    let observed = (t0() + Duration::minutes(10)).to_rfc3339();
    let cases = [
        ("empty signals", json!({"signals": {}})),
        ("garbage value", json!("garbage")),
        (
            "signals not an object",
            json!({"observed_at": observed, "signals": [1, 2]}),
        ),
        (
            "garbage percent",
            json!({"observed_at": observed, "signals": {
                "X-Codex-Primary-Used-Percent": "lots",
                "X-Codex-Primary-Window-Minutes": "three hundred"}}),
        ),
        (
            "no observed_at",
            json!({"signals": {
                "X-Codex-Primary-Used-Percent": "5",
                "X-Codex-Primary-Window-Minutes": "300",
                "X-Codex-Secondary-Used-Percent": "5",
                "X-Codex-Secondary-Window-Minutes": "10080"}}),
        ),
        (
            "bad observed_at",
            json!({"observed_at": "yesterday", "signals": {
                "X-Codex-Primary-Used-Percent": "5",
                "X-Codex-Primary-Window-Minutes": "10080"}}),
        ),
    ];
    for (case, quota) in cases {
        let t = busy_after_a_round(true).await;
        t.sim
            .set_passive_override(&t.name_of("busy@example.com"), Some(quota));
        let r = t.inspect().await;
        assert_eq!(
            r.status,
            quota_patrol::core::report::RunStatus::Completed,
            "{case}"
        );
        assert_eq!(r.probed_count, 1, "{case}");
        assert!(!t.decision(&r, "busy@example.com").from_cache, "{case}");
    }
}

#[tokio::test]
async fn evidence_over_a_threshold_makes_the_probe_due_and_the_probe_decides() {
    let t = app(
        vec![
            plus("hot@example.com", 10.0, 40.0),
            plus("liar@example.com", 10.0, 40.0),
        ],
        true,
    )
    .await;
    t.inspect().await;
    t.clock.advance(Duration::minutes(10));
    let (hot, liar) = (t.name_of("hot@example.com"), t.name_of("liar@example.com"));
    // hot: the upstream really is at 97 % weekly and CPA saw it (no counter change).
    t.sim
        .update_usage(&hot, |u| u.weekly.as_mut().unwrap().used_percent = 97.0);
    t.sim.observe_passive(&hot);
    // liar: a stale header says 99 % while the usage body says 40 % (docs/rules/cpa.md §9).
    let observed = (t0() + Duration::minutes(10)).to_rfc3339();
    t.sim.set_passive_override(
        &liar,
        Some(json!({"observed_at": observed, "signals": {
            "X-Codex-Primary-Used-Percent": "99",
            "X-Codex-Primary-Window-Minutes": "10080"}})),
    );
    let r = t.inspect().await;
    assert_eq!(r.probed_count, 2, "{r:?}");
    let hot_d = t.decision(&r, "hot@example.com");
    assert!(!hot_d.from_cache);
    assert_eq!(hot_d.action, Action::Disable, "{hot_d:?}");
    assert!(t.sim.account(&hot).unwrap().disabled);
    let liar_d = t.decision(&r, "liar@example.com");
    assert!(!liar_d.from_cache);
    assert_eq!(liar_d.action, Action::Keep, "{liar_d:?}");
    assert!(
        !t.sim.account(&liar).unwrap().disabled,
        "passive evidence never acts"
    );
}

#[tokio::test]
async fn the_status_page_shows_passive_evidence_beside_the_probe() {
    use crate::status_page::{page_text, row_of, sign_in};
    let t = busy_after_a_round(true).await;
    t.inspect().await;
    let cookie = sign_in(&t).await;
    let html = page_text(&t, "/sites/test", &cookie).await;
    let busy = row_of(&html, &t.name_of("busy@example.com"));
    assert!(
        busy.contains("passive: weekly 40 % · 5-hour 10 %, seen"),
        "{busy}"
    );
    assert!(busy.contains(r#"data-passive-newer="true""#), "{busy}");
    let idle = row_of(&html, &t.name_of("idle@example.com"));
    assert!(!idle.contains("passive:"), "{idle}");
}
