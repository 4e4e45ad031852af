//! Safe against a real CPA (docs/rules/patrol.md §11 items 3–5): every write read back (a write CPA answered ok
//! but did not apply is re-applied once), values CPA lost in a token refresh repaired while a
//! person's change is adopted, stale CPA cooldowns cleared with `reset-quota` once (v7.2.22+
//! only), `?name=` only on v7.2.94+, `auth_index` on status patches only on v7.2.x, and
//! exception/pending accounts whose CPA priority sits above the routed ones.

use chrono::Duration;
use quota_patrol::core::inspect::Action;
use quota_patrol::core::settings::SettingsPatch;
use serde_json::{Value, json};

use crate::helpers::*;

async fn logs(t: &TestApp, category: &str) -> Vec<Value> {
    t.log_entries(category).await
}

fn with_op<'a>(logs: &'a [Value], op: &str) -> Vec<&'a Value> {
    logs.iter().filter(|l| l["operationType"] == op).collect()
}

fn reset_quota_calls(t: &TestApp) -> Vec<Value> {
    t.bodies("POST", "/reset-quota")
}

fn fields_patches(t: &TestApp, name: &str) -> Vec<Value> {
    t.bodies("PATCH", "/auth-files/fields")
        .into_iter()
        .filter(|b| b["name"] == name)
        .collect()
}

/// Counter value of `quota_patrol_cpa_write_drift_total` for kind `kind` of site `test`.
async fn drift_metric(t: &TestApp, kind: &str) -> f64 {
    let text = t.get("/metrics").await.text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("quota_patrol_cpa_write_drift_total{"))
        .filter(|l| l.contains(&format!("kind=\"{kind}\"")) && l.contains("site=\"test\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn with_prio(mut a: quota_patrol_sim::SimAccount, p: i64) -> quota_patrol_sim::SimAccount {
    a.priority = p;
    a
}

/// A person changing a field in CPA's UI (the UI uses the same management API).
async fn person_patch_fields(t: &TestApp, body: Value) {
    let r = t
        .http
        .patch(format!(
            "{}/v0/management/auth-files/fields",
            t.sim.base_url()
        ))
        .bearer_auth(MGMT_KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_status_patch_cpa_answered_ok_without_applying_is_re_applied_once() {
    let t = spawn_app(vec![plus("hot@example.com", 10.0, 97.0)]).await;
    let name = t.name_of("hot@example.com");
    let before = drift_metric(&t, "disabled").await;
    t.sim.revert_next_write(&name);
    let r = t.inspect().await;
    assert_eq!(t.decision(&r, "hot@example.com").action, Action::Disable);
    assert_eq!(t.status_patches(&name), vec![true, true], "re-applied once");
    assert!(t.sim.account(&name).unwrap().disabled);
    let l = logs(&t, "account").await;
    let drift = with_op(&l, "writeDrift");
    assert_eq!(drift.len(), 1, "{l:?}");
    assert_eq!(drift[0]["level"], "warning");
    assert!(
        drift[0]["message"]
            .as_str()
            .unwrap()
            .contains("re-applied once: ok")
    );
    assert!(drift_metric(&t, "disabled").await >= before + 1.0);
    // The next round finds CPA as written: nothing more is sent.
    t.inspect_forced().await;
    assert_eq!(t.status_patches(&name), vec![true, true]);
}

#[tokio::test]
async fn a_priority_patch_cpa_answered_ok_without_applying_is_re_applied_once() {
    let t = spawn_app(vec![
        plus("a@example.com", 1.0, 1.0),
        plus("b@example.com", 1.0, 1.0),
    ])
    .await;
    t.inspect().await;
    let (a, b) = (t.name_of("a@example.com"), t.name_of("b@example.com"));
    let before = drift_metric(&t, "priority").await;
    t.sim.revert_next_write(&a);
    let r = t
        .put(
            "/api/settings/priority-routing?siteId=test",
            json!({"priorityRoutingEnabled": false, "accountPriorities": [
                {"name": a, "priority": 1, "pendingFirstInspection": false},
                {"name": b, "priority": 2, "pendingFirstInspection": false}]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let sent = fields_patches(&t, &a);
    assert_eq!(
        sent,
        vec![json!({"name": a, "priority": 2}); 2],
        "sent twice, exactly"
    );
    assert_eq!(t.sim.account(&a).unwrap().priority, 2);
    assert_eq!(fields_patches(&t, &b).len(), 1);
    assert!(drift_metric(&t, "priority").await >= before + 1.0);
    let l = logs(&t, "account").await;
    assert_eq!(with_op(&l, "writeDrift").len(), 1, "{l:?}");
}

#[tokio::test]
async fn an_enable_in_cpa_is_adopted_as_a_persons_change_even_after_a_token_refresh() {
    let t = spawn_app(vec![
        plus("a@example.com", 1.0, 1.0),
        plus("b@example.com", 1.0, 1.0),
    ])
    .await;
    t.inspect().await;
    let (a, b) = (t.name_of("a@example.com"), t.name_of("b@example.com"));
    for n in [&a, &b] {
        t.disable_by_hand(n).await;
    }
    t.clock.advance(Duration::minutes(5));
    // A person enabled both in CPA's UI; a token refresh followed on a (as CPA refreshes an
    // account soon after it is enabled): that must not make it look like CPA's own drift.
    t.sim.set_disabled(&a, false);
    t.sim.simulate_token_refresh(&a);
    t.sim.set_disabled(&b, false);
    t.inspect().await;
    for n in [&a, &b] {
        assert!(
            !t.sim.account(n).unwrap().disabled,
            "the person's enable stands"
        );
        assert_eq!(t.status_patches(n), vec![true]);
    }
    let l = logs(&t, "account").await;
    let adopted = with_op(&l, "externalChange");
    assert_eq!(adopted.len(), 2, "{l:?}");
    assert!(with_op(&l, "writeDrift").is_empty(), "{l:?}");
    // Adopted means forgotten: later rounds leave b alone too.
    t.clock.advance(Duration::minutes(5));
    t.sim.simulate_token_refresh(&b);
    t.inspect().await;
    assert_eq!(t.status_patches(&b), vec![true]);
}

#[tokio::test]
async fn a_priority_lost_in_a_token_refresh_is_repaired_but_a_persons_priority_is_adopted() {
    let t = spawn_app(vec![
        plus("a@example.com", 1.0, 1.0),
        plus("b@example.com", 1.0, 1.0),
    ])
    .await;
    t.inspect().await;
    let (a, b) = (t.name_of("a@example.com"), t.name_of("b@example.com"));
    t.put(
        "/api/settings/priority-routing?siteId=test",
        json!({"priorityRoutingEnabled": false, "accountPriorities": [
            {"name": a, "priority": 1, "pendingFirstInspection": false},
            {"name": b, "priority": 2, "pendingFirstInspection": false}]}),
    )
    .await;
    assert_eq!(t.sim.account(&a).unwrap().priority, 2);
    t.clock.advance(Duration::minutes(5));
    t.sim.simulate_token_refresh(&a);
    person_patch_fields(&t, json!({"name": b, "priority": 7})).await;
    t.inspect().await;
    assert_eq!(t.sim.account(&a).unwrap().priority, 2, "repaired");
    assert_eq!(fields_patches(&t, &a).len(), 2);
    assert_eq!(t.sim.account(&b).unwrap().priority, 7, "adopted");
    // A person resetting our value to 0 without any token refresh is theirs as well.
    person_patch_fields(&t, json!({"name": a, "priority": 0})).await;
    t.inspect().await;
    assert_eq!(t.sim.account(&a).unwrap().priority, 0);
    assert_eq!(
        fields_patches(&t, &a).len(),
        3,
        "only the person's patch was added"
    );
}

async fn exhaust_then_recover(t: &TestApp, name: &str) {
    let r = t.inspect().await;
    assert_eq!(r.decisions[0].action, Action::Disable);
    t.sim
        .update_usage(name, |u| u.weekly.as_mut().unwrap().used_percent = 5.0);
    let r = t.inspect_forced().await;
    assert_eq!(
        r.decisions[0].action,
        Action::Enable,
        "{:?}",
        r.decisions[0]
    );
}

#[tokio::test]
async fn reset_quota_is_called_once_after_a_re_enable_on_v7_2() {
    let t = spawn_app_version(
        vec![plus("hot@example.com", 10.0, 97.0)],
        fast_settings(),
        "v7.2.140",
    )
    .await;
    let name = t.name_of("hot@example.com");
    exhaust_then_recover(&t, &name).await;
    let index = t.sim.auth_index_for("codex", &name);
    assert_eq!(reset_quota_calls(&t), vec![json!({"auth_index": index})]);
    t.inspect_forced().await;
    t.inspect_forced().await;
    assert_eq!(reset_quota_calls(&t).len(), 1, "once, not every round");
    let l = logs(&t, "account").await;
    assert_eq!(with_op(&l, "cooldownReset").len(), 1, "{l:?}");
}

#[tokio::test]
async fn reset_quota_is_never_called_on_v7_1_19_nor_on_dev_builds() {
    for version in ["v7.1.19", "dev"] {
        let t = spawn_app_version(
            vec![plus("hot@example.com", 10.0, 97.0)],
            fast_settings(),
            version,
        )
        .await;
        let name = t.name_of("hot@example.com");
        exhaust_then_recover(&t, &name).await;
        t.sim.set_cooldown(&name, Some(t0() + Duration::hours(2)));
        t.inspect_forced().await;
        assert!(reset_quota_calls(&t).is_empty(), "{version}");
    }
}

#[tokio::test]
async fn a_usable_probe_clears_a_listed_cooldown_once_per_episode() {
    let t = spawn_app_version(
        vec![plus("a@example.com", 10.0, 10.0)],
        fast_settings(),
        "7.2.140",
    )
    .await;
    let name = t.name_of("a@example.com");
    t.inspect().await;
    assert!(reset_quota_calls(&t).is_empty(), "no cooldown, no call");
    let until = t0() + Duration::hours(2);
    t.sim.set_cooldown(&name, Some(until));
    t.inspect_forced().await;
    assert_eq!(reset_quota_calls(&t).len(), 1);
    assert_eq!(
        t.sim.account(&name).unwrap().next_retry_after,
        None,
        "CPA cleared it"
    );
    // CPA still (or again) shows the same cooldown: the same episode is not reset twice.
    t.sim.set_cooldown(&name, Some(until));
    t.inspect_forced().await;
    assert_eq!(reset_quota_calls(&t).len(), 1);
    // The episode ends; a new one gets its own call.
    t.sim.set_cooldown(&name, None);
    t.inspect_forced().await;
    t.sim.set_cooldown(&name, Some(until + Duration::hours(1)));
    t.inspect_forced().await;
    assert_eq!(reset_quota_calls(&t).len(), 2);
}

#[tokio::test]
async fn clear_cpa_cooldowns_off_calls_nothing() {
    let settings = SettingsPatch {
        clear_cpa_cooldowns: Some(false),
        ..fast_settings()
    };
    let t = spawn_app_version(
        vec![plus("hot@example.com", 10.0, 97.0)],
        settings,
        "v7.2.140",
    )
    .await;
    let name = t.name_of("hot@example.com");
    exhaust_then_recover(&t, &name).await;
    t.sim.set_cooldown(&name, Some(t0() + Duration::hours(2)));
    t.inspect_forced().await;
    assert!(reset_quota_calls(&t).is_empty());
    let s: Value = t
        .get("/api/settings?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(s["clearCpaCooldowns"], false);
}

#[tokio::test]
async fn auth_index_guards_status_patches_only_on_v7_2() {
    for (version, guarded) in [("v7.1.19", false), ("dev", false), ("v7.2.22", true)] {
        let t = spawn_app_version(
            vec![plus("hot@example.com", 10.0, 97.0)],
            fast_settings(),
            version,
        )
        .await;
        let name = t.name_of("hot@example.com");
        t.inspect().await;
        let bodies = t.bodies("PATCH", "/auth-files/status");
        assert_eq!(bodies.len(), 1, "{version}");
        let expected = if guarded {
            json!({"name": name, "disabled": true, "auth_index": t.sim.auth_index_for("codex", &name)})
        } else {
            json!({"name": name, "disabled": true})
        };
        assert_eq!(bodies[0], expected, "{version}");
        assert!(t.sim.account(&name).unwrap().disabled, "{version}");
    }
}

fn listing_queries(t: &TestApp) -> Vec<String> {
    t.sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/auth-files"))
        .map(|r| r.query)
        .collect()
}

#[tokio::test]
async fn a_single_refresh_asks_for_one_name_only_on_v7_2_94_and_later() {
    for (version, filtered) in [("v7.1.19", false), ("v7.2.93", false), ("v7.2.94", true)] {
        let t = spawn_app_version(
            vec![
                plus("a@example.com", 10.0, 10.0),
                plus("b@example.com", 10.0, 20.0),
            ],
            fast_settings(),
            version,
        )
        .await;
        t.inspect().await;
        let name = t.name_of("b@example.com");
        t.sim.clear_requests();
        let r = t
            .post(
                &format!("/api/quotas/{name}/refresh?siteId=test"),
                Value::Null,
            )
            .await;
        assert_eq!(r.status(), 200, "{version}");
        let q = listing_queries(&t);
        assert_eq!(q.len(), 1, "{version}: {q:?}");
        assert_eq!(q[0].starts_with("name="), filtered, "{version}: {q:?}");
        let accounts: Value = t
            .get("/api/accounts?siteId=test")
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            accounts.as_array().unwrap().len(),
            2,
            "{version}: the others stay"
        );
    }
}

#[tokio::test]
async fn a_name_filter_ignored_by_cpa_is_tolerated() {
    let t = spawn_app_version(
        vec![
            plus("a@example.com", 10.0, 10.0),
            plus("b@example.com", 10.0, 20.0),
        ],
        fast_settings(),
        "v7.2.140",
    )
    .await;
    t.inspect().await;
    t.sim.set_ignore_list_filters(true);
    let name = t.name_of("b@example.com");
    let r = t
        .post(
            &format!("/api/quotas/{name}/refresh?siteId=test"),
            Value::Null,
        )
        .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let text = body.to_string();
    assert!(text.contains(&name), "{text}");
    assert!(
        !text.contains(&t.name_of("a@example.com")),
        "only b: {text}"
    );
    assert!(listing_queries(&t).last().unwrap().starts_with("name="));
    let accounts: Value = t
        .get("/api/accounts?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(accounts.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_pending_account_above_the_routed_ones_is_reported_and_lowered_on_request() {
    let t = spawn_app(vec![
        plus("a@example.com", 1.0, 1.0),
        plus("b@example.com", 1.0, 1.0),
        with_prio(plus("c@example.com", 1.0, 1.0), 9),
    ])
    .await;
    t.inspect().await;
    let n: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|e| t.name_of(&format!("{e}@example.com")))
        .collect();
    let list = json!([
        {"name": n[0], "priority": 1, "pendingFirstInspection": false},
        {"name": n[1], "priority": 2, "pendingFirstInspection": false},
        {"name": n[2], "priority": 3, "pendingFirstInspection": true}]);
    let r = t
        .put(
            "/api/settings/priority-routing?siteId=test",
            json!({"priorityRoutingEnabled": false, "accountPriorities": list}),
        )
        .await;
    let saved: Value = r.json().await.unwrap();
    let w = saved["warnings"].to_string();
    assert!(
        w.contains(&n[2]) && w.contains("pending first inspection"),
        "{saved}"
    );
    assert_eq!(saved["lowerStalePriorities"], false);
    let st: Value = t
        .get("/api/settings/priority-routing?siteId=test")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(st["warnings"].as_array().unwrap().len(), 1, "{st}");
    assert!(
        st["warnings"][0].as_str().unwrap().contains("priority 9"),
        "{st}"
    );
    let l = logs(&t, "priority").await;
    assert!(!with_op(&l, "stalePriority").is_empty(), "{l:?}");
    assert_eq!(
        t.sim.account(&n[2]).unwrap().priority,
        9,
        "left alone while off"
    );
    let r = t
        .put(
            "/api/settings/priority-routing?siteId=test",
            json!({"priorityRoutingEnabled": false, "lowerStalePriorities": true}),
        )
        .await;
    let saved: Value = r.json().await.unwrap();
    assert_eq!(saved["lowerStalePriorities"], true);
    assert_eq!(t.sim.account(&n[2]).unwrap().priority, 0);
    assert_eq!(
        fields_patches(&t, &n[2]),
        vec![json!({"name": n[2], "priority": 0})]
    );
    assert_eq!(saved["warnings"], json!([]), "{saved}");
}

#[tokio::test]
async fn the_new_settings_are_documented_in_openapi_and_validated_like_the_others() {
    let t = spawn_app(vec![]).await;
    let doc = t.get("/api/openapi.json").await.text().await.unwrap();
    for field in ["clearCpaCooldowns", "lowerStalePriorities"] {
        assert!(doc.contains(field), "{field} missing from OpenAPI");
    }
    let r = t
        .put(
            "/api/settings?siteId=test",
            json!({"clearCpaCooldowns": "yes"}),
        )
        .await;
    assert_eq!(r.status(), 400, "a non-boolean is rejected");
    let r = t
        .put(
            "/api/settings?siteId=test",
            json!({"clearCpaCooldowns": false, "lowerStalePriorities": true}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let s: Value = r.json().await.unwrap();
    assert_eq!(
        (
            s["clearCpaCooldowns"].clone(),
            s["lowerStalePriorities"].clone()
        ),
        (json!(false), json!(true))
    );
}

#[tokio::test]
async fn a_routing_enable_clears_a_listed_cooldown_once_and_calls_nothing_without_one() {
    let t = spawn_app_version(
        vec![
            plus("a@example.com", 10.0, 10.0),
            plus("b@example.com", 10.0, 10.0),
        ],
        fast_settings(),
        "v7.2.140",
    )
    .await;
    let (a, b) = (t.name_of("a@example.com"), t.name_of("b@example.com"));
    t.put(
        "/api/settings/priority-routing?siteId=test",
        json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 1}),
    )
    .await;
    t.inspect().await;
    assert!(t.sim.account(&b).unwrap().disabled, "b waits as standby");
    assert!(reset_quota_calls(&t).is_empty());
    t.sim
        .update_usage(&a, |u| u.weekly.as_mut().unwrap().used_percent = 97.0);
    t.sim.set_cooldown(&b, Some(t0() + Duration::hours(2)));
    let r = t.inspect_forced().await;
    assert!(
        !t.sim.account(&b).unwrap().disabled,
        "{:?}",
        r.priority_routing_outcomes
    );
    assert_eq!(
        reset_quota_calls(&t),
        vec![json!({"auth_index": t.sim.auth_index_for("codex", &b)})]
    );
    // Its turn coming without a cooldown in CPA is no reason to call reset-quota: a recovers,
    // b goes back to standby, and a is enabled again without any call.
    t.sim
        .update_usage(&a, |u| u.weekly.as_mut().unwrap().used_percent = 10.0);
    t.sim
        .update_usage(&b, |u| u.weekly.as_mut().unwrap().used_percent = 97.0);
    t.inspect_forced().await;
    assert_eq!(reset_quota_calls(&t).len(), 1, "no call without a cooldown");
}

#[tokio::test]
async fn the_cooldown_episode_already_cleared_survives_a_restart() {
    let t = spawn_app_version(
        vec![plus("a@example.com", 10.0, 10.0)],
        fast_settings(),
        "v7.2.140",
    )
    .await;
    let name = t.name_of("a@example.com");
    let until = t0() + Duration::hours(2);
    t.sim.set_cooldown(&name, Some(until));
    t.inspect_forced().await;
    assert_eq!(reset_quota_calls(&t).len(), 1);
    let t = t.restart().await;
    t.sim.set_cooldown(&name, Some(until));
    t.inspect_forced().await;
    assert_eq!(
        reset_quota_calls(&t).len(),
        1,
        "same episode after the restart"
    );
}

#[tokio::test]
async fn a_single_account_round_keeps_the_other_accounts_write_records() {
    use quota_patrol::jobs::inspect::{RoundKind, RoundOptions, run_round};
    // v7.2.140: the single-account round re-reads only its account (`?name=`).
    let t = spawn_app_version(
        vec![
            plus("a@example.com", 1.0, 1.0),
            plus("b@example.com", 1.0, 1.0),
        ],
        fast_settings(),
        "v7.2.140",
    )
    .await;
    t.inspect().await;
    let (a, b) = (t.name_of("a@example.com"), t.name_of("b@example.com"));
    t.disable_by_hand(&b).await;
    let records = |t: &TestApp| {
        t.patrol
            .store
            .run_blocking(|c| quota_patrol::store::writes::load(c, SITE))
            .unwrap()
            .into_iter()
            .map(|w| w.account_name)
            .collect::<Vec<_>>()
    };
    assert!(records(&t).contains(&b));
    let opts = RoundOptions {
        kind: RoundKind::Reset,
        force: true,
        dry_run: false,
        only: Some(std::collections::HashSet::from([a.clone()])),
    };
    run_round(&t.patrol, SITE, opts).await.unwrap();
    assert!(
        records(&t).contains(&b),
        "a one-account listing is no reason to forget the others"
    );
}
