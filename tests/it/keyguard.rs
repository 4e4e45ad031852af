//! A refused management key never gets the host banned (docs/rules/patrol.md §11, item 1): the simulated CPA
//! bans as real CPA does (5 refused keys per client IP ⇒ 30 min 403 for every key; forgotten
//! after 2 h idle), and whatever an operator does meanwhile — settings saves, manual
//! inspections, restarts with warm-up, one-shot `inspect` runs of the real binary — CPA sees
//! at most one refused attempt per 3 h, plus exactly one per explicit retry.

use chrono::Duration;
use quota_patrol::clock::{Clock, SystemClock};
use quota_patrol::config::AlertsConfig;
use quota_patrol_sim::{KeyCheckCounts, SimConfig};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::helpers::*;
use crate::smtp::SmtpServer;

const WRONG: &str = "wrong-KEY-secret-1";
const KEY_ENV: &str = "QP_IT_CPA_KEY";

fn banning_sim() -> SimConfig {
    SimConfig {
        management_key: Some(MGMT_KEY.into()),
        accounts: vec![plus("ok@example.com", 10.0, 40.0)],
        ban_after_failures: Some(5),
        ..Default::default()
    }
}

async fn json_of(r: reqwest::Response) -> Value {
    r.json().await.unwrap()
}

/// Runs `quota-patrol inspect` (the real binary) on the test's database, with the site's key
/// coming from `KEY_ENV` = `key`. Returns (success, stderr).
async fn inspect_cli(t: &TestApp, key: &str, extra: &[&str]) -> (bool, String) {
    let dir = t.db_path.parent().unwrap();
    let cfg = dir.join("inspect.toml");
    std::fs::write(
        &cfg,
        format!(
            "[database]\npath = {db:?}\n\n[dev]\nallow_short_intervals = true\n\n[[sites]]\nid = \"{SITE}\"\nname = \"Test\"\ncpa_base_url = \"{url}\"\nmanagement_key_env = \"{KEY_ENV}\"\nusage_url = \"{url}/backend-api/wham/usage\"\n",
            db = t.db_path.display().to_string(),
            url = t.sim.base_url(),
        ),
    )
    .unwrap();
    // Async: the simulated CPA answers on this test's runtime while the binary runs.
    let out = Command::new(env!("CARGO_BIN_EXE_quota-patrol"))
        .arg("inspect")
        .arg("--config")
        .arg(&cfg)
        .args(extra)
        .env(KEY_ENV, key)
        .output()
        .await
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        !stderr.contains(key) && !stdout.contains(key),
        "the key never prints"
    );
    (out.status.success(), stderr)
}

/// Waits for the round a scheduler tick started (an event, not a sleep).
async fn tick_and_wait(t: &TestApp) -> usize {
    let mut rounds = t.patrol.subscribe_rounds();
    let started = quota_patrol::scheduler::tick(&t.patrol).await.len();
    if started > 0 {
        tokio::time::timeout(std::time::Duration::from_secs(20), rounds.recv())
            .await
            .expect("the round ends")
            .expect("round result");
    }
    started
}

fn refused(n: u32) -> KeyCheckCounts {
    KeyCheckCounts {
        refused: n,
        banned_answers: 0,
        bans: 0,
    }
}

#[tokio::test]
async fn a_refused_key_is_tried_at_most_once_per_three_hours_whatever_the_operator_does() {
    // The real binary runs on the system clock: the test clock starts there too.
    let t = spawn_app_at(
        SystemClock.now(),
        banning_sim(),
        fast_settings(),
        false,
        AlertsConfig::default(),
    )
    .await;
    let saved = t
        .put("/api/settings", json!({"managementKey": WRONG}))
        .await;
    assert_eq!(saved.status(), 200);
    let run = json_of(t.post("/api/inspection/run", json!({})).await).await;
    assert_eq!(run["status"], "error", "{run}");
    assert_eq!(t.sim.key_checks(), refused(1));

    // Saves that keep the key, a routing save, manual inspections: no call to CPA at all.
    for body in [
        json!({"usedPercentThreshold": 90}),
        json!({"managementKey": WRONG}),
        json!({"autoPollingEnabled": true}),
    ] {
        assert_eq!(t.put("/api/settings", body).await.status(), 200);
    }
    let routing = json_of(
        t.put(
            "/api/settings/priority-routing",
            json!({"priorityRoutingEnabled": false, "priorityMinActiveCount": 1}),
        )
        .await,
    )
    .await;
    assert!(
        routing["cpaPrioritySyncWarning"]
            .as_str()
            .is_some_and(|w| w.contains("management key refused at")),
        "{routing}"
    );
    for _ in 0..2 {
        let run = json_of(t.post("/api/inspection/run", json!({})).await).await;
        assert!(
            run["error"]
                .as_str()
                .is_some_and(|e| e.contains("next automatic try at")),
            "{run}"
        );
    }
    let accounts = t.post("/api/accounts/refresh", json!({})).await;
    assert_eq!(accounts.status(), 502);
    assert_eq!(json_of(accounts).await["code"], "management_key_refused");
    assert_eq!(t.sim.key_checks(), refused(1));

    // Five restarts, each with the start-up warm-up `serve` runs.
    let mut t = t;
    for _ in 0..5 {
        t = t.restart().await;
        quota_patrol::app::warm_up_all(&t.patrol).await;
    }
    assert_eq!(
        t.sim.key_checks(),
        refused(1),
        "restarts honour the stored refusal"
    );

    // Five one-shot `inspect` runs of the real binary with the same key from the environment.
    for _ in 0..5 {
        let (ok, stderr) = inspect_cli(&t, WRONG, &[]).await;
        assert!(!ok);
        assert!(stderr.contains("next automatic try at"), "{stderr}");
    }
    assert_eq!(t.sim.key_checks(), refused(1), "inspect honours it too");
    for _ in 0..3 {
        assert_eq!(tick_and_wait(&t).await, 0, "ticks start nothing");
    }

    // Status and readiness say so.
    let status = json_of(t.get("/api/inspection/status?siteId=test").await).await;
    let detail = status["keyRefusal"]["detail"].as_str().unwrap().to_string();
    assert!(
        detail.starts_with("management key refused at") && detail.contains("next automatic try at"),
        "{status}"
    );
    assert_eq!(status["keyRefusal"]["attempts"], 1);
    let ready = json_of(t.get("/readyz").await).await;
    assert_eq!(ready["sites"][0]["detail"], detail.as_str());
    assert!(!status.to_string().contains(WRONG) && !ready.to_string().contains(WRONG));

    // The operator's one retry through the binary: exactly one attempt.
    let (ok, stderr) = inspect_cli(&t, WRONG, &["--retry-key"]).await;
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("refused the management key"), "{stderr}");
    assert_eq!(t.sim.key_checks(), refused(2));
    assert!(!inspect_cli(&t, WRONG, &[]).await.0);
    assert_eq!(t.sim.key_checks(), refused(2));

    // The automatic try comes 3 h after the last one, once; CPA forgot the earlier failures
    // (2 h idle), so the host is never banned.
    t.clock.advance(Duration::minutes(179));
    assert_eq!(tick_and_wait(&t).await, 0);
    t.clock.advance(Duration::minutes(2));
    assert_eq!(tick_and_wait(&t).await, 1, "the automatic try");
    assert_eq!(tick_and_wait(&t).await, 0);
    assert_eq!(t.sim.key_checks(), refused(3));

    // A new key in the environment clears the state and works.
    let (ok, stderr) = inspect_cli(&t, MGMT_KEY, &[]).await;
    assert!(ok, "{stderr}");
    let status = json_of(t.get("/api/inspection/status?siteId=test").await).await;
    assert!(status["keyRefusal"].is_null(), "{status}");
    assert_eq!(t.sim.key_checks(), refused(3));
}

#[tokio::test]
async fn the_retry_endpoint_makes_exactly_one_attempt_and_never_the_one_that_bans() {
    let t = spawn_app_sim(
        banning_sim(),
        fast_settings(),
        false,
        AlertsConfig::default(),
    )
    .await;
    t.put("/api/settings", json!({"managementKey": WRONG}))
        .await;
    t.inspect().await;
    assert_eq!(t.sim.key_checks(), refused(1));
    for n in 2..=4 {
        let r = t
            .post("/api/settings/sites/test/retry-connection", json!({}))
            .await;
        assert_eq!(r.status(), 502);
        let body = json_of(r).await;
        assert_eq!(body["code"], "management_key_refused", "{body}");
        assert!(!body.to_string().contains(WRONG));
        assert_eq!(t.sim.key_checks(), refused(n), "one attempt per retry");
    }
    let status = json_of(t.get("/api/inspection/status?siteId=test").await).await;
    assert_eq!(status["keyRefusal"]["attempts"], 4, "{status}");
    assert_eq!(status["keyRefusal"]["countedByCpa"], 4, "{status}");
    // A fifth refused attempt within 2 h would get the host banned: refused without a call.
    let r = t
        .post("/api/settings/sites/test/retry-connection", json!({}))
        .await;
    assert_eq!(r.status(), 502);
    let body = json_of(r).await;
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("a retry is safe from"),
        "{body}"
    );
    assert_eq!(t.sim.key_checks(), refused(4), "no call: CPA would ban");
    // Once CPA forgot (2 h idle), a retry is allowed again, and it counts from one.
    t.clock.advance(Duration::hours(2));
    let r = t
        .post("/api/settings/sites/test/retry-connection", json!({}))
        .await;
    assert_eq!(r.status(), 502);
    assert_eq!(t.sim.key_checks(), refused(5));
    let status = json_of(t.get("/api/inspection/status?siteId=test").await).await;
    assert_eq!(status["keyRefusal"]["countedByCpa"], 1, "{status}");

    // The right key through the API: tried at once, the refusal is gone, nothing was banned.
    t.put("/api/settings", json!({"managementKey": MGMT_KEY}))
        .await;
    let r = t.inspect().await;
    assert!(r.error.is_none(), "{:?}", r.error);
    let status = json_of(t.get("/api/inspection/status?siteId=test").await).await;
    assert!(status["keyRefusal"].is_null());
    assert_eq!(t.sim.key_checks(), refused(5));
    // A retry with a working key answers ok with the listing.
    let ok = t
        .post("/api/settings/sites/test/retry-connection", json!({}))
        .await;
    assert_eq!(ok.status(), 200);
    assert_eq!(json_of(ok).await["accounts"], 1);
}

#[tokio::test]
async fn without_the_guard_the_simulated_cpa_bans_like_real_cpa() {
    // The fake is faithful: 5 refused keys ban the IP, the right key is then refused too,
    // and the count is forgotten after 2 h idle. (What the guard above protects against.)
    let t = spawn_app_sim(
        banning_sim(),
        fast_settings(),
        false,
        AlertsConfig::default(),
    )
    .await;
    let http = reqwest::Client::new();
    let list = |key: &'static str| {
        http.get(format!("{}/v0/management/auth-files", t.sim.base_url()))
            .bearer_auth(key)
            .send()
    };
    for _ in 0..4 {
        assert_eq!(list(WRONG).await.unwrap().status(), 401);
    }
    t.clock.advance(Duration::hours(2));
    assert_eq!(list(WRONG).await.unwrap().status(), 401);
    assert_eq!(
        list(MGMT_KEY).await.unwrap().status(),
        200,
        "forgotten after 2 h idle"
    );
    for _ in 0..5 {
        list(WRONG).await.unwrap();
    }
    let banned = list(MGMT_KEY).await.unwrap();
    assert_eq!(banned.status(), 403);
    assert!(banned.text().await.unwrap().contains("IP banned"));
    assert_eq!(t.sim.key_checks().bans, 1);
    t.clock.advance(Duration::minutes(31));
    assert_eq!(list(MGMT_KEY).await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_refused_key_raises_site_unreachable_at_once_with_its_cause() {
    let smtp = SmtpServer::start().await;
    let t = spawn_app_sim(
        banning_sim(),
        fast_settings(),
        false,
        email_alerts(&smtp.url()),
    )
    .await;
    t.inspect().await;
    t.put("/api/settings", json!({"managementKey": WRONG}))
        .await;
    t.clock.advance(Duration::minutes(1));
    t.inspect().await;
    quota_patrol::jobs::alerts::deliver_due(&t.patrol)
        .await
        .unwrap();
    let got = smtp.received();
    assert_eq!(
        got.len(),
        1,
        "told at once: a refused key does not heal by waiting"
    );
    let msg = got[0].parsed();
    assert_eq!(
        msg.subject().unwrap(),
        "[quota-patrol] CRITICAL: The CPA of Test is unreachable"
    );
    let body = msg.body_text(0).unwrap().to_string();
    assert!(body.contains("Cause: management key refused at"), "{body}");
    assert!(!body.contains(WRONG));
    // Restarts and ticks do not repeat it.
    let t = t.restart().await;
    quota_patrol::jobs::alerts::on_tick(t.patrol.clone()).await;
    quota_patrol::jobs::alerts::deliver_due(&t.patrol)
        .await
        .unwrap();
    assert_eq!(smtp.received().len(), 1);
}
