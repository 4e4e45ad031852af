//! Graceful stop (docs/rules/patrol.md §11.5, docs/operations.md "Stopping"): after the signal
//! nothing new starts, a running round finishes what is in flight, persists and says what it left
//! undone; the real binary exits 0 on SIGTERM with its database closed, and the next start loses
//! and repeats nothing.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;
use quota_patrol::clock::{Clock, SystemClock};
use quota_patrol::core::report::{InspectionRunResult, RunStatus};
use quota_patrol::jobs::JobError;
use quota_patrol::jobs::inspect::{RoundKind, RoundOptions, run_round};
use quota_patrol::scheduler::{Started, tick};
use quota_patrol::store::{self, Store};
use quota_patrol_sim::{SimAccount, SimConfig, SimCpa, SimHandle, SimUsage, UpstreamBehaviour};
use serde_json::Value;

use crate::helpers::*;

/// Waits (bounded: 2000 progress polls over HTTP, no sleep) until `ready` holds.
async fn poll_until(t: &TestApp, what: &str, ready: impl Fn() -> bool) {
    for _ in 0..2000 {
        if ready() {
            return;
        }
        let _ = t.get("/api/runtime/progress").await;
    }
    panic!("timed out waiting until {what}");
}

/// Api-calls the sim received for the account `name` (answered or in flight).
fn api_calls_for(sim: &SimHandle, name: &str) -> usize {
    let index = sim.auth_index_for("codex", name);
    sim.requests()
        .iter()
        .filter(|r| r.path.ends_with("/api-call") && r.body.contains(&index))
        .count()
}

fn history_of(db: &std::path::Path, name: &str) -> Vec<store::accounts::HistoryEntry> {
    let s = Store::open(db).unwrap();
    let h = s
        .run_blocking(|c| store::accounts::history(c, SITE, name, 100))
        .unwrap();
    s.close().unwrap();
    h
}

fn runs_of(db: &std::path::Path) -> Vec<InspectionRunResult> {
    let s = Store::open(db).unwrap();
    let r = s.run_blocking(|c| store::runs::list(c, SITE, 100)).unwrap();
    s.close().unwrap();
    r
}

#[tokio::test]
async fn after_shutdown_is_requested_a_scheduler_tick_and_a_round_start_nothing() {
    let mut settings = fast_settings();
    settings.auto_polling_enabled = Some(true);
    settings.poll_interval_minutes = Some(1);
    let t = spawn_app_with(vec![plus("ok@example.com", 10.0, 40.0)], settings).await;
    let mut rounds = t.patrol.subscribe_rounds();
    // Before the signal a tick starts the due regular round.
    assert_eq!(tick(&t.patrol).await, vec![Started::Regular(SITE.into())]);
    rounds.recv().await.unwrap();
    let calls = t.sim.api_call_count();
    assert!(calls > 0);
    // Due again, but shutdown is requested: the second tick starts nothing.
    *t.patrol.runtime(SITE).next_scheduled_at.lock().unwrap() = None;
    t.patrol.request_shutdown();
    assert!(tick(&t.patrol).await.is_empty());
    let err = run_round(&t.patrol, SITE, RoundOptions::new(RoundKind::Manual))
        .await
        .unwrap_err();
    assert!(matches!(err, JobError::ShuttingDown), "{err}");
    assert_eq!(
        t.sim.api_call_count(),
        calls,
        "no CPA call after the signal"
    );
    assert!(!t.patrol.runtime(SITE).is_running());
}

#[tokio::test]
async fn a_round_stopped_by_shutdown_finishes_the_probe_in_flight_and_starts_no_other() {
    // One probe at a time; both accounts hang until the test releases them.
    let mut settings = fast_settings();
    settings.probe_workers = Some(1);
    settings.timeout_ms = Some(60_000);
    let t = spawn_app_with(
        vec![
            with_behaviour(plus("a@example.com", 1.0, 10.0), UpstreamBehaviour::Hang),
            with_behaviour(plus("b@example.com", 1.0, 10.0), UpstreamBehaviour::Hang),
        ],
        settings,
    )
    .await;
    let (a, b) = (t.name_of("a@example.com"), t.name_of("b@example.com"));
    let p = t.patrol.clone();
    let round =
        tokio::spawn(
            async move { run_round(&p, SITE, RoundOptions::new(RoundKind::Manual)).await },
        );
    poll_until(&t, "the first probe is in flight", || {
        t.sim.api_call_count() == 1
    })
    .await;
    // CPA lists by lower-cased name: `a` is probed first and hangs; `b` waits for its batch.
    assert_eq!(
        (api_calls_for(&t.sim, &a), api_calls_for(&t.sim, &b)),
        (1, 0)
    );
    t.patrol.request_shutdown();
    t.sim.release_hanging();
    let r = round.await.unwrap().unwrap();
    assert_eq!(r.status, RunStatus::Error, "{r:?}");
    assert_eq!(
        r.error.as_deref(),
        Some("stopped by shutdown before 1 probe(s)")
    );
    assert_eq!(r.probed_count, 1);
    assert_eq!(
        t.sim.api_call_count(),
        1,
        "no probe started after the signal"
    );
    assert!(
        t.decision(&r, "a@example.com")
            .error
            .as_deref()
            .unwrap()
            .contains("request failed")
    );
    assert_eq!(
        t.decision(&r, "b@example.com").error.as_deref(),
        Some("not evaluated: the probe did not run"),
        "the probe cut by the stop is not an evaluation"
    );
    // What ran is persisted: the run record and the in-flight probe's history row.
    let runs = runs_of(&t.db_path);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run_id, r.run_id);
    assert_eq!(
        runs[0].error.as_deref(),
        Some("stopped by shutdown before 1 probe(s)")
    );
    let h = history_of(&t.db_path, &a);
    assert_eq!(h.len(), 1);
    assert!(!h[0].success);
    assert!(history_of(&t.db_path, &b).is_empty());
}

#[tokio::test]
async fn a_round_stopped_before_its_actions_takes_none_and_the_next_start_takes_each_once() {
    let mut settings = fast_settings();
    settings.timeout_ms = Some(60_000);
    let t = spawn_app_with(
        vec![
            plus("full@example.com", 1.0, 99.0),
            with_behaviour(plus("slow@example.com", 1.0, 10.0), UpstreamBehaviour::Hang),
        ],
        settings,
    )
    .await;
    let full = t.name_of("full@example.com");
    let p = t.patrol.clone();
    let round =
        tokio::spawn(
            async move { run_round(&p, SITE, RoundOptions::new(RoundKind::Manual)).await },
        );
    // Both probes run in one batch; the slow one is still in flight at the signal.
    poll_until(&t, "both probes started", || t.sim.api_call_count() == 2).await;
    t.patrol.request_shutdown();
    t.sim.release_hanging();
    let r = round.await.unwrap().unwrap();
    assert_eq!(
        r.error.as_deref(),
        Some("stopped by shutdown before 1 action(s)")
    );
    assert_eq!(
        t.decision(&r, "full@example.com").action.as_str(),
        "disable"
    );
    assert!(r.action_outcomes.is_empty());
    assert!(
        t.status_patches(&full).is_empty(),
        "no action after the signal"
    );
    assert!(!t.sim.account(&full).unwrap().disabled);
    // The next start (same database) does the action once; the round after repeats nothing.
    let t = t.restart().await;
    let r = t.inspect().await;
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    assert_eq!(t.status_patches(&full), vec![true]);
    t.clock.advance(Duration::minutes(10));
    t.inspect().await;
    assert_eq!(t.status_patches(&full), vec![true]);
}

// ---- The real binary ------------------------------------------------------------------------

const ADMIN_ENV: &str = "QP_SHUTDOWN_TEST_ADMIN_TOKEN";
const KEY_ENV: &str = "QP_SHUTDOWN_TEST_MGMT_KEY";

fn write_config(dir: &std::path::Path, sim: &SimHandle) -> std::path::PathBuf {
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_token_env = "{ADMIN_ENV}"
shutdown_deadline_seconds = 20

[database]
path = "{db}"

[logging]
format = "json"
level = "info"

[scheduler]
# Rounds are started through the API; no tick during the test.
tick_seconds = 60
warmup = false

[dev]
allow_short_intervals = true

[[sites]]
id = "{SITE}"
name = "Test"
cpa_base_url = "{base}"
management_key_env = "{KEY_ENV}"
usage_url = "{base}/backend-api/wham/usage"

[sites.settings]
probeWorkers = 1
probeBatchDelayMinMs = 0
probeBatchDelayMaxMs = 0
timeoutMs = 60000
retryCount = 0
autoActionMode = "disable"
"#,
        db = dir.join("qp.db").display(),
        base = sim.base_url(),
    );
    let path = dir.join("quota-patrol.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Starts `quota-patrol serve`; answers the child, its logs and its API base URL (the port
/// the OS chose, read from the "quota-patrol serving" log line).
async fn serve(config: &std::path::Path) -> (tokio::process::Child, Logs, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_quota-patrol"))
        .args(["serve", "--config"])
        .arg(config)
        .env(ADMIN_ENV, ADMIN_TOKEN)
        .env(KEY_ENV, MGMT_KEY)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut logs = Logs::follow(child.stderr.take().unwrap());
    let serving = logs.wait_for("quota-patrol serving").await;
    let api = format!("http://{}", serving["fields"]["api"].as_str().unwrap());
    (child, logs, api)
}

/// `kill -TERM <pid>` (the crate forbids the unsafe code of a direct `kill(2)`).
fn sigterm(child: &tokio::process::Child) {
    let ok = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().expect("still running").to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM failed");
}

async fn exit_code(child: &mut tokio::process::Child) -> Option<i32> {
    tokio::time::timeout(StdDuration::from_secs(30), child.wait())
        .await
        .expect("the binary exits within 30 s")
        .unwrap()
        .code()
}

async fn run_inspection(api: &str, query: &str) -> Value {
    reqwest::Client::new()
        .post(format!("{api}/api/inspection/run{query}"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn account(email: &str, weekly: f64) -> SimAccount {
    let now = SystemClock.now();
    SimAccount::codex(
        email,
        "plus",
        SimUsage::paid(
            1.0,
            now + Duration::hours(3),
            weekly,
            now + Duration::days(3),
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_stops_on_sigterm_with_exit_0_after_the_running_round_persisted() {
    let sim = SimCpa::start(
        SimConfig {
            management_key: Some(MGMT_KEY.into()),
            accounts: vec![
                account("a-full@example.com", 99.0),
                account("b-hang@example.com", 10.0),
                account("c-later@example.com", 10.0),
            ],
            ban_after_failures: None,
            ..Default::default()
        },
        Arc::new(SystemClock),
    )
    .expect("sim starts");
    let name = |email: &str| {
        sim.accounts()
            .into_iter()
            .find(|a| a.email == email)
            .unwrap()
            .name
    };
    let (full, hang, later) = (
        name("a-full@example.com"),
        name("b-hang@example.com"),
        name("c-later@example.com"),
    );
    let patches = |sim: &SimHandle| {
        sim.requests()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path.ends_with("/auth-files/status"))
            .filter(|r| r.body.contains(&full))
            .count()
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &sim);
    let db = dir.path().join("qp.db");

    // Start 1: a completed round disables the exhausted account, then a second round hangs on
    // `b` (probes run one at a time, in CPA's name order) when SIGTERM arrives.
    let (mut child, mut logs, api) = serve(&config).await;
    let first = run_inspection(&api, "").await;
    assert_eq!(first["status"], "completed", "{first}");
    assert_eq!(patches(&sim), 1);
    sim.set_behaviour(&hang, UpstreamBehaviour::Hang);
    sim.set_behaviour(&later, UpstreamBehaviour::Hang);
    let before = (api_calls_for(&sim, &hang), api_calls_for(&sim, &later));
    let api2 = api.clone();
    let second = tokio::spawn(async move { run_inspection(&api2, "?force=true").await });
    let http = reqwest::Client::new();
    let mut in_flight = false;
    for _ in 0..2000 {
        if api_calls_for(&sim, &hang) == before.0 + 1 {
            in_flight = true;
            break;
        }
        let _ = http
            .get(format!("{api}/api/runtime/progress"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await;
    }
    assert!(in_flight, "the hanging probe never started");
    sigterm(&child);
    logs.wait_for("shutting down").await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the binary waits for the running round"
    );
    // The in-flight probe completes (CPA answers 502): the round persists and ends.
    sim.release_hanging();
    assert_eq!(exit_code(&mut child).await, Some(0));
    logs.wait_for("stopped cleanly").await;
    let second = second.await.unwrap();
    assert_eq!(second["status"], "error", "{second}");
    assert_eq!(second["error"], "stopped by shutdown before 1 probe(s)");
    assert_eq!(
        api_calls_for(&sim, &later),
        before.1,
        "no probe started after the signal"
    );
    let wal = dir.path().join("qp.db-wal");
    assert_eq!(
        wal.metadata().map(|m| m.len()).unwrap_or(0),
        0,
        "the WAL was folded back at close"
    );
    // Nothing was lost: the stopped round's record and its probe's history row exist.
    let runs = runs_of(&db);
    let stopped = runs
        .iter()
        .find(|r| r.run_id == second["runId"].as_str().unwrap())
        .expect("the stopped round is recorded");
    assert_eq!(stopped.status, RunStatus::Error);
    assert_eq!(
        stopped.error.as_deref(),
        Some("stopped by shutdown before 1 probe(s)")
    );
    let h = history_of(&db, &hang);
    assert_eq!(h.len(), 2, "round 1 and the in-flight probe of round 2");
    assert!(h[0].error.as_deref().unwrap().contains("request failed"));
    assert_eq!(history_of(&db, &later).len(), 1, "round 1 only");

    // Start 2 on the same database: the next round repeats no action; an idle stop is quick.
    let (mut child, mut logs, api) = serve(&config).await;
    let third = run_inspection(&api, "").await;
    assert_eq!(third["status"], "completed", "{third}");
    assert_eq!(
        patches(&sim),
        1,
        "the disabled account is not patched again"
    );
    sigterm(&child);
    assert_eq!(exit_code(&mut child).await, Some(0));
    logs.wait_for("stopped cleanly").await;
}

#[tokio::test]
async fn at_the_deadline_the_app_stops_anyway_and_leaves_the_running_round_as_after_a_crash() {
    use quota_patrol::app::{App, AppOptions};
    use quota_patrol::clock::ManualClock;
    let clock = ManualClock::new(t0());
    let sim = SimCpa::start(
        SimConfig {
            management_key: Some(MGMT_KEY.into()),
            accounts: vec![with_behaviour(
                plus("stuck@example.com", 1.0, 10.0),
                UpstreamBehaviour::Hang,
            )],
            ban_after_failures: None,
            ..Default::default()
        },
        Arc::new(clock.clone()),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("qp.db");
    let cfg = quota_patrol::config::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_token: Some(secrecy::SecretString::from(ADMIN_TOKEN)),
        admin_token_env: "QUOTA_PATROL_ADMIN_TOKEN".into(),
        metrics_public: false,
        metrics_per_account: false,
        shutdown_deadline_seconds: 1,
        session_hours: 168,
        database_path: db.clone(),
        log_retention_days: 30,
        log_format: quota_patrol::config::LogFormat::Pretty,
        log_level: "warn".into(),
        tick_seconds: 60,
        warmup: false,
        allow_short_intervals: true,
        interval_unit_seconds: 60,
        sites: vec![],
        alerts: Default::default(),
        router: None,
    };
    let app = App::build(
        &cfg,
        AppOptions {
            clock: Arc::new(clock.clone()),
            random: Arc::new(quota_patrol::random::FixedRandom::new(0.0)),
            scheduler: true,
        },
    )
    .await
    .unwrap();
    let mut settings = fast_settings();
    settings.timeout_ms = Some(60_000);
    quota_patrol::jobs::sites::create_site(
        app.patrol(),
        quota_patrol::jobs::sites::SiteInput {
            site_id: Some(SITE.into()),
            site_name: Some("Test".into()),
            cpa_base_url: Some(sim.base_url()),
            management_key: Some(MGMT_KEY.into()),
            usage_url: Some(format!("{}/backend-api/wham/usage", sim.base_url())),
            settings,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let p = app.patrol().clone();
    let round =
        tokio::spawn(
            async move { run_round(&p, SITE, RoundOptions::new(RoundKind::Manual)).await },
        );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let api = format!("http://{}", app.api_addr());
    let running = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    for _ in 0..2000 {
        if sim.api_call_count() == 1 {
            break;
        }
        let _ = http.get(format!("{api}/healthz")).send().await;
    }
    assert_eq!(sim.api_call_count(), 1, "the probe hangs in flight");
    stop.send(()).unwrap();
    let report = tokio::time::timeout(StdDuration::from_secs(10), running)
        .await
        .expect("the stop ends at its 1 s deadline, not when the probe does")
        .unwrap()
        .unwrap();
    assert_eq!(report.waited_for, vec![SITE.to_string()]);
    assert_eq!(report.abandoned, vec![SITE.to_string()]);
    assert!(!report.clean);
    // The round ends after the stop: the store is closed, so it leaves nothing half-written.
    sim.release_hanging();
    let late = round.await.unwrap();
    assert!(
        late.as_ref()
            .is_err_and(|e| e.to_string().contains("closed")),
        "{late:?}"
    );
    assert!(runs_of(&db).is_empty(), "no record, as after a crash");
    assert!(history_of(&db, &sim.accounts()[0].name).is_empty());
}
