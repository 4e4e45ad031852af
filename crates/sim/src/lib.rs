//! A simulated CPA (CLIProxyAPI) on 127.0.0.1: the management API of docs/rules/cpa.md (auth gate,
//! auth-file listing and patches, deletes, `api-call`, usage queue) in front of an in-process fake
//! Codex usage upstream, plus knobs that tests and the `demo` command turn (outages, failures,
//! traffic). It owns no patrol logic and reads time only through the injected [`Clock`].
//! Used by `quota-patrol demo`, the integration tests and the benchmarks (docs/rules/cpa.md §8).
//! [`openai`] is a separate fake: an OpenAI-compatible upstream for the router (docs/rules/router.md §5).

mod accounts;
mod management;
pub mod openai;
mod state;
mod upstream;

#[cfg(test)]
mod tests;

pub use accounts::{
    CLOUDFLARE_CHALLENGE, DEACTIVATED_WORKSPACE, TOKEN_INVALIDATED, demo_accounts,
    generated_accounts,
};
pub use state::KeyCheckCounts;
pub use upstream::{roll_forward, usage_body};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use quota_patrol_core::clock::SharedClock;
use state::{Shared, SimState};

/// Length of a five-hour window in seconds (docs/rules/cpa.md §4.3).
pub const FIVE_HOUR_SECONDS: i64 = 18_000;
/// Length of a weekly window in seconds (docs/rules/cpa.md §4.3).
pub const WEEKLY_SECONDS: i64 = 604_800;
/// Length of a 30-day window in seconds (docs/rules/cpa.md §4.3, "~30-day window").
pub const MONTHLY_SECONDS: i64 = 2_592_000;

/// How the simulated CPA is set up at start.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Plaintext management key. `None` => management is disabled and every `/v0/management/*`
    /// request answers 404 with an empty body (CPA v7.1.19, docs/rules/cpa.md §1.1).
    pub management_key: Option<String>,
    /// Value of `X-CPA-VERSION`, e.g. `"v7.1.19"` (default) or `"v7.2.140"`; it also switches the
    /// version-dependent behaviour (list filters ≥ v7.2.94, `auth_index` on the status patch and
    /// `/reset-quota` ≥ v7.2.22, generic fields patch ≥ v7.1.22). `"dev"` counts as newest.
    pub version: String,
    /// The auth files present at start.
    pub accounts: Vec<SimAccount>,
    /// CPA's `auth-dir`; part of every `path` and of the `auth_index` seed. Default `/data/auths`.
    pub auth_dir: String,
    /// Failed key checks from one IP before that IP is banned for 30 minutes (CPA: 5, loopback
    /// included, docs/rules/cpa.md §1.2). `None` switches the ban off.
    pub ban_after_failures: Option<u32>,
    /// Port on 127.0.0.1 to listen on; 0 (default) = any free port. The demo asks for a fixed
    /// one so a second daemon's stored site address stays valid across demo restarts.
    pub listen_port: u16,
    /// The listing carries each Codex entry's passive `quota` object, as CPA builds after
    /// v7.2.140 do (docs/rules/cpa.md §9); served traffic updates it. Default off (no field).
    pub passive_quota: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            management_key: Some("sim-management-key".to_string()),
            version: "v7.1.19".to_string(),
            accounts: Vec::new(),
            auth_dir: "/data/auths".to_string(),
            ban_after_failures: Some(5),
            listen_port: 0,
            passive_quota: false,
        }
    }
}

/// One Codex auth file of the simulated CPA and the state of its upstream account.
#[derive(Debug, Clone, PartialEq)]
pub struct SimAccount {
    /// File name, e.g. `codex-user1@example.com-plus.json` (also the `id`).
    pub name: String,
    /// Account e-mail (listing `email`, `label`, `account`; empty => omitted).
    pub email: String,
    /// `id_token.plan_type` in the listing and `plan_type` in the usage payload.
    pub plan: String,
    /// `id_token.chatgpt_account_id`; the upstream checks `ChatGPT-Account-Id` against it.
    pub chatgpt_account_id: Option<String>,
    /// `false` => the listing omits `auth_index` and no `api-call` can reach the account.
    pub has_auth_index: bool,
    /// CPA's operator switch (listing `disabled`, status `disabled`).
    pub disabled: bool,
    /// CPA `priority` (0 = absent, omitted from the listing).
    pub priority: i64,
    /// CPA `note` (omitted when empty).
    pub note: Option<String>,
    /// Cumulative success counter at start.
    pub success: u64,
    /// Cumulative failure counter at start.
    pub failed: u64,
    /// Provider / `type`, normally `"codex"`.
    pub provider: String,
    /// The upstream quota of the account.
    pub usage: SimUsage,
    /// How the upstream answers a usage request for this account.
    pub behaviour: UpstreamBehaviour,
}

impl Default for SimAccount {
    fn default() -> Self {
        Self {
            name: String::new(),
            email: String::new(),
            plan: "plus".to_string(),
            chatgpt_account_id: None,
            has_auth_index: true,
            disabled: false,
            priority: 0,
            note: None,
            success: 0,
            failed: 0,
            provider: "codex".to_string(),
            usage: SimUsage::default(),
            behaviour: UpstreamBehaviour::Normal,
        }
    }
}

impl SimAccount {
    /// A normal Codex account named the way CPA's login flow names it
    /// (`codex-<email>-<plan>.json`, docs/rules/cpa.md §2) with a stable UUID-like
    /// `chatgpt_account_id` derived from the e-mail.
    pub fn codex(email: &str, plan: &str, usage: SimUsage) -> Self {
        Self {
            name: format!("codex-{email}-{plan}.json"),
            email: email.to_string(),
            plan: plan.to_string(),
            chatgpt_account_id: Some(accounts::account_id_for(email)),
            usage,
            ..Self::default()
        }
    }
}

/// The upstream quota of one account; each window is optional (free accounts have no five-hour
/// window, some accounts report a 30-day window instead of a weekly one; docs/rules/cpa.md §4.3).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimUsage {
    /// 18000-second window.
    pub five_hour: Option<SimWindow>,
    /// 604800-second window.
    pub weekly: Option<SimWindow>,
    /// 30-day window (2592000 s unless `window_seconds` says otherwise).
    pub monthly: Option<SimWindow>,
    /// Credit balance (`credits.balance`); `None` => no credits.
    pub credits_balance: Option<f64>,
    /// Banked rate-limit reset credits (docs/rules/cpa.md §10); `None` => the usage body has no
    /// `rate_limit_reset_credits` (an older payload: unknown, not zero).
    pub reset_credits: Option<Vec<SimResetCredit>>,
    /// How the reset-credit endpoints behave, and what they recorded.
    pub credit_desk: CreditDesk,
}

/// The reset-credit endpoints of one simulated account (docs/rules/cpa.md §10): knobs for every
/// outcome and what they did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CreditDesk {
    /// `redeem_request_id` → the credit it spent (the idempotency ledger).
    pub redeemed_requests: Vec<(String, String)>,
    /// Consume calls received (every try, whatever the answer).
    pub consume_calls: u32,
    /// List calls received.
    pub list_calls: u32,
    /// The next consume calls that take effect but answer with a transport failure (CPA 502
    /// `request failed`): the ambiguous answer.
    pub ambiguous_after_effect: u32,
    /// Answer every consume with this status and body instead (e.g. 429), spending nothing.
    pub consume_status: Option<(u16, String)>,
    /// After a `reset`, the usage body keeps reading the windows of before for this many usage
    /// probes (the upstream's delayed reset).
    pub delayed_reset_probes: u32,
    /// The windows shown while a reset is delayed, and how many probes are left.
    pub pending_stale: Option<(u32, Box<SimUsage>)>,
}

impl CreditDesk {
    /// Credits spent through the consume endpoint (each idempotency key counts once).
    pub fn spent(&self) -> usize {
        self.redeemed_requests.len()
    }
}
/// One banked rate-limit reset credit of the simulated upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct SimResetCredit {
    /// `RateLimitResetCredit_…`.
    pub id: String,
    pub granted_at: DateTime<Utc>,
    /// It lapses then (about 30 days after `granted_at` upstream).
    pub expires_at: DateTime<Utc>,
    /// When it was spent; `None` while available.
    pub redeemed_at: Option<DateTime<Utc>>,
}

impl SimResetCredit {
    /// An available credit granted at `granted_at` that lapses 30 days later.
    pub fn granted(id: &str, granted_at: DateTime<Utc>) -> Self {
        Self {
            id: id.to_string(),
            granted_at,
            expires_at: granted_at + Duration::days(30),
            redeemed_at: None,
        }
    }

    /// Whether it can be spent at `now` (not redeemed, not lapsed).
    pub fn available(&self, now: DateTime<Utc>) -> bool {
        self.redeemed_at.is_none() && self.expires_at > now
    }
}

impl SimUsage {
    /// A paid account: five-hour and weekly windows (docs/rules/cpa.md §4.3).
    pub fn paid(
        five_hour_used: f64,
        five_hour_reset_at: DateTime<Utc>,
        weekly_used: f64,
        weekly_reset_at: DateTime<Utc>,
    ) -> Self {
        Self {
            five_hour: Some(SimWindow::five_hour(five_hour_used, five_hour_reset_at)),
            weekly: Some(SimWindow::weekly(weekly_used, weekly_reset_at)),
            ..Self::default()
        }
    }

    /// A free account: a single weekly window (docs/rules/cpa.md §4.3).
    pub fn weekly_only(used: f64, reset_at: DateTime<Utc>) -> Self {
        Self {
            weekly: Some(SimWindow::weekly(used, reset_at)),
            ..Self::default()
        }
    }

    /// A free account with a single 30-day window (docs/rules/cpa.md §4.3).
    pub fn monthly_only(used: f64, reset_at: DateTime<Utc>) -> Self {
        Self {
            monthly: Some(SimWindow::monthly(used, reset_at)),
            ..Self::default()
        }
    }

    /// `rate_limit_reset_credits` at `now`: `(available_count, applicable_available_count)`;
    /// applicable only while a window is exhausted and the account has two windows (a credit
    /// resets the 5-hour and weekly windows together; docs/rules/cpa.md §10).
    pub fn reset_credit_counts(&self, now: DateTime<Utc>) -> Option<(u32, u32)> {
        let credits = self.reset_credits.as_ref()?;
        let available = credits.iter().filter(|c| c.available(now)).count() as u32;
        let applicable = if self.is_exhausted() && self.resettable() {
            available
        } else {
            0
        };
        Some((available, applicable))
    }

    /// Whether a credit can reset this account: both a 5-hour and a long window (a
    /// single-window account keeps its credit).
    pub fn resettable(&self) -> bool {
        self.five_hour.is_some() && (self.weekly.is_some() || self.monthly.is_some())
    }

    /// Whether any window is at or above 100 % (docs/rules/cpa.md §4.3 "Exhausted").
    pub fn is_exhausted(&self) -> bool {
        [&self.five_hour, &self.weekly, &self.monthly]
            .into_iter()
            .flatten()
            .any(|w| w.used_percent >= 100.0)
    }
}

/// One rate-limit window of the upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct SimWindow {
    /// Used share in percent (0..100, may exceed 100).
    pub used_percent: f64,
    /// When the window resets.
    pub reset_at: DateTime<Utc>,
    /// `limit_window_seconds`.
    pub window_seconds: i64,
}

impl SimWindow {
    /// A five-hour window (18000 s).
    pub fn five_hour(used_percent: f64, reset_at: DateTime<Utc>) -> Self {
        Self {
            used_percent,
            reset_at,
            window_seconds: FIVE_HOUR_SECONDS,
        }
    }

    /// A weekly window (604800 s).
    pub fn weekly(used_percent: f64, reset_at: DateTime<Utc>) -> Self {
        Self {
            used_percent,
            reset_at,
            window_seconds: WEEKLY_SECONDS,
        }
    }

    /// A 30-day window (2592000 s).
    pub fn monthly(used_percent: f64, reset_at: DateTime<Utc>) -> Self {
        Self {
            used_percent,
            reset_at,
            window_seconds: MONTHLY_SECONDS,
        }
    }
}

/// How the fake upstream (and the network in front of it) answers for one account.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum UpstreamBehaviour {
    /// The usage payload of docs/rules/cpa.md §4.2 built from [`SimUsage`].
    #[default]
    Normal,
    /// A fixed upstream answer, e.g. 401 (invalid token), 402 (deactivated workspace),
    /// a Cloudflare HTML 403, 429, 500; CPA wraps it in the `api-call` envelope.
    Status {
        status: u16,
        content_type: String,
        body: String,
    },
    /// The upstream never answers: the `api-call` handler waits 60 s (CPA's own api-call
    /// timeout) and then answers 502 `request failed`, far beyond any sane client timeout.
    /// Shutdown cancels the wait.
    Hang,
    /// The call never reaches the upstream: `api-call` answers 502 `{"error":"request failed"}`
    /// (docs/rules/cpa.md §3).
    TransportFailure,
    /// The upstream answers 200 with this (non-usage) body.
    Garbage(String),
}

/// The current state of one simulated account, for assertions and the demo.
#[derive(Debug, Clone, PartialEq)]
pub struct SimAccountView {
    pub name: String,
    /// `None` when the account has no auth index.
    pub auth_index: Option<String>,
    pub email: String,
    pub plan: String,
    pub chatgpt_account_id: Option<String>,
    pub disabled: bool,
    /// CPA `status`: `active`, `disabled` or `error`.
    pub status: String,
    pub status_message: String,
    /// CPA `priority` (0 = absent).
    pub priority: i64,
    pub note: Option<String>,
    pub usage: SimUsage,
    pub behaviour: UpstreamBehaviour,
    pub success: u64,
    pub failed: u64,
    /// Requests (success + failed) in the 20 recent 10-minute buckets.
    pub recent_requests: u64,
    /// Windows are not rolled forward when their reset passes (see [`SimHandle::set_stale`]).
    pub stale: bool,
    /// Deleted through the management API (hidden from the listing).
    pub deleted: bool,
    /// CPA's cooldown (`next_retry_after`), when set.
    pub next_retry_after: Option<DateTime<Utc>>,
}

/// How the simulated CPA's management API answers as a whole (docs/rules/cpa.md §1.1, §11).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SimMode {
    /// A standalone CPA serving `/v0/management` (every release up to v7.2.140; an 8.x
    /// that still keeps `/v0`).
    #[default]
    Standalone,
    /// An 8.x build that dropped `/v0/management`: every `/v0/management/*` request answers
    /// 404 with an empty body, without a key check but with the `X-CPA-*` headers (start the
    /// simulation with `version: "v8.0.3"` to have it report an 8.x).
    V0Dropped,
    /// A node in cluster mode, managed by a control plane: every management route answers
    /// 404 with an empty body and no `X-CPA-*` headers, exactly like a CPA without a
    /// management key.
    ClusterNode,
}

/// One HTTP request received by the simulated CPA (any path, before any check).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedRequest {
    pub method: String,
    /// Path without the query, e.g. `/v0/management/auth-files/fields`.
    pub path: String,
    /// Raw query string, empty when none.
    pub query: String,
    /// Body as text (lossy UTF-8), empty when none.
    pub body: String,
}

/// Starts simulated CPAs.
pub struct SimCpa;

impl SimCpa {
    /// Binds 127.0.0.1:0, starts serving on the current Tokio runtime and returns once the socket
    /// is bound, so callers may send requests at once (no readiness sleep needed).
    ///
    /// Errors: binding fails, or there is no Tokio runtime in this context (`ErrorKind::Other`).
    pub fn start(config: SimConfig, clock: SharedClock) -> std::io::Result<SimHandle> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            std::io::Error::other(format!("SimCpa::start needs a Tokio runtime: {e}"))
        })?;
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", config.listen_port))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(std_listener)?
        };
        let shared = Arc::new(Shared::new(config, clock));
        let cancel = shared.cancel.clone();
        let app = management::router(shared.clone());
        let shutdown = cancel.clone();
        let task = runtime.spawn(async move {
            let service = app.into_make_service_with_connect_info::<SocketAddr>();
            let _ = axum::serve(listener, service)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await;
        });
        Ok(SimHandle {
            shared,
            addr,
            cancel,
            task: Some(task),
        })
    }
}

/// A running simulated CPA: its address and every knob. Dropping it stops the server.
pub struct SimHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl SimHandle {
    /// The CPA root, `http://127.0.0.1:PORT`; the management API is under `/v0/management`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The configured management key.
    pub fn management_key(&self) -> Option<String> {
        self.shared.config.management_key.clone()
    }

    /// The clock the simulation reads.
    pub fn clock(&self) -> SharedClock {
        self.shared.clock.clone()
    }

    /// The `auth_index` CPA computes for an auth file of this simulation (docs/rules/cpa.md §2).
    pub fn auth_index_for(&self, provider: &str, name: &str) -> String {
        state::auth_index(provider, &self.shared.config.auth_dir, name)
    }

    fn with_state<R>(&self, f: impl FnOnce(&mut SimState) -> R) -> R {
        let mut state = self.shared.lock();
        f(&mut state)
    }

    /// Changes how the upstream answers for `name` (no-op for unknown names).
    pub fn set_behaviour(&self, name: &str, behaviour: UpstreamBehaviour) {
        self.with_state(|s| {
            if let Some(a) = s.get_mut(name) {
                a.spec.behaviour = behaviour;
            }
        });
    }

    /// Replaces the upstream quota of `name`.
    pub fn set_usage(&self, name: &str, usage: SimUsage) {
        self.with_state(|s| {
            if let Some(a) = s.get_mut(name) {
                a.spec.usage = usage;
            }
        });
    }

    /// Edits the upstream quota of `name` in place. `f` runs under the simulation's lock: do not
    /// call other methods of this handle from inside it.
    pub fn update_usage(&self, name: &str, f: impl FnOnce(&mut SimUsage)) {
        self.with_state(|s| {
            if let Some(a) = s.get_mut(name) {
                f(&mut a.spec.usage);
            }
        });
    }

    /// `true` => windows of `name` whose reset passed are *not* rolled forward: the upstream keeps
    /// reporting the old `used_percent` with a `reset_at` in the past (docs/rules/patrol.md §3 "stale").
    pub fn set_stale(&self, name: &str, stale: bool) {
        self.with_state(|s| {
            if let Some(a) = s.get_mut(name) {
                a.stale = stale;
            }
        });
    }

    /// Adds `requests` successful proxy requests to `name`: grows `success` and the current
    /// `recent_requests` bucket and queues usage records (CPA v7.1.19 §5.1–5.2). No quota burns.
    pub fn add_traffic(&self, name: &str, requests: u64) {
        let now = self.shared.clock.now();
        self.with_state(|s| s.add_traffic(name, requests, now));
    }

    /// Client traffic through the proxy: `requests` requests are routed like CPA does
    /// (docs/rules/cpa.md §6.2: enabled, not cooling down, not exhausted; highest priority group only;
    /// `fill-first` takes the first by id, `round-robin` spreads with a seeded RNG). Each success
    /// burns `percent_per_request` of the five-hour window, a quarter of that on the weekly window
    /// when a five-hour window exists (else the full amount), and a quarter of the weekly amount on
    /// a 30-day window when a weekly one exists; windows are capped at 100 %. Accounts whose
    /// upstream misbehaves fail the request, cool down as CPA does (§6.3) and the request fails
    /// over to the next account.
    pub fn simulate_traffic(&self, rng_seed: u64, percent_per_request: f64, requests: u64) {
        let now = self.shared.clock.now();
        self.with_state(|s| s.simulate_traffic(rng_seed, percent_per_request, requests, now));
    }

    /// Puts `name` in CPA's cooldown until `until` (status `error`, `unavailable`,
    /// `next_retry_after`, a Codex 429 text as `status_message`; docs/rules/cpa.md §8), or clears it.
    pub fn set_cooldown(&self, name: &str, until: Option<DateTime<Utc>>) {
        let now = self.shared.clock.now();
        self.with_state(|s| s.set_cooldown(name, until, now));
    }

    /// The current state of `name` (also for deleted accounts).
    pub fn account(&self, name: &str) -> Option<SimAccountView> {
        let now = self.shared.clock.now();
        self.with_state(|s| s.get(name).map(|a| a.view(now)))
    }

    /// Every account, in listing order (lower-cased name), deleted ones included.
    pub fn accounts(&self) -> Vec<SimAccountView> {
        let now = self.shared.clock.now();
        self.with_state(|s| s.ordered().map(|a| a.view(now)).collect())
    }

    /// Adds (or replaces) an auth file, as if a new login had been stored.
    pub fn add_account(&self, account: SimAccount) {
        let now = self.shared.clock.now();
        self.with_state(|s| s.insert(account, now));
    }

    /// Toggles `disabled` as a person would in CPA's UI (same effect as the status patch).
    pub fn set_disabled(&self, name: &str, disabled: bool) {
        let now = self.shared.clock.now();
        self.with_state(|s| {
            if let Some(a) = s.get_mut(name) {
                a.apply_disabled(disabled, now);
            }
        });
    }

    /// The next status or fields patch of `name` answers `200 ok` but changes nothing, once
    /// (CPA #5967: a priority patch answered "ok" without applying).
    pub fn revert_next_write(&self, name: &str) {
        self.with_state(|s| {
            s.knobs.revert_next.insert(name.to_string());
        });
    }

    /// Switches the listing's passive `quota` field on or off (docs/rules/cpa.md §9).
    pub fn set_passive_quota(&self, enabled: bool) {
        self.with_state(|s| s.knobs.passive_quota = enabled);
    }

    /// Makes `name`'s passive quota what CPA would list after it served a response just now
    /// (the headers of its current usage, `observed_at` = the clock's now).
    pub fn observe_passive(&self, name: &str) {
        let now = self.shared.clock.now();
        self.with_state(|s| {
            if let Some(a) = s.get_mut(name) {
                a.observe_passive(now);
            }
        });
    }

    /// Replaces `name`'s listed `quota` value with `value` as is (garbage, empty `signals`, no
    /// `observed_at`, ...); `None` goes back to the simulated one.
    pub fn set_passive_override(&self, name: &str, value: Option<serde_json::Value>) {
        self.with_state(|s| {
            if let Some(a) = s.get_mut(name) {
                a.passive_override = value;
            }
        });
    }

    /// `true` => the listing ignores `?name=` / `?auth_index=` even on v7.2.94+ (like an older
    /// build, or a proxy that drops the query): clients must check the names they get.
    pub fn set_ignore_list_filters(&self, ignore: bool) {
        self.with_state(|s| s.knobs.ignore_list_filters = ignore);
    }

    /// A token refresh of `name` that loses the fields set through the management API
    /// (CPA #5465, #5528): `priority` and `disabled` go back to their defaults and
    /// `last_refresh` becomes now.
    pub fn simulate_token_refresh(&self, name: &str) {
        let now = self.shared.clock.now();
        self.with_state(|s| {
            if let Some(a) = s.get_mut(name) {
                a.refresh_token_losing_fields(now);
            }
        });
    }

    /// Switches how the management API answers as a whole (see [`SimMode`]); takes effect
    /// for the next request.
    pub fn set_mode(&self, mode: SimMode) {
        self.with_state(|s| s.knobs.mode = mode);
    }

    /// After `n` more `api-call`s the management API switches to `mode` (the n-th call is still
    /// answered as before): an upgrade or a switch to cluster mode in the middle of a round.
    /// `n == 0` switches at once.
    pub fn set_mode_after_api_calls(&self, n: usize, mode: SimMode) {
        self.with_state(|s| {
            if n == 0 {
                s.knobs.mode = mode;
                s.knobs.mode_after = None;
            } else {
                s.knobs.mode_after = Some((n, mode));
            }
        });
    }

    /// `true` => the listing sends every `auth_index` as a JSON number (the 64-bit value of
    /// its hex form) instead of the hex string; `api-call`, the status patch and `reset-quota`
    /// then also take that number's decimal text (docs/rules/cpa.md §11: clients accept both).
    pub fn set_auth_index_as_number(&self, numeric: bool) {
        self.with_state(|s| s.knobs.numeric_auth_index = numeric);
    }

    /// `true` => every request answers 503 with an HTML body, like a dead backend behind a
    /// reverse proxy (no CPA headers).
    pub fn set_down(&self, down: bool) {
        self.with_state(|s| s.knobs.down = down);
    }

    /// After `n` more `api-call`s the simulation goes down (see [`SimHandle::set_down`]); the
    /// n-th call is still answered normally. `n == 0` goes down at once.
    pub fn die_after_api_calls(&self, n: usize) {
        self.with_state(|s| {
            if n == 0 {
                s.knobs.down = true;
                s.knobs.die_after = None;
            } else {
                s.knobs.die_after = Some(n);
            }
        });
    }

    /// `Some(body)` => `GET /auth-files` answers 200 with this (non-JSON) body.
    pub fn set_listing_garbage(&self, body: Option<String>) {
        self.with_state(|s| s.knobs.listing_garbage = body);
    }

    /// `Some(status)` => status/fields patches and deletes of `name` fail with `status`
    /// (after validation and lookup, like a failed save in CPA). `None` clears it.
    pub fn set_fail_patch(&self, name: &str, status: Option<u16>) {
        self.with_state(|s| match status {
            Some(code) => {
                s.knobs.fail_patch.insert(name.to_string(), code);
            }
            None => {
                s.knobs.fail_patch.remove(name);
            }
        });
    }

    /// CPA's `usage-statistics-enabled` (the simulation starts with `true` so that traffic fills
    /// the usage queue; real CPA defaults to `false`, docs/rules/cpa.md §5.2).
    pub fn set_usage_statistics_enabled(&self, enabled: bool) {
        self.with_state(|s| s.usage_statistics_enabled = enabled);
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.with_state(|s| s.requests.clone())
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.with_state(|s| s.requests.clear());
    }

    /// Switches request recording (on by default; benchmarks may turn it off).
    pub fn set_record_requests(&self, record: bool) {
        self.with_state(|s| s.knobs.record_requests = record);
    }

    /// Key checks refused so far: wrong or missing keys, answers to a banned IP, bans imposed.
    pub fn key_checks(&self) -> KeyCheckCounts {
        self.shared.lock().key_checks
    }

    /// Number of authenticated, well-formed `api-call` requests (answered or still in flight).
    pub fn api_call_count(&self) -> usize {
        self.shared.api_calls.load(Ordering::SeqCst)
    }

    /// Ends every hanging upstream call now (and any later one at once): the `api-call`
    /// answers 502 `request failed`. Lets tests hold a round open without waiting on a timeout.
    pub fn release_hanging(&self) {
        self.shared.release.cancel();
    }

    /// Stops the server: no new connections, hanging calls are cancelled, in-flight requests get
    /// two seconds to finish. The port is closed when this returns.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(StdDuration::from_secs(2), &mut task)
                .await
                .is_err()
        {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
