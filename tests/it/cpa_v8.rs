//! CPA 8.x and cluster-managed nodes (docs/rules/cpa.md §11, docs/decisions.md §18): the version
//! CPA reports is recorded and shown; an 8.x that dropped `/v0/management` and a node whose
//! every management route answers an empty 404 (management off, or cluster mode) are reported
//! as such — site state, one log line per round, status page — back off, are never a key
//! failure, and no account is acted on. A numeric `auth_index` works like the hex one.

use quota_patrol::core::report::RunStatus;
use quota_patrol::core::settings::SettingsPatch;
use quota_patrol_sim::{KeyCheckCounts, SimMode};
use serde_json::Value;

use crate::helpers::*;

const V0_DROPPED: &str = "CPA v8.0.3 answered 404 on /v0/management: this build dropped the v0 API";
const MANAGEMENT_OFF: &str =
    "management API off, or the node is managed by a control plane (cluster mode); not supported";

/// One account under its thresholds, one at 100 % weekly (a normal round disables it).
fn accounts() -> Vec<quota_patrol_sim::SimAccount> {
    vec![
        plus("ok@example.com", 10.0, 40.0),
        plus("full@example.com", 20.0, 100.0),
    ]
}

async fn json(t: &TestApp, path: &str) -> Value {
    t.get(path).await.json().await.unwrap()
}

/// The site's entry of `GET /api/settings/sites`.
async fn site_view(t: &TestApp) -> Value {
    json(t, "/api/settings/sites").await["sites"][0].clone()
}

/// Every operation-log entry of the site, newest first.
async fn all_logs(t: &TestApp) -> Vec<Value> {
    json(t, &format!("/api/runtime/logs?siteId={SITE}&limit=1000"))
        .await
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Management writes the simulated CPA received (status / fields patches, deletes).
fn writes(t: &TestApp) -> usize {
    t.sim
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" || r.method == "DELETE")
        .count()
}

/// A round on a CPA whose management API cannot be used: error status with `text`, no
/// action, exactly one log line (`cpaUnsupported`, level error), no key failure, a pause,
/// and `text` as the site's CPA state in the API views.
async fn assert_unsupported_round(t: &TestApp, text: &str) {
    let before_logs = all_logs(t).await.len();
    let before_writes = writes(t);
    let run = t.inspect().await;
    assert_eq!(run.status, RunStatus::Error);
    assert_eq!(run.error.as_deref(), Some(text));
    assert_eq!(
        (run.disable_count, run.enable_count, run.delete_count),
        (0, 0, 0)
    );
    assert_eq!(writes(t), before_writes, "nothing is written to CPA");
    let logs = all_logs(t).await;
    assert_eq!(logs.len(), before_logs + 1, "one line per round: {logs:#?}");
    let line = &logs[0];
    assert_eq!(line["operationType"], "cpaUnsupported");
    assert_eq!(line["level"], "error");
    let message = line["message"].as_str().unwrap();
    assert!(
        message.starts_with(text) && message.contains("no account is acted on"),
        "{message}"
    );
    assert_eq!(t.sim.key_checks(), KeyCheckCounts::default());

    let site = site_view(t).await;
    assert_eq!(site["cpaUnsupported"], text);
    let status = json(t, &format!("/api/inspection/status?siteId={SITE}")).await;
    assert_eq!(status["cpaUnsupported"], text);
    assert!(status["keyRefusal"].is_null(), "never a key refusal");
    assert!(status["pausedUntil"].is_string(), "backs off: {status}");
    let ready: Value = t
        .http
        .get(t.url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["sites"][0]["cpaUnsupported"], text);
    assert_eq!(ready["sites"][0]["detail"], text);
}

#[tokio::test]
async fn an_8x_cpa_is_used_while_v0_answers_and_reported_plainly_once_it_dropped_v0() {
    let t = spawn_app_version(accounts(), fast_settings(), "v8.0.3").await;
    let full = t.name_of("full@example.com");
    let run = t.inspect().await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(
        run.disable_count, 1,
        "an 8.x serving /v0 is patrolled as before"
    );
    let site = site_view(&t).await;
    assert_eq!(site["cpaVersion"], "v8.0.3");
    assert!(site["cpaUnsupported"].is_null());

    t.sim.set_mode(SimMode::V0Dropped);
    t.sim.set_disabled(&full, false);
    assert_unsupported_round(&t, V0_DROPPED).await;
    assert!(
        !t.sim.account(&full).unwrap().disabled,
        "no account is acted on"
    );
    assert_eq!(site_view(&t).await["cpaVersion"], "v8.0.3");
}

#[tokio::test]
async fn a_cluster_node_is_reported_as_managed_by_a_control_plane_and_recovers_when_it_answers() {
    let t = spawn_app_version(accounts(), fast_settings(), "v7.2.140").await;
    let full = t.name_of("full@example.com");
    assert_eq!(t.inspect().await.status, RunStatus::Completed);
    t.sim.set_disabled(&full, false);
    t.sim.set_mode(SimMode::ClusterNode);
    assert_unsupported_round(&t, MANAGEMENT_OFF).await;
    // Every round says it again in one line, and still touches nothing.
    assert_unsupported_round(&t, MANAGEMENT_OFF).await;
    assert!(!t.sim.account(&full).unwrap().disabled);
    assert_eq!(
        site_view(&t).await["cpaVersion"],
        "v7.2.140",
        "the recorded version stays"
    );

    // The status page names the state beside the version.
    let cookie = crate::status_page::sign_in(&t).await;
    let page = crate::status_page::page_text(&t, &format!("/sites/{SITE}"), &cookie).await;
    assert!(page.contains("unsupported"), "{page}");
    assert!(page.contains("managed by a control plane"), "{page}");
    assert!(page.contains("CPA v7.2.140"), "{page}");

    t.sim.set_mode(SimMode::Standalone);
    let run = t.inspect().await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(run.disable_count, 1);
    let status = json(&t, &format!("/api/inspection/status?siteId={SITE}")).await;
    assert!(status["cpaUnsupported"].is_null());
    assert!(status["pausedUntil"].is_null());
    assert!(site_view(&t).await["cpaUnsupported"].is_null());
}

#[tokio::test]
async fn a_cpa_without_a_management_key_reads_the_same_and_is_not_a_key_failure() {
    let sim = quota_patrol_sim::SimConfig {
        management_key: None,
        accounts: accounts(),
        ..Default::default()
    };
    let t = spawn_app_sim(
        sim,
        fast_settings(),
        false,
        quota_patrol::config::AlertsConfig::default(),
    )
    .await;
    assert_unsupported_round(&t, MANAGEMENT_OFF).await;
    assert!(site_view(&t).await["cpaVersion"].is_null());
}

#[tokio::test]
async fn a_numeric_auth_index_is_probed_and_guards_writes_like_the_hex_one() {
    let t = spawn_app_version(accounts(), fast_settings(), "v7.2.140").await;
    t.sim.set_auth_index_as_number(true);
    let full = t.name_of("full@example.com");
    let run = t.inspect().await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!((run.probed_count, run.failed_count), (2, 0));
    assert_eq!(run.disable_count, 1);
    assert!(t.sim.account(&full).unwrap().disabled);
    let hex = t.sim.auth_index_for("codex", &full);
    let number = u64::from_str_radix(&hex, 16).unwrap().to_string();
    let accounts = json(&t, &format!("/api/accounts?siteId={SITE}")).await;
    let shown = accounts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == full.as_str())
        .unwrap()["authIndex"]
        .clone();
    assert_eq!(shown, number.as_str(), "kept as CPA's number, as text");
}

#[tokio::test]
async fn a_v0_404_in_the_middle_of_a_round_ends_it_before_any_action() {
    // One probe per batch: the first probe is answered, then the 8.x drops /v0.
    let settings = SettingsPatch {
        probe_workers: Some(1),
        ..fast_settings()
    };
    let both_full = vec![
        plus("full1@example.com", 20.0, 100.0),
        plus("full2@example.com", 20.0, 100.0),
        plus("full3@example.com", 20.0, 100.0),
    ];
    let t = spawn_app_version(both_full, settings, "v8.0.3").await;
    t.sim.set_mode_after_api_calls(1, SimMode::V0Dropped);
    let before_logs = all_logs(&t).await.len();
    let run = t.inspect().await;
    assert_eq!(run.status, RunStatus::Error);
    assert_eq!(run.error.as_deref(), Some(V0_DROPPED));
    assert_eq!(run.disable_count, 0);
    assert_eq!(writes(&t), 0, "nothing is written to CPA");
    let probes = t
        .sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/api-call"))
        .count();
    assert_eq!(probes, 2, "no probe batch starts after the 404");
    let logs = all_logs(&t).await;
    let unsupported: Vec<&Value> = logs[..logs.len() - before_logs]
        .iter()
        .filter(|l| l["operationType"] == "cpaUnsupported")
        .collect();
    assert_eq!(unsupported.len(), 1, "{logs:#?}");
    assert!(
        !logs
            .iter()
            .any(|l| l["message"].as_str().unwrap().starts_with("round failed")),
        "{logs:#?}"
    );
    assert_eq!(t.sim.key_checks(), KeyCheckCounts::default());
}
