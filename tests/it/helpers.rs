//! Test harness: `spawn_app()` starts the real app on port 0 with a temp SQLite file and a
//! manual clock, against the simulated CPA on 127.0.0.1. Nothing sleeps waiting for readiness:
//! listeners are bound before the functions return.

use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use quota_patrol::app::{App, AppOptions};
use quota_patrol::clock::ManualClock;
use quota_patrol::config::{
    AlertsConfig, Config, EmailConfig, EmailTransport, LogFormat, RouterConfig,
};
use quota_patrol::core::report::InspectionRunResult;
use quota_patrol::core::settings::SettingsPatch;
use quota_patrol::jobs::Patrol;
use quota_patrol::jobs::inspect::{RoundKind, RoundOptions, run_round};
use quota_patrol::jobs::sites::{SiteInput, create_site};
use quota_patrol_sim::{SimAccount, SimConfig, SimCpa, SimHandle, SimUsage, UpstreamBehaviour};
use secrecy::SecretString;
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

pub const SITE: &str = "test";
pub const ADMIN_TOKEN: &str = "test-admin-TOKEN-secret";
pub const MGMT_KEY: &str = "test-mgmt-KEY-secret";

/// 2026-05-21 03:00:00 UTC, the start of every test clock.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
}

pub struct TestApp {
    pub api: String,
    pub patrol: Patrol,
    pub sim: SimHandle,
    pub clock: ManualClock,
    pub http: reqwest::Client,
    pub db_path: std::path::PathBuf,
    pub dir: Option<tempfile::TempDir>,
    /// `[server] metrics_public` of this app (kept across [`TestApp::restart`]).
    pub metrics_public: bool,
    /// `[alerts]` of this app (kept across [`TestApp::restart`]).
    pub alerts: AlertsConfig,
    /// `[router]` of this app (kept across [`TestApp::restart`]).
    pub router_config: Option<RouterConfig>,
    /// The router's base URL (`http://127.0.0.1:PORT`) and handle, with `[router]`.
    pub router: Option<String>,
    pub router_handle: Option<quota_patrol::router::RouterHandle>,
    /// Whether the app's usage writer runs (kept across [`TestApp::restart`]).
    pub usage_writer: bool,
    /// The router's usage records, when it has a `[router]` and its usage writer does not run.
    pub usage: Option<quota_patrol::router::UsageReceiver>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

/// Settings that make rounds fast and deterministic in tests.
pub fn fast_settings() -> SettingsPatch {
    SettingsPatch {
        probe_workers: Some(4),
        probe_batch_delay_min_ms: Some(0),
        probe_batch_delay_max_ms: Some(0),
        timeout_ms: Some(1000),
        retry_count: Some(0),
        auto_enable_recovered: Some(true),
        auto_action_mode: Some("disable".into()),
        invalid_confirmations: Some(2),
        ..Default::default()
    }
}

pub fn plus(email: &str, five: f64, weekly: f64) -> SimAccount {
    SimAccount::codex(
        email,
        "plus",
        SimUsage::paid(
            five,
            t0() + Duration::hours(3),
            weekly,
            t0() + Duration::days(3),
        ),
    )
}

pub fn free(email: &str, weekly: f64) -> SimAccount {
    SimAccount::codex(
        email,
        "free",
        SimUsage::weekly_only(weekly, t0() + Duration::days(4)),
    )
}

pub fn with_behaviour(mut a: SimAccount, b: UpstreamBehaviour) -> SimAccount {
    a.behaviour = b;
    a
}

/// `[alerts]` on, times in Europe/Berlin, e-mail to two recipients through `smtp_url` (plain
/// SMTP), default delivery rules.
pub fn email_alerts(smtp_url: &str) -> AlertsConfig {
    AlertsConfig {
        enabled: true,
        timezone: chrono_tz::Europe::Berlin,
        email: Some(EmailConfig {
            transport: EmailTransport::Smtp {
                url: smtp_url.into(),
                password: None,
            },
            from: "quota-patrol <patrol@example.com>".parse().unwrap(),
            to: vec![
                "ops@example.com".parse().unwrap(),
                "Oncall <oncall@example.com>".parse().unwrap(),
            ],
            timeout_seconds: 2,
        }),
        ..Default::default()
    }
}

fn config(
    db: std::path::PathBuf,
    metrics_public: bool,
    alerts: AlertsConfig,
    router: Option<RouterConfig>,
) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_token: Some(SecretString::from(ADMIN_TOKEN)),
        admin_token_env: "QUOTA_PATROL_ADMIN_TOKEN".into(),
        metrics_public,
        metrics_per_account: false,
        shutdown_deadline_seconds: 20,
        session_hours: 168,
        database_path: db,
        log_retention_days: 30,
        log_format: LogFormat::Pretty,
        log_level: "warn".into(),
        tick_seconds: 1,
        warmup: false,
        allow_short_intervals: true,
        interval_unit_seconds: 60,
        sites: vec![],
        alerts,
        router,
    }
}

/// Starts the simulated CPA with `accounts` and the app with a site `test` pointing at it.
pub async fn spawn_app(accounts: Vec<SimAccount>) -> TestApp {
    spawn_app_with(accounts, fast_settings()).await
}

/// Like [`spawn_app`] with explicit settings.
pub async fn spawn_app_with(accounts: Vec<SimAccount>, settings: SettingsPatch) -> TestApp {
    spawn_app_opts(accounts, settings, false).await
}

/// Like [`spawn_app_with`], choosing `[server] metrics_public` too.
pub async fn spawn_app_opts(
    accounts: Vec<SimAccount>,
    settings: SettingsPatch,
    metrics_public: bool,
) -> TestApp {
    spawn_app_full(accounts, settings, metrics_public, AlertsConfig::default()).await
}

/// Like [`spawn_app`] with `[alerts]` (see [`email_alerts`]).
pub async fn spawn_app_alerts(accounts: Vec<SimAccount>, alerts: AlertsConfig) -> TestApp {
    spawn_app_full(accounts, fast_settings(), false, alerts).await
}

/// Like [`spawn_app_with`] against a simulated CPA reporting `version` in `X-CPA-VERSION`
/// (and having that version's features, docs/rules/cpa.md §0).
pub async fn spawn_app_version(
    accounts: Vec<SimAccount>,
    settings: SettingsPatch,
    version: &str,
) -> TestApp {
    let sim = SimConfig {
        management_key: Some(MGMT_KEY.into()),
        accounts,
        ban_after_failures: None,
        version: version.into(),
        ..Default::default()
    };
    spawn_app_sim(sim, settings, false, AlertsConfig::default()).await
}

/// Every option of the app under test.
pub async fn spawn_app_full(
    accounts: Vec<SimAccount>,
    settings: SettingsPatch,
    metrics_public: bool,
    alerts: AlertsConfig,
) -> TestApp {
    let sim = SimConfig {
        management_key: Some(MGMT_KEY.into()),
        accounts,
        ban_after_failures: None,
        ..Default::default()
    };
    spawn_app_sim(sim, settings, metrics_public, alerts).await
}

/// Like [`spawn_app_full`] with the simulated CPA's whole config (version, ban, key).
pub async fn spawn_app_sim(
    sim: SimConfig,
    settings: SettingsPatch,
    metrics_public: bool,
    alerts: AlertsConfig,
) -> TestApp {
    spawn_app_at(t0(), sim, settings, metrics_public, alerts).await
}

/// Like [`spawn_app_sim`] with the manual clock starting at `start` (tests that run the real
/// binary, whose clock is the system's, start near it).
pub async fn spawn_app_at(
    start_at: DateTime<Utc>,
    sim: SimConfig,
    settings: SettingsPatch,
    metrics_public: bool,
    alerts: AlertsConfig,
) -> TestApp {
    let clock = ManualClock::new(start_at);
    let sim = SimCpa::start(sim, Arc::new(clock.clone())).expect("sim starts");
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("qp.db");
    let t = start(clock, sim, db_path, Some(dir), metrics_public, alerts, None).await;
    let input = SiteInput {
        site_id: Some(SITE.into()),
        site_name: Some("Test".into()),
        cpa_base_url: Some(t.sim.base_url()),
        management_key: Some(MGMT_KEY.into()),
        usage_url: Some(format!("{}/backend-api/wham/usage", t.sim.base_url())),
        settings,
        ..Default::default()
    };
    create_site(&t.patrol, input).await.expect("site created");
    t
}

/// Like [`spawn_app`] with a `[router]` (its listener on port 0 whatever `listen` says) and
/// the site `test` created before it serves. The test reads the usage records from
/// [`TestApp::usage`] (the app's usage writer does not run).
pub async fn spawn_app_router(accounts: Vec<SimAccount>, router: RouterConfig) -> TestApp {
    spawn_app_router_with(accounts, router, false).await
}

/// Like [`spawn_app_router`] with the app's own usage writer running (records go to the
/// database; [`TestApp::usage`] is `None`), also after [`TestApp::restart`].
pub async fn spawn_app_router_writing_usage(
    accounts: Vec<SimAccount>,
    router: RouterConfig,
) -> TestApp {
    spawn_app_router_with(accounts, router, true).await
}

/// A test app's `[router]` and whether the app's usage writer runs.
#[derive(Clone)]
struct TestRouter {
    config: RouterConfig,
    usage_writer: bool,
}

async fn spawn_app_router_with(
    accounts: Vec<SimAccount>,
    mut router: RouterConfig,
    usage_writer: bool,
) -> TestApp {
    router.settings.listen = "127.0.0.1:0".parse().unwrap();
    let clock = ManualClock::new(t0());
    let sim = SimConfig {
        management_key: Some(MGMT_KEY.into()),
        accounts,
        ban_after_failures: None,
        ..Default::default()
    };
    let sim = SimCpa::start(sim, Arc::new(clock.clone())).expect("sim starts");
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("qp.db");
    let input = SiteInput {
        site_id: Some(SITE.into()),
        site_name: Some("Test".into()),
        cpa_base_url: Some(sim.base_url()),
        management_key: Some(MGMT_KEY.into()),
        usage_url: Some(format!("{}/backend-api/wham/usage", sim.base_url())),
        settings: fast_settings(),
        ..Default::default()
    };
    let t = start(
        clock,
        sim,
        db_path,
        Some(dir),
        false,
        AlertsConfig::default(),
        Some(TestRouter {
            config: router,
            usage_writer,
        }),
    )
    .await;
    create_site(&t.patrol, input).await.expect("site created");
    t
}

async fn start(
    clock: ManualClock,
    sim: SimHandle,
    db_path: std::path::PathBuf,
    dir: Option<tempfile::TempDir>,
    metrics_public: bool,
    alerts: AlertsConfig,
    router: Option<TestRouter>,
) -> TestApp {
    let usage_writer = router.as_ref().is_some_and(|r| r.usage_writer);
    let router_config = router.map(|r| r.config);
    let mut app = App::build(
        &config(
            db_path.clone(),
            metrics_public,
            alerts.clone(),
            router_config.clone(),
        ),
        AppOptions {
            clock: Arc::new(clock.clone()),
            random: Arc::new(quota_patrol::random::FixedRandom::new(0.0)),
            scheduler: false,
        },
    )
    .await
    .expect("app builds");
    let api = format!("http://{}", app.api_addr());
    let patrol = app.patrol().clone();
    let router = app.router_addr().map(|a| format!("http://{a}"));
    let router_handle = app.router_handle();
    let usage = if usage_writer {
        None
    } else {
        app.take_usage_receiver()
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        app.run_until_stopped(async {
            let _ = rx.await;
        })
        .await
        .expect("app runs");
    });
    TestApp {
        api,
        patrol,
        sim,
        clock,
        http: reqwest::Client::new(),
        db_path,
        dir,
        metrics_public,
        alerts,
        router_config,
        usage_writer,
        router,
        router_handle,
        usage,
        stop: Some(tx),
        server: Some(server),
    }
}

impl TestApp {
    /// Stops the app (not the sim) and starts a new one on the same database file: a restart.
    pub async fn restart(mut self) -> TestApp {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(s) = self.server.take() {
            s.await.unwrap();
        }
        let dir = self.dir.take();
        let TestApp {
            clock,
            sim,
            db_path,
            metrics_public,
            alerts,
            router_config,
            usage_writer,
            ..
        } = self;
        start(
            clock,
            sim,
            db_path,
            dir,
            metrics_public,
            alerts,
            router_config.map(|config| TestRouter {
                config,
                usage_writer,
            }),
        )
        .await
    }

    /// One manual round through the jobs layer.
    pub async fn inspect(&self) -> InspectionRunResult {
        run_round(&self.patrol, SITE, RoundOptions::new(RoundKind::Manual))
            .await
            .expect("round runs")
    }

    /// One forced manual round.
    pub async fn inspect_forced(&self) -> InspectionRunResult {
        run_round(
            &self.patrol,
            SITE,
            RoundOptions {
                kind: RoundKind::Manual,
                force: true,
                dry_run: false,
                only: None,
            },
        )
        .await
        .expect("round runs")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api)
    }

    /// A person's disable through the API (`POST /api/accounts/{name}/disable`); asserts 200.
    pub async fn disable_by_hand(&self, name: &str) {
        let r = self
            .post(
                &format!("/api/accounts/{name}/disable?siteId={SITE}"),
                serde_json::Value::Null,
            )
            .await;
        assert_eq!(r.status(), 200, "manual disable of {name}");
    }

    /// The site's operation-log entries of `category` (`GET /api/runtime/logs`, newest first).
    pub async fn log_entries(&self, category: &str) -> Vec<serde_json::Value> {
        let v: serde_json::Value = self
            .get(&format!(
                "/api/runtime/logs?siteId={SITE}&category={category}&limit=1000"
            ))
            .await
            .json()
            .await
            .unwrap();
        v.as_array().cloned().unwrap_or_default()
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
    }

    pub async fn post(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        self.http
            .post(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn put(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        self.http
            .put(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn delete(&self, path: &str) -> reqwest::Response {
        self.http
            .delete(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// Name of the sim account with this e-mail.
    pub fn name_of(&self, email: &str) -> String {
        self.sim
            .accounts()
            .into_iter()
            .find(|a| a.email == email)
            .map(|a| a.name)
            .expect("account exists")
    }

    /// The decision of the account with this e-mail in `r`.
    pub fn decision<'a>(
        &self,
        r: &'a InspectionRunResult,
        email: &str,
    ) -> &'a quota_patrol::core::report::DecisionRecord {
        let name = self.name_of(email);
        r.decisions
            .iter()
            .find(|d| d.account_name == name)
            .unwrap_or_else(|| panic!("no decision for {email}"))
    }

    /// Bodies of the requests the sim received on `path` (suffix, e.g. `/reset-quota`).
    pub fn bodies(&self, method: &str, path: &str) -> Vec<serde_json::Value> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.ends_with(path))
            .map(|r| serde_json::from_str(&r.body).unwrap_or(serde_json::Value::Null))
            .collect()
    }

    /// Status patches the sim received for `name`, as `disabled` values in order.
    pub fn status_patches(&self, name: &str) -> Vec<bool> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "PATCH" && r.path.ends_with("/auth-files/status"))
            .filter_map(|r| serde_json::from_str::<serde_json::Value>(&r.body).ok())
            .filter(|b| b["name"] == name)
            .filter_map(|b| b["disabled"].as_bool())
            .collect()
    }
}

// ---- The real binary ------------------------------------------------------------------------

/// The binary's stderr, one JSON log line at a time (forwarded by a reader task).
pub struct Logs(tokio::sync::mpsc::UnboundedReceiver<String>, Vec<String>);

impl Logs {
    pub fn follow(stderr: tokio::process::ChildStderr) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                let _ = tx.send(l);
            }
        });
        Self(rx, Vec::new())
    }

    /// The next line whose message contains `text` (bounded: 30 s, then the test fails).
    pub async fn wait_for(&mut self, text: &str) -> Value {
        let found = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            while let Some(line) = self.0.recv().await {
                self.1.push(line.clone());
                let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                if v["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(text))
                {
                    return Some(v);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(v)) => v,
            _ => panic!(
                "no log line {text:?}; stderr so far:\n{}",
                self.1.join("\n")
            ),
        }
    }

    /// Every line received so far (the pending ones read without waiting), for a failure message.
    pub fn so_far(&mut self) -> String {
        while let Ok(line) = self.0.try_recv() {
            self.1.push(line);
        }
        self.1.join("\n")
    }
}
