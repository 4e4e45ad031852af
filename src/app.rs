//! WIRING: builds the application from a validated config — store, bootstrap sites, patrol,
//! API listener (bound while building, so tests use port 0 and never wait) — and runs it until
//! a shutdown signal: scheduler ticks, startup warm-up, the API server; then the graceful stop
//! (docs/operations.md "Stopping"): nothing new starts, running rounds and an alert delivery get
//! `[server] shutdown_deadline_seconds` to finish, the database is closed.

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::OnceLock;

use chrono::Duration;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use secrecy::SecretString;
use tokio::net::TcpListener;

use crate::api::{ApiState, router};
use crate::clock::SharedClock;
use crate::config::Config;
use crate::jobs::{Patrol, PatrolOptions, refresh, sites};
use crate::store::Store;

/// Errors while building or running the app.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("cannot open the database {path}: {source}")]
    Store {
        path: String,
        source: crate::store::StoreError,
    },
    /// The cause follows in the error chain (`{:#}` prints it once).
    #[error(
        "cannot listen on {addr} (is another quota-patrol running? choose another address: [server] listen / [router] listen, or demo --listen / --router-listen)"
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("no admin token: set the environment variable {0} (the API refuses to run open)")]
    NoAdminToken(String),
    #[error("{0}")]
    Other(String),
}

/// Options beyond the config file that callers (tests, demo) choose.
pub struct AppOptions {
    pub clock: SharedClock,
    /// Every random draw that affects a decision (`ThreadRandom` in the daemon; tests fix it).
    pub random: crate::random::SharedRandom,
    /// Run the scheduler (off in tests that drive jobs directly).
    pub scheduler: bool,
}

/// The built application: bound listener and patrol, not yet serving.
pub struct App {
    listener: TcpListener,
    /// The router's bound sockets (one per listener thread) and router, when `[router]` is
    /// configured.
    router: Option<(
        crate::router::listener::RouterListeners,
        crate::router::Router,
    )>,
    /// The router's usage queue; the writer (`jobs::router::spawn_usage_writer`) drains it
    /// unless a test took it ([`App::take_usage_receiver`]).
    usage: Option<std::sync::Arc<crate::router::UsageQueue>>,
    /// `[router] usage_request_rows`: the writer also stores one row per client request.
    usage_request_rows: bool,
    patrol: Patrol,
    admin_token: SecretString,
    metrics_public: bool,
    /// `[alerts] timezone`: the status page's times.
    timezone: chrono_tz::Tz,
    /// `[server] session_hours`.
    session_hours: u32,
    tick_seconds: u64,
    warmup: bool,
    scheduler: bool,
    shutdown_deadline: std::time::Duration,
}

/// What the graceful stop did ([`App::run_until_stopped`]), for the log and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// Sites whose round (or manual action) was running at the signal.
    pub waited_for: Vec<String>,
    /// Sites still busy at the deadline: their round was left as after a crash.
    pub abandoned: Vec<String>,
    /// Whether everything (rounds, alert delivery, HTTP requests) ended before the deadline.
    pub clean: bool,
}

/// Buckets of `quota_patrol_router_added_latency_seconds` (50 µs to 100 ms): a histogram,
/// not a summary, as docs/rules/router.md §5 / docs/rules/router.md §5 ask, around the §6 targets (100 µs, 250 µs, 1 ms).
const ADDED_LATENCY_BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
];

/// Seconds between two upkeeps of the Prometheus recorder.
const METRICS_UPKEEP_SECONDS: u64 = 5;

/// Drains the recorder's histogram samples into their buckets every
/// [`METRICS_UPKEEP_SECONDS`]: `install_recorder` starts no upkeep of its own, and without a
/// scrape of `/metrics` the samples of `quota_patrol_router_added_latency_seconds` (one per
/// routed request) would pile up in memory (metrics-exporter-prometheus,
/// `PrometheusHandle::run_upkeep`). Aborted when the app stops.
fn spawn_metrics_upkeep(handle: PrometheusHandle) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every =
            tokio::time::interval(std::time::Duration::from_secs(METRICS_UPKEEP_SECONDS));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            handle.run_upkeep();
        }
    })
}

/// The process-wide Prometheus recorder (installed once; `App::build` installs it before the
/// router registers its counters).
pub fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(
                        "quota_patrol_router_added_latency_seconds".into(),
                    ),
                    &ADDED_LATENCY_BUCKETS,
                )
                .ok()?
                .install_recorder()
                .ok()
        })
        .clone()
}

impl App {
    /// Opens the store, creates config sites missing from it, binds the API listener.
    pub async fn build(cfg: &Config, opts: AppOptions) -> Result<Self, AppError> {
        let admin_token = cfg
            .admin_token
            .clone()
            .ok_or_else(|| AppError::NoAdminToken(cfg.admin_token_env.clone()))?;
        // The recorder first: metrics registered before it (the router's zeros) would be lost.
        let _ = metrics_handle();
        let store = Store::open(&cfg.database_path).map_err(|source| AppError::Store {
            path: cfg.database_path.display().to_string(),
            source,
        })?;
        let mut patrol = Patrol::new(
            store,
            opts.clock,
            PatrolOptions {
                allow_short_intervals: cfg.allow_short_intervals,
                interval_unit: Duration::seconds(cfg.interval_unit_seconds),
                log_retention_days: cfg.log_retention_days,
                per_account_metrics: cfg.metrics_per_account,
            },
        )
        .with_random(opts.random.clone());
        if cfg.alerts.enabled || cfg.alerts.has_channel() {
            let alerting = crate::jobs::alerts::Alerting::from_config(&cfg.alerts)
                .map_err(|e| AppError::Other(e.to_string()))?;
            if alerting.enabled && !cfg.alerts.has_channel() {
                tracing::warn!("alerts are enabled without a channel: events are only recorded");
            }
            patrol = patrol.with_alerting(alerting);
        }
        for site in &cfg.sites {
            match sites::bootstrap_site(&patrol, site.clone()).await {
                Ok(true) => {
                    tracing::info!(site = %site.site_id, "site created from the config file")
                }
                Ok(false) => {}
                Err(e) => {
                    return Err(AppError::Other(format!(
                        "cannot bootstrap site {}: {e}",
                        site.site_id
                    )));
                }
            }
        }
        // Readers (API, router) find every site's pool published from the stored state.
        crate::jobs::pool::publish_all(&patrol).await;
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| AppError::Bind {
                addr: cfg.listen,
                source,
            })?;
        let (router, usage) = match &cfg.router {
            None => (None, None),
            Some(rc) => {
                let (r, rx) = build_router(rc, &patrol, opts.random.clone()).await?;
                let admin = crate::jobs::router::RouterAdmin::new(
                    std::sync::Arc::new(r.1.handle()),
                    rc.spec.clone(),
                );
                // The stored pools, accounts, chains and client keys join the config's part.
                crate::jobs::router::sync(&patrol, &admin)
                    .await
                    .map_err(|e| AppError::Other(format!("[router]: {e}")))?;
                patrol.set_router_admin(Some(admin));
                (Some(r), Some(rx))
            }
        };
        Ok(Self {
            listener,
            router,
            usage,
            usage_request_rows: cfg
                .router
                .as_ref()
                .is_some_and(|rc| rc.settings.usage_request_rows),
            patrol,
            admin_token,
            metrics_public: cfg.metrics_public,
            timezone: cfg.alerts.timezone,
            session_hours: cfg.session_hours,
            tick_seconds: cfg.tick_seconds,
            warmup: cfg.warmup,
            scheduler: opts.scheduler,
            shutdown_deadline: std::time::Duration::from_secs(cfg.shutdown_deadline_seconds),
        })
    }

    /// The bound API address (port 0 resolved).
    pub fn api_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    /// The bound router address (port 0 resolved); `None` without `[router]`.
    pub fn router_addr(&self) -> Option<SocketAddr> {
        self.router.as_ref().map(|(l, _)| l.local_addr())
    }

    /// A handle to the router (keys, reload, status, preview); `None` without `[router]`.
    pub fn router_handle(&self) -> Option<crate::router::RouterHandle> {
        self.router.as_ref().map(|(_, r)| r.handle())
    }

    /// Takes the router's usage records (once; `None` without `[router]` or when taken): the
    /// caller then reads them one by one instead of the usage writer (tests).
    pub fn take_usage_receiver(&mut self) -> Option<crate::router::UsageReceiver> {
        self.usage.take().map(crate::router::UsageReceiver::new)
    }

    /// The patrol (jobs) of this app.
    pub fn patrol(&self) -> &Patrol {
        &self.patrol
    }

    /// Serves the API, runs warm-up and the scheduler, until `shutdown` resolves (or
    /// [`Patrol::request_shutdown`] is called), then stops gracefully: the scheduler and the API
    /// listener stop accepting, running rounds finish what is in flight and persist, an alert
    /// delivery in flight records its attempt — all within the shutdown deadline, after which
    /// the rest is left as after a crash — and the database is closed.
    ///
    /// Errors: the scheduler cannot start, the API server fails before the signal.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<StopReport, AppError> {
        let pages = crate::web::routes(crate::web::WebState::new(
            self.patrol.clone(),
            self.admin_token.clone(),
            self.timezone,
            chrono::Duration::hours(i64::from(self.session_hours)),
        ));
        let state = ApiState {
            patrol: self.patrol.clone(),
            admin_token: self.admin_token,
            metrics_public: self.metrics_public,
            metrics: metrics_handle(),
        };
        let upkeep = state.metrics.clone().map(spawn_metrics_upkeep);
        let mut scheduler = None;
        if self.scheduler {
            if self.warmup {
                let p = self.patrol.clone();
                tokio::spawn(async move { warm_up_all(&p).await });
            }
            scheduler = Some(
                crate::scheduler::start(self.patrol.clone(), self.tick_seconds)
                    .await
                    .map_err(|e| AppError::Other(format!("scheduler: {e}")))?,
            );
        }
        let stopping = self.patrol.clone();
        let mut server = tokio::spawn(
            axum::serve(self.listener, router(state, pages))
                .with_graceful_shutdown(async move { stopping.shutdown_requested().await })
                .into_future(),
        );
        let router_handle = self.router.as_ref().map(|(_, r)| r.handle());
        let mut router_server = match self.router {
            Some((listeners, router)) => {
                let stopping = self.patrol.clone();
                let started = listeners.serve(&router, || {
                    let p = stopping.clone();
                    async move { p.shutdown_requested().await }
                });
                match started {
                    Ok(s) => Some(s),
                    Err(e) => {
                        self.patrol.request_shutdown();
                        server.abort();
                        return Err(AppError::Other(format!(
                            "cannot start the router's listener threads: {e}"
                        )));
                    }
                }
            }
            None => None,
        };
        let request_rows = self.usage_request_rows;
        let mut usage_writer = self.usage.map(|q| {
            crate::jobs::router::spawn_usage_writer(self.patrol.store.clone(), q, request_rows)
        });
        let early = tokio::select! {
            () = shutdown => None,
            () = self.patrol.shutdown_requested() => None,
            served = &mut server => Some(served),
        };
        self.patrol.request_shutdown();
        let deadline = tokio::time::Instant::now() + self.shutdown_deadline;
        let waited_for = self.patrol.busy_sites();
        tracing::info!(
            running = ?waited_for,
            deadline_seconds = self.shutdown_deadline.as_secs(),
            "shutting down: no new rounds; waiting for running rounds"
        );
        if let Some(mut s) = scheduler {
            let _ = s.shutdown().await;
        }
        let mut clean = true;
        if tokio::time::timeout_at(deadline, self.patrol.wait_idle())
            .await
            .is_err()
        {
            clean = false;
        }
        let abandoned = self.patrol.busy_sites();
        if !abandoned.is_empty() {
            tracing::warn!(sites = ?abandoned, "shutdown deadline reached: the rounds still running are left as after a crash; the next round handles them");
        }
        if tokio::time::timeout_at(
            deadline,
            crate::jobs::alerts::wait_for_delivery(&self.patrol),
        )
        .await
        .is_err()
        {
            clean = false;
            tracing::warn!(
                "shutdown deadline reached during an alert delivery: its message is retried at the next start"
            );
        }
        let served = match early {
            Some(served) => Some(served),
            None => match tokio::time::timeout_at(deadline, &mut server).await {
                Ok(served) => Some(served),
                Err(_) => {
                    clean = false;
                    tracing::warn!(
                        "shutdown deadline reached with HTTP requests in flight: they are cut"
                    );
                    server.abort();
                    None
                }
            },
        };
        if !stop_router(
            router_server.as_mut(),
            router_handle.as_ref(),
            usage_writer.as_mut(),
            deadline,
        )
        .await
        {
            clean = false;
        }
        if let Some(u) = upkeep {
            u.abort();
        }
        close_store(&self.patrol.store).await;
        if clean {
            tracing::info!("stopped cleanly");
        } else {
            tracing::warn!("stopped after the shutdown deadline");
        }
        match served {
            Some(Ok(Ok(()))) | None => Ok(StopReport {
                waited_for,
                abandoned,
                clean,
            }),
            Some(Ok(Err(e))) => Err(AppError::Other(format!("API server: {e}"))),
            Some(Err(e)) => Err(AppError::Other(format!("API server task: {e}"))),
        }
    }
}

/// Stops the router after the API: waits for its listener threads (requests in flight) until
/// `deadline`, then closes the usage queue and waits for its writer to write what is queued
/// (docs/decisions.md §19). Returns `false` when the deadline cut anything.
async fn stop_router(
    server: Option<&mut crate::router::listener::RouterServer>,
    handle: Option<&crate::router::RouterHandle>,
    usage_writer: Option<&mut tokio::task::JoinHandle<()>>,
    deadline: tokio::time::Instant,
) -> bool {
    let mut clean = true;
    if let Some(r) = server {
        match tokio::time::timeout_at(deadline, r.stopped()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "the router's listener failed"),
            Err(_) => {
                clean = false;
                tracing::warn!(
                    "shutdown deadline reached with router requests in flight: they are cut"
                );
                r.cut();
            }
        }
    }
    if let Some(h) = handle {
        h.close_usage();
    }
    if let Some(w) = usage_writer
        && tokio::time::timeout_at(deadline, &mut *w).await.is_err()
    {
        clean = false;
        tracing::warn!("shutdown deadline reached while writing router usage: the rest is lost");
        w.abort();
    }
    clean
}

/// Builds the router of `[router]` (its patrol links read `Patrol::pool_handle`) and binds its
/// listener sockets (`[router] threads`, docs/decisions.md §19). Errors: an invalid spec, the
/// address is taken.
async fn build_router(
    rc: &crate::config::RouterConfig,
    patrol: &Patrol,
    random: crate::random::SharedRandom,
) -> Result<
    (
        (
            crate::router::listener::RouterListeners,
            crate::router::Router,
        ),
        std::sync::Arc<crate::router::UsageQueue>,
    ),
    AppError,
> {
    let usage = std::sync::Arc::new(crate::router::UsageQueue::new(
        crate::router::USAGE_QUEUE_CAPACITY,
        crate::router::USAGE_BATCH,
    ));
    let p = patrol.clone();
    let feeds: crate::router::FeedSource = std::sync::Arc::new(move |site: &str| {
        let feed: std::sync::Arc<dyn crate::core::pool::PoolFeed> = p.pool_handle(site);
        feed
    });
    let router = crate::router::Router::new(
        rc.settings.clone(),
        rc.spec.clone(),
        feeds,
        patrol.clock.clone(),
        random,
        usage.clone(),
    )
    .map_err(|ps| AppError::Other(format!("[router]: {}", ps.join("; "))))?;
    let addr = rc.settings.listen;
    let listeners = crate::router::listener::RouterListeners::bind(addr, rc.settings.threads)
        .map_err(|source| AppError::Bind { addr, source })?;
    tracing::info!(%addr, threads = listeners.threads(), "router listening");
    Ok(((listeners, router), usage))
}

/// Closes the database on the blocking pool and logs what the checkpoint folded back.
async fn close_store(store: &Store) {
    let s = store.clone();
    match tokio::task::spawn_blocking(move || s.close()).await {
        Ok(Ok(r)) => tracing::info!(
            checkpointed_frames = r.checkpointed_frames,
            busy = r.busy,
            "database closed"
        ),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "database close failed; SQLite recovers the WAL at the next start")
        }
        Err(e) => tracing::warn!(error = %e, "database close task failed"),
    }
}

/// Resolves at the first SIGTERM (systemd, Docker, Kubernetes) or SIGINT (Ctrl-C) and answers
/// its name; the stop that follows is [`App::run_until_stopped`]'s. A second signal during the
/// stop is not handled here: it is ignored until the deadline ends the stop.
///
/// Errors: the signal handlers cannot be installed (then the process could not stop cleanly).
#[cfg(unix)]
pub fn stop_signal() -> std::io::Result<impl Future<Output = &'static str> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    })
}

/// Resolves at Ctrl-C (platforms without Unix signals).
#[cfg(not(unix))]
pub fn stop_signal() -> std::io::Result<impl Future<Output = &'static str> + Send + 'static> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    })
}

/// Startup warm-up of every enabled site (docs/rules/patrol.md §4.6); failures are logged, never fatal.
pub async fn warm_up_all(p: &Patrol) {
    let Ok(all) = crate::jobs::queries::sites(p).await else {
        return;
    };
    for site in all.into_iter().filter(|s| s.site_enabled) {
        if p.is_shutting_down() {
            return;
        }
        match refresh::warm_up(p, &site.site_id).await {
            Ok(names) => tracing::info!(site = %site.site_id, probed = names.len(), "warm-up done"),
            Err(e) => {
                tracing::warn!(site = %site.site_id, error = %e, "warm-up failed; the regular schedule continues")
            }
        }
    }
}
