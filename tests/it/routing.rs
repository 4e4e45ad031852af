//! Priority routing end to end (docs/rules/patrol.md §6): the seed scenarios of §6.3, the reorder example
//! of §6.2, ownership of manual disables, startup classification of reasons, and the
//! incremental CPA priority sync of §6.5.

use chrono::Duration;
use quota_patrol::core::inspect::Action;
use quota_patrol::core::report::InspectionRunResult;
use quota_patrol_sim::{SimAccount, SimUsage, UpstreamBehaviour};
use serde_json::{Value, json};

use crate::helpers::*;

/// Names of the accounts with these e-mails (CPA sorts by name, so a1 < a2 < a3).
fn names(t: &TestApp, emails: &[&str]) -> Vec<String> {
    emails.iter().map(|e| t.name_of(e)).collect()
}

async fn routing(t: &TestApp, body: Value) -> Value {
    let r = t
        .put("/api/settings/priority-routing?siteId=test", body)
        .await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

async fn list_order(t: &TestApp) -> Vec<String> {
    let v: Value = t
        .get("/api/settings/priority-routing?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    v["accountPriorities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

fn enabled(t: &TestApp, name: &str) -> bool {
    !t.sim.account(name).unwrap().disabled
}

fn set_weekly(t: &TestApp, name: &str, used: f64) {
    t.sim.update_usage(name, |u| {
        if let Some(w) = u.weekly.as_mut() {
            w.used_percent = used;
        }
    });
}

async fn reason_of(t: &TestApp, name: &str) -> (String, Value) {
    let accounts: Value = t
        .get("/api/accounts?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    let a = accounts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .unwrap()
        .clone();
    (
        a["disableReason"].as_str().unwrap().to_string(),
        a["disabledBy"].clone(),
    )
}

async fn logs(t: &TestApp, category: &str) -> String {
    Value::from(t.log_entries(category).await).to_string()
}

/// Three usable plus accounts A1..A3 with routing on (minActive 2) after one inspection.
async fn three_routed() -> (TestApp, Vec<String>, InspectionRunResult) {
    let t = spawn_app(vec![
        plus("a1@example.com", 10.0, 10.0),
        plus("a2@example.com", 10.0, 10.0),
        plus("a3@example.com", 10.0, 10.0),
    ])
    .await;
    routing(
        &t,
        json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 2}),
    )
    .await;
    let r = t.inspect().await;
    let n = names(&t, &["a1@example.com", "a2@example.com", "a3@example.com"]);
    (t, n, r)
}

#[tokio::test]
async fn all_usable_keeps_the_first_two_active_and_stands_the_third_by() {
    let (t, n, r) = three_routed().await;
    assert_eq!(list_order(&t).await, n);
    assert!(enabled(&t, &n[0]) && enabled(&t, &n[1]) && !enabled(&t, &n[2]));
    assert_eq!(r.priority_routing_outcomes.len(), 1);
    assert_eq!(
        (
            r.priority_routing_outcomes[0].action,
            r.priority_routing_outcomes[0].account_name.as_str()
        ),
        (Action::Disable, n[2].as_str())
    );
    assert_eq!(
        reason_of(&t, &n[2]).await,
        ("OrderedStandby".to_string(), json!("routing"))
    );
    let st: Value = t
        .get("/api/settings/priority-routing?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(st["activeAccountNames"], json!([n[0], n[1]]));
}

#[tokio::test]
async fn an_exhausted_first_account_brings_the_third_in_and_its_recovery_sends_the_third_back() {
    let (t, n, _) = three_routed().await;
    set_weekly(&t, &n[0], 97.0);
    t.inspect_forced().await;
    assert!(!enabled(&t, &n[0]) && enabled(&t, &n[1]) && enabled(&t, &n[2]));
    assert_eq!(reason_of(&t, &n[0]).await.0, "QuotaExhausted");
    set_weekly(&t, &n[0], 5.0);
    t.inspect_forced().await;
    assert!(enabled(&t, &n[0]) && enabled(&t, &n[1]) && !enabled(&t, &n[2]));
    assert_eq!(reason_of(&t, &n[2]).await.0, "OrderedStandby");
}

#[tokio::test]
async fn two_exhausted_leave_only_the_third_and_warn() {
    let (t, n, _) = three_routed().await;
    set_weekly(&t, &n[0], 97.0);
    set_weekly(&t, &n[1], 99.0);
    t.inspect_forced().await;
    assert!(!enabled(&t, &n[0]) && !enabled(&t, &n[1]) && enabled(&t, &n[2]));
    assert!(
        logs(&t, "priority")
            .await
            .contains("only 1 usable, below minimum 2")
    );
}

/// §6.3 "with no usable account routing disables nothing more": the exhausted accounts are the
/// patrol's to disable (QuotaExhausted), never routing's standby — not even those the patrol
/// leaves enabled.
#[tokio::test]
async fn all_exhausted_disables_all_and_says_so() {
    let (t, n, _) = three_routed().await;
    assert_eq!(reason_of(&t, &n[2]).await.0, "OrderedStandby");
    for name in &n {
        set_weekly(&t, name, 100.0);
    }
    // The patrol only decides: A1 and A2 stay enabled though exhausted, outside any active set.
    // A routing that stood by every enabled account outside the active set would disable them.
    let r = t
        .put(
            "/api/settings?siteId=test",
            json!({"autoActionMode": "none"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = t.inspect_forced().await;
    assert!(r.priority_routing_outcomes.is_empty(), "{r:?}");
    assert!(enabled(&t, &n[0]) && enabled(&t, &n[1]) && !enabled(&t, &n[2]));
    assert_eq!(
        reason_of(&t, &n[2]).await,
        ("QuotaExhausted".to_string(), json!("patrol")),
        "A3, on standby before, is now disabled for its quota"
    );

    // The patrol disables: all three end disabled, every one by the patrol for its quota.
    let r = t
        .put(
            "/api/settings?siteId=test",
            json!({"autoActionMode": "disable"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = t.inspect_forced().await;
    assert!(r.priority_routing_outcomes.is_empty(), "{r:?}");
    assert!(n.iter().all(|name| !enabled(&t, name)));
    for name in &n {
        assert_eq!(
            reason_of(&t, name).await,
            ("QuotaExhausted".to_string(), json!("patrol")),
            "{name}"
        );
    }
    let l = logs(&t, "priority").await;
    assert!(l.contains("all prioritised accounts exhausted"), "{l}");
    assert_eq!(
        l.matches("routing standby-disabled").count(),
        1,
        "only A3's, in the first round: {l}"
    );
}

#[tokio::test]
async fn a_paid_account_with_five_hour_over_is_not_active_and_min_active_one_takes_only_the_first_usable()
 {
    let (t, n, _) = three_routed().await;
    routing(
        &t,
        json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 1}),
    )
    .await;
    t.sim
        .update_usage(&n[0], |u| u.five_hour.as_mut().unwrap().used_percent = 99.0);
    t.inspect_forced().await;
    assert!(!enabled(&t, &n[0]), "5-hour over: disabled");
    assert!(enabled(&t, &n[1]));
    assert!(!enabled(&t, &n[2]), "minActive 1: only the first usable");
}

#[tokio::test]
async fn a_recovered_account_does_not_jump_the_queue() {
    let t = spawn_app(vec![
        plus("a1@example.com", 10.0, 10.0),
        plus("a2@example.com", 10.0, 10.0),
        plus("a3@example.com", 10.0, 97.0),
        plus("a4@example.com", 10.0, 10.0),
    ])
    .await;
    routing(
        &t,
        json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 2}),
    )
    .await;
    t.inspect().await;
    let n = names(
        &t,
        &[
            "a1@example.com",
            "a2@example.com",
            "a3@example.com",
            "a4@example.com",
        ],
    );
    assert!(!enabled(&t, &n[2]));
    set_weekly(&t, &n[2], 5.0);
    let r = t.inspect_forced().await;
    assert!(
        !enabled(&t, &n[2]),
        "A1 and A2 still usable: the recovered A3 waits"
    );
    assert_eq!(
        t.decision(&r, "a3@example.com").disable_reason,
        Some(quota_patrol::core::account::DisableReason::OrderedStandby)
    );
    assert!(enabled(&t, &n[0]) && enabled(&t, &n[1]) && !enabled(&t, &n[3]));
}

#[tokio::test]
async fn a_manually_disabled_account_with_recovered_quota_stays_disabled_under_routing() {
    let (t, n, _) = three_routed().await;
    assert_eq!(
        t.post(
            &format!("/api/accounts/{}/disable?siteId=test", n[0]),
            Value::Null
        )
        .await
        .status(),
        200
    );
    for _ in 0..2 {
        t.inspect_forced().await;
    }
    assert!(
        !enabled(&t, &n[0]),
        "routing never enables a manual disable"
    );
    assert!(enabled(&t, &n[1]) && enabled(&t, &n[2]));
    assert_eq!(
        reason_of(&t, &n[0]).await,
        ("ManualDisabled".to_string(), json!("manual"))
    );
}

#[tokio::test]
async fn exceptions_and_pending_accounts_are_never_enabled_by_routing() {
    let failing = with_behaviour(
        plus("a3@example.com", 1.0, 1.0),
        UpstreamBehaviour::TransportFailure,
    );
    let mut exc = plus("a4@example.com", 1.0, 1.0);
    exc.disabled = true;
    let t = spawn_app(vec![
        plus("a1@example.com", 99.0, 10.0),
        plus("a2@example.com", 10.0, 99.0),
        failing,
        exc,
    ])
    .await;
    let n = names(
        &t,
        &[
            "a1@example.com",
            "a2@example.com",
            "a3@example.com",
            "a4@example.com",
        ],
    );
    t.inspect().await;
    assert_eq!(
        t.put("/api/exceptions?siteId=test", json!({"exceptions": [n[3]]}))
            .await
            .status(),
        200
    );
    routing(
        &t,
        json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 3}),
    )
    .await;
    t.clock.advance(Duration::hours(1));
    t.inspect_forced().await;
    let st: Value = t
        .get("/api/settings/priority-routing?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    let pending: Vec<&Value> = st["accountPriorities"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pendingFirstInspection"] == true)
        .collect();
    assert_eq!(pending.len(), 1, "the failing account stays pending: {st}");
    assert_eq!(pending[0]["name"], n[2].as_str());
    assert!(!enabled(&t, &n[3]), "exceptions are never touched");
    assert!(
        !st["accountPriorities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == n[3].as_str()),
        "exceptions are not listed"
    );
    assert!(
        logs(&t, "priority")
            .await
            .contains("all prioritised accounts exhausted")
    );
}

#[tokio::test]
async fn new_accounts_are_placed_as_the_spec_example_says_and_cpa_priorities_follow() {
    let t = spawn_app(vec![
        free("free-1@example.com", 20.0),
        SimAccount::codex(
            "paid-1@example.com",
            "pro",
            SimUsage::paid(
                1.0,
                t0() + Duration::hours(2),
                10.0,
                t0() + Duration::days(3),
            ),
        ),
        free("free-2@example.com", 99.0),
    ])
    .await;
    t.inspect().await;
    let existing = names(
        &t,
        &[
            "free-1@example.com",
            "paid-1@example.com",
            "free-2@example.com",
        ],
    );
    let body: Vec<Value> = existing
        .iter()
        .enumerate()
        .map(|(i, n)| json!({"name": n, "priority": i + 1, "pendingFirstInspection": false}))
        .collect();
    routing(&t, json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 2, "accountPriorities": body})).await;
    t.sim.add_account(free("new-free-high@example.com", 10.0));
    t.sim.add_account(free("new-free-low@example.com", 40.0));
    t.sim.add_account(SimAccount::codex(
        "new-paid@example.com",
        "pro",
        SimUsage::paid(
            1.0,
            t0() + Duration::hours(2),
            5.0,
            t0() + Duration::days(3),
        ),
    ));
    t.sim.clear_requests();
    t.inspect().await;
    let expected = names(
        &t,
        &[
            "free-1@example.com",
            "new-free-high@example.com",
            "new-free-low@example.com",
            "new-paid@example.com",
            "paid-1@example.com",
            "free-2@example.com",
        ],
    );
    assert_eq!(list_order(&t).await, expected);
    assert!(logs(&t, "priority").await.contains("reordered"));
    // CPA priorities: first = 6 … last = 1, sent as exactly {name, priority}.
    for (i, name) in expected.iter().enumerate() {
        assert_eq!(
            t.sim.account(name).unwrap().priority,
            6 - i as i64,
            "{name}"
        );
    }
    for r in t
        .sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/auth-files/fields"))
    {
        let b: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(
            b.as_object().unwrap().keys().collect::<Vec<_>>(),
            vec!["name", "priority"]
        );
    }
}

fn field_patches(t: &TestApp) -> Vec<(String, i64)> {
    t.sim
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/auth-files/fields"))
        .map(|r| {
            let b: Value = serde_json::from_str(&r.body).unwrap();
            (
                b["name"].as_str().unwrap().to_string(),
                b["priority"].as_i64().unwrap(),
            )
        })
        .collect()
}

async fn synced_three() -> (TestApp, Vec<String>) {
    let t = spawn_app(vec![
        plus("a1@example.com", 1.0, 1.0),
        plus("a2@example.com", 1.0, 1.0),
        plus("a3@example.com", 1.0, 1.0),
    ])
    .await;
    t.inspect().await;
    let n = names(&t, &["a1@example.com", "a2@example.com", "a3@example.com"]);
    (t, n)
}

fn listing(n: &[String], pending: &[bool]) -> Value {
    Value::Array(
        n.iter()
            .zip(pending)
            .enumerate()
            .map(|(i, (n, p))| json!({"name": n, "priority": i + 1, "pendingFirstInspection": p}))
            .collect(),
    )
}

#[tokio::test]
async fn saving_syncs_only_changed_priorities_with_the_exact_body() {
    let (t, n) = synced_three().await;
    t.sim.clear_requests();
    let st = routing(&t, json!({"priorityRoutingEnabled": false, "accountPriorities": listing(&n, &[false, false, false])})).await;
    assert_eq!(st["cpaPrioritySyncWarning"], Value::Null);
    assert_eq!(
        field_patches(&t),
        vec![(n[0].clone(), 3), (n[1].clone(), 2), (n[2].clone(), 1)]
    );
    t.sim.clear_requests();
    routing(&t, json!({"priorityRoutingEnabled": false, "accountPriorities": listing(&n, &[false, false, false])})).await;
    assert!(
        field_patches(&t).is_empty(),
        "nothing changed, nothing patched"
    );
    t.sim.clear_requests();
    let swapped = vec![n[1].clone(), n[0].clone(), n[2].clone()];
    routing(&t, json!({"priorityRoutingEnabled": false, "accountPriorities": listing(&swapped, &[false, false, false])})).await;
    assert_eq!(
        field_patches(&t),
        vec![(n[1].clone(), 3), (n[0].clone(), 2)]
    );
}

#[tokio::test]
async fn pending_entries_and_exceptions_are_not_synced_and_unknown_names_are_warned_about() {
    let (t, n) = synced_three().await;
    t.put("/api/exceptions?siteId=test", json!({"exceptions": [n[2]]}))
        .await;
    t.sim.clear_requests();
    let mut body = listing(&n, &[false, true, false]);
    body.as_array_mut()
        .unwrap()
        .push(json!({"name": "ghost.json", "priority": 9, "pendingFirstInspection": false}));
    let st = routing(
        &t,
        json!({"priorityRoutingEnabled": true, "accountPriorities": body}),
    )
    .await;
    assert_eq!(field_patches(&t), vec![(n[0].clone(), 1)]);
    assert!(st["warnings"].to_string().contains("ghost.json"), "{st}");
}

#[tokio::test]
async fn duplicate_or_missing_names_in_cpa_stop_the_sync_with_a_warning_and_keep_the_saved_list() {
    let (t, n) = synced_three().await;
    let mut dup = plus("other@example.com", 1.0, 1.0);
    dup.name = n[0].to_uppercase();
    dup.provider = "claude".into();
    t.sim.add_account(dup);
    t.sim.clear_requests();
    let st = routing(&t, json!({"priorityRoutingEnabled": true, "accountPriorities": listing(&n, &[false, false, false])})).await;
    assert!(
        st["cpaPrioritySyncWarning"]
            .as_str()
            .unwrap()
            .contains("duplicate"),
        "{st}"
    );
    assert!(field_patches(&t).is_empty());
    assert_eq!(list_order(&t).await, n, "local config is not rolled back");

    let (t, n) = synced_three().await;
    let del = reqwest::Client::new()
        .delete(format!("{}/v0/management/auth-files", t.sim.base_url()))
        .query(&[("name", n[1].as_str())])
        .bearer_auth(MGMT_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 200);
    t.sim.clear_requests();
    let st = routing(&t, json!({"priorityRoutingEnabled": true, "accountPriorities": listing(&n, &[false, false, false])})).await;
    let w = st["cpaPrioritySyncWarning"].as_str().unwrap();
    assert!(w.contains("missing") && w.contains(&n[1]), "{w}");
    assert!(field_patches(&t).is_empty());
}

#[tokio::test]
async fn a_patch_failing_half_way_stops_the_sync_and_keeps_earlier_patches() {
    let (t, n) = synced_three().await;
    t.sim.set_fail_patch(&n[1], Some(500));
    t.sim.clear_requests();
    let st = routing(&t, json!({"priorityRoutingEnabled": true, "accountPriorities": listing(&n, &[false, false, false])})).await;
    assert!(
        st["cpaPrioritySyncWarning"]
            .as_str()
            .unwrap()
            .contains("failed after 1 update"),
        "{st}"
    );
    assert_eq!(
        t.sim.account(&n[0]).unwrap().priority,
        3,
        "the earlier patch stays"
    );
    assert_eq!(
        t.sim.account(&n[2]).unwrap().priority,
        0,
        "nothing after the failure"
    );
    assert_eq!(list_order(&t).await, n);
}

#[tokio::test]
async fn an_unreachable_cpa_does_not_stop_saving_the_routing_config() {
    let (t, n) = synced_three().await;
    t.sim.set_down(true);
    let st = routing(&t, json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 3, "accountPriorities": listing(&n, &[false, false, false])})).await;
    assert!(
        st["cpaPrioritySyncWarning"]
            .as_str()
            .unwrap()
            .contains("stopped"),
        "{st}"
    );
    assert_eq!(st["priorityMinActiveCount"], 3);
    assert_eq!(list_order(&t).await, n);
}

#[tokio::test]
async fn an_out_of_range_minimum_is_clamped() {
    let (t, _) = synced_three().await;
    let st = routing(
        &t,
        json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 11}),
    )
    .await;
    assert_eq!(st["priorityMinActiveCount"], 10);
    let st = routing(
        &t,
        json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 0}),
    )
    .await;
    assert_eq!(st["priorityMinActiveCount"], 1);
}

#[tokio::test]
async fn reasons_of_accounts_disabled_while_the_daemon_was_down_are_rebuilt_at_the_first_round() {
    let (t, n) = synced_three().await;
    routing(
        &t,
        json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 3}),
    )
    .await;
    let t = t.restart().await;
    // While "down", a person disables A1 (usable) and A2 runs out and is disabled elsewhere.
    t.sim.set_disabled(&n[0], true);
    set_weekly(&t, &n[1], 100.0);
    t.sim.set_disabled(&n[1], true);
    t.clock.advance(Duration::hours(1));
    t.inspect_forced().await;
    assert_eq!(
        reason_of(&t, &n[0]).await,
        ("ManualDisabled".to_string(), json!("external"))
    );
    assert_eq!(
        reason_of(&t, &n[1]).await,
        ("QuotaExhausted".to_string(), json!("patrol"))
    );
    assert!(
        !enabled(&t, &n[0]),
        "a person's disable is never undone by routing"
    );
}

/// Runs the same pool through three rounds and returns what the patrol did.
async fn run_pool(routing_off_explicitly: bool) -> (Vec<(String, Action, bool)>, Vec<bool>) {
    let t = spawn_app(vec![
        plus("a1@example.com", 10.0, 97.0),
        plus("a2@example.com", 99.0, 10.0),
        plus("a3@example.com", 10.0, 10.0),
        free("a4@example.com", 20.0),
    ])
    .await;
    let first = t.inspect().await;
    assert!(first.priority_routing_outcomes.is_empty());
    let mut actions: Vec<(String, Action, bool)> = first
        .action_outcomes
        .into_iter()
        .map(|o| (o.account_name, o.action, o.success))
        .collect();
    if routing_off_explicitly {
        let n = names(
            &t,
            &[
                "a4@example.com",
                "a3@example.com",
                "a2@example.com",
                "a1@example.com",
            ],
        );
        routing(&t, json!({"priorityRoutingEnabled": false, "priorityMinActiveCount": 1, "accountPriorities": listing(&n, &[false, false, false, false])})).await;
    }
    let n = names(
        &t,
        &[
            "a1@example.com",
            "a2@example.com",
            "a3@example.com",
            "a4@example.com",
        ],
    );
    for step in 0..3 {
        if step == 1 {
            set_weekly(&t, &n[0], 5.0);
        }
        let r = t.inspect_forced().await;
        assert!(r.priority_routing_outcomes.is_empty());
        for o in r.action_outcomes {
            actions.push((o.account_name, o.action, o.success));
        }
    }
    (actions, n.iter().map(|name| enabled(&t, name)).collect())
}

#[tokio::test]
async fn with_routing_off_every_decision_and_action_is_as_without_the_feature() {
    let without = run_pool(false).await;
    let with_off = run_pool(true).await;
    assert_eq!(without, with_off);
    assert!(!without.0.is_empty(), "the scenario does act");
}

#[tokio::test]
async fn routing_never_re_enables_an_account_the_patrol_just_disabled_for_a_402() {
    let (t, n, _) = three_routed().await;
    t.sim.set_behaviour(
        &n[0],
        UpstreamBehaviour::Status {
            status: 402,
            content_type: "application/json".into(),
            body: r#"{"detail":{"code":"deactivated_workspace"}}"#.into(),
        },
    );
    for _ in 0..2 {
        let r = t.inspect_forced().await;
        assert!(
            !r.priority_routing_outcomes
                .iter()
                .any(|o| o.action == Action::Enable && o.account_name == n[0]),
            "{:?}",
            r.priority_routing_outcomes
        );
    }
    assert!(
        !enabled(&t, &n[0]),
        "the deactivated account stays disabled"
    );
    assert!(
        enabled(&t, &n[1]) && enabled(&t, &n[2]),
        "the next two take over"
    );
    assert_eq!(reason_of(&t, &n[0]).await.0, "ErrorDisabled");
}

#[tokio::test]
async fn a_pending_account_in_back_off_does_not_graduate_on_its_old_snapshot() {
    let (t, n, _) = three_routed().await;
    // A3 is left out of a saved list: it comes back as pending at the next reload.
    let body: Vec<Value> = n[..2]
        .iter()
        .enumerate()
        .map(|(i, name)| json!({"name": name, "priority": i + 1, "pendingFirstInspection": false}))
        .collect();
    routing(
        &t,
        json!({"priorityRoutingEnabled": true, "accountPriorities": body}),
    )
    .await;
    t.sim
        .set_behaviour(&n[2], UpstreamBehaviour::TransportFailure);
    t.inspect_forced().await; // fails: back-off starts
    t.inspect().await; // skipped while backing off
    let st: Value = t
        .get("/api/settings/priority-routing?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    let a3 = st["accountPriorities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == n[2].as_str())
        .unwrap()
        .clone();
    assert_eq!(a3["pendingFirstInspection"], true, "{st}");
}

#[tokio::test]
async fn a_recovered_first_account_waits_for_a_manual_inspection_when_auto_polling_is_off() {
    let mut s = fast_settings();
    s.auto_polling_enabled = Some(false);
    // A paid account keeps its place when exhausted, so its recovery changes the active set.
    let a1 = SimAccount::codex(
        "a1@example.com",
        "plus",
        SimUsage::paid(
            10.0,
            t0() + Duration::hours(3),
            100.0,
            t0() + Duration::minutes(4),
        ),
    );
    let t = spawn_app_with(
        vec![
            a1,
            plus("a2@example.com", 10.0, 10.0),
            plus("a3@example.com", 10.0, 10.0),
        ],
        s,
    )
    .await;
    routing(
        &t,
        json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 1}),
    )
    .await;
    t.inspect().await;
    let n = names(&t, &["a1@example.com", "a2@example.com", "a3@example.com"]);
    assert_eq!(list_order(&t).await, n);
    assert!(!enabled(&t, &n[0]) && enabled(&t, &n[1]) && !enabled(&t, &n[2]));
    t.clock.advance(Duration::minutes(6));
    let r = quota_patrol::jobs::refresh::run_reset_checks(&t.patrol, SITE)
        .await
        .unwrap()
        .expect("reset due");
    assert!(r.priority_routing_outcomes.is_empty());
    assert!(
        !enabled(&t, &n[0]),
        "recovered, but no dispatch without auto polling"
    );
    assert!(enabled(&t, &n[1]));
    let r = t.inspect().await;
    assert!(
        r.priority_routing_outcomes
            .iter()
            .any(|o| o.action == Action::Enable && o.account_name == n[0]),
        "{:?}",
        r.priority_routing_outcomes
    );
    assert!(
        enabled(&t, &n[0]) && !enabled(&t, &n[1]),
        "A1 is first again; A2 back to standby"
    );
}

#[tokio::test]
async fn with_nothing_usable_routing_disables_nothing_more() {
    let failing = with_behaviour(
        plus("a3@example.com", 1.0, 1.0),
        UpstreamBehaviour::TransportFailure,
    );
    let t = spawn_app(vec![
        plus("a1@example.com", 10.0, 99.0),
        plus("a2@example.com", 10.0, 100.0),
        failing,
    ])
    .await;
    routing(
        &t,
        json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 2}),
    )
    .await;
    let r = t.inspect().await;
    let n = names(&t, &["a1@example.com", "a2@example.com", "a3@example.com"]);
    assert!(
        !enabled(&t, &n[0]) && !enabled(&t, &n[1]),
        "the patrol disabled the exhausted ones"
    );
    assert!(
        enabled(&t, &n[2]),
        "the account without data is left as it is"
    );
    assert!(
        r.priority_routing_outcomes.is_empty(),
        "{:?}",
        r.priority_routing_outcomes
    );
    assert!(
        logs(&t, "priority")
            .await
            .contains("all prioritised accounts exhausted")
    );
}
