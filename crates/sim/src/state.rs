//! The simulated CPA's memory: auth records (O(1) by name and by `auth_index`, kept in listing
//! order), the test knobs, the brute-force counters, the request log and the usage queue.
//! Plain data behind one mutex; never held across an `.await`. Time comes in as arguments.
//! Rules: docs/rules/cpa.md §1.2 (ban), §2 (records, `auth_index`), §5 (counters, queue), §6 (routing).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Duration, FixedOffset, Utc};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::upstream;
use super::{RecordedRequest, SimAccount, SimAccountView, SimConfig, UpstreamBehaviour};
use quota_patrol_core::clock::SharedClock;

/// Number of `recent_requests` buckets (CPA v7.1.19, auth-files listing).
pub(crate) const BUCKETS: usize = 20;
/// Length of one `recent_requests` bucket in seconds.
pub(crate) const BUCKET_SECONDS: i64 = 600;
/// Ban length after too many failed key checks (docs/rules/cpa.md §1.2).
pub(crate) const BAN_MINUTES: i64 = 30;
/// Upper bound of the usage queue, so long simulations do not grow without limit.
const QUEUE_CAP: usize = 100_000;
/// Usage records queued by one `add_traffic` call at most.
pub(crate) const TRAFFIC_RECORDS_CAP: u64 = 1_000;
/// Upper bound of the request log.
const REQUEST_LOG_CAP: usize = 200_000;

/// A CPA version as three numbers; `dev` and unparsable strings count as newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version(pub u32, pub u32, pub u32);

impl Version {
    pub(crate) fn parse(raw: &str) -> Self {
        let trimmed = raw.trim().trim_start_matches(['v', 'V']);
        let mut parts = trimmed.split('.').map(|p| p.parse::<u32>());
        match (parts.next(), parts.next(), parts.next()) {
            (Some(Ok(a)), Some(Ok(b)), Some(Ok(c))) => Version(a, b, c),
            (Some(Ok(a)), Some(Ok(b)), None) => Version(a, b, 0),
            _ => Version(u32::MAX, u32::MAX, u32::MAX),
        }
    }
}

/// Version-dependent behaviour (docs/rules/cpa.md §0 timeline).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Features {
    /// `GET /auth-files?name=&auth_index=` (v7.2.94).
    pub list_filters: bool,
    /// `auth_index` in the status patch and `POST /reset-quota` (v7.2.22).
    pub v7_2_22: bool,
    /// Generic metadata fields patch (v7.1.22).
    pub generic_fields: bool,
    /// Unknown management paths run the key check and answer an empty 404 (HEAD); older builds
    /// answer gin's plain-text 404 without any check. The exact switch version is unknown; the
    /// simulation uses v7.2.0.
    pub keyed_unknown_paths: bool,
}

impl Features {
    pub(crate) fn for_version(v: Version) -> Self {
        Self {
            list_filters: v >= Version(7, 2, 94),
            v7_2_22: v >= Version(7, 2, 22),
            generic_fields: v >= Version(7, 1, 22),
            keyed_unknown_paths: v >= Version(7, 2, 0),
        }
    }
}

/// The parts of [`SimConfig`] that never change after start.
#[derive(Debug)]
pub(crate) struct FixedConfig {
    pub management_key: Option<String>,
    pub version: String,
    pub features: Features,
    pub auth_dir: String,
    pub ban_after_failures: Option<u32>,
    pub commit: String,
    pub build_date: String,
}

/// Everything the server tasks share.
pub(crate) struct Shared {
    pub config: FixedConfig,
    pub clock: SharedClock,
    pub state: Mutex<SimState>,
    pub api_calls: AtomicUsize,
    pub cancel: CancellationToken,
    /// Cancelled by `SimHandle::release_hanging`: hanging api-calls answer at once from then on.
    pub release: CancellationToken,
}

impl Shared {
    pub(crate) fn new(config: SimConfig, clock: SharedClock) -> Self {
        let now = clock.now();
        let version = Version::parse(&config.version);
        let digest = Sha256::digest(format!("cpa-commit:{}", config.version).as_bytes());
        let auth_dir = clean_dir(&config.auth_dir);
        let mut state = SimState::new(auth_dir.clone());
        state.knobs.passive_quota = config.passive_quota;
        for account in config.accounts {
            state.insert(account, now);
        }
        Self {
            config: FixedConfig {
                management_key: config.management_key,
                version: config.version,
                features: Features::for_version(version),
                auth_dir,
                ban_after_failures: config.ban_after_failures,
                commit: hex::encode(&digest[..4])[..7].to_string(),
                build_date: "2026-05-21T03:00:00Z".to_string(),
            },
            clock,
            state: Mutex::new(state),
            api_calls: AtomicUsize::new(0),
            cancel: CancellationToken::new(),
            release: CancellationToken::new(),
        }
    }

    /// Locks the state; a poisoned lock (a panicking test thread) is recovered, the data is plain.
    pub(crate) fn lock(&self) -> MutexGuard<'_, SimState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `auth-dir` without trailing slashes and doubled slashes (Go `filepath.Clean`, enough for it).
fn clean_dir(dir: &str) -> String {
    let mut out = String::with_capacity(dir.len());
    for part in dir.split('/') {
        if part.is_empty() || part == "." {
            continue;
        }
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() { "/".to_string() } else { out }
}

/// Absolute path of an auth file under `auth_dir`.
pub(crate) fn auth_path(auth_dir: &str, name: &str) -> String {
    if auth_dir.ends_with('/') {
        format!("{auth_dir}{name}")
    } else {
        format!("{auth_dir}/{name}")
    }
}

/// `auth_index`: first 8 bytes of SHA-256 of `"<type>:<absolute path>"` in lowercase hex
/// (CPA v7.1.19 and HEAD, `sdk/cliproxy/auth/types.go`; docs/rules/cpa.md §2).
pub(crate) fn auth_index(provider: &str, auth_dir: &str, name: &str) -> String {
    let seed = format!("{provider}:{}", auth_path(&clean_dir(auth_dir), name));
    hex::encode(&Sha256::digest(seed.as_bytes())[..8])
}

/// A per-account fake access token (JWT-looking, never a real secret).
fn fake_token(name: &str) -> String {
    let digest = hex::encode(Sha256::digest(
        format!("sim-access-token:{name}").as_bytes(),
    ));
    format!("eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.sim.{digest}")
}

/// Go `time.Time` JSON: RFC 3339 with nanoseconds (trailing zeros trimmed) in the +08:00 offset
/// of the official Docker image (TZ=Asia/Shanghai; docs/rules/cpa.md §1.3).
pub(crate) fn go_time(at: DateTime<Utc>) -> String {
    let local = at.with_timezone(&shanghai());
    let mut out = local.format("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = local.timestamp_subsec_nanos();
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push_str("+08:00");
    out
}

/// The +08:00 offset CPA's Docker image reports.
pub(crate) fn shanghai() -> FixedOffset {
    FixedOffset::east_opt(8 * 3600)
        .unwrap_or_else(|| FixedOffset::east_opt(0).expect("zero offset"))
}

/// Index of the 10-minute bucket containing `at`.
pub(crate) fn bucket_id(at: DateTime<Utc>) -> i64 {
    at.timestamp().div_euclid(BUCKET_SECONDS)
}

/// One 10-minute `recent_requests` bucket.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Bucket {
    pub id: i64,
    pub success: u64,
    pub failed: u64,
}

/// One auth file as the simulated CPA holds it.
#[derive(Debug, Clone)]
pub(crate) struct AccountRecord {
    pub spec: SimAccount,
    pub auth_index: Option<String>,
    pub token: String,
    pub path: String,
    pub lower_name: String,
    pub status: String,
    pub status_message: String,
    pub unavailable: bool,
    pub next_retry_after: Option<DateTime<Utc>>,
    pub stale: bool,
    pub deleted: bool,
    pub buckets: [Bucket; BUCKETS],
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub last_refresh: DateTime<Utc>,
    pub size: u64,
    pub prefix: Option<String>,
    pub proxy_url: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// Keys written by the generic fields patch that the listing does not show.
    pub metadata: serde_json::Map<String, Value>,
    /// Passive quota (docs/rules/cpa.md §9): when CPA last saw a response carrying rate-limit
    /// headers for this account (`None`: nothing seen, `signals` empty) ...
    pub passive_observed_at: Option<DateTime<Utc>>,
    /// ... and those headers, raw strings under canonical names, replaced per response.
    pub passive_signals: BTreeMap<String, String>,
    /// A test's replacement of the whole `quota` value (garbage, no `observed_at`, ...).
    pub passive_override: Option<Value>,
}

impl AccountRecord {
    /// The fields the fake upstream reads and rolls forward ([`upstream::respond`]).
    pub(crate) fn upstream(&mut self) -> upstream::UpstreamAccount<'_> {
        upstream::UpstreamAccount {
            spec: &mut self.spec,
            token: &self.token,
            stale: self.stale,
        }
    }

    fn new(spec: SimAccount, auth_dir: &str, now: DateTime<Utc>) -> Self {
        let path = auth_path(auth_dir, &spec.name);
        let auth_index = spec
            .has_auth_index
            .then(|| auth_index(&spec.provider, auth_dir, &spec.name));
        // Stable, plausible file times: the login happened some days before the simulation.
        let seed = Sha256::digest(spec.name.as_bytes());
        let age_minutes =
            60 * 24 + i64::from(u16::from_be_bytes([seed[0], seed[1]])) % (60 * 24 * 20);
        let created_at =
            now - Duration::minutes(age_minutes) - Duration::milliseconds(i64::from(seed[2]));
        let (status, status_message) = if spec.disabled {
            ("disabled", "")
        } else {
            ("active", "")
        };
        let mut record = Self {
            token: fake_token(&spec.name),
            lower_name: spec.name.to_lowercase(),
            size: 3900 + u64::from(seed[3]) + spec.email.len() as u64 * 3,
            auth_index,
            path,
            status: status.to_string(),
            status_message: status_message.to_string(),
            unavailable: false,
            next_retry_after: None,
            stale: false,
            deleted: false,
            buckets: [Bucket::default(); BUCKETS],
            created_at,
            updated_at: created_at + Duration::seconds(2),
            last_refresh: created_at,
            prefix: None,
            proxy_url: None,
            headers: BTreeMap::new(),
            metadata: serde_json::Map::new(),
            passive_observed_at: None,
            passive_signals: BTreeMap::new(),
            passive_override: None,
            spec,
        };
        // Spread the initial counters over the recent buckets so `recent_requests` looks lived-in.
        let recent = record.spec.success.min(40);
        let current = bucket_id(now);
        for i in 0..recent {
            let id = current - (i as i64 * 7 + i64::from(seed[4])) % BUCKETS as i64;
            record.bucket_mut(id).success += 1;
        }
        record
    }

    /// What CPA (after v7.2.140) saw on this account's last served response: the Codex
    /// rate-limit headers of its current usage, observed `now` (docs/rules/cpa.md §9). Windows go
    /// to the slots the upstream uses: the shortest present window is *primary*, the next one
    /// *secondary* (so a weekly-only account carries 10080 in primary).
    pub(crate) fn observe_passive(&mut self, now: DateTime<Utc>) {
        let usage = &self.spec.usage;
        let mut signals = BTreeMap::new();
        let windows = [&usage.five_hour, &usage.weekly, &usage.monthly];
        for (slot, w) in ["Primary", "Secondary"]
            .into_iter()
            .zip(windows.into_iter().flatten())
        {
            let pre = format!("X-Codex-{slot}");
            signals.insert(format!("{pre}-Used-Percent"), fmt_num(w.used_percent));
            signals.insert(
                format!("{pre}-Window-Minutes"),
                (w.window_seconds / 60).to_string(),
            );
            signals.insert(
                format!("{pre}-Reset-At"),
                w.reset_at.timestamp().to_string(),
            );
        }
        if !self.spec.plan.is_empty() {
            signals.insert("X-Codex-Plan-Type".into(), self.spec.plan.clone());
        }
        self.passive_signals = signals;
        self.passive_observed_at = Some(now);
    }

    /// The listing's `quota` value (docs/rules/cpa.md §9): `{"signals": {}}` while nothing was
    /// seen; `observed_at` omitted while unset, else a Go time (with CPA's local offset).
    pub(crate) fn passive_quota(&self) -> Value {
        if let Some(v) = &self.passive_override {
            return v.clone();
        }
        let mut q = serde_json::Map::new();
        if let Some(at) = self.passive_observed_at {
            q.insert("observed_at".into(), Value::String(go_time(at)));
        }
        q.insert(
            "signals".into(),
            Value::Object(
                self.passive_signals
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            ),
        );
        Value::Object(q)
    }

    pub(crate) fn bucket_mut(&mut self, id: i64) -> &mut Bucket {
        let slot = &mut self.buckets[id.rem_euclid(BUCKETS as i64) as usize];
        if slot.id != id {
            *slot = Bucket {
                id,
                success: 0,
                failed: 0,
            };
        }
        slot
    }

    /// `(success, failed)` of bucket `id`, zero when the ring slot holds another bucket.
    pub(crate) fn bucket(&self, id: i64) -> (u64, u64) {
        let slot = &self.buckets[id.rem_euclid(BUCKETS as i64) as usize];
        if slot.id == id {
            (slot.success, slot.failed)
        } else {
            (0, 0)
        }
    }

    fn recent_total(&self, now: DateTime<Utc>) -> u64 {
        let current = bucket_id(now);
        (current - BUCKETS as i64 + 1..=current)
            .map(|id| {
                let (s, f) = self.bucket(id);
                s + f
            })
            .sum()
    }

    /// The status toggle's effect (CPA `applyAuthDisabledState`, docs/rules/cpa.md §2.2).
    pub(crate) fn apply_disabled(&mut self, disabled: bool, now: DateTime<Utc>) {
        self.spec.disabled = disabled;
        if disabled {
            self.status = "disabled".to_string();
            self.status_message = "disabled via management API".to_string();
        } else {
            self.status = "active".to_string();
            self.status_message = String::new();
        }
        self.updated_at = now;
    }

    /// A token refresh that rewrote the auth file and lost the fields set through the
    /// management API (CPA #5465, #5528): `priority` and `disabled` back to their defaults,
    /// `last_refresh` and `updated_at` now.
    pub(crate) fn refresh_token_losing_fields(&mut self, now: DateTime<Utc>) {
        self.spec.priority = 0;
        if self.spec.disabled {
            self.apply_disabled(false, now);
        }
        self.last_refresh = now;
        self.updated_at = now;
    }

    /// CPA's cooldown after an upstream error (docs/rules/cpa.md §6.3).
    fn cool_down(&mut self, until: DateTime<Utc>, message: String) {
        self.status = "error".to_string();
        self.status_message = message;
        self.unavailable = true;
        self.next_retry_after = Some(until);
    }

    fn clear_cooldown(&mut self) {
        if !self.spec.disabled {
            self.status = "active".to_string();
            self.status_message = String::new();
        }
        self.unavailable = false;
        self.next_retry_after = None;
    }

    fn cooling_down(&self, now: DateTime<Utc>) -> bool {
        self.next_retry_after.is_some_and(|until| until > now)
    }

    pub(crate) fn view(&self, now: DateTime<Utc>) -> SimAccountView {
        SimAccountView {
            name: self.spec.name.clone(),
            auth_index: self.auth_index.clone(),
            email: self.spec.email.clone(),
            plan: self.spec.plan.clone(),
            chatgpt_account_id: self.spec.chatgpt_account_id.clone(),
            disabled: self.spec.disabled,
            status: self.status.clone(),
            status_message: self.status_message.clone(),
            priority: self.spec.priority,
            note: self.spec.note.clone(),
            usage: self.spec.usage.clone(),
            behaviour: self.spec.behaviour.clone(),
            success: self.spec.success,
            failed: self.spec.failed,
            recent_requests: self.recent_total(now),
            stale: self.stale,
            deleted: self.deleted,
            next_retry_after: self.next_retry_after,
        }
    }
}

/// Test knobs (see `SimHandle`).
#[derive(Debug, Default)]
pub(crate) struct Knobs {
    pub down: bool,
    pub die_after: Option<usize>,
    pub listing_garbage: Option<String>,
    pub fail_patch: HashMap<String, u16>,
    /// Names whose next status/fields patch answers ok without applying (CPA #5967).
    pub revert_next: std::collections::HashSet<String>,
    /// `GET /auth-files` ignores `?name=`/`?auth_index=` whatever the version.
    pub ignore_list_filters: bool,
    pub record_requests: bool,
    /// How the management API answers as a whole (docs/rules/cpa.md §11).
    pub mode: crate::SimMode,
    /// The listing sends `auth_index` as a JSON number (the 64-bit value of the hex form).
    pub numeric_auth_index: bool,
    /// After this many more `api-call`s the mode switches (the last one is still answered).
    pub mode_after: Option<(usize, crate::SimMode)>,
    /// The listing carries each Codex entry's passive `quota` (CPA after v7.2.140,
    /// docs/rules/cpa.md §9); off = an older CPA, no `quota` field at all.
    pub passive_quota: bool,
}

/// Failed key checks of one client IP (docs/rules/cpa.md §1.2).
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    pub count: u32,
    pub blocked_until: Option<DateTime<Utc>>,
    /// Last failed or banned attempt: CPA forgets an entry idle for 2 h.
    pub last_at: Option<DateTime<Utc>>,
}

/// Key checks CPA refused since start, for tests ("CPA saw at most n refused attempts").
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KeyCheckCounts {
    /// Requests with a missing or wrong key.
    pub refused: u32,
    /// Requests refused because their IP was banned.
    pub banned_answers: u32,
    /// Bans imposed (5 failures from one IP).
    pub bans: u32,
}

/// A usage-queue record and the instant it was produced (for the retention drop).
#[derive(Debug)]
pub(crate) struct QueuedRecord {
    pub at: DateTime<Utc>,
    pub record: Value,
}

/// The mutable state of the simulated CPA.
pub(crate) struct SimState {
    records: Vec<AccountRecord>,
    by_name: HashMap<String, usize>,
    by_index: HashMap<String, usize>,
    /// Record slots sorted by (lower-cased name, name): the listing order.
    order: Vec<usize>,
    auth_dir: String,
    pub knobs: Knobs,
    pub failures: HashMap<IpAddr, Attempts>,
    pub key_checks: KeyCheckCounts,
    pub requests: Vec<RecordedRequest>,
    pub usage_queue: VecDeque<QueuedRecord>,
    pub usage_statistics_enabled: bool,
    /// `redis-usage-queue-retention-seconds` (default 60).
    pub queue_retention_seconds: i64,
    /// `routing.strategy`: `round-robin` or `fill-first`.
    pub routing_strategy: String,
    seq: u64,
}

impl SimState {
    fn new(auth_dir: String) -> Self {
        Self {
            records: Vec::new(),
            by_name: HashMap::new(),
            by_index: HashMap::new(),
            order: Vec::new(),
            auth_dir,
            knobs: Knobs {
                record_requests: true,
                ..Knobs::default()
            },
            failures: HashMap::new(),
            key_checks: KeyCheckCounts::default(),
            requests: Vec::new(),
            usage_queue: VecDeque::new(),
            usage_statistics_enabled: true,
            queue_retention_seconds: 60,
            routing_strategy: "round-robin".to_string(),
            seq: 0,
        }
    }

    /// Adds an auth file or replaces the one with the same name.
    pub(crate) fn insert(&mut self, account: SimAccount, now: DateTime<Utc>) {
        let record = AccountRecord::new(account, &self.auth_dir, now);
        if let Some(&slot) = self.by_name.get(&record.spec.name) {
            if let Some(old) = self.records[slot].auth_index.take() {
                self.by_index.remove(&old);
            }
            if let Some(index) = &record.auth_index {
                self.by_index.insert(index.clone(), slot);
            }
            self.records[slot] = record;
            return;
        }
        let slot = self.records.len();
        self.by_name.insert(record.spec.name.clone(), slot);
        if let Some(index) = &record.auth_index {
            self.by_index.insert(index.clone(), slot);
        }
        let key = (record.lower_name.clone(), record.spec.name.clone());
        self.records.push(record);
        let records = &self.records;
        let pos = self.order.partition_point(|&i| {
            (
                records[i].lower_name.as_str(),
                records[i].spec.name.as_str(),
            ) < (key.0.as_str(), key.1.as_str())
        });
        self.order.insert(pos, slot);
    }

    /// Any record by name, deleted ones included.
    pub(crate) fn get(&self, name: &str) -> Option<&AccountRecord> {
        self.by_name.get(name).map(|&i| &self.records[i])
    }

    /// Any record by name, deleted ones included.
    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut AccountRecord> {
        self.by_name.get(name).map(|&i| &mut self.records[i])
    }

    /// A listed (not deleted) record by name or id.
    pub(crate) fn live_mut(&mut self, name: &str) -> Option<&mut AccountRecord> {
        self.get_mut(name).filter(|r| !r.deleted)
    }

    /// A listed record by `auth_index`.
    /// The record whose `auth_index` is `index`: its hex form, or (as a client that read the
    /// listing's numeric form sends it back) the decimal of the same 64-bit value.
    pub(crate) fn by_auth_index_mut(&mut self, index: &str) -> Option<&mut AccountRecord> {
        let slot = match self.by_index.get(index) {
            Some(slot) => *slot,
            None => {
                let hex = format!("{:016x}", index.parse::<u64>().ok()?);
                *self.by_index.get(&hex)?
            }
        };
        Some(&mut self.records[slot]).filter(|r| !r.deleted)
    }

    /// Records in listing order, deleted ones included.
    pub(crate) fn ordered(&self) -> impl Iterator<Item = &AccountRecord> {
        self.order.iter().map(|&i| &self.records[i])
    }

    /// Hides a record from the listing and from `api-call` (HEAD removes the record; v7.1.19 keeps
    /// a hidden disabled one, docs/rules/cpa.md §2.4 — the simulation keeps it for assertions).
    pub(crate) fn mark_deleted(&mut self, name: &str, now: DateTime<Utc>) -> bool {
        match self.live_mut(name) {
            Some(record) => {
                record.deleted = true;
                record.apply_disabled(true, now);
                record.status_message = "removed via management API".to_string();
                true
            }
            None => false,
        }
    }

    pub(crate) fn record_request(&mut self, request: RecordedRequest) {
        if !self.knobs.record_requests {
            return;
        }
        if self.requests.len() >= REQUEST_LOG_CAP {
            self.requests.drain(..REQUEST_LOG_CAP / 2);
        }
        self.requests.push(request);
    }

    pub(crate) fn set_cooldown(
        &mut self,
        name: &str,
        until: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) {
        let Some(record) = self.get_mut(name) else {
            return;
        };
        match until {
            Some(until) => {
                let message = upstream::usage_limit_error(&record.spec.plan, until, now);
                record.cool_down(until, message);
            }
            None => record.clear_cooldown(),
        }
    }

    /// Clears CPA's own cooldown of the record with this index (`POST /reset-quota`, v7.2.22).
    pub(crate) fn reset_quota(&mut self, index: &str) -> Option<Vec<String>> {
        let record = self.by_auth_index_mut(index)?;
        let models = if record.next_retry_after.is_some() {
            vec!["gpt-5.4".to_string()]
        } else {
            Vec::new()
        };
        record.clear_cooldown();
        Some(models)
    }

    /// `requests` successful requests on `name` at once: counters and the current bucket grow by
    /// `requests`; at most [`TRAFFIC_RECORDS_CAP`] usage records are queued per call.
    pub(crate) fn add_traffic(&mut self, name: &str, requests: u64, now: DateTime<Utc>) {
        let Some(&slot) = self.by_name.get(name) else {
            return;
        };
        let record = &mut self.records[slot];
        record.spec.success += requests;
        record.bucket_mut(bucket_id(now)).success += requests;
        if requests > 0 {
            record.observe_passive(now);
        }
        if requests > 0 && record.status == "error" {
            record.clear_cooldown();
        }
        for _ in 0..requests.min(TRAFFIC_RECORDS_CAP) {
            self.queue_usage_record(slot, now, None);
        }
    }

    /// One successful proxied request on `slot`: counters, bucket, status, usage record.
    fn succeed(&mut self, slot: usize, now: DateTime<Utc>) {
        let record = &mut self.records[slot];
        record.observe_passive(now);
        record.spec.success += 1;
        record.bucket_mut(bucket_id(now)).success += 1;
        if record.status == "error" {
            record.clear_cooldown();
        }
        self.queue_usage_record(slot, now, None);
    }

    /// One failed proxied request on `slot` with CPA's cooldown (docs/rules/cpa.md §6.3).
    fn fail(&mut self, slot: usize, status: u16, body: &str, now: DateTime<Utc>) {
        let record = &mut self.records[slot];
        record.spec.failed += 1;
        record.bucket_mut(bucket_id(now)).failed += 1;
        let (cooldown, message) = match status {
            401 => (Duration::minutes(30), "unauthorized".to_string()),
            402 | 403 => (Duration::minutes(30), "payment_required".to_string()),
            404 => (Duration::hours(12), "not_found".to_string()),
            429 => (Duration::minutes(1), body.chars().take(500).collect()),
            _ => (
                Duration::seconds(60),
                "transient upstream error".to_string(),
            ),
        };
        record.cool_down(now + cooldown, message);
        self.queue_usage_record(slot, now, Some((status, body.chars().take(500).collect())));
    }

    fn queue_usage_record(
        &mut self,
        slot: usize,
        now: DateTime<Utc>,
        failure: Option<(u16, String)>,
    ) {
        if !self.usage_statistics_enabled {
            return;
        }
        self.seq += 1;
        let seq = self.seq;
        let record = &self.records[slot];
        let input = 800 + (seq * 7919) % 9000;
        let output = 100 + (seq * 104_729) % 1500;
        let reasoning = output / 5;
        let cached = input / 2;
        let mut entry = json!({
            "timestamp": go_time(now),
            "latency_ms": 900 + (seq * 31) % 7000,
            "source": if record.spec.email.is_empty() { record.spec.provider.clone() } else { record.spec.email.clone() },
            "auth_index": record.auth_index.clone().unwrap_or_default(),
            "tokens": {
                "input_tokens": input,
                "output_tokens": output,
                "reasoning_tokens": reasoning,
                "cached_tokens": cached,
                "cache_read_tokens": cached,
                "cache_creation_tokens": 0,
                "total_tokens": input + output,
            },
            "failed": failure.is_some(),
            "fail": {
                "status_code": failure.as_ref().map_or(200, |f| f.0),
                "body": failure.as_ref().map(|f| f.1.clone()).unwrap_or_default(),
            },
            "provider": record.spec.provider,
            "model": "gpt-5.4",
            "alias": "gpt-5.4",
            "endpoint": "POST /v1/responses",
            "auth_type": "oauth",
            "api_key": "sk-sim-client-1",
            "request_id": format!("{:08x}", (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32),
            "reasoning_effort": "medium",
        });
        if failure.is_none() {
            let headers = upstream::codex_rate_limit_headers(&record.spec.usage, now);
            if let Some(obj) = entry.as_object_mut() {
                obj.insert("response_headers".to_string(), json!(headers));
            }
        }
        if self.usage_queue.len() >= QUEUE_CAP {
            self.usage_queue.pop_front();
        }
        self.usage_queue.push_back(QueuedRecord {
            at: now,
            record: entry,
        });
    }

    /// Pops up to `count` records, oldest first, after dropping the expired ones (§5.2).
    pub(crate) fn pop_usage(&mut self, count: usize, now: DateTime<Utc>) -> Vec<Value> {
        let oldest_kept = now - Duration::seconds(self.queue_retention_seconds);
        while self.usage_queue.front().is_some_and(|r| r.at < oldest_kept) {
            self.usage_queue.pop_front();
        }
        let n = count.min(self.usage_queue.len());
        self.usage_queue.drain(..n).map(|r| r.record).collect()
    }

    /// Routed client traffic; see `SimHandle::simulate_traffic` for the rules.
    pub(crate) fn simulate_traffic(
        &mut self,
        seed: u64,
        percent: f64,
        requests: u64,
        now: DateTime<Utc>,
    ) {
        let mut rng = SplitMix64(seed);
        for record in &mut self.records {
            if !record.stale {
                upstream::roll_forward(&mut record.spec.usage, now);
            }
        }
        let fill_first = self.routing_strategy == "fill-first";
        let records = &self.records;
        let routable = |r: &AccountRecord| {
            !r.deleted && !r.spec.disabled && !r.cooling_down(now) && !r.spec.usage.is_exhausted()
        };
        // Candidates sorted by priority (desc), then id; only the top group is used (§6.2).
        let mut candidates: Vec<usize> = self
            .order
            .iter()
            .copied()
            .filter(|&i| routable(&records[i]))
            .collect();
        candidates.sort_by(|&a, &b| {
            records[b]
                .spec
                .priority
                .cmp(&records[a].spec.priority)
                .then_with(|| records[a].spec.name.cmp(&records[b].spec.name))
        });
        let group_of = |candidates: &[usize], records: &[AccountRecord]| {
            let top = candidates.first().map(|&i| records[i].spec.priority);
            candidates
                .iter()
                .take_while(|&&i| Some(records[i].spec.priority) == top)
                .count()
        };
        let mut group_len = group_of(&candidates, &self.records);
        'requests: for _ in 0..requests {
            loop {
                if group_len == 0 {
                    break 'requests;
                }
                let pick = if fill_first {
                    0
                } else {
                    (rng.next() % group_len as u64) as usize
                };
                let slot = candidates[pick];
                let failure = match &self.records[slot].spec.behaviour {
                    UpstreamBehaviour::Normal | UpstreamBehaviour::Garbage(_) => None,
                    UpstreamBehaviour::Status { status, body, .. } => Some((*status, body.clone())),
                    UpstreamBehaviour::Hang => Some((408, String::new())),
                    UpstreamBehaviour::TransportFailure => Some((502, String::new())),
                };
                match failure {
                    None => {
                        burn(&mut self.records[slot].spec.usage, percent);
                        self.succeed(slot, now);
                        if self.records[slot].spec.usage.is_exhausted() {
                            candidates.remove(pick);
                            group_len -= 1;
                            if group_len == 0 {
                                group_len = group_of(&candidates, &self.records);
                            }
                        }
                        continue 'requests;
                    }
                    Some((status, body)) => self.fail(slot, status, &body, now),
                }
                candidates.remove(pick);
                group_len -= 1;
                if group_len == 0 {
                    group_len = group_of(&candidates, &self.records);
                }
            }
        }
    }
}

/// Burns quota for one request: the five-hour window takes `percent`, the weekly a quarter of it
/// when a five-hour window exists, the 30-day window a quarter of the weekly share when a weekly
/// window exists; each capped at 100 %.
fn burn(usage: &mut super::SimUsage, percent: f64) {
    let mut share = percent;
    if let Some(w) = usage.five_hour.as_mut() {
        w.used_percent = (w.used_percent + share).min(100.0);
        share /= 4.0;
    }
    if let Some(w) = usage.weekly.as_mut() {
        w.used_percent = (w.used_percent + share).min(100.0);
        share /= 4.0;
    }
    if let Some(w) = usage.monthly.as_mut() {
        w.used_percent = (w.used_percent + share).min(100.0);
    }
}

/// A percent as a header carries it: `58`, `12.5`.
fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// Tiny deterministic RNG (SplitMix64) so simulations replay identically on every platform.
pub(crate) struct SplitMix64(pub u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_index_matches_the_cpa_example_vector() {
        assert_eq!(
            auth_index("codex", "/data/auths", "codex-user1@example.com-plus.json"),
            "dced952c87a12d9f"
        );
        assert_eq!(
            auth_index("codex", "/data/auths/", "codex-user1@example.com-plus.json"),
            "dced952c87a12d9f"
        );
    }

    #[test]
    fn versions_parse_and_dev_counts_as_newest() {
        assert_eq!(Version::parse("v7.1.19"), Version(7, 1, 19));
        assert!(Version::parse("dev") > Version::parse("v7.2.140"));
        assert!(!Features::for_version(Version::parse("v7.1.19")).list_filters);
        assert!(Features::for_version(Version::parse("v7.2.94")).list_filters);
    }

    #[test]
    fn go_time_uses_the_shanghai_offset_and_trims_nanoseconds() {
        let at =
            DateTime::parse_from_rfc3339("2026-05-20T19:00:50.120Z").map(|d| d.with_timezone(&Utc));
        assert_eq!(
            at.map(go_time).ok().as_deref(),
            Some("2026-05-21T03:00:50.12+08:00")
        );
    }
}
