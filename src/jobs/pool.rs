//! Publishing the pool snapshot (docs/rules/patrol.md §12.2): each site's [`PoolSnapshot`] is held in
//! memory in its runtime behind an `arc-swap` and replaced whole after every round (auto,
//! manual, quota refresh, reset re-check, freshness, warm-up), listing reload, manual account
//! action and settings or priority-list change, and at start-up from the stored state. A publish
//! reads SQLite once, off any request path; readers ([`Patrol::pool_snapshot`],
//! [`PublishedPool::load`]) never touch SQLite or a lock held by a writer. Also owns the API
//! views of the snapshot (`GET /api/pool`, the `pool` part of `GET /api/inspection/status`)
//! and the `quota_patrol_pool_accounts` gauges.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{JobError, Patrol, PoolData};
use crate::core::account::{Account, ProbeState, ReasonOwner};
use crate::core::availability::Availability;
use crate::core::inspect::Action;
use crate::core::pool::{
    self, PoolAccount, PoolCounts, PoolInputs, PoolSample, PoolSnapshot, PublishCause,
};
use crate::core::report::{ActionOutcome, InspectionRunResult};

/// One site's published snapshot. Readers load it lock-free (`arc-swap`); publishers take
/// `publishing` so that two publishes store in the order they read the database, and a
/// slower, older read never replaces a newer snapshot.
#[derive(Default)]
pub struct PublishedPool {
    current: ArcSwapOption<PoolSnapshot>,
    /// Held across read-build-store; the value is the last version published.
    publishing: tokio::sync::Mutex<u64>,
}

impl std::fmt::Debug for PublishedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.current.load().as_ref().map(|s| s.version);
        f.debug_struct("PublishedPool")
            .field("version", &v)
            .finish()
    }
}

impl PublishedPool {
    /// The current snapshot (`None` before the first publish); lock-free, never blocks on a
    /// publish in progress.
    pub fn load(&self) -> Option<Arc<PoolSnapshot>> {
        self.current.load_full()
    }
}

impl crate::core::pool::PoolFeed for PublishedPool {
    fn current(&self) -> Option<Arc<PoolSnapshot>> {
        self.load()
    }
}

impl Patrol {
    /// The site's current snapshot; `None` for a site never published (unknown, or deleted).
    /// The snapshot itself is read lock-free; finding the site's runtime takes the runtime
    /// map's lock for one hash lookup. A per-request reader (the router) keeps the handle of
    /// [`Patrol::pool_handle`] instead and skips even that.
    pub fn pool_snapshot(&self, site_id: &str) -> Option<Arc<PoolSnapshot>> {
        let rt = self
            .runtimes
            .lock()
            .expect("runtimes lock")
            .get(site_id)
            .cloned()?;
        rt.published().load()
    }

    /// The site's snapshot holder, to keep and read per request (`PublishedPool::load`).
    pub fn pool_handle(&self, site_id: &str) -> Arc<PublishedPool> {
        self.runtime(site_id).published().clone()
    }

    /// Rebuilds the site's snapshot from the stored state (site settings, listing, probe
    /// states, reasons, exceptions, priority list; judged at the injected clock's `now`) and
    /// publishes it; answers it. Errors: `UnknownSite`, store failures (the previous snapshot
    /// stays published).
    pub async fn publish_pool(
        &self,
        site_id: &str,
        cause: PublishCause,
    ) -> Result<Arc<PoolSnapshot>, JobError> {
        self.publish_from(site_id, cause, None).await
    }

    /// [`Patrol::publish_pool`], taking the accounts and probe states from `seen` (a full
    /// round's, `disabled` flags already brought up to its actions) instead of reading and
    /// parsing them back; reasons, exceptions and the priority list are read from the store.
    async fn publish_from(
        &self,
        site_id: &str,
        cause: PublishCause,
        seen: Option<RoundPool>,
    ) -> Result<Arc<PoolSnapshot>, JobError> {
        let site = self.site(site_id).await?;
        let holder = self.pool_handle(site_id);
        let mut last = holder.publishing.lock().await;
        let PoolData {
            accounts,
            states,
            reasons,
            exceptions,
            priorities,
        } = match seen {
            None => self.pool(site_id).await?,
            Some(seen) => {
                let sid = site_id.to_string();
                let (reasons, exceptions, priorities) = self
                    .store
                    .run(move |c| {
                        Ok((
                            crate::store::accounts::load_reasons(c, &sid)?,
                            crate::store::accounts::exceptions(c, &sid)?,
                            crate::store::priorities::load(c, &sid)?,
                        ))
                    })
                    .await?;
                let (accounts, states) = seen.split();
                PoolData {
                    accounts,
                    states,
                    reasons,
                    exceptions: exceptions.into_iter().collect(),
                    priorities,
                }
            }
        };
        let input = PoolInputs {
            site_id,
            accounts: &accounts,
            states: &states,
            reasons: &reasons,
            exceptions: &exceptions,
            priorities: &priorities,
            routing_enabled: site.settings.priority_routing_enabled,
            settings: &site.settings,
            policies: &site.account_policies,
        };
        let snapshot = Arc::new(pool::build(input, cause, *last + 1, self.now()));
        *last = snapshot.version;
        holder.current.store(Some(snapshot.clone()));
        record_gauges(&snapshot);
        Ok(snapshot)
    }
}

/// What a round over the whole site saw: every listed account (exceptions included) with its
/// probe state as the round left it, so that publishing its result parses nothing back from
/// the store (at 10,000 accounts that read costs about as much as a cached round).
#[derive(Debug, Default)]
pub struct RoundPool {
    pub accounts: Vec<(Account, ProbeState)>,
}

impl RoundPool {
    /// Brings `disabled` up to the round's successful actions and routing steps, in order (the
    /// later outcome of an account wins; a deleted account leaves the pool).
    fn apply<'a>(&mut self, outcomes: impl Iterator<Item = &'a ActionOutcome>) {
        let done: HashMap<&str, Action> = outcomes
            .filter(|o| o.success)
            .map(|o| (o.account_name.as_str(), o.action))
            .collect();
        self.accounts.retain_mut(|(a, _)| {
            match done.get(a.name.as_str()) {
                Some(Action::Delete) => return false,
                Some(Action::Disable) => a.disabled = true,
                Some(Action::Enable) => a.disabled = false,
                Some(Action::Keep) | None => {}
            }
            true
        });
    }

    fn split(self) -> (Vec<Account>, HashMap<String, ProbeState>) {
        let mut states = HashMap::with_capacity(self.accounts.len());
        let accounts = self
            .accounts
            .into_iter()
            .map(|(a, st)| {
                states.insert(a.name.clone(), st);
                a
            })
            .collect();
        (accounts, states)
    }
}

/// Publishes `site_id`'s snapshot; a failure is logged (the previous snapshot stays) and never
/// fails the work that triggered it.
pub async fn publish(p: &Patrol, site_id: &str, cause: PublishCause) {
    publish_logged(p, site_id, cause, None).await;
}

/// [`Patrol::publish_from`], a failure logged (the previous snapshot stays); then the site's
/// forecast gauges (`jobs::forecast::refresh_gauges`) from the new snapshot.
async fn publish_logged(p: &Patrol, site_id: &str, cause: PublishCause, seen: Option<RoundPool>) {
    if let Err(e) = p.publish_from(site_id, cause, seen).await {
        tracing::warn!(site = site_id, error = %e, "pool snapshot not published; readers keep the previous one");
        return;
    }
    super::forecast::refresh_gauges(p, site_id).await;
}

/// Publishes the result of the round `r` (any kind), at its end; `seen` = what a full round
/// held ([`RoundPool`]), else the stored state is read back.
pub async fn publish_after_round(
    p: &Patrol,
    site_id: &str,
    r: &InspectionRunResult,
    seen: Option<RoundPool>,
) {
    let cause = PublishCause::Round {
        run_id: r.run_id.clone(),
        kind: r.source.clone(),
    };
    let seen = seen.map(|mut seen| {
        // Routing steps come after the round's actions: the later outcome wins.
        seen.apply(r.action_outcomes.iter().chain(&r.priority_routing_outcomes));
        seen
    });
    publish_logged(p, site_id, cause, seen).await;
    record_sample(p, site_id).await;
}

/// Appends the site's [`PoolSample`] (the published counts and the forecast's remaining
/// capacity, migration 0009) after a round: the status page's 7-day chart. A failure is logged
/// and changes nothing else.
async fn record_sample(p: &Patrol, site_id: &str) {
    let Some(snapshot) = p.pool_snapshot(site_id) else {
        return;
    };
    let forecast = match super::forecast::site_forecast(p, site_id).await {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(site = site_id, error = %e, "pool sample not recorded");
            return;
        }
    };
    let c = &snapshot.counts;
    let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let sample = PoolSample {
        at: snapshot.taken_at,
        total: n(c.total),
        usable: n(c.usable),
        active: n(forecast.as_ref().map_or(c.usable, |f| f.active_accounts)),
        exhausted: n(c.exhausted),
        invalid: n(c.invalid + c.deactivated),
        remaining_percent: forecast.as_ref().map_or(0.0, |f| f.remaining_percent),
    };
    let sid = site_id.to_string();
    if let Err(e) = p
        .store
        .run(move |conn| crate::store::samples::insert(conn, &sid, &sample))
        .await
    {
        tracing::warn!(site = site_id, error = %e, "pool sample not recorded");
    }
}

/// Publishes after a person's action on an account (`account`) or the exception list.
pub async fn publish_after_manual(p: &Patrol, site_id: &str, action: &str, account: Option<&str>) {
    let cause = PublishCause::ManualAction {
        action: action.to_string(),
        account: account.map(str::to_string),
    };
    publish(p, site_id, cause).await;
}

/// Start-up: publishes every stored site from its stored state (no CPA call).
pub async fn publish_all(p: &Patrol) {
    match p.store.run(|c| crate::store::sites::list(c)).await {
        Ok(sites) => {
            for s in sites {
                publish(p, &s.site_id, PublishCause::Startup).await;
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot list sites: no pool snapshot published"),
    }
}

/// The pool gauges, set at every publish from the snapshot (so they agree with the API and
/// alerts): `quota_patrol_pool_accounts{site, availability}` (accounts by availability state),
/// `quota_patrol_accounts{site, state=enabled|disabled}` (admin state in CPA) and
/// `quota_patrol_usable_accounts{site}` (enabled and `usable`) — api.md `/metrics`.
fn record_gauges(s: &PoolSnapshot) {
    let c = &s.counts;
    for (state, n) in [
        ("usable", c.usable),
        ("exhausted", c.exhausted),
        ("invalid", c.invalid),
        ("deactivated", c.deactivated),
        ("failing", c.failing),
        ("noData", c.no_data),
        ("disabled", c.disabled),
    ] {
        metrics::gauge!("quota_patrol_pool_accounts", "site" => s.site_id.clone(), "availability" => state)
            .set(n as f64);
    }
    let enabled: Vec<&crate::core::pool::PoolAccount> =
        s.accounts.iter().filter(|a| !a.disabled).collect();
    let usable = enabled
        .iter()
        .filter(|a| a.availability.is_usable())
        .count();
    let id = s.site_id.clone();
    metrics::gauge!("quota_patrol_accounts", "site" => id.clone(), "state" => "enabled")
        .set(enabled.len() as f64);
    metrics::gauge!("quota_patrol_accounts", "site" => id.clone(), "state" => "disabled")
        .set((s.accounts.len() - enabled.len()) as f64);
    metrics::gauge!("quota_patrol_usable_accounts", "site" => id).set(usable as f64);
}

/// What produced a snapshot (`origin` of [`PoolView`]).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OriginView {
    /// `startup`, `round`, `listingReload`, `manualAction`, `settingsChange`.
    pub cause: String,
    /// The round's id (`round` only).
    pub run_id: Option<String>,
    /// The round's kind: `auto`, `manual`, `quotaRefresh`, `reset`, `freshness`, `warmup`.
    pub kind: Option<String>,
    /// `disable`, `enable`, `release`, `exceptions` (`manualAction` only).
    pub action: Option<String>,
    /// The account acted on (`manualAction` only).
    pub account: Option<String>,
}

impl From<&PublishCause> for OriginView {
    fn from(c: &PublishCause) -> Self {
        let mut v = OriginView {
            cause: String::new(),
            run_id: None,
            kind: None,
            action: None,
            account: None,
        };
        v.cause = match c {
            PublishCause::Startup => "startup",
            PublishCause::Round { run_id, kind } => {
                v.run_id = Some(run_id.clone());
                v.kind = Some(kind.clone());
                "round"
            }
            PublishCause::ListingReload => "listingReload",
            PublishCause::ManualAction { action, account } => {
                v.action = Some(action.clone());
                v.account = account.clone();
                "manualAction"
            }
            PublishCause::SettingsChange => "settingsChange",
        }
        .into();
        v
    }
}

/// One account of `GET /api/pool`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolAccountView {
    pub name: String,
    pub display_account: String,
    /// Position in the priority list (1 = best tier); `null` when not listed.
    pub tier: Option<u32>,
    pub pending_first_inspection: bool,
    /// Disabled in CPA.
    pub disabled: bool,
    pub exception: bool,
    /// As in `GET /api/accounts` (`""` when none; provisional `ManualDisabled` included).
    pub disable_reason: String,
    pub disabled_by: Option<ReasonOwner>,
    pub disable_reason_provisional: bool,
    /// `usable`, `exhausted`, `invalid`, `deactivated`, `failing`, `noData`, `disabled`.
    pub availability: String,
    /// `exhausted`: the earliest instant it is usable again (`null` = unknown reset).
    pub until: Option<DateTime<Utc>>,
    /// `failing`: when the failure was seen.
    pub since: Option<DateTime<Utc>>,
}

impl From<&PoolAccount> for PoolAccountView {
    fn from(a: &PoolAccount) -> Self {
        Self {
            name: a.name.clone(),
            display_account: a.display_name.clone(),
            tier: a.tier,
            pending_first_inspection: a.pending_first_inspection,
            disabled: a.disabled,
            exception: a.exception,
            disable_reason: a
                .reason
                .map(|r| r.reason.as_str().to_string())
                .unwrap_or_default(),
            disabled_by: a.reason.map(|r| r.owner),
            disable_reason_provisional: a.reason.is_some_and(|r| r.provisional),
            availability: a.availability.as_str().into(),
            until: a.availability.until(),
            since: match a.availability {
                Availability::Failing { since } => since,
                _ => None,
            },
        }
    }
}

/// The site-level part of a snapshot (`pool` of `GET /api/inspection/status`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolSummaryView {
    /// Publish number of the site in this process (from 1).
    pub version: u64,
    pub taken_at: DateTime<Utc>,
    pub origin: OriginView,
    pub counts: PoolCounts,
    /// `null` when some account is usable or no reset is known; else the earliest reset.
    pub usable_until: Option<DateTime<Utc>>,
}

impl From<&PoolSnapshot> for PoolSummaryView {
    fn from(s: &PoolSnapshot) -> Self {
        Self {
            version: s.version,
            taken_at: s.taken_at,
            origin: (&s.origin).into(),
            counts: s.counts,
            usable_until: s.usable_until,
        }
    }
}

/// `GET /api/pool`: the published snapshot of a site.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolView {
    pub site_id: String,
    #[serde(flatten)]
    pub summary: PoolSummaryView,
    /// `usedPercentThreshold` the availabilities were judged with.
    pub threshold: u8,
    /// Whether `accounts` is in priority order (else CPA's listing order).
    pub routing_enabled: bool,
    pub accounts: Vec<PoolAccountView>,
}

impl From<&PoolSnapshot> for PoolView {
    fn from(s: &PoolSnapshot) -> Self {
        Self {
            site_id: s.site_id.clone(),
            summary: s.into(),
            threshold: s.threshold,
            routing_enabled: s.routing_enabled,
            accounts: s.accounts.iter().map(PoolAccountView::from).collect(),
        }
    }
}

/// The published snapshot of `site_id` as the API shows it; publishes one first when none is
/// (only after a publish failed: start-up and site creation publish).
pub async fn view(p: &Patrol, site_id: &str) -> Result<PoolView, JobError> {
    let snapshot = match p.pool_snapshot(site_id) {
        Some(s) => s,
        None => p.publish_pool(site_id, PublishCause::Startup).await?,
    };
    Ok(PoolView::from(snapshot.as_ref()))
}
