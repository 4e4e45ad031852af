//! Use cases: the inspection round, freshness and reset passes, manual account actions, site
//! administration and the read models the API shows. Each job has a one-step function that
//! tests call directly; `scheduler.rs` only decides *when* they run.

pub mod accounts;
pub mod actions;
pub mod alerts;
pub mod connection;
pub mod cooldowns;
pub mod forecast;
pub mod inspect;
pub mod listing;
pub mod policies;
pub mod pool;
pub mod priority;
pub mod progress;
pub mod queries;
pub mod readback;
pub mod refresh;
pub mod reset_credits;
pub mod round;
pub mod router;
mod runtime;
pub mod sites;
pub mod status_page;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

use crate::clock::SharedClock;
use crate::core::oplog::NewLogEntry;
use crate::core::site::Site;
use crate::cpa::CpaError;
use crate::random::SharedRandom;
use crate::store::{Store, StoreError};

pub use progress::{OperationType, Progress, ProgressStatus, Stage};
pub use runtime::{RoundGuard, SiteRuntime};

/// Errors of use cases; the API maps them to HTTP in one place.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("unknown site {0}")]
    UnknownSite(String),
    #[error("site {0} is busy with another round")]
    Busy(String),
    #[error("{0}")]
    NotFound(String),
    #[error("invalid input: {}", .0.join("; "))]
    Invalid(Vec<String>),
    #[error(transparent)]
    Cpa(#[from] CpaError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The site's management key was refused by CPA and may not be tried now (CPA bans an IP
    /// after 5 refused keys): `detail` says when it was refused and when it is tried again.
    #[error("site {site}: {detail}; {}", connection::advice(.site))]
    KeyRefused {
        site: String,
        detail: String,
        next_try_at: DateTime<Utc>,
        /// CPA's HTTP status of the refusal (401, or 403 for a banned IP).
        status: u16,
    },
    #[error("site {0} has no management key (set one through the API or its environment variable)")]
    NoKey(String),
    /// The process is stopping (SIGTERM/SIGINT): no new round starts (docs/operations.md
    /// "Stopping").
    #[error("quota-patrol is shutting down: no new round starts")]
    ShuttingDown,
    /// The request conflicts with what exists (e.g. a router entry declared in the config file).
    #[error("{0}")]
    Conflict(String),
    /// The router spec a change would give has problems (`RouterSpec::problems`), each a sentence.
    #[error("invalid router spec: {}", .0.join("; "))]
    InvalidSpec(Vec<String>),
    /// No `[router]` in the config: the router admin endpoints have nothing to act on.
    #[error("the router is not enabled (no [router] section in the config file)")]
    RouterDisabled,
}

/// Runs `fut` in its own task and waits for it: dropping the caller does not cancel the work.
pub(crate) async fn detached<T: Send + 'static>(
    fut: impl std::future::Future<Output = Result<T, JobError>> + Send + 'static,
) -> Result<T, JobError> {
    tokio::spawn(fut)
        .await
        .map_err(|e| JobError::Store(StoreError::Worker(format!("round task failed: {e}"))))?
}

/// Everything stored about a site's accounts, read in one store call: the listing, probe
/// states, disable reasons, exceptions and the priority list.
#[derive(Debug, Clone, Default)]
pub struct PoolData {
    pub accounts: Vec<crate::core::account::Account>,
    pub states: HashMap<String, crate::core::account::ProbeState>,
    pub reasons: HashMap<String, crate::core::account::DisableRecord>,
    pub exceptions: HashSet<String>,
    pub priorities: Vec<crate::core::priority::PriorityEntry>,
}

/// Process-wide options of the patrol.
#[derive(Debug, Clone)]
pub struct PatrolOptions {
    /// Lowers the `pollIntervalMinutes` floor to 1 (documented dev/test switch).
    pub allow_short_intervals: bool,
    /// Length of one "minute" of the poll interval and jitter (60 s; the demo uses less).
    pub interval_unit: Duration,
    /// Operation-log retention in days.
    pub log_retention_days: i64,
    /// `[metrics] per_account`: also publish `quota_patrol_account_used_percent` per account
    /// and window (off by default: one series per account and window).
    pub per_account_metrics: bool,
}

impl Default for PatrolOptions {
    fn default() -> Self {
        Self {
            allow_short_intervals: false,
            interval_unit: Duration::seconds(60),
            log_retention_days: 30,
            per_account_metrics: false,
        }
    }
}

/// Everything the jobs need: store, clock, random source, per-site runtime, options.
#[derive(Clone)]
pub struct Patrol {
    pub store: Store,
    pub clock: SharedClock,
    /// Every random draw that affects a decision (batch pauses, backoff jitter, the spread of
    /// regular rounds); `ThreadRandom` unless [`Patrol::with_random`] fixed it.
    random: SharedRandom,
    pub options: PatrolOptions,
    runtimes: Arc<Mutex<HashMap<String, Arc<SiteRuntime>>>>,
    rounds: tokio::sync::broadcast::Sender<crate::core::report::InspectionRunResult>,
    /// E-mail / webhook alerts (`None`: not configured).
    alerting: Option<Arc<alerts::Alerting>>,
    /// Cancelled once at SIGTERM/SIGINT: rounds start no new probe batch or action, the
    /// scheduler and alert delivery start nothing new (docs/operations.md "Stopping").
    shutdown: tokio_util::sync::CancellationToken,
    /// The running router's admin side (`None`: no `[router]`); set once by the app wiring
    /// ([`Patrol::set_router_admin`]), shared by every clone.
    router: Arc<arc_swap::ArcSwapOption<router::RouterAdmin>>,
}

impl Patrol {
    /// A patrol over `store`, drawing randomness from `rand` ([`crate::random::ThreadRandom`]).
    pub fn new(store: Store, clock: SharedClock, options: PatrolOptions) -> Self {
        let (rounds, _) = tokio::sync::broadcast::channel(64);
        Self {
            store,
            clock,
            random: Arc::new(crate::random::ThreadRandom),
            options,
            runtimes: Arc::new(Mutex::new(HashMap::new())),
            rounds,
            alerting: None,
            shutdown: tokio_util::sync::CancellationToken::new(),
            router: Arc::default(),
        }
    }

    /// Installs (or removes) the router's admin side for every clone of this patrol: the app
    /// wiring calls it once the router is built; the `/api/router/*` endpoints answer 503
    /// `router_disabled` until then.
    pub fn set_router_admin(&self, admin: Option<router::RouterAdmin>) {
        self.router.store(admin.map(Arc::new));
    }

    /// The router's admin side, when a router runs.
    pub fn router_admin(&self) -> Option<Arc<router::RouterAdmin>> {
        self.router.load_full()
    }

    /// Asks every job to stop starting work (idempotent): running rounds finish the probes and
    /// actions in flight, persist and end; new rounds fail with [`JobError::ShuttingDown`].
    pub fn request_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Whether [`Patrol::request_shutdown`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Resolves once shutdown is requested (for `select!` with a pause).
    pub async fn shutdown_requested(&self) {
        self.shutdown.cancelled().await;
    }

    /// Waits until no site holds its round lock: every running round (and manual action or
    /// settings save holding a site) has ended. Call after [`Patrol::request_shutdown`], under a
    /// deadline: nothing new starts then, so this converges ([`Patrol::busy_sites`] says which
    /// sites it waits for).
    pub async fn wait_idle(&self) {
        let all: Vec<Arc<SiteRuntime>> = self
            .runtimes
            .lock()
            .expect("runtimes lock")
            .values()
            .cloned()
            .collect();
        for rt in all {
            rt.wait_free().await;
        }
    }

    /// Sites whose round lock is held now (a round or a manual action runs).
    pub fn busy_sites(&self) -> Vec<String> {
        self.runtimes
            .lock()
            .expect("runtimes lock")
            .iter()
            .filter(|(_, rt)| rt.is_running())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The same patrol drawing from `random` (tests and simulations fix it, as the clock).
    /// Call before the first [`Patrol::runtime`]: site runtimes keep the source they got.
    pub fn with_random(mut self, random: SharedRandom) -> Self {
        self.random = random;
        self
    }

    /// The random source every decision draws from.
    pub fn random(&self) -> &SharedRandom {
        &self.random
    }

    /// The same patrol with alerting (app wiring, tests).
    pub fn with_alerting(mut self, alerting: alerts::Alerting) -> Self {
        self.alerting = Some(Arc::new(alerting));
        self
    }

    /// Alerting, when configured.
    pub fn alerting(&self) -> Option<&Arc<alerts::Alerting>> {
        self.alerting.as_ref()
    }

    /// Every finished round (all kinds but warm-up), as it finishes. Slow receivers lose the
    /// oldest results (broadcast semantics).
    pub fn subscribe_rounds(
        &self,
    ) -> tokio::sync::broadcast::Receiver<crate::core::report::InspectionRunResult> {
        self.rounds.subscribe()
    }

    pub(crate) fn publish_round(&self, r: &crate::core::report::InspectionRunResult) {
        if self.rounds.receiver_count() > 0 {
            let _ = self.rounds.send(r.clone());
        }
    }

    /// Now, from the injected clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// The runtime of a site (created on first use).
    pub fn runtime(&self, site_id: &str) -> Arc<SiteRuntime> {
        let mut map = self.runtimes.lock().expect("runtimes lock");
        map.entry(site_id.to_string())
            .or_insert_with(|| Arc::new(SiteRuntime::new(self.random.clone())))
            .clone()
    }

    /// Forgets a deleted site's runtime.
    pub fn forget_runtime(&self, site_id: &str) {
        self.runtimes.lock().expect("runtimes lock").remove(site_id);
    }

    /// Reads a site's [`PoolData`].
    pub async fn pool(&self, site_id: &str) -> Result<PoolData, JobError> {
        let sid = site_id.to_string();
        Ok(self
            .store
            .run(move |c| {
                Ok(PoolData {
                    accounts: crate::store::accounts::list(c, &sid)?,
                    states: crate::store::accounts::load_states(c, &sid)?,
                    reasons: crate::store::accounts::load_reasons(c, &sid)?,
                    exceptions: crate::store::accounts::exceptions(c, &sid)?
                        .into_iter()
                        .collect(),
                    priorities: crate::store::priorities::load(c, &sid)?,
                })
            })
            .await?)
    }

    /// Loads a site; `UnknownSite` if absent.
    pub async fn site(&self, site_id: &str) -> Result<Site, JobError> {
        let id = site_id.to_string();
        self.store
            .run(move |c| crate::store::sites::get(c, &id))
            .await?
            .ok_or_else(|| JobError::UnknownSite(site_id.to_string()))
    }

    /// Resolves `?siteId=`: the given site, else the first enabled site by id, else the first site.
    pub async fn resolve_site(&self, site_id: Option<&str>) -> Result<Site, JobError> {
        if let Some(id) = site_id.filter(|s| !s.is_empty()) {
            return self.site(id).await;
        }
        let sites = self.store.run(|c| crate::store::sites::list(c)).await?;
        sites
            .iter()
            .find(|s| s.site_enabled)
            .or(sites.first())
            .cloned()
            .ok_or_else(|| JobError::UnknownSite("(no site configured)".into()))
    }

    /// Appends operation-log entries and mirrors them to tracing.
    pub async fn log(&self, entries: Vec<NewLogEntry>) {
        if entries.is_empty() {
            return;
        }
        for e in &entries {
            let site = e.site_id.as_deref().unwrap_or("-");
            let account = e.account_name.as_deref().unwrap_or("-");
            match e.level {
                crate::core::oplog::Level::Info => {
                    tracing::info!(site, account, op = e.operation_type, "{}", e.message)
                }
                crate::core::oplog::Level::Warning => {
                    tracing::warn!(site, account, op = e.operation_type, "{}", e.message)
                }
                crate::core::oplog::Level::Error => {
                    tracing::error!(site, account, op = e.operation_type, "{}", e.message)
                }
            }
        }
        let now = self.now();
        if let Err(e) = self
            .store
            .run(move |c| crate::store::log::append(c, now, &entries))
            .await
        {
            tracing::error!(error = %e, "cannot write the operation log");
        }
    }
}
