//! Rounds end to end against the simulated CPA: actions, failures that must not cause actions,
//! restarts that lose and repeat nothing, reset re-probes handled exactly once.

use chrono::Duration;
use quota_patrol::core::inspect::Action;
use quota_patrol::core::report::RunStatus;
use quota_patrol::jobs::refresh::run_reset_checks;
use quota_patrol_sim::{SimAccount, SimUsage, UpstreamBehaviour};
use serde_json::Value;

use crate::helpers::*;

fn status(code: u16, content_type: &str, body: &str) -> UpstreamBehaviour {
    UpstreamBehaviour::Status {
        status: code,
        content_type: content_type.into(),
        body: body.into(),
    }
}

const CLOUDFLARE: &str = "<!DOCTYPE html><html><head><title>Just a moment...</title></head><body>Cloudflare</body></html>";

#[tokio::test]
async fn a_full_round_disables_exhausted_accounts_and_leaves_the_rest_alone() {
    let mut manual = plus("manual@example.com", 5.0, 10.0);
    manual.disabled = true;
    let mut no_index = plus("noindex@example.com", 5.0, 10.0);
    no_index.has_auth_index = false;
    let t = spawn_app(vec![
        plus("ok@example.com", 10.0, 40.0),
        plus("weekly@example.com", 10.0, 97.0),
        SimAccount::codex(
            "fivehour@example.com",
            "pro",
            SimUsage::paid(
                98.0,
                t0() + Duration::hours(2),
                20.0,
                t0() + Duration::days(3),
            ),
        ),
        free("free@example.com", 30.0),
        free("free-five@example.com", 30.0),
        with_behaviour(
            plus("invalid@example.com", 1.0, 1.0),
            status(
                401,
                "application/json",
                r#"{"error":{"message":"token revoked"}}"#,
            ),
        ),
        with_behaviour(
            plus("edge@example.com", 1.0, 1.0),
            status(403, "text/html", CLOUDFLARE),
        ),
        manual,
        no_index,
    ])
    .await;
    let r = t.inspect().await;
    assert_eq!(r.status, RunStatus::Completed, "{:?}", r.error);
    assert_eq!(r.total_accounts, 9);
    assert_eq!(t.decision(&r, "ok@example.com").action, Action::Keep);
    assert_eq!(t.decision(&r, "weekly@example.com").action, Action::Disable);
    assert_eq!(t.decision(&r, "weekly@example.com").rule, 3);
    assert_eq!(
        t.decision(&r, "fivehour@example.com").action,
        Action::Disable
    );
    assert_eq!(t.decision(&r, "fivehour@example.com").rule, 4);
    assert_eq!(t.decision(&r, "free@example.com").action, Action::Keep);
    let invalid = t.decision(&r, "invalid@example.com");
    assert_eq!(
        (invalid.action, invalid.rule),
        (Action::Keep, 2),
        "one 401 is not enough: {}",
        invalid.reason
    );
    let edge = t.decision(&r, "edge@example.com");
    assert_eq!((edge.action, edge.rule), (Action::Keep, 8));
    assert!(
        edge.error.as_deref().unwrap_or_default().contains("403"),
        "{edge:?}"
    );
    assert_eq!(t.decision(&r, "manual@example.com").action, Action::Keep);
    assert_eq!(t.decision(&r, "noindex@example.com").action, Action::Keep);
    assert_eq!(r.disable_count, 2);
    assert!(
        r.action_outcomes.iter().all(|o| o.success),
        "{:?}",
        r.action_outcomes
    );

    // CPA now has exactly the two disables; nothing else was patched.
    assert!(
        t.sim
            .account(&t.name_of("weekly@example.com"))
            .unwrap()
            .disabled
    );
    assert!(
        t.sim
            .account(&t.name_of("fivehour@example.com"))
            .unwrap()
            .disabled
    );
    let patches = t
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" || r.method == "DELETE")
        .count();
    assert_eq!(patches, 2);

    // Second round: the 401 is confirmed and acted on; the manual disable is classified, not undone.
    let r2 = t.inspect_forced().await;
    let invalid = t.decision(&r2, "invalid@example.com");
    assert_eq!(
        (invalid.action, invalid.rule),
        (Action::Disable, 1),
        "{}",
        invalid.reason
    );
    assert_eq!(t.decision(&r2, "manual@example.com").action, Action::Keep);
    assert!(
        t.sim
            .account(&t.name_of("manual@example.com"))
            .unwrap()
            .disabled
    );
    let accounts: Value = t
        .get("/api/accounts?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    let manual = accounts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["email"] == "manual@example.com")
        .unwrap();
    assert_eq!(manual["disableReason"], "ManualDisabled");
    assert_eq!(manual["disabledBy"], "external");
    let weekly = accounts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["email"] == "weekly@example.com")
        .unwrap();
    assert_eq!(
        (
            weekly["disableReason"].as_str(),
            weekly["disabledBy"].as_str()
        ),
        (Some("QuotaExhausted"), Some("patrol"))
    );
}

#[tokio::test]
async fn action_mode_none_decides_without_acting() {
    let mut s = fast_settings();
    s.auto_action_mode = Some("none".into());
    let t = spawn_app_with(vec![plus("weekly@example.com", 10.0, 99.0)], s).await;
    let r = t.inspect().await;
    assert_eq!(t.decision(&r, "weekly@example.com").action, Action::Keep);
    assert!(t.decision(&r, "weekly@example.com").is_quota_reached);
    assert!(
        !t.sim
            .account(&t.name_of("weekly@example.com"))
            .unwrap()
            .disabled
    );
}

#[tokio::test]
async fn a_dry_run_changes_nothing_in_cpa() {
    let t = spawn_app(vec![plus("weekly@example.com", 10.0, 99.0)]).await;
    let r = quota_patrol::jobs::inspect::run_round(
        &t.patrol,
        SITE,
        quota_patrol::jobs::inspect::RoundOptions {
            dry_run: true,
            ..quota_patrol::jobs::inspect::RoundOptions::new(
                quota_patrol::jobs::inspect::RoundKind::Manual,
            )
        },
    )
    .await
    .unwrap();
    assert_eq!(t.decision(&r, "weekly@example.com").action, Action::Disable);
    assert!(r.action_outcomes.is_empty());
    assert!(
        !t.sim
            .account(&t.name_of("weekly@example.com"))
            .unwrap()
            .disabled
    );
}

#[tokio::test]
async fn when_cpa_dies_half_way_failed_probes_cause_no_action_and_the_next_round_works() {
    let mut s = fast_settings();
    s.probe_workers = Some(1);
    let t = spawn_app_with(
        (0..6)
            .map(|i| plus(&format!("a{i}@example.com"), 10.0, 99.0))
            .collect(),
        s,
    )
    .await;
    t.sim.die_after_api_calls(2);
    let r = t.inspect().await;
    let failed: Vec<_> = r.decisions.iter().filter(|d| d.error.is_some()).collect();
    assert_eq!(failed.len(), 4, "{:#?}", r.decisions);
    assert!(failed.iter().all(|d| d.action == Action::Keep));
    // The two probed accounts were decided; their disables failed because CPA is down, and
    // the failure is recorded, not hidden.
    assert_eq!(r.action_outcomes.len(), 2);
    assert!(
        r.action_outcomes
            .iter()
            .all(|o| !o.success && o.error.is_some())
    );
    assert!(t.sim.accounts().iter().all(|a| !a.disabled));

    // CPA comes back: the daemon is still there and the next round acts on fresh evidence.
    t.sim.set_down(false);
    t.clock.advance(Duration::minutes(31)); // beyond any failure back-off
    let r = t.inspect().await;
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(r.disable_count, 6, "{:#?}", r.decisions);
    assert!(t.sim.accounts().iter().all(|a| a.disabled));
}

#[tokio::test]
async fn a_cpa_that_is_down_fails_the_round_without_any_action() {
    let t = spawn_app(vec![plus("weekly@example.com", 10.0, 99.0)]).await;
    t.sim.set_down(true);
    let r = t.inspect().await;
    assert_eq!(r.status, RunStatus::Error);
    assert!(r.error.as_deref().unwrap().contains("503"), "{:?}", r.error);
    assert!(r.decisions.is_empty());
    t.sim.set_down(false);
    assert_eq!(t.inspect().await.disable_count, 1);
}

#[tokio::test]
async fn garbage_and_html_bodies_are_errors_never_actions() {
    let t = spawn_app(vec![
        with_behaviour(
            plus("garbage@example.com", 1.0, 99.0),
            UpstreamBehaviour::Garbage("<html><body>maintenance</body></html>".into()),
        ),
        with_behaviour(
            plus("jsonarray@example.com", 1.0, 99.0),
            UpstreamBehaviour::Garbage("[1,2,3]".into()),
        ),
        with_behaviour(
            plus("fivexx@example.com", 1.0, 99.0),
            status(502, "text/html", "<html>Bad gateway</html>"),
        ),
        with_behaviour(
            plus("transport@example.com", 1.0, 99.0),
            UpstreamBehaviour::TransportFailure,
        ),
    ])
    .await;
    let r = t.inspect().await;
    for d in &r.decisions {
        assert_eq!(d.action, Action::Keep, "{d:?}");
        assert!(d.error.is_some(), "{d:?}");
    }
    assert!(t.sim.accounts().iter().all(|a| !a.disabled));
    // A garbage listing fails the round with a clear error, and still nothing is acted on.
    t.sim
        .set_listing_garbage(Some("<html>not json</html>".into()));
    let r = t.inspect().await;
    assert_eq!(r.status, RunStatus::Error);
    assert!(
        r.error.as_deref().unwrap().contains("unexpected answer"),
        "{:?}",
        r.error
    );
}

#[tokio::test]
async fn a_timing_out_account_does_not_hold_up_the_others() {
    let t = spawn_app(vec![
        with_behaviour(plus("slow@example.com", 1.0, 99.0), UpstreamBehaviour::Hang),
        plus("weekly@example.com", 10.0, 99.0),
    ])
    .await;
    let r = t.inspect().await;
    let slow = t.decision(&r, "slow@example.com");
    assert_eq!(slow.action, Action::Keep);
    assert!(
        slow.error.as_deref().unwrap().contains("timed out"),
        "{slow:?}"
    );
    assert_eq!(t.decision(&r, "weekly@example.com").action, Action::Disable);
}

#[tokio::test]
async fn a_restart_in_the_middle_of_the_day_loses_nothing_and_repeats_nothing() {
    let t = spawn_app(vec![
        plus("ok@example.com", 10.0, 40.0),
        plus("weekly@example.com", 10.0, 97.0),
    ])
    .await;
    t.inspect().await;
    let before: Value = t.get("/api/quotas?siteId=test").await.json().await.unwrap();
    let weekly = t.name_of("weekly@example.com");
    assert_eq!(t.status_patches(&weekly), vec![true]);

    t.clock.advance(Duration::hours(2));
    let t = t.restart().await;
    // Snapshots, reasons and the last run survived.
    let after: Value = t.get("/api/quotas?siteId=test").await.json().await.unwrap();
    assert_eq!(
        before.as_array().unwrap().len(),
        after.as_array().unwrap().len()
    );
    assert!(
        after
            .as_array()
            .unwrap()
            .iter()
            .all(|q| q["refreshedAt"].is_string())
    );
    let accounts: Value = t
        .get("/api/accounts?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    let w = accounts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == weekly.as_str())
        .unwrap();
    assert_eq!(w["disableReason"], "QuotaExhausted");
    assert_eq!(
        t.get("/api/inspection/last-run?siteId=test").await.status(),
        200
    );

    // The next round reuses fresh data and sends no second disable.
    let r = t.inspect().await;
    assert_eq!(
        r.probed_count, 0,
        "nothing changed, nothing is probed: {:#?}",
        r.decisions
    );
    assert_eq!(t.status_patches(&weekly), vec![true]);
}

#[tokio::test]
async fn a_reset_re_probe_re_enables_an_account_exactly_once_even_across_a_restart() {
    let exhausted = SimAccount::codex(
        "reset@example.com",
        "free",
        SimUsage::weekly_only(100.0, t0() + Duration::minutes(4)),
    );
    let t = spawn_app(vec![exhausted, plus("ok@example.com", 10.0, 10.0)]).await;
    let name = t.name_of("reset@example.com");
    t.inspect().await;
    assert_eq!(t.status_patches(&name), vec![true]);

    // Before reset + 1 minute of grace: nothing is due.
    t.clock
        .advance(Duration::minutes(4) + Duration::seconds(30));
    assert!(run_reset_checks(&t.patrol, SITE).await.unwrap().is_none());

    t.clock.advance(Duration::seconds(31));
    let r = run_reset_checks(&t.patrol, SITE)
        .await
        .unwrap()
        .expect("the reset check runs");
    assert_eq!(t.decision(&r, "reset@example.com").action, Action::Enable);
    assert_eq!(t.status_patches(&name), vec![true, false]);
    assert!(
        run_reset_checks(&t.patrol, SITE).await.unwrap().is_none(),
        "handled once"
    );

    let t = t.restart().await;
    assert!(
        run_reset_checks(&t.patrol, SITE).await.unwrap().is_none(),
        "not repeated after a restart"
    );
    assert_eq!(t.status_patches(&name), vec![true, false]);
}

#[tokio::test]
async fn a_manually_disabled_account_with_recovered_quota_stays_disabled_until_released() {
    let t = spawn_app(vec![plus("a@example.com", 10.0, 10.0)]).await;
    let name = t.name_of("a@example.com");
    t.disable_by_hand(&name).await;
    for _ in 0..2 {
        let r = t.inspect_forced().await;
        assert_eq!(t.decision(&r, "a@example.com").action, Action::Keep);
    }
    assert!(t.sim.account(&name).unwrap().disabled);
    assert_eq!(
        t.post(
            &format!("/api/accounts/{name}/release?siteId=test"),
            Value::Null
        )
        .await
        .status(),
        200
    );
    let r = t.inspect_forced().await;
    assert_eq!(
        t.decision(&r, "a@example.com").action,
        Action::Enable,
        "released accounts are managed again"
    );
    assert!(!t.sim.account(&name).unwrap().disabled);
}

/// docs/rules/patrol.md §3: a window at ≥ 100 % whose reset already passed is no evidence either way — an
/// enabled account is not disabled, one we disabled for its quota is not enabled — and both are
/// re-probed shortly (after `STALE_RECHECK`, 2 minutes).
#[tokio::test]
async fn a_stale_window_neither_disables_nor_enables() {
    let on = SimAccount::codex(
        "on@example.com",
        "free",
        SimUsage::weekly_only(10.0, t0() + Duration::days(3)),
    );
    let off = SimAccount::codex(
        "off@example.com",
        "free",
        SimUsage::weekly_only(100.0, t0() + Duration::minutes(1)),
    );
    let t = spawn_app(vec![on, off]).await;
    let (on, off) = (t.name_of("on@example.com"), t.name_of("off@example.com"));
    t.inspect().await;
    assert!(!t.sim.account(&on).unwrap().disabled);
    assert!(t.sim.account(&off).unwrap().disabled, "exhausted: disabled");
    assert_eq!(t.status_patches(&off), vec![true]);

    // Both now report 100 % of a week whose reset passed a minute ago.
    t.clock.advance(Duration::minutes(2));
    t.sim.set_usage(
        &on,
        SimUsage::weekly_only(100.0, t0() + Duration::minutes(1)),
    );
    t.sim.set_stale(&on, true);
    t.sim.set_stale(&off, true);
    let r = t.inspect_forced().await;
    for email in ["on@example.com", "off@example.com"] {
        let d = t.decision(&r, email);
        assert_eq!(d.action, Action::Keep, "{email}: {d:?}");
        assert!(!d.from_cache, "{email} was probed");
        assert!(d.reason.contains("stale"), "{email}: {}", d.reason);
    }
    assert!(!t.sim.account(&on).unwrap().disabled, "not disabled");
    assert!(t.sim.account(&off).unwrap().disabled, "not enabled");
    assert!(t.status_patches(&on).is_empty());
    assert_eq!(t.status_patches(&off), vec![true], "no enable was sent");
    let accounts: Value = t
        .get("/api/accounts?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    let reason = |name: &str| {
        accounts
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap()["disableReason"]
            .clone()
    };
    assert_eq!(reason(&off), "QuotaExhausted");
    assert_eq!(reason(&on), "");

    // Re-probed within 2 minutes, without waiting for a round: the disabled one by its reset
    // check, the enabled one by the freshness pass.
    t.clock.advance(Duration::minutes(2));
    let r = run_reset_checks(&t.patrol, SITE)
        .await
        .unwrap()
        .expect("the stale disabled account is re-checked");
    assert!(!t.decision(&r, "off@example.com").from_cache);
    let r = quota_patrol::jobs::refresh::run_freshness_pass(&t.patrol, SITE)
        .await
        .unwrap()
        .expect("the stale enabled account is re-probed");
    assert!(!t.decision(&r, "on@example.com").from_cache);
    assert!(!t.sim.account(&on).unwrap().disabled);
    assert!(t.sim.account(&off).unwrap().disabled);
}

#[tokio::test]
async fn activity_in_the_listing_counters_triggers_a_real_probe() {
    let t = spawn_app(vec![
        plus("busy@example.com", 10.0, 40.0),
        plus("idle@example.com", 10.0, 40.0),
    ])
    .await;
    t.inspect().await;
    t.clock.advance(Duration::minutes(10));
    t.sim.add_traffic(&t.name_of("busy@example.com"), 3);
    let r = t.inspect().await;
    assert!(!t.decision(&r, "busy@example.com").from_cache);
    assert!(t.decision(&r, "idle@example.com").from_cache);
    assert_eq!(r.probed_count, 1);
}

#[tokio::test]
async fn the_freshness_pass_probes_due_accounts_once_and_leaves_failing_ones_alone() {
    let t = spawn_app(vec![
        plus("ok@example.com", 10.0, 40.0),
        with_behaviour(
            plus("revoked@example.com", 1.0, 1.0),
            status(401, "application/json", "{}"),
        ),
    ])
    .await;
    // Never probed: both are due.
    let r = quota_patrol::jobs::refresh::run_freshness_pass(&t.patrol, SITE)
        .await
        .unwrap()
        .expect("due accounts");
    assert_eq!(r.probed_count, 2);
    assert!(
        r.action_outcomes.is_empty(),
        "the freshness pass never acts"
    );
    // Right after, nothing is due — not even the account whose probe failed.
    assert!(
        quota_patrol::jobs::refresh::run_freshness_pass(&t.patrol, SITE)
            .await
            .unwrap()
            .is_none()
    );
    // After the real-refresh age (8 h + at most 110 min) both are due again.
    t.clock.advance(Duration::hours(10));
    let r = quota_patrol::jobs::refresh::run_freshness_pass(&t.patrol, SITE)
        .await
        .unwrap()
        .expect("due again");
    assert_eq!(r.probed_count, 2);
}

#[tokio::test]
async fn a_refused_management_key_pauses_the_site_instead_of_retrying_every_tick() {
    let t = spawn_app(vec![plus("ok@example.com", 10.0, 40.0)]).await;
    let wrong = quota_patrol::jobs::sites::SiteInput {
        management_key: Some("wrong-key".into()),
        ..Default::default()
    };
    quota_patrol::jobs::sites::update_site(&t.patrol, SITE, wrong)
        .await
        .unwrap();
    let err = quota_patrol::jobs::refresh::run_freshness_pass(&t.patrol, SITE)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("refused the management key"),
        "{err}"
    );
    for _ in 0..3 {
        assert!(
            quota_patrol::scheduler::tick(&t.patrol).await.is_empty(),
            "paused: nothing starts"
        );
    }
    let listings = t
        .sim
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/auth-files"))
        .count();
    assert_eq!(listings, 1, "one refused key, no retries");
    let logs: Value = t
        .get("/api/runtime/logs?siteId=test&level=error")
        .await
        .json()
        .await
        .unwrap();
    let text = logs.to_string();
    assert!(text.contains("next automatic try at"), "{text}");
    assert!(
        !text.contains("wrong-key") && !text.contains(MGMT_KEY),
        "no key in logs"
    );
    // Not half an hour later (CPA forgets failures only after 2 h idle), but 3 h later.
    t.clock.advance(Duration::minutes(31));
    assert!(quota_patrol::scheduler::tick(&t.patrol).await.is_empty());
    t.clock.advance(Duration::minutes(150));
    assert_eq!(quota_patrol::scheduler::tick(&t.patrol).await.len(), 1);
}

#[tokio::test]
async fn a_failing_reset_re_probe_backs_off_instead_of_running_every_tick() {
    let exhausted = SimAccount::codex(
        "reset@example.com",
        "free",
        SimUsage::weekly_only(100.0, t0() + Duration::minutes(4)),
    );
    let t = spawn_app(vec![exhausted]).await;
    let name = t.name_of("reset@example.com");
    t.inspect().await;
    t.sim
        .set_behaviour(&name, status(503, "text/html", "<html>down</html>"));
    t.clock.advance(Duration::minutes(6));
    let calls = t.sim.api_call_count();
    assert!(run_reset_checks(&t.patrol, SITE).await.unwrap().is_some());
    assert_eq!(t.sim.api_call_count(), calls + 1);
    // Ticks right after: the failed re-check waits for its back-off.
    for _ in 0..3 {
        assert!(run_reset_checks(&t.patrol, SITE).await.unwrap().is_none());
    }
    assert_eq!(t.sim.api_call_count(), calls + 1, "no hammering");
    // After the back-off the re-check comes back, and this time it recovers the account.
    t.sim.set_behaviour(&name, UpstreamBehaviour::Normal);
    t.clock.advance(Duration::minutes(2));
    let r = run_reset_checks(&t.patrol, SITE)
        .await
        .unwrap()
        .expect("retried after back-off");
    assert_eq!(t.decision(&r, "reset@example.com").action, Action::Enable);
}

#[tokio::test]
async fn an_account_disabled_after_a_401_or_402_is_not_re_enabled_from_its_old_snapshot() {
    let t = spawn_app(vec![
        plus("revoked@example.com", 10.0, 10.0),
        plus("deactivated@example.com", 10.0, 10.0),
    ])
    .await;
    t.inspect().await;
    let (revoked, deactivated) = (
        t.name_of("revoked@example.com"),
        t.name_of("deactivated@example.com"),
    );
    t.sim
        .set_behaviour(&revoked, status(401, "application/json", "{}"));
    t.sim.set_behaviour(
        &deactivated,
        status(
            402,
            "application/json",
            r#"{"detail":{"code":"deactivated_workspace"}}"#,
        ),
    );
    t.inspect_forced().await;
    t.inspect_forced().await;
    assert!(
        t.sim.account(&revoked).unwrap().disabled && t.sim.account(&deactivated).unwrap().disabled
    );
    for _ in 0..2 {
        t.clock.advance(Duration::minutes(20));
        let r = t.inspect().await;
        assert_eq!(r.enable_count, 0, "{:#?}", r.decisions);
    }
    assert_eq!(t.status_patches(&revoked), vec![true]);
    assert_eq!(t.status_patches(&deactivated), vec![true]);
}

#[tokio::test]
async fn a_stale_answer_at_reset_time_is_re_probed_within_minutes() {
    let exhausted = SimAccount::codex(
        "stale@example.com",
        "free",
        SimUsage::weekly_only(100.0, t0() + Duration::minutes(4)),
    );
    let t = spawn_app(vec![exhausted]).await;
    let name = t.name_of("stale@example.com");
    t.inspect().await;
    t.sim.set_stale(&name, true);
    t.clock.advance(Duration::minutes(6));
    let r = run_reset_checks(&t.patrol, SITE)
        .await
        .unwrap()
        .expect("reset due");
    assert_eq!(
        t.decision(&r, "stale@example.com").action,
        Action::Keep,
        "stale: no evidence either way"
    );
    // The upstream rolls the window; the re-check comes back within 5 minutes and enables.
    t.sim.set_stale(&name, false);
    t.clock.advance(Duration::minutes(3));
    let r = run_reset_checks(&t.patrol, SITE)
        .await
        .unwrap()
        .expect("stale re-check due");
    assert_eq!(t.decision(&r, "stale@example.com").action, Action::Enable);
}

#[tokio::test]
async fn a_garbage_answer_for_a_disabled_account_never_enables_it() {
    let t = spawn_app(vec![plus("spent@example.com", 10.0, 99.0)]).await;
    let name = t.name_of("spent@example.com");
    t.inspect().await;
    assert!(t.sim.account(&name).unwrap().disabled);
    t.sim
        .set_behaviour(&name, UpstreamBehaviour::Garbage("{\"ok\":true}".into()));
    t.clock.advance(Duration::hours(10));
    let r = t.inspect_forced().await;
    assert_eq!(t.decision(&r, "spent@example.com").action, Action::Keep);
    assert_eq!(t.status_patches(&name), vec![true]);
}

#[tokio::test]
async fn an_empty_listing_does_not_wipe_what_the_patrol_knows() {
    let t = spawn_app(vec![plus("a@example.com", 10.0, 10.0)]).await;
    let name = t.name_of("a@example.com");
    t.post(
        &format!("/api/accounts/{name}/disable?siteId=test"),
        Value::Null,
    )
    .await;
    t.sim.set_listing_garbage(Some("{\"files\":[]}".into()));
    let r = t.inspect().await;
    assert_eq!(
        r.status,
        RunStatus::Error,
        "an empty listing after a full one is not believed"
    );
    t.sim.set_listing_garbage(Some("{}".into()));
    assert_eq!(
        t.inspect().await.status,
        RunStatus::Error,
        "an object without files is not a listing"
    );
    t.sim.set_listing_garbage(None);
    t.inspect().await;
    let accounts: Value = t
        .get("/api/accounts?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        accounts[0]["disabledBy"], "manual",
        "the manual disable survived"
    );
}

/// The listing is parsed as it streams in (docs/benchmarks.md "round (`benches/round.rs`)"):
/// a body that is not a listing still fails the round with the start of what CPA sent.
#[tokio::test]
async fn a_streamed_listing_that_is_not_json_fails_the_round_quoting_its_start() {
    let t = spawn_app(vec![plus("a@example.com", 10.0, 10.0)]).await;
    t.sim
        .set_listing_garbage(Some("<html>bad gateway</html>".into()));
    let r = t.inspect().await;
    assert_eq!(r.status, RunStatus::Error);
    let error = r.error.unwrap_or_default();
    assert!(
        error.contains("body starts with: <html>bad gateway</html>"),
        "{error}"
    );
}

#[tokio::test]
async fn every_cpa_call_of_a_site_shares_one_http_pool_rebuilt_only_for_a_new_timeout() {
    let t = spawn_app(vec![plus("a@example.com", 10.0, 10.0)]).await;
    t.inspect().await;
    t.inspect_forced().await;
    let name = t.name_of("a@example.com");
    t.disable_by_hand(&name).await;
    assert_eq!(
        t.patrol.runtime(SITE).http().builds(),
        1,
        "one pool for everything"
    );
    t.put("/api/settings", serde_json::json!({"timeoutMs": 2000}))
        .await;
    t.inspect().await;
    assert_eq!(
        t.patrol.runtime(SITE).http().builds(),
        2,
        "a new timeout, a new pool"
    );
}

/// docs/rules/patrol.md §5.1: the one action path (`jobs::actions::execute`, used by
/// the round and by routing) re-reads the stored reason and drops an action whose reason is
/// no longer the one its decision read — a person's change wins; an unchanged one runs.
#[tokio::test]
async fn an_action_whose_reason_a_person_changed_since_it_was_read_is_not_executed() {
    use quota_patrol::core::account::{DisableReason, DisableRecord, ReasonOwner};
    use quota_patrol::core::inspect::ReasonChange;
    use quota_patrol::core::oplog::Source;
    use quota_patrol::jobs::actions::{Actor, PlannedAction, execute};
    use std::collections::HashMap;

    let t = spawn_app(vec![plus("a@example.com", 1.0, 10.0)]).await;
    t.inspect().await;
    let name = t.name_of("a@example.com");
    let site = t.patrol.site(SITE).await.unwrap();
    let client = t.patrol.client(&site).await.unwrap();
    // The decision read "no reason"; then a person disables the account.
    let read_before: HashMap<String, DisableRecord> = HashMap::new();
    t.disable_by_hand(&name).await;
    let enable = || {
        vec![PlannedAction {
            name: name.clone(),
            action: Action::Enable,
            auth_index: None,
            reason: ReasonChange::Clear,
            reset: Default::default(),
        }]
    };
    let patches = t.status_patches(&name).len();
    let done = execute(
        &t.patrol,
        &site,
        &client,
        enable(),
        &read_before,
        Actor::Patrol,
        Source::Auto,
        None,
    )
    .await
    .unwrap();
    assert_eq!((done.dropped, done.outcomes.len()), (1, 0));
    assert_eq!(t.status_patches(&name).len(), patches, "no CPA write");
    assert!(t.sim.account(&name).unwrap().disabled);

    // Read after the person's change: the same action runs and clears the reason.
    let read_after = HashMap::from([(
        name.clone(),
        DisableRecord {
            reason: DisableReason::ManualDisabled,
            owner: ReasonOwner::Manual,
            set_at: t0(),
        },
    )]);
    let done = execute(
        &t.patrol,
        &site,
        &client,
        enable(),
        &read_after,
        Actor::Patrol,
        Source::Auto,
        None,
    )
    .await
    .unwrap();
    assert_eq!(done.dropped, 0);
    assert!(done.outcomes.iter().all(|o| o.success) && done.outcomes.len() == 1);
    assert!(!t.sim.account(&name).unwrap().disabled);
    assert_eq!(done.logs.len(), 1);
    let site_id = site.site_id.clone();
    let reasons = t
        .patrol
        .store
        .run(move |c| quota_patrol::store::accounts::load_reasons(c, &site_id))
        .await
        .unwrap();
    assert!(
        !reasons.contains_key(&name),
        "reason cleared with the enable"
    );
}

/// The log entries (`GET /api/runtime/logs`) of `category` about `name` with `op`, oldest first.
async fn entries_of(t: &TestApp, category: &str, op: &str, name: &str) -> Vec<Value> {
    let mut v: Vec<Value> = t
        .log_entries(category)
        .await
        .into_iter()
        .filter(|e| e["operationType"] == op && e["accountName"] == name)
        .collect();
    v.reverse();
    v
}

#[tokio::test]
async fn the_log_entries_of_a_quota_disable_and_its_re_enable_name_the_reset() {
    let reset = t0() + Duration::minutes(4);
    let t = spawn_app(vec![
        SimAccount::codex(
            "reset@example.com",
            "free",
            SimUsage::weekly_only(100.0, reset),
        ),
        plus("ok@example.com", 10.0, 10.0),
    ])
    .await;
    let name = t.name_of("reset@example.com");
    t.inspect().await;
    let at = |e: &Value| {
        e["resetAt"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
    };
    let text = reset.to_rfc3339();
    // The disable: the decision and the action both name the reset it waits for.
    let decided = entries_of(&t, "inspection", "decision", &name).await;
    let acted = entries_of(&t, "account", "action", &name).await;
    for e in [&decided[0], &acted[0]] {
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("disable"), "{e}");
        assert!(message.contains(&text), "{e}");
        assert_eq!(at(e), Some(reset), "{e}");
    }
    // The re-enable after it: the reset that passed.
    t.clock.advance(Duration::minutes(5) + Duration::seconds(1));
    let r = run_reset_checks(&t.patrol, SITE).await.unwrap().unwrap();
    assert_eq!(t.decision(&r, "reset@example.com").action, Action::Enable);
    let decided = entries_of(&t, "inspection", "decision", &name).await;
    let acted = entries_of(&t, "account", "action", &name).await;
    for e in [&decided[1], &acted[1]] {
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("enable"), "{e}");
        assert!(message.contains(&text), "{e}");
        assert_eq!(at(e), Some(reset), "{e}");
    }
}
