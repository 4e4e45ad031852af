//! In-memory state of one site, in named parts: the round slot (lock + progress), the CPA
//! connection (key latch, HTTP pool, concurrency limit, failure pause, empty listings), the
//! published pool with its forecast cache, the schedule and the usage marks.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::Semaphore;

use super::JobError;
use super::pool::PublishedPool;
use super::progress::Progress;
use crate::core::cpa_pause::CpaPause;
use crate::core::forecast::SiteForecast;
use crate::core::listing::EmptyListings;
use crate::cpa::{CpaError, HttpPool, KeyLatch};
use crate::random::SharedRandom;

/// The round lock of a site and the progress of the round that holds it.
#[derive(Debug)]
struct RoundSlot {
    /// Held for the whole of a round; taken only through [`RoundSlot::try_begin`].
    busy: tokio::sync::Mutex<()>,
    /// Whether a round holds `busy`; read by status checks so that they never take the lock
    /// themselves (a status poll must not make a manual run fail with 409).
    running: Arc<AtomicBool>,
    progress: Mutex<Progress>,
}

impl RoundSlot {
    fn new() -> Self {
        Self {
            busy: tokio::sync::Mutex::new(()),
            running: Arc::new(AtomicBool::new(false)),
            progress: Mutex::new(Progress::default()),
        }
    }

    fn try_begin(&self) -> Option<RoundGuard<'_>> {
        let lock = self.busy.try_lock().ok()?;
        self.running.store(true, Ordering::SeqCst);
        Some(RoundGuard {
            _lock: lock,
            running: self.running.clone(),
        })
    }

    fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Resolves once no round holds the lock (takes and frees it).
    async fn wait_free(&self) {
        drop(self.busy.lock().await);
    }

    fn progress(&self) -> Progress {
        self.progress.lock().map(|p| p.clone()).unwrap_or_default()
    }

    fn update_progress(&self, now: DateTime<Utc>, f: impl FnOnce(&mut Progress)) {
        if let Ok(mut p) = self.progress.lock() {
            f(&mut p);
            p.updated_at = Some(now);
            p.recompute();
        }
    }
}

/// What every CPA client of a site shares, and how its management calls went lately.
#[derive(Debug)]
struct CpaConnection {
    /// CPA concurrency limit: its size and the semaphore of that size.
    limit: Mutex<(usize, Arc<Semaphore>)>,
    /// Stops every client of the site once CPA refused its key (see `cpa::KeyLatch`).
    latch: Arc<KeyLatch>,
    /// The site's one HTTP connection pool (see `cpa::HttpPool`).
    http: HttpPool,
    /// Automatic work pauses until then after the CPA management API failed (`core::cpa_pause`).
    pause: Mutex<CpaPause>,
    /// First failed management call of the current failure streak (alerts: site_unreachable).
    failing_since: Mutex<Option<DateTime<Utc>>>,
    /// Empty listings in a row while accounts were known (`core::listing`).
    empty_listings: Mutex<EmptyListings>,
    /// The patrol's random source (jitter of the pause).
    random: SharedRandom,
    /// The last management failure said this CPA cannot be used (an 8.x that dropped `/v0`,
    /// management off or a cluster node; `CpaError::is_unsupported`): its text, until a
    /// management call works again (docs/rules/cpa.md §11).
    unsupported: Mutex<Option<CpaError>>,
    /// The `X-CPA-VERSION` last published as `quota_patrol_cpa_info`.
    version_shown: Mutex<Option<String>>,
}

impl CpaConnection {
    fn new(random: SharedRandom) -> Self {
        Self {
            limit: Mutex::new((0, Arc::new(Semaphore::new(1)))),
            latch: Arc::new(KeyLatch::default()),
            http: HttpPool::default(),
            pause: Mutex::new(CpaPause::default()),
            failing_since: Mutex::new(None),
            empty_listings: Mutex::new(EmptyListings::default()),
            random,
            unsupported: Mutex::new(None),
            version_shown: Mutex::new(None),
        }
    }

    fn note_failing(&self, now: DateTime<Utc>) {
        self.failing_since
            .lock()
            .expect("failing lock")
            .get_or_insert(now);
    }

    fn pause_after_failure(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        let jitter = self.random.fraction();
        self.pause
            .lock()
            .expect("pause lock")
            .note_failure(now, jitter)
    }

    fn note_success(&self) {
        *self.pause.lock().expect("pause lock") = CpaPause::default();
        *self.failing_since.lock().expect("failing lock") = None;
        *self.unsupported.lock().expect("unsupported lock") = None;
    }

    fn failing_since(&self) -> Option<DateTime<Utc>> {
        self.failing_since.lock().ok().and_then(|g| *g)
    }

    fn paused_until(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.pause.lock().ok().and_then(|g| g.paused_until(now))
    }

    fn note_empty_listing(&self) -> bool {
        self.empty_listings
            .lock()
            .expect("listing lock")
            .note_empty()
    }

    fn note_filled_listing(&self) {
        self.empty_listings
            .lock()
            .expect("listing lock")
            .note_filled();
    }

    fn limit(&self, size: usize) -> Arc<Semaphore> {
        let mut slot = self.limit.lock().expect("limit lock");
        if slot.0 != size {
            *slot = (size, Arc::new(Semaphore::new(size.max(1))));
        }
        slot.1.clone()
    }
}

/// The published pool snapshot (`jobs::pool`) and the last site forecast with the snapshot
/// version it was computed for (`jobs::forecast`: a round's publish and its alerts share one
/// computation).
#[derive(Debug, Default)]
struct Published {
    pool: Arc<PublishedPool>,
    forecast: Mutex<Option<(u64, SiteForecast)>>,
}

/// In-memory state of one site, in named parts (see the module docs).
#[derive(Debug)]
pub struct SiteRuntime {
    round: RoundSlot,
    cpa: CpaConnection,
    published: Published,
    /// Next regular round (auto polling).
    pub next_scheduled_at: Mutex<Option<DateTime<Utc>>>,
    /// auth_index values seen in the usage queue since their last probe.
    pub usage_marks: Mutex<HashSet<String>>,
}

/// Proof that a round holds a site: dropping it frees the site.
pub struct RoundGuard<'a> {
    _lock: tokio::sync::MutexGuard<'a, ()>,
    running: Arc<AtomicBool>,
}

impl Drop for RoundGuard<'_> {
    fn drop(&mut self) {
        self.running.store(false, Ordering::SeqCst);
    }
}

impl SiteRuntime {
    pub(super) fn new(random: SharedRandom) -> Self {
        Self {
            round: RoundSlot::new(),
            cpa: CpaConnection::new(random),
            published: Published::default(),
            next_scheduled_at: Mutex::new(None),
            usage_marks: Mutex::new(HashSet::new()),
        }
    }

    /// Takes the site for a round; `None` when another round holds it (busy, 409).
    pub fn try_begin(&self) -> Option<RoundGuard<'_>> {
        self.round.try_begin()
    }

    /// Like [`SiteRuntime::try_begin`], with the 409 error for `site_id` when busy.
    pub fn begin(&self, site_id: &str) -> Result<RoundGuard<'_>, JobError> {
        self.try_begin()
            .ok_or_else(|| JobError::Busy(site_id.to_string()))
    }

    /// Whether a round is running (never takes the lock).
    pub fn is_running(&self) -> bool {
        self.round.is_running()
    }

    /// Resolves once no round holds the site (shutdown waits on it).
    pub(super) async fn wait_free(&self) {
        self.round.wait_free().await;
    }

    /// Records a failed management call: automatic work pauses 1, 2, 4 … 30 min, less up to
    /// `core::retry::JITTER_SPREAD` of jitter from the patrol's random source
    /// (`core::cpa_pause`). A refused key (`CpaError::Auth`) is not paused here: `connection`
    /// stores it and its gate keeps every call away (docs/rules/cpa.md §1.2). Returns the pause end,
    /// `None` for a refused key.
    ///
    /// An unsupported answer (`CpaError::is_unsupported`: an 8.x CPA that dropped `/v0`,
    /// management off or a cluster node) pauses the same way and is kept as the site's CPA
    /// state ([`SiteRuntime::cpa_unsupported`]) until a management call works again
    /// (docs/rules/cpa.md §11, docs/decisions.md §18).
    pub fn note_cpa_failure(&self, now: DateTime<Utc>, e: &CpaError) -> Option<DateTime<Utc>> {
        self.cpa.note_failing(now);
        if matches!(e, CpaError::Auth { .. }) {
            return None;
        }
        if e.is_unsupported() {
            *self.cpa.unsupported.lock().expect("unsupported lock") = Some(e.clone());
        }
        Some(self.cpa.pause_after_failure(now))
    }

    /// Why this site's CPA cannot be used, when its last management failure said so and no
    /// call has worked since (`CpaError::V0Dropped` or `CpaError::ManagementOff`).
    pub fn cpa_unsupported(&self) -> Option<CpaError> {
        self.cpa.unsupported.lock().ok().and_then(|g| g.clone())
    }

    /// The version last published as `quota_patrol_cpa_info{site,version}` and, when `version`
    /// differs, replaces it (the old series goes to 0). Returns the one it replaced.
    pub fn swap_version_shown(&self, version: &str) -> Option<Option<String>> {
        let mut g = self.cpa.version_shown.lock().ok()?;
        if g.as_deref() == Some(version) {
            return None;
        }
        Some(g.replace(version.to_string()))
    }

    /// CPA refused the key at `now`: the site's management calls count as failing (alerts).
    pub fn note_key_refused(&self, now: DateTime<Utc>) {
        self.cpa.note_failing(now);
    }

    /// The HTTP connection pool every client of this site shares.
    pub fn http(&self) -> &HttpPool {
        &self.cpa.http
    }

    /// The latch every client of this site shares.
    pub fn latch(&self) -> Arc<KeyLatch> {
        self.cpa.latch.clone()
    }

    /// Counts an empty listing; `true` once it repeated 3 times in a row (then it is believed;
    /// `core::listing`).
    pub fn accept_empty_listing(&self) -> bool {
        self.cpa.note_empty_listing()
    }

    /// A non-empty listing arrived.
    pub fn reset_empty_listings(&self) {
        self.cpa.note_filled_listing();
    }

    /// Records a successful management call (ends any pause).
    pub fn note_cpa_success(&self) {
        self.cpa.note_success();
    }

    /// Since when every management call failed (`None` when the last one worked or none failed
    /// since the start).
    pub fn cpa_failing_since(&self) -> Option<DateTime<Utc>> {
        self.cpa.failing_since()
    }

    /// Until when automatic work is paused, if it is.
    pub fn cpa_paused_until(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cpa.paused_until(now)
    }

    /// The site's published pool snapshot holder (read lock-free, see `jobs::pool`).
    pub fn published(&self) -> &Arc<PublishedPool> {
        &self.published.pool
    }

    /// The cached site forecast when it was computed for pool snapshot `version`.
    pub(crate) fn cached_forecast(&self, version: u64) -> Option<SiteForecast> {
        let cached = self.published.forecast.lock().expect("forecast lock");
        cached
            .as_ref()
            .filter(|(v, _)| *v == version)
            .map(|(_, f)| f.clone())
    }

    /// Caches `forecast`, computed for pool snapshot `version`.
    pub(crate) fn cache_forecast(&self, version: u64, forecast: SiteForecast) {
        *self.published.forecast.lock().expect("forecast lock") = Some((version, forecast));
    }

    /// A copy of the current progress.
    pub fn progress(&self) -> Progress {
        self.round.progress()
    }

    /// Updates the progress.
    pub fn update_progress(&self, now: DateTime<Utc>, f: impl FnOnce(&mut Progress)) {
        self.round.update_progress(now, f);
    }

    /// The CPA concurrency limit for `size` requests in flight (re-created when it changes).
    pub(super) fn limit(&self, size: usize) -> Arc<Semaphore> {
        self.cpa.limit(size)
    }
}
