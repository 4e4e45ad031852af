//! Read models for the API: accounts with their reasons and availability (the one rule of
//! `core::availability`), quota snapshots with freshness, inspection status, settings, logs,
//! runs and history. Reads only; no CPA calls.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{JobError, Patrol};
use crate::core::account::{DisableReason, QuotaSnapshot, ReasonOwner, shown_reason};
use crate::core::availability::{AccountFacts, Availability, availability};
use crate::core::forecast::Projection;
use crate::core::freshness;
use crate::core::oplog::{LogEntry, LogQuery};
use crate::core::policy::{AppliedThreshold, QuotaPolicy, applied_threshold};
use crate::core::quota::{Credits, QuotaWindow, WindowKind};
use crate::core::report::InspectionRunResult;
use crate::core::settings::PatrolSettings;
use crate::core::site::Site;
use crate::store;

/// One past probe of an account (`GET /api/quotas/{name}/history`), as the store keeps it.
pub use crate::store::accounts::HistoryEntry;

/// An account's availability as the API shows it: the one rule's answer
/// (`core::availability::availability` at the site's threshold and the current time).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AvailabilityView {
    /// `usable`, `exhausted`, `invalid` (401), `deactivated` (402 deactivated), `failing` (last
    /// probe failed otherwise), `noData` (never read, no weekly/monthly figure, or stale) or
    /// `disabled` (by a person or another tool).
    pub state: String,
    /// `exhausted` only: the earliest instant the account may be usable again (the latest
    /// reset among its exhausted windows); `null` when unknown or not exhausted.
    pub until: Option<DateTime<Utc>>,
}

impl From<Availability> for AvailabilityView {
    fn from(a: Availability) -> Self {
        Self {
            state: a.as_str().to_string(),
            until: a.until(),
        }
    }
}

/// One account (`GET /api/accounts`, api.md).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountView {
    pub name: String,
    pub auth_index: Option<String>,
    pub email: Option<String>,
    pub display_account: String,
    pub plan_type: Option<String>,
    pub disabled: bool,
    pub status: String,
    pub status_message: String,
    pub cpa_priority: i64,
    pub local_priority: Option<u32>,
    pub pending_first_inspection: bool,
    pub exception: bool,
    /// `""` when none. A disabled account without a record of ours shows `ManualDisabled`
    /// (provisional, see `disableReasonProvisional`).
    pub disable_reason: String,
    pub disabled_by: Option<ReasonOwner>,
    /// `null` when none or provisional.
    pub disabled_at: Option<DateTime<Utc>>,
    /// `true` when the reason is not a record of ours but derived: disabled in CPA by someone
    /// else, not yet classified by a successful probe (docs/rules/patrol.md §5.1); shown as
    /// `ManualDisabled`, owner `external`.
    pub disable_reason_provisional: bool,
    /// Usable now, or why not and until when.
    pub availability: AvailabilityView,
    /// Observe only (`PUT /api/accounts/{name}/policy`): probed, shown and counted, never
    /// written to in CPA by the patrol or routing.
    pub never_act: bool,
    /// Banked reset credits (docs/reset-credits.md); `null` when the site's
    /// `resetCreditsMode` is `off` or nothing is known.
    pub reset_credits: Option<super::reset_credits::AccountCreditsView>,
}

/// One window of `GET /api/quotas`: the snapshot's window (its fields flattened) plus its
/// exhaustion forecast (docs/rules/patrol.md §10, `jobs::forecast`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaWindowView {
    #[serde(flatten)]
    pub window: QuotaWindow,
    /// Burn rate of the current window, percentage points per hour (recent probes weighted
    /// more); `null` until two probes since its last reset span 30 minutes.
    pub burn_rate_per_hour: Option<f64>,
    /// When it reaches `forecastThreshold` at that rate, when that is before its reset;
    /// `null` otherwise (`exhaustion` says why).
    pub projected_exhausted_at: Option<DateTime<Utc>>,
    /// The projection: `{kind: "at", at}`, `alreadyExhausted`, `notBeforeReset` or `unknown`.
    pub exhaustion: Projection,
    /// Percent the projection runs to: the threshold at which this window disables the
    /// account, or 100 for a window that only counts at 100 % (free 5-hour, code review, ...).
    pub forecast_threshold: u8,
}

impl QuotaWindowView {
    /// `w` with its forecast `f` (`None`: no forecast, e.g. no history yet).
    pub fn new(w: QuotaWindow, f: Option<&super::forecast::WindowForecast>) -> Self {
        Self {
            window: w,
            burn_rate_per_hour: f.and_then(|f| f.burn).map(|b| b.percent_per_hour),
            projected_exhausted_at: f.and_then(|f| f.projection.at()),
            exhaustion: f.map_or(Projection::Unknown, |f| f.projection),
            forecast_threshold: f.map_or(100, |f| f.threshold),
        }
    }
}

/// Which kind of evidence a shown snapshot is (docs/rules/patrol.md §4.7): a real probe's
/// usage body, or CPA's listed rate-limit headers of the account's last served response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EvidenceSource {
    Probe,
    Passive,
}

/// An account's stored passive evidence, shown beside the probe's snapshot (`GET /api/quotas`
/// `passive`; docs/rules/patrol.md §4.7). Never what decisions are made on.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PassiveView {
    /// Always `passive`.
    pub source: EvidenceSource,
    /// When CPA saw the response the windows come from.
    pub observed_at: DateTime<Utc>,
    /// Seconds from `observedAt` to now (the patrol's clock).
    pub age_seconds: i64,
    /// Whether it was seen after the last real probe (only then may it spare or call a probe).
    pub newer_than_probe: bool,
    pub plan_type: Option<String>,
    /// The windows the signals carry, as a probe's (classified by window length).
    pub windows: Vec<QuotaWindow>,
    pub weekly_used_percent: Option<f64>,
    pub five_hour_used_percent: Option<f64>,
}

impl PassiveView {
    /// `snap` (a stored passive snapshot) as seen at `now` against the last real probe
    /// `probe_at`.
    pub fn new(snap: &QuotaSnapshot, probe_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Self {
        Self {
            source: EvidenceSource::Passive,
            observed_at: snap.refreshed_at,
            age_seconds: (now - snap.refreshed_at).num_seconds().max(0),
            newer_than_probe: probe_at.is_none_or(|p| snap.refreshed_at > p),
            plan_type: snap.plan_type.clone(),
            windows: snap.windows.clone(),
            weekly_used_percent: snap.weekly_used(),
            five_hour_used_percent: snap.five_hour_used(),
        }
    }
}

/// One account's quota (`GET /api/quotas`, api.md).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaView {
    pub account_name: String,
    pub display_account: String,
    pub plan_type: Option<String>,
    pub disabled: bool,
    /// As in `GET /api/accounts` (provisional `ManualDisabled` included).
    pub disable_reason: String,
    /// As in `GET /api/accounts`.
    pub disable_reason_provisional: bool,
    /// Every window of the current snapshot with its forecast.
    pub windows: Vec<QuotaWindowView>,
    pub weekly_used_percent: Option<f64>,
    pub five_hour_used_percent: Option<f64>,
    pub credits: Option<Credits>,
    pub status_code: Option<u16>,
    pub success: bool,
    pub error: Option<String>,
    pub checked_at: Option<DateTime<Utc>>,
    pub refreshed_at: Option<DateTime<Utc>>,
    pub next_real_refresh_at: Option<DateTime<Utc>>,
    pub from_cache: bool,
    pub cache_reason: Option<String>,
    pub consecutive_failures: u32,
    /// Position in the priority list (1 = first), when listed.
    pub local_priority: Option<u32>,
    pub pending_first_inspection: bool,
    /// Usable now, or why not and until when (as in `GET /api/accounts`).
    pub availability: AvailabilityView,
    /// The real kind of the window `weeklyUsedPercent` was read from: `weekly`, or `monthly`
    /// for a monthly-only account (docs/rules/patrol.md §9); `null` without one.
    pub long_window: Option<WindowKind>,
    /// The account's effective quota policy: per-window thresholds, `fiveHourRule`,
    /// `neverAct`, and where each came from (`site` / `account`).
    pub policy: QuotaPolicy,
    /// The threshold that applied: the deciding window (the exhausting one, else the long
    /// window), its threshold and source; `null` without a snapshot.
    pub applied_threshold: Option<AppliedThreshold>,
    /// Banked reset credits (docs/reset-credits.md); `null` when the site's
    /// `resetCreditsMode` is `off` or nothing is known.
    pub reset_credits: Option<super::reset_credits::AccountCreditsView>,
    /// What `windows` come from: `probe` (a real probe's usage body); `null` without a
    /// snapshot. Decisions are made on it only.
    pub source: Option<EvidenceSource>,
    /// Seconds from `refreshedAt` (the real probe) to now; `null` without a snapshot.
    pub age_seconds: Option<i64>,
    /// The account's passive evidence (CPA's listed `quota` signals), when any was read;
    /// `null` otherwise (docs/rules/patrol.md §4.7).
    pub passive: Option<PassiveView>,
}

/// Settings of a site as the API shows them (never the key).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingsResponse {
    pub site_id: String,
    pub site_name: String,
    pub site_enabled: bool,
    pub cpa_base_url: String,
    pub has_management_key: bool,
    pub provider: String,
    pub usage_url: String,
    pub user_agent: String,
    #[serde(flatten)]
    pub settings: PatrolSettings,
}

impl From<&Site> for SettingsResponse {
    fn from(s: &Site) -> Self {
        Self {
            site_id: s.site_id.clone(),
            site_name: s.site_name.clone(),
            site_enabled: s.site_enabled,
            cpa_base_url: s.cpa_base_url.clone(),
            has_management_key: s.has_management_key(),
            provider: s.provider.clone(),
            usage_url: s.usage_url.clone(),
            user_agent: s.user_agent.clone(),
            settings: s.settings.clone(),
        }
    }
}

/// `GET /api/inspection/status`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InspectionStatus {
    pub is_polling: bool,
    pub auto_polling_enabled: bool,
    pub poll_interval_minutes: u32,
    pub next_scheduled_at: Option<DateTime<Utc>>,
    pub next_reset_check_at: Option<DateTime<Utc>>,
    pub next_real_refresh_at: Option<DateTime<Utc>>,
    pub last_run_started_at: Option<DateTime<Utc>>,
    pub last_run_finished_at: Option<DateTime<Utc>>,
    pub last_cpa_contact_at: Option<DateTime<Utc>>,
    pub cpa_version: Option<String>,
    /// Why this CPA's management API cannot be used, when its last failure said so: an 8.x
    /// that dropped `/v0/management`, or management off / a node managed by a control plane
    /// (docs/rules/cpa.md §11); `null` otherwise, and once a management call works again.
    pub cpa_unsupported: Option<String>,
    /// Automatic work is paused until then after CPA management failures (`null` = running).
    pub paused_until: Option<DateTime<Utc>>,
    /// CPA refused the management key: when, why, and when it is tried again (`null` = not
    /// refused). Persisted: a restart or an `inspect` run honours it.
    pub key_refusal: Option<super::connection::KeyRefusalView>,
    /// The published pool snapshot's counts and `usableUntil` (`GET /api/pool` has the
    /// accounts); `null` before the site's first publish.
    pub pool: Option<super::pool::PoolSummaryView>,
    /// Banked reset credits of the site (docs/reset-credits.md); `null` when its
    /// `resetCreditsMode` is `off`.
    pub reset_credits: Option<super::reset_credits::SiteCreditsView>,
}

fn reason_str(r: Option<DisableReason>) -> String {
    r.map(|r| r.as_str().to_string()).unwrap_or_default()
}

/// Accounts of a site with priority, reason and availability fields (availability read under
/// each account's effective quota policy, now).
pub async fn accounts(p: &Patrol, site: &Site) -> Result<Vec<AccountView>, JobError> {
    let sid = site.site_id.clone();
    let (accounts, reasons, exceptions, priorities, states, lists) = p
        .store
        .run(move |c| {
            let pr = priorities_by_name(c, &sid)?;
            Ok((
                store::accounts::list(c, &sid)?,
                store::accounts::load_reasons(c, &sid)?,
                store::accounts::exceptions(c, &sid)?,
                pr,
                store::accounts::load_states(c, &sid)?,
                super::reset_credits::lists_by_name(c, &sid)?,
            ))
        })
        .await?;
    let mode = site.settings.reset_credits_mode;
    let now = p.now();
    Ok(accounts
        .into_iter()
        .map(|a| {
            let record = reasons.get(&a.name);
            let r = shown_reason(a.disabled, record);
            let pr = priorities.get(&a.name);
            let facts = AccountFacts::from_parts(a.disabled, record, states.get(&a.name));
            let policy = site.quota_policy(&a.name);
            AccountView {
                reset_credits: super::reset_credits::account_view(
                    mode,
                    states.get(&a.name).and_then(|s| s.snapshot.as_ref()),
                    lists.get(&a.name),
                ),
                availability: availability(facts, &policy, now).into(),
                never_act: policy.never_act,
                display_account: a.display_name().to_string(),
                exception: exceptions.contains(&a.name),
                disable_reason: reason_str(r.map(|r| r.reason)),
                disabled_by: r.map(|r| r.owner),
                disabled_at: r.and_then(|r| r.set_at),
                disable_reason_provisional: r.is_some_and(|r| r.provisional),
                local_priority: pr.map(|x| x.0),
                pending_first_inspection: pr.is_some_and(|x| x.1),
                name: a.name,
                auth_index: a.auth_index,
                email: a.email,
                plan_type: a.plan_type,
                disabled: a.disabled,
                status: a.status,
                status_message: a.status_message,
                cpa_priority: a.cpa_priority,
            }
        })
        .collect())
}

/// Quota views of a site's accounts, each window with its forecast (`jobs::forecast`).
pub async fn quotas(p: &Patrol, site: &Site) -> Result<Vec<QuotaView>, JobError> {
    let forecasts = super::forecast::window_forecasts(p, &site.site_id).await?;
    quota_views(p, site, &forecasts).await
}

/// Quota views with the given per-account, per-window forecasts (empty: none, every window's
/// forecast fields `null` / `unknown`).
async fn quota_views(
    p: &Patrol,
    site: &Site,
    forecasts: &HashMap<String, HashMap<String, super::forecast::WindowForecast>>,
) -> Result<Vec<QuotaView>, JobError> {
    let sid = site.site_id.clone();
    let (accounts, states, reasons, priorities, lists, passive) = p
        .store
        .run(move |c| {
            Ok((
                store::accounts::list(c, &sid)?,
                store::accounts::load_states(c, &sid)?,
                store::accounts::load_reasons(c, &sid)?,
                priorities_by_name(c, &sid)?,
                super::reset_credits::lists_by_name(c, &sid)?,
                store::passive::load(c, &sid)?,
            ))
        })
        .await?;
    let mode = site.settings.reset_credits_mode;
    let now = p.now();
    Ok(accounts
        .into_iter()
        .map(|a| {
            let st = states.get(&a.name).cloned().unwrap_or_default();
            let snap = st.snapshot.as_ref();
            let record = reasons.get(&a.name);
            let shown = shown_reason(a.disabled, record);
            let facts = AccountFacts::from_parts(a.disabled, record, states.get(&a.name));
            let policy = site.quota_policy(&a.name);
            QuotaView {
                reset_credits: super::reset_credits::account_view(mode, snap, lists.get(&a.name)),
                availability: availability(facts, &policy, now).into(),
                long_window: snap.and_then(|s| s.long_window()).map(|w| w.kind),
                applied_threshold: snap.and_then(|s| applied_threshold(s, &policy, now)),
                policy,
                display_account: a.display_name().to_string(),
                plan_type: snap
                    .and_then(|s| s.plan_type.clone())
                    .or(a.plan_type.clone()),
                disabled: a.disabled,
                disable_reason: reason_str(shown.map(|r| r.reason)),
                disable_reason_provisional: shown.is_some_and(|r| r.provisional),
                windows: snap
                    .map(|s| {
                        let f = forecasts.get(&a.name);
                        s.windows
                            .iter()
                            .map(|w| {
                                let wf = f.and_then(|f| f.get(&w.id));
                                QuotaWindowView::new(w.clone(), wf)
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                weekly_used_percent: snap.and_then(QuotaSnapshot::weekly_used),
                five_hour_used_percent: snap.and_then(QuotaSnapshot::five_hour_used),
                credits: snap.and_then(|s| s.credits.clone()),
                status_code: st.last_status_code,
                success: st.last_error.is_none() && snap.is_some(),
                error: st.last_error.clone(),
                checked_at: st.checked_at.or(snap.map(|s| s.checked_at)),
                refreshed_at: snap.map(|s| s.refreshed_at),
                next_real_refresh_at: freshness::next_real_refresh_at(
                    &site.site_id,
                    &a.name,
                    snap.map(|s| s.refreshed_at),
                    &site.settings,
                ),
                from_cache: snap.is_some_and(|s| s.from_cache),
                cache_reason: snap.and_then(|s| s.cache_reason.clone()),
                consecutive_failures: st.consecutive_failures,
                local_priority: priorities.get(&a.name).map(|x| x.0),
                pending_first_inspection: priorities.get(&a.name).is_some_and(|x| x.1),
                source: snap.map(|_| EvidenceSource::Probe),
                age_seconds: snap.map(|s| (now - s.refreshed_at).num_seconds().max(0)),
                passive: passive
                    .get(&a.name)
                    .map(|ps| PassiveView::new(ps, st.last_probe_at, now)),
                account_name: a.name,
            }
        })
        .collect())
}

/// Inspection status of a site.
pub async fn inspection_status(p: &Patrol, site: &Site) -> Result<InspectionStatus, JobError> {
    let rt = p.runtime(&site.site_id);
    let sid = site.site_id.clone();
    let (runtime, key_refusal) = p
        .store
        .run(move |c| {
            Ok((
                store::sites::runtime(c, &sid)?,
                store::key_refusals::get(c, &sid)?,
            ))
        })
        .await?;
    let resets = super::refresh::pending_reset_checks(p, site).await?;
    // Only `nextRealRefreshAt` is read: no forecast (it reads the history).
    let views = quota_views(p, site, &HashMap::new()).await?;
    Ok(InspectionStatus {
        is_polling: rt.is_running(),
        auto_polling_enabled: site.settings.auto_polling_enabled,
        poll_interval_minutes: site.settings.poll_interval_minutes,
        next_scheduled_at: if site.settings.auto_polling_enabled {
            rt.next_scheduled_at.lock().ok().and_then(|n| *n)
        } else {
            None
        },
        next_reset_check_at: resets.first().map(|r| r.check_at),
        next_real_refresh_at: views.iter().filter_map(|v| v.next_real_refresh_at).min(),
        reset_credits: super::reset_credits::site_summary(
            site.settings.reset_credits_mode,
            views.iter().map(|v| v.reset_credits.as_ref()),
        ),
        last_run_started_at: runtime.last_run_started_at,
        last_run_finished_at: runtime.last_run_finished_at,
        last_cpa_contact_at: runtime.last_cpa_contact_at,
        cpa_version: runtime.cpa_version,
        cpa_unsupported: rt.cpa_unsupported().map(|e| e.to_string()),
        paused_until: paused_until(&rt, key_refusal.as_ref(), p.now()),
        key_refusal: key_refusal
            .as_ref()
            .map(|r| super::connection::KeyRefusalView::new(&site.site_id, r)),
        pool: p
            .pool_snapshot(&site.site_id)
            .map(|s| super::pool::PoolSummaryView::from(s.as_ref())),
    })
}

/// Until when automatic work on a site is paused at `now`: after CPA management failures
/// (`rt`) or a refused management key (its next automatic try); `None` = running.
pub(crate) fn paused_until(
    rt: &super::SiteRuntime,
    key_refusal: Option<&crate::core::key_refusal::KeyRefusal>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    rt.cpa_paused_until(now)
        .max(key_refusal.map(|r| r.next_automatic_try_at()))
}

/// Operation-log entries.
pub async fn logs(p: &Patrol, q: LogQuery) -> Result<Vec<LogEntry>, JobError> {
    Ok(p.store.run(move |c| store::log::query(c, &q)).await?)
}

/// The last full round of a site.
pub async fn last_run(p: &Patrol, site_id: &str) -> Result<Option<InspectionRunResult>, JobError> {
    let sid = site_id.to_string();
    Ok(p.store.run(move |c| store::runs::last(c, &sid)).await?)
}

/// Past rounds of a site, newest first.
pub async fn runs(
    p: &Patrol,
    site_id: &str,
    limit: u32,
) -> Result<Vec<InspectionRunResult>, JobError> {
    let sid = site_id.to_string();
    Ok(p.store
        .run(move |c| store::runs::list(c, &sid, limit))
        .await?)
}

/// Snapshot history of one account, newest first.
pub async fn history(
    p: &Patrol,
    site_id: &str,
    name: &str,
    limit: u32,
) -> Result<Vec<HistoryEntry>, JobError> {
    let sid = site_id.to_string();
    let n = name.to_string();
    Ok(p.store
        .run(move |c| store::accounts::history(c, &sid, &n, limit))
        .await?)
}

/// Every site.
pub async fn sites(p: &Patrol) -> Result<Vec<Site>, JobError> {
    Ok(p.store.run(|c| store::sites::list(c)).await?)
}

/// Last successful CPA contact of one site (`GET /readyz`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpaContact {
    pub site_id: String,
    pub site_enabled: bool,
    pub last_cpa_contact_at: Option<DateTime<Utc>>,
    pub cpa_version: Option<String>,
    /// As `cpaUnsupported` of `GET /api/inspection/status` (docs/rules/cpa.md §11).
    pub cpa_unsupported: Option<String>,
    /// Why the site cannot work now, e.g. "management key refused at …, next automatic try
    /// at …", or why its CPA cannot be used (`null` when nothing is known to stop it).
    pub detail: Option<String>,
}

/// Every site's last CPA contact, in one store call (cheap enough for a readiness probe).
pub async fn cpa_contacts(p: &Patrol) -> Result<Vec<CpaContact>, JobError> {
    let mut contacts = stored_contacts(p).await?;
    for contact in &mut contacts {
        if let Some(e) = p.runtime(&contact.site_id).cpa_unsupported() {
            let text = e.to_string();
            contact.detail.get_or_insert_with(|| text.clone());
            contact.cpa_unsupported = Some(text);
        }
    }
    Ok(contacts)
}

/// [`cpa_contacts`] as stored (no in-memory state), in one store call.
async fn stored_contacts(p: &Patrol) -> Result<Vec<CpaContact>, JobError> {
    Ok(p.store
        .run(|c| {
            store::sites::list(c)?
                .into_iter()
                .map(|s| {
                    let rt = store::sites::runtime(c, &s.site_id)?;
                    let refusal = store::key_refusals::get(c, &s.site_id)?;
                    Ok(CpaContact {
                        detail: refusal.map(|r| {
                            format!("{}; {}", r.detail(), super::connection::advice(&s.site_id))
                        }),
                        site_id: s.site_id,
                        site_enabled: s.site_enabled,
                        last_cpa_contact_at: rt.last_cpa_contact_at,
                        cpa_version: rt.cpa_version,
                        cpa_unsupported: None,
                    })
                })
                .collect()
        })
        .await?)
}

/// The priority list as name → (position, pending).
fn priorities_by_name(
    c: &rusqlite::Connection,
    site_id: &str,
) -> Result<std::collections::HashMap<String, (u32, bool)>, crate::store::StoreError> {
    Ok(store::priorities::load(c, site_id)?
        .into_iter()
        .map(|e| (e.name, (e.priority, e.pending_first_inspection)))
        .collect())
}
