//! The request router's HTTP adapter (docs/rules/router.md §3–§5): its own listener serving
//! `POST /v1/chat/completions`, `POST /v1/responses` (JSON and SSE), `POST /v1/responses/compact`
//! and `GET /v1/models[/{model}]`, one *lane* per (pool, model) holding the engine state, the
//! attempt loop (retry, fail-over, chain legs, the all-excluded answer), the upstream calls
//! (hyper-util) and the streaming pass-through.
//! Owns: lanes and their locks, client-key checks, usage records (sent, never written here),
//! router metrics. Must not: decide eligibility, affinity or failure classes itself (those are
//! `core::selection`, `core::affinity`, `core::failure`), read the database, log a key (upstream
//! or client), or hold a lane lock across an `.await`.

mod answer;
mod attempt;
mod head;
mod http;
mod lanes;
pub mod listener;
mod outcome;
mod reply;
mod status;
mod stream;
mod upstream;
pub mod usage;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::clock::SharedClock;
use crate::core::affinity::ResponseLinks;
use crate::core::pool::PoolFeed;
use crate::core::router::{RouterSpec, UsageRecord};
use crate::random::SharedRandom;
use lanes::Lanes;

pub use status::{PreviewError, PreviewExcluded, PreviewLeg, RouterPreview, RouterStatus};

pub use usage::{USAGE_BATCH, USAGE_QUEUE_CAPACITY, UsageQueue, UsageReceiver};
/// Linked `previous_response_id`s kept for Responses API continuations (LRU).
const RESPONSE_LINKS: usize = 10_000;

/// `[router]` settings, parsed and defined by `config` (a leaf the router reads, never the
/// reverse); re-exported here for the router's callers.
pub use crate::config::RouterSettings;

/// Finds the published pool of a patrol site (the app passes `Patrol::pool_handle`).
pub type FeedSource = Arc<dyn Fn(&str) -> Arc<dyn PoolFeed> + Send + Sync>;

/// Request counters for the status view.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub requests: AtomicU64,
    pub served: AtomicU64,
    pub failed: AtomicU64,
    pub attempts: AtomicU64,
    pub failovers: AtomicU64,
    pub usage_dropped: AtomicU64,
}

/// Everything a request needs, shared by the handlers.
pub(crate) struct Shared {
    pub settings: RouterSettings,
    pub clock: SharedClock,
    pub random: SharedRandom,
    /// Hex SHA-256 of the accepted client keys.
    pub keys: ArcSwap<HashSet<String>>,
    pub lanes: ArcSwap<Lanes>,
    pub feeds: FeedSource,
    /// The usage queue to the writer; closed by [`RouterHandle::close_usage`].
    pub usage: Arc<UsageQueue>,
    pub links: Mutex<ResponseLinks>,
    pub counters: Counters,
    /// The per-request metric handles, looked up on first use ([`Shared::hot`]).
    hot: std::sync::OnceLock<HotMetrics>,
}

/// Handles of the counters and the histogram every served request touches. A `counter!` call
/// hashes its key (and allocates its labels) into the registry each time; these are looked up
/// once, on the first request (after the app installed the recorder). Names: docs/router.md
/// "Metrics".
pub(crate) struct HotMetrics {
    pub requests_ok: metrics::Counter,
    pub attempts: metrics::Counter,
    pub failovers: metrics::Counter,
    pub cache_samples: metrics::Counter,
    pub cache_hits: metrics::Counter,
    pub added_latency: metrics::Histogram,
    /// `quota_patrol_router_affinity_total` per choice, in [`outcome::CHOICES`] order.
    affinity: Vec<metrics::Counter>,
}

impl HotMetrics {
    fn new() -> Self {
        Self {
            requests_ok: metrics::counter!("quota_patrol_router_requests_total", "status" => "200"),
            attempts: metrics::counter!("quota_patrol_router_attempts_total"),
            failovers: metrics::counter!("quota_patrol_router_failovers_total"),
            cache_samples: metrics::counter!("quota_patrol_router_cache_samples_total"),
            cache_hits: metrics::counter!("quota_patrol_router_cache_hits_total"),
            added_latency: metrics::histogram!("quota_patrol_router_added_latency_seconds"),
            affinity: outcome::CHOICES
                .iter()
                .map(|&c| {
                    metrics::counter!("quota_patrol_router_affinity_total", "choice" => outcome::choice_name(c))
                })
                .collect(),
        }
    }

    /// The affinity counter of `choice`.
    pub fn affinity(&self, choice: crate::core::affinity::AffinityChoice) -> &metrics::Counter {
        let i = outcome::CHOICES.iter().position(|&c| c == choice);
        &self.affinity[i.expect("every choice is in CHOICES")]
    }
}

impl Shared {
    /// The per-request metric handles.
    pub fn hot(&self) -> &HotMetrics {
        self.hot.get_or_init(HotMetrics::new)
    }

    /// Queues one usage record without waiting; a full or closed queue drops it (counted).
    pub fn send_usage(&self, record: UsageRecord) {
        if !self.usage.push(record) {
            self.counters.usage_dropped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("quota_patrol_router_usage_dropped_total").increment(1);
        }
    }
}

/// The router: owns the lanes and builds the axum app of its listener.
pub struct Router {
    shared: Arc<Shared>,
}

/// A cheap handle to the running router (admin API, app, tests).
#[derive(Clone)]
pub struct RouterHandle {
    shared: Arc<Shared>,
}

impl Router {
    /// Builds the router over `spec` (validated: `spec.problems()` must be empty, else they are
    /// returned). Client keys start empty (every keyed request is refused until
    /// [`RouterHandle::set_keys`]); usage records go to `usage`.
    pub fn new(
        settings: RouterSettings,
        spec: RouterSpec,
        feeds: FeedSource,
        clock: SharedClock,
        random: SharedRandom,
        usage: Arc<UsageQueue>,
    ) -> Result<Self, Vec<String>> {
        let problems = spec.problems();
        if !problems.is_empty() {
            return Err(problems);
        }
        let lanes = Lanes::build(spec, &settings.affinity, &feeds, None);
        register_metrics();
        let shared = Arc::new(Shared {
            settings,
            clock,
            random,
            keys: ArcSwap::from_pointee(HashSet::new()),
            lanes: ArcSwap::from_pointee(lanes),
            feeds,
            usage,
            links: Mutex::new(ResponseLinks::new(RESPONSE_LINKS)),
            counters: Counters::default(),
            hot: std::sync::OnceLock::new(),
        });
        Ok(Self { shared })
    }

    /// A handle to this router.
    pub fn handle(&self) -> RouterHandle {
        RouterHandle {
            shared: self.shared.clone(),
        }
    }

    /// The axum app of the router listener (routes, body limit, client auth).
    pub fn app(&self) -> axum::Router {
        http::app(self.shared.clone())
    }
}

impl RouterHandle {
    /// Replaces the accepted client keys (hex SHA-256, `core::router::key_hash`).
    pub fn set_keys(&self, hashes: HashSet<String>) {
        self.shared.keys.store(Arc::new(hashes));
    }

    /// Validates `spec` (`RouterSpec::problems`) and rebuilds the lanes; lanes whose accounts
    /// did not change keep their state (cooldowns, bindings). Errors: every problem.
    pub fn reload(&self, spec: RouterSpec) -> Result<(), Vec<String>> {
        let problems = spec.problems();
        if !problems.is_empty() {
            return Err(problems);
        }
        let old = self.shared.lanes.load_full();
        let lanes = Lanes::build(
            spec,
            &self.shared.settings.affinity,
            &self.shared.feeds,
            Some(&old),
        );
        self.shared.lanes.store(Arc::new(lanes));
        Ok(())
    }

    /// Closes the usage queue (the app's stop): the writer drains what was queued and ends;
    /// records of requests still running are dropped (and counted).
    pub fn close_usage(&self) {
        self.shared.usage.close();
    }

    /// The spec the router runs.
    pub fn spec(&self) -> Arc<RouterSpec> {
        self.shared.lanes.load().spec.clone()
    }

    /// Pools, accounts (availability, cooldown, demotion), bindings per lane and request
    /// counters (docs/rules/router.md §5; `GET /api/router/status`).
    pub fn status(&self) -> RouterStatus {
        status::status(&self.shared)
    }

    /// Who would serve the next request for `model` (and `session_key`, taken as a session
    /// header value): per leg the ranking and the exclusions with reason and until. Read-only
    /// (no binding is made). Errors: unknown model.
    pub fn preview(
        &self,
        model: &str,
        session_key: Option<&str>,
    ) -> Result<RouterPreview, PreviewError> {
        status::preview(&self.shared, model, session_key)
    }
}

/// Registers the router's counters at zero (every label value that is known in advance), so
/// `/metrics` lists them before the first event and rates start from 0. Requires the
/// recorder installed first (`app::metrics_handle`). Names: docs/router.md "Failures, retries
/// and exclusion", "Metrics".
fn register_metrics() {
    for name in [
        "quota_patrol_router_attempts_total",
        "quota_patrol_router_failovers_total",
        "quota_patrol_router_cache_hits_total",
        "quota_patrol_router_cache_samples_total",
        "quota_patrol_router_late_failures_total",
        "quota_patrol_router_cancelled_streams_total",
        "quota_patrol_router_pool_throttles_total",
        "quota_patrol_router_usage_dropped_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    for kind in crate::core::failure::CooldownKind::ALL {
        metrics::counter!("quota_patrol_router_exclusions_total", "reason" => outcome::kind_name(kind))
            .increment(0);
    }
    for choice in outcome::CHOICES {
        metrics::counter!("quota_patrol_router_affinity_total", "choice" => outcome::choice_name(choice))
            .increment(0);
    }
}

/// Lane lookup by (pool, model).
pub(crate) type LaneMap = HashMap<(String, String), Arc<lanes::Lane>>;
