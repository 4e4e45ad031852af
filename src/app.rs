//! WIRING: builds the application from a validated config — store, bootstrap sites, patrol,
//! API listener (bound while building, so tests use port 0 and never wait) — and runs it until
//! a shutdown signal: scheduler ticks, startup warm-up, the API server.

use std::future::Future;
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
    #[error("cannot listen on {addr}: {source}")]
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
    /// Run the scheduler (off in tests that drive jobs directly).
    pub scheduler: bool,
}

/// The built application: bound listener and patrol, not yet serving.
pub struct App {
    listener: TcpListener,
    patrol: Patrol,
    admin_token: SecretString,
    metrics_public: bool,
    tick_seconds: u64,
    warmup: bool,
    scheduler: bool,
}

/// The process-wide Prometheus recorder (installed once).
pub fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| PrometheusBuilder::new().install_recorder().ok())
        .clone()
}

impl App {
    /// Opens the store, creates config sites missing from it, binds the API listener.
    pub async fn build(cfg: &Config, opts: AppOptions) -> Result<Self, AppError> {
        let admin_token = cfg
            .admin_token
            .clone()
            .ok_or_else(|| AppError::NoAdminToken(cfg.admin_token_env.clone()))?;
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
            },
        );
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
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| AppError::Bind {
                addr: cfg.listen,
                source,
            })?;
        Ok(Self {
            listener,
            patrol,
            admin_token,
            metrics_public: cfg.metrics_public,
            tick_seconds: cfg.tick_seconds,
            warmup: cfg.warmup,
            scheduler: opts.scheduler,
        })
    }

    /// The bound API address (port 0 resolved).
    pub fn api_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    /// The patrol (jobs) of this app.
    pub fn patrol(&self) -> &Patrol {
        &self.patrol
    }

    /// Serves the API, runs warm-up and the scheduler, until `shutdown` resolves.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), AppError> {
        let state = ApiState {
            patrol: self.patrol.clone(),
            admin_token: self.admin_token,
            metrics_public: self.metrics_public,
            metrics: metrics_handle(),
        };
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
        let served = axum::serve(self.listener, router(state))
            .with_graceful_shutdown(shutdown)
            .await;
        if let Some(mut s) = scheduler {
            let _ = s.shutdown().await;
        }
        served.map_err(|e| AppError::Other(format!("API server: {e}")))
    }
}

/// Startup warm-up of every enabled site (patrol.md §4.6); failures are logged, never fatal.
pub async fn warm_up_all(p: &Patrol) {
    let Ok(all) = crate::jobs::queries::sites(p).await else {
        return;
    };
    for site in all.into_iter().filter(|s| s.site_enabled) {
        match refresh::warm_up(p, &site.site_id).await {
            Ok(names) => tracing::info!(site = %site.site_id, probed = names.len(), "warm-up done"),
            Err(e) => {
                tracing::warn!(site = %site.site_id, error = %e, "warm-up failed; the regular schedule continues")
            }
        }
    }
}
