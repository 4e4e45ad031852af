//! The smaller fixes seen on real CPA runs (docs/rules/patrol.md §11, item 6): a 401 awaiting confirmation is
//! re-probed at the next round even when routing stood it by; a round whose probes CPA left
//! unanswered is `partial` / `failed` with the cause; a saved priority entry may omit
//! `pendingFirstInspection`; a decision that was not evaluated carries its cause in `error`;
//! an account disabled by someone else shows a provisional `ManualDisabled` until classified.

use chrono::Duration;
use quota_patrol::core::account::DisableReason;
use quota_patrol::core::inspect::Action;
use quota_patrol::core::report::RunStatus;
use quota_patrol_sim::{SimAccount, UpstreamBehaviour};
use serde_json::{Value, json};

use crate::helpers::*;

fn upstream(code: u16, content_type: &str, body: &str) -> UpstreamBehaviour {
    UpstreamBehaviour::Status {
        status: code,
        content_type: content_type.into(),
        body: body.into(),
    }
}

fn revoked(email: &str) -> SimAccount {
    with_behaviour(
        plus(email, 1.0, 1.0),
        upstream(
            401,
            "application/json",
            r#"{"error":{"message":"token revoked"}}"#,
        ),
    )
}

async fn json_of(r: reqwest::Response, want: u16) -> Value {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert_eq!(status, want, "{text}");
    serde_json::from_str(&text).unwrap()
}

async fn account_view(t: &TestApp, path: &str, key: &str, name: &str) -> Value {
    let list = json_of(t.get(path).await, 200).await;
    list.as_array()
        .unwrap()
        .iter()
        .find(|a| a[key] == name)
        .unwrap_or_else(|| panic!("{name} not in {list}"))
        .clone()
}

// ---------------------------------------------------------------------------------------------
// 1. A 401 awaiting confirmation is re-probed at the next round, routing on or off
// ---------------------------------------------------------------------------------------------

/// Two usable accounts and a new one whose first probe is a 401; invalidConfirmations 2.
/// Returns the app, the revoked account's name and the second round.
async fn second_round_after_a_first_401(
    routing: bool,
    mode: &str,
) -> (
    TestApp,
    String,
    quota_patrol::core::report::InspectionRunResult,
) {
    let mut s = fast_settings();
    s.auto_action_mode = Some(mode.into());
    let t = spawn_app_with(
        vec![
            plus("a1@example.com", 10.0, 10.0),
            plus("a2@example.com", 10.0, 10.0),
            revoked("a3@example.com"),
        ],
        s,
    )
    .await;
    if routing {
        let r = t
            .put(
                "/api/settings/priority-routing?siteId=test",
                json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 2}),
            )
            .await;
        assert_eq!(r.status(), 200);
    }
    let bad = t.name_of("a3@example.com");
    let r = t.inspect().await;
    let d = t.decision(&r, "a3@example.com");
    assert_eq!((d.action, d.rule), (Action::Keep, 2), "{}", d.reason);
    assert_eq!(d.next_real_refresh_at, None, "re-probed at the next round");
    // With routing on, routing stood the new account by (it is not in the active set).
    assert_eq!(t.sim.account(&bad).unwrap().disabled, routing);

    t.clock.advance(Duration::minutes(10));
    let r = t.inspect().await;
    (t, bad, r)
}

#[tokio::test]
async fn with_routing_on_a_first_401_is_confirmed_and_deleted_at_the_next_round() {
    let (t, bad, r) = second_round_after_a_first_401(true, "delete").await;
    let d = t.decision(&r, "a3@example.com");
    assert_eq!((d.action, d.rule), (Action::Delete, 1), "{}", d.reason);
    assert!(t.sim.account(&bad).unwrap().deleted);
}

#[tokio::test]
async fn with_routing_on_a_first_401_is_confirmed_and_marked_error_disabled_at_the_next_round() {
    let (t, bad, r) = second_round_after_a_first_401(true, "disable").await;
    let d = t.decision(&r, "a3@example.com");
    // Already disabled (by routing): kept disabled, now owned by the patrol as ErrorDisabled.
    assert_eq!(d.rule, 1, "{}", d.reason);
    assert_eq!(d.disable_reason, Some(DisableReason::ErrorDisabled));
    assert!(t.sim.account(&bad).unwrap().disabled);
    let a = account_view(&t, "/api/accounts?siteId=test", "name", &bad).await;
    assert_eq!(
        (&a["disableReason"], &a["disabledBy"]),
        (&json!("ErrorDisabled"), &json!("patrol")),
        "{a}"
    );
}

#[tokio::test]
async fn with_routing_off_a_first_401_is_confirmed_and_disabled_or_deleted_at_the_next_round() {
    let (t, bad, r) = second_round_after_a_first_401(false, "disable").await;
    let d = t.decision(&r, "a3@example.com");
    assert_eq!((d.action, d.rule), (Action::Disable, 1), "{}", d.reason);
    assert!(t.sim.account(&bad).unwrap().disabled);

    let (t, bad, r) = second_round_after_a_first_401(false, "delete").await;
    assert_eq!(t.decision(&r, "a3@example.com").action, Action::Delete);
    assert!(t.sim.account(&bad).unwrap().deleted);
}

// ---------------------------------------------------------------------------------------------
// 2. CPA going away mid-round: `partial` / `failed` with the cause
// ---------------------------------------------------------------------------------------------

fn six_usable() -> Vec<SimAccount> {
    (0..6)
        .map(|i| plus(&format!("a{i}@example.com"), 10.0, 10.0))
        .collect()
}

async fn one_worker(accounts: Vec<SimAccount>) -> TestApp {
    let mut s = fast_settings();
    s.probe_workers = Some(1);
    spawn_app_with(accounts, s).await
}

#[tokio::test]
async fn a_round_where_cpa_died_for_most_probes_is_failed_with_the_cause() {
    let t = one_worker(six_usable()).await;
    t.sim.die_after_api_calls(2);
    let r = t.inspect().await;
    assert_eq!(r.status, RunStatus::Failed, "{:?}", r.error);
    let cause = r.error.clone().unwrap();
    assert!(cause.contains("4 of 6"), "{cause}");
    assert!(cause.contains("503"), "{cause}");

    // As the API shows and stores it.
    let last = json_of(t.get("/api/inspection/last-run?siteId=test").await, 200).await;
    assert_eq!(last["status"], "failed", "{last}");
    assert_eq!(last["error"], json!(cause));
    let runs = json_of(t.get("/api/inspection/runs?siteId=test").await, 200).await;
    assert_eq!(runs[0]["status"], "failed", "{runs}");
    let logs = json_of(
        t.get("/api/runtime/logs?siteId=test&category=inspection&level=error")
            .await,
        200,
    )
    .await;
    assert!(
        logs.as_array()
            .unwrap()
            .iter()
            .any(|l| l["operationType"] == "cpaProbeFailures"),
        "{logs}"
    );
}

#[tokio::test]
async fn a_round_where_cpa_went_down_for_a_few_probes_is_partial_with_the_cause() {
    let t = one_worker(six_usable()).await;
    t.sim.die_after_api_calls(4);
    let r = t.inspect().await;
    assert_eq!(r.status, RunStatus::Partial, "{:?}", r.error);
    assert!(
        r.error.as_deref().unwrap().contains("2 of 6"),
        "{:?}",
        r.error
    );
    let last = json_of(t.get("/api/inspection/last-run?siteId=test").await, 200).await;
    assert_eq!(last["status"], "partial", "{last}");

    // CPA back: the next round is completed again, without an error.
    t.sim.set_down(false);
    t.clock.advance(Duration::minutes(31)); // beyond any failure back-off
    let r = t.inspect().await;
    assert_eq!((r.status, r.error), (RunStatus::Completed, None));
}

#[tokio::test]
async fn upstream_answers_are_not_cpa_going_away() {
    let t = spawn_app(vec![
        revoked("invalid@example.com"),
        with_behaviour(
            plus("limited@example.com", 1.0, 1.0),
            upstream(429, "application/json", r#"{"error":"rate limited"}"#),
        ),
        with_behaviour(
            plus("edge@example.com", 1.0, 1.0),
            upstream(403, "text/html", "<html>Just a moment...</html>"),
        ),
        plus("ok@example.com", 10.0, 10.0),
    ])
    .await;
    let r = t.inspect().await;
    assert_eq!(r.failed_count, 3, "{:#?}", r.decisions);
    assert_eq!((r.status, r.error), (RunStatus::Completed, None));
}

// ---------------------------------------------------------------------------------------------
// 3. Saved priority entries may omit `pendingFirstInspection`
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_saved_priority_list_without_pending_flags_is_accepted_as_not_pending() {
    let t = spawn_app(vec![
        plus("a@example.com", 1.0, 1.0),
        plus("b@example.com", 1.0, 1.0),
    ])
    .await;
    json_of(
        t.post("/api/accounts/refresh?siteId=test", Value::Null)
            .await,
        200,
    )
    .await;
    let (a, b) = (t.name_of("a@example.com"), t.name_of("b@example.com"));
    let st = json_of(
        t.put(
            "/api/settings/priority-routing?siteId=test",
            json!({
                "priorityRoutingEnabled": false,
                "accountPriorities": [
                    {"name": b, "priority": 1},
                    {"name": a, "priority": 2, "pendingFirstInspection": true},
                ],
            }),
        )
        .await,
        200,
    )
    .await;
    assert_eq!(
        st["accountPriorities"],
        json!([
            {"name": b, "priority": 1, "pendingFirstInspection": false},
            {"name": a, "priority": 2, "pendingFirstInspection": true},
        ]),
        "{st}"
    );

    // The OpenAPI document says so: optional in the request, always present in answers.
    let doc = json_of(t.get("/api/openapi.json").await, 200).await;
    let schemas = &doc["components"]["schemas"];
    let required = |s: &str| {
        schemas[s]["required"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    assert!(
        !required("SavedPriorityEntry").contains(&json!("pendingFirstInspection")),
        "{}",
        schemas["SavedPriorityEntry"]
    );
    assert!(required("SavedPriorityEntry").contains(&json!("name")));
    assert!(required("PriorityEntry").contains(&json!("pendingFirstInspection")));
}

// ---------------------------------------------------------------------------------------------
// 4. A decision that was not evaluated carries its cause in `error`
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_account_without_auth_index_has_its_cause_in_the_decision_error() {
    let t = spawn_app(vec![
        SimAccount {
            has_auth_index: false,
            ..plus("noindex@example.com", 1.0, 1.0)
        },
        plus("ok@example.com", 1.0, 1.0),
    ])
    .await;
    let run = json_of(
        t.post("/api/inspection/run?siteId=test", Value::Null).await,
        200,
    )
    .await;
    let name = t.name_of("noindex@example.com");
    let d = run["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["accountName"] == name.as_str())
        .unwrap();
    assert_eq!(d["evaluated"], false, "{d}");
    assert_eq!(d["action"], "keep");
    assert!(
        d["error"].as_str().unwrap().contains("no auth_index"),
        "{d}"
    );
    let ok = run["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["accountName"] == t.name_of("ok@example.com").as_str())
        .unwrap();
    assert_eq!(
        (&ok["evaluated"], &ok["error"]),
        (&json!(true), &Value::Null)
    );
}

#[tokio::test]
async fn an_account_in_probe_back_off_has_its_cause_in_the_decision_error() {
    let t = spawn_app(vec![with_behaviour(
        plus("flaky@example.com", 1.0, 1.0),
        UpstreamBehaviour::TransportFailure,
    )])
    .await;
    t.inspect().await;
    let r = t.inspect().await; // same minute: the failure back-off holds
    let d = t.decision(&r, "flaky@example.com");
    assert!(!d.evaluated);
    assert!(d.error.as_deref().unwrap().contains("back-off"), "{d:?}");
}

// ---------------------------------------------------------------------------------------------
// 5. A disable we have no record of shows a provisional ManualDisabled/external
// ---------------------------------------------------------------------------------------------

fn disabled_by_someone(mut a: SimAccount) -> SimAccount {
    a.disabled = true;
    a
}

#[tokio::test]
async fn an_unknown_disable_is_provisional_manual_until_a_usable_probe_confirms_it() {
    let t = spawn_app(vec![disabled_by_someone(plus(
        "ext@example.com",
        1.0,
        10.0,
    ))])
    .await;
    json_of(
        t.post("/api/accounts/refresh?siteId=test", Value::Null)
            .await,
        200,
    )
    .await;
    let name = t.name_of("ext@example.com");
    let a = account_view(&t, "/api/accounts?siteId=test", "name", &name).await;
    assert_eq!(a["disableReason"], "ManualDisabled", "{a}");
    assert_eq!(a["disabledBy"], "external", "{a}");
    assert_eq!(a["disabledAt"], Value::Null, "{a}");
    assert_eq!(a["disableReasonProvisional"], true, "{a}");
    let q = account_view(&t, "/api/quotas?siteId=test", "accountName", &name).await;
    assert_eq!(
        (&q["disableReason"], &q["disableReasonProvisional"]),
        (&json!("ManualDisabled"), &json!(true)),
        "{q}"
    );

    // The first successful probe finds usable quota: a manual disable, recorded, never undone.
    let r = t.inspect().await;
    assert_eq!(t.decision(&r, "ext@example.com").action, Action::Keep);
    assert!(t.sim.account(&name).unwrap().disabled);
    let a = account_view(&t, "/api/accounts?siteId=test", "name", &name).await;
    assert_eq!(
        (
            &a["disableReason"],
            &a["disabledBy"],
            &a["disableReasonProvisional"]
        ),
        (&json!("ManualDisabled"), &json!("external"), &json!(false)),
        "{a}"
    );
    assert_eq!(
        a["disabledAt"],
        json!(t0().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        "{a}"
    );
}

#[tokio::test]
async fn an_unknown_disable_found_exhausted_is_adopted_and_no_longer_provisional() {
    let t = spawn_app(vec![
        disabled_by_someone(plus("spent@example.com", 1.0, 99.0)),
        plus("on@example.com", 1.0, 10.0),
    ])
    .await;
    let r = t.inspect().await;
    assert_eq!(
        t.decision(&r, "spent@example.com").disable_reason,
        Some(DisableReason::QuotaExhausted)
    );
    let name = t.name_of("spent@example.com");
    let a = account_view(&t, "/api/accounts?siteId=test", "name", &name).await;
    assert_eq!(
        (
            &a["disableReason"],
            &a["disabledBy"],
            &a["disableReasonProvisional"]
        ),
        (&json!("QuotaExhausted"), &json!("patrol"), &json!(false)),
        "{a}"
    );
    // An enabled account shows no reason, and nothing provisional.
    let on = account_view(
        &t,
        "/api/quotas?siteId=test",
        "accountName",
        &t.name_of("on@example.com"),
    )
    .await;
    assert_eq!(
        (&on["disableReason"], &on["disableReasonProvisional"]),
        (&json!(""), &json!(false)),
        "{on}"
    );
}

#[tokio::test]
async fn an_unknown_disable_that_cannot_be_probed_stays_provisional_and_can_be_released() {
    let t = spawn_app(vec![disabled_by_someone(SimAccount {
        has_auth_index: false,
        ..plus("ext@example.com", 1.0, 10.0)
    })])
    .await;
    t.inspect().await;
    let name = t.name_of("ext@example.com");
    let a = account_view(&t, "/api/accounts?siteId=test", "name", &name).await;
    assert_eq!(a["disableReasonProvisional"], true, "not classified: {a}");
    // Releasing the provisional manual disable hands the account to the patrol.
    let a = json_of(
        t.post(
            &format!("/api/accounts/{name}/release?siteId=test"),
            Value::Null,
        )
        .await,
        200,
    )
    .await;
    assert_eq!(
        (
            &a["disableReason"],
            &a["disabledBy"],
            &a["disableReasonProvisional"]
        ),
        (&json!("OrderedStandby"), &json!("patrol"), &json!(false)),
        "{a}"
    );
    assert!(
        t.sim.account(&name).unwrap().disabled,
        "release sends nothing"
    );
}

#[tokio::test]
async fn a_probe_that_times_out_alone_is_a_slow_upstream_not_cpa_going_away() {
    // The demo's judy.slow: CPA's api-call waits on an upstream that never answers, and the
    // probe times out (timeoutMs 1000 in tests) while every other probe is answered.
    let t = spawn_app(vec![
        with_behaviour(plus("slow@example.com", 1.0, 1.0), UpstreamBehaviour::Hang),
        plus("ok@example.com", 10.0, 10.0),
    ])
    .await;
    let r = t.inspect().await;
    assert_eq!(r.failed_count, 1, "{:#?}", r.decisions);
    assert_eq!((r.status, r.error.clone()), (RunStatus::Completed, None));
    assert!(
        t.decision(&r, "slow@example.com")
            .error
            .as_deref()
            .is_some_and(|e| e.contains("timed out")),
        "{:#?}",
        r.decisions
    );
    // Every probe timing out is CPA not answering: the round is failed.
    t.sim
        .set_behaviour(&t.name_of("ok@example.com"), UpstreamBehaviour::Hang);
    t.clock.advance(Duration::hours(1));
    let r = t.inspect_forced().await;
    assert_eq!(r.status, RunStatus::Failed, "{:?}", r.error);
    t.sim.release_hanging();
}
