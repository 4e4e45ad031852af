//! The status page's read model (issue 11): per site a [`SiteCard`] (reachability, counts,
//! resets, forecast, last round, raised alerts) and per account an [`AccountRow`] in priority
//! order, with the site's recent rounds, operation log and 7-day pool samples. Reads only (no CPA
//! call, nothing written); the web adapter formats it. Availability is `core::availability`'s
//! one rule, as in `GET /api/accounts`.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Duration, Utc};

use super::queries::{InspectionStatus, inspection_status};
use super::{JobError, Patrol};
use crate::core::account::{ReasonOwner, shown_reason};
use crate::core::alerting::{Family, SiteAlertState};
use crate::core::availability::{AccountFacts, Availability, availability};
use crate::core::forecast::SiteForecast;
use crate::core::freshness;
use crate::core::oplog::{LogEntry, LogQuery};
use crate::core::pool::{PoolCounts, PoolSample};
use crate::core::quota::WindowKind;
use crate::core::report::RunSummary;
use crate::core::site::Site;
use crate::store;

/// Rounds listed on a site's page (newest first).
pub const RECENT_ROUNDS: u32 = 10;
/// Operation-log entries listed on a site's page (newest first).
pub const RECENT_LOG: u32 = 30;
/// The span of the pool chart.
pub const CHART_DAYS: i64 = 7;

/// One site as its card shows it.
#[derive(Debug, Clone)]
pub struct SiteCard {
    pub site_id: String,
    pub site_name: String,
    pub site_enabled: bool,
    /// Polling, schedule, CPA contact, pause and key refusal (`GET /api/inspection/status`).
    pub status: InspectionStatus,
    /// CPA's management API has failed since then (`null`: the last call worked).
    pub cpa_failing_since: Option<DateTime<Utc>>,
    /// Published counts; `None` before the site's first publish.
    pub counts: Option<PoolCounts>,
    /// Usable accounts in use: the active set under priority routing, else every usable one.
    pub active: usize,
    /// The earliest reset of any account's window (usable or exhausted).
    pub earliest_reset_at: Option<DateTime<Utc>>,
    /// The forecast (dry time, remaining capacity); `None` before the first publish.
    pub forecast: Option<SiteForecast>,
    /// The newest round of any kind.
    pub last_round: Option<RunSummary>,
    /// Alert families whose raising event went out and has not cleared, with since when
    /// (`exhaustion`, `min_active`, `invalid_accounts`, `reachability`, `pool_low`).
    pub raised: Vec<(Family, Option<DateTime<Utc>>)>,
}

/// One window's figure in a row: used percent, its deciding threshold (`None`: the window
/// does not disable this account, e.g. the 5-hour window of a free plan) and its reset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowCell {
    pub used_percent: Option<f64>,
    pub threshold: Option<u8>,
    pub reset_at: Option<DateTime<Utc>>,
}

/// One account of a site's page.
#[derive(Debug, Clone)]
pub struct AccountRow {
    pub name: String,
    pub display_account: String,
    /// Position in the priority list (1 = first); `None` when not listed.
    pub priority: Option<u32>,
    pub plan_type: Option<String>,
    /// The long window (weekly, else monthly) and its real kind.
    pub long_window: Option<(WindowKind, WindowCell)>,
    pub five_hour: Option<WindowCell>,
    pub availability: Availability,
    /// Disabled in CPA.
    pub disabled: bool,
    /// The shown disable reason (`DisableReason::as_str`), its owner, and whether it is
    /// provisional (derived, not a record of ours).
    pub reason: Option<(String, ReasonOwner, bool)>,
    /// In the active set of priority routing.
    pub active: bool,
    /// Waiting for its first inspection before routing may enable it (routing on only).
    pub pending_first_inspection: bool,
    pub exception: bool,
    pub never_act: bool,
    /// The last probe (successful or not).
    pub checked_at: Option<DateTime<Utc>>,
    /// The last probe's error, when it failed.
    pub error: Option<String>,
    /// When the next real (not cached) probe is due.
    pub next_real_refresh_at: Option<DateTime<Utc>>,
}

/// Everything a site's page shows.
#[derive(Debug, Clone)]
pub struct SitePage {
    pub card: SiteCard,
    pub routing_enabled: bool,
    pub min_active: u32,
    /// In priority order: listed accounts by position, then the unlisted ones by name.
    pub rows: Vec<AccountRow>,
    /// Newest first, at most [`RECENT_ROUNDS`].
    pub rounds: Vec<RunSummary>,
    /// Newest first, at most [`RECENT_LOG`].
    pub log: Vec<LogEntry>,
    /// The last [`CHART_DAYS`] days of samples, oldest first.
    pub samples: Vec<PoolSample>,
    /// The router's `GET /api/router/status` document when a router runs.
    pub router: Option<serde_json::Value>,
}

/// The card of every site, by site id. Errors: store failures.
pub async fn overview(p: &Patrol) -> Result<Vec<SiteCard>, JobError> {
    let mut cards = Vec::new();
    for site in super::queries::sites(p).await? {
        cards.push(card(p, &site).await?);
    }
    Ok(cards)
}

/// The card of `site`. Errors: store failures.
pub async fn card(p: &Patrol, site: &Site) -> Result<SiteCard, JobError> {
    let status = inspection_status(p, site).await?;
    let sid = site.site_id.clone();
    let (last_round, alerts) = p
        .store
        .run(move |c| {
            Ok((
                store::runs::summaries(c, &sid, 1)?.pop(),
                store::alerts::load_state(c, &sid)?,
            ))
        })
        .await?;
    let snapshot = p.pool_snapshot(&site.site_id);
    let forecast = match snapshot {
        Some(_) => super::forecast::site_forecast(p, &site.site_id).await?,
        None => None,
    };
    let counts = snapshot.as_ref().map(|s| s.counts);
    Ok(SiteCard {
        site_id: site.site_id.clone(),
        site_name: site.site_name.clone(),
        site_enabled: site.site_enabled,
        cpa_failing_since: p.runtime(&site.site_id).cpa_failing_since(),
        active: forecast
            .as_ref()
            .map_or(counts.map_or(0, |c| c.usable), |f| f.active_accounts),
        earliest_reset_at: forecast.as_ref().and_then(|f| f.earliest_reset_at),
        counts,
        forecast,
        last_round,
        raised: raised(&alerts),
        status,
    })
}

fn raised(s: &SiteAlertState) -> Vec<(Family, Option<DateTime<Utc>>)> {
    Family::ALL
        .into_iter()
        .filter(|f| s.get(*f).raised)
        .map(|f| (f, s.get(f).raised_at))
        .collect()
}

/// The page of `site`. Errors: store failures.
pub async fn site_page(p: &Patrol, site: &Site) -> Result<SitePage, JobError> {
    let card = card(p, site).await?;
    let active: HashSet<String> = super::priority::status(p, site)
        .await?
        .active_account_names
        .into_iter()
        .collect();
    let sid = site.site_id.clone();
    let since = p.now() - Duration::days(CHART_DAYS);
    let loaded = p
        .store
        .run(move |c| {
            Ok(Loaded {
                accounts: store::accounts::list(c, &sid)?,
                states: store::accounts::load_states(c, &sid)?,
                reasons: store::accounts::load_reasons(c, &sid)?,
                exceptions: store::accounts::exceptions(c, &sid)?.into_iter().collect(),
                priorities: store::priorities::load(c, &sid)?
                    .into_iter()
                    .map(|e| (e.name, (e.priority, e.pending_first_inspection)))
                    .collect(),
                rounds: store::runs::summaries(c, &sid, RECENT_ROUNDS)?,
                log: store::log::query(
                    c,
                    &LogQuery {
                        site_id: Some(sid.clone()),
                        limit: RECENT_LOG,
                        ..LogQuery::default()
                    },
                )?,
                samples: store::samples::since(c, &sid, since)?,
            })
        })
        .await?;
    let rows = rows(site, &loaded, &active, p.now());
    Ok(SitePage {
        card,
        routing_enabled: site.settings.priority_routing_enabled,
        min_active: site.settings.priority_min_active_count,
        rows,
        rounds: loaded.rounds,
        log: loaded.log,
        samples: loaded.samples,
        router: p.router_admin().map(|a| a.control().status_json()),
    })
}

/// What one store call reads for a site's page.
struct Loaded {
    accounts: Vec<crate::core::account::Account>,
    states: HashMap<String, crate::core::account::ProbeState>,
    reasons: HashMap<String, crate::core::account::DisableRecord>,
    exceptions: HashSet<String>,
    priorities: HashMap<String, (u32, bool)>,
    rounds: Vec<RunSummary>,
    log: Vec<LogEntry>,
    samples: Vec<PoolSample>,
}

/// The rows of a site in priority order (unlisted accounts after the listed ones, by name).
fn rows(site: &Site, l: &Loaded, active: &HashSet<String>, now: DateTime<Utc>) -> Vec<AccountRow> {
    let mut rows: Vec<AccountRow> = l
        .accounts
        .iter()
        .map(|a| {
            let st = l.states.get(&a.name);
            let snap = st.and_then(|s| s.snapshot.as_ref());
            let record = l.reasons.get(&a.name);
            let shown = shown_reason(a.disabled, record);
            let policy = site.quota_policy(&a.name);
            let facts = AccountFacts::from_parts(a.disabled, record, st);
            let cell = |w: &crate::core::quota::QuotaWindow| WindowCell {
                used_percent: w.used_percent,
                threshold: snap.and_then(|s| s.threshold_for(w, &policy)),
                reset_at: w.reset_at,
            };
            let pr = l.priorities.get(&a.name);
            AccountRow {
                name: a.name.clone(),
                display_account: a.display_name().to_string(),
                priority: pr.map(|x| x.0),
                plan_type: snap
                    .and_then(|s| s.plan_type.clone())
                    .or(a.plan_type.clone()),
                long_window: snap
                    .and_then(|s| s.long_window())
                    .map(|w| (w.kind, cell(w))),
                five_hour: snap.and_then(|s| s.five_hour()).map(cell),
                availability: availability(facts, &policy, now),
                disabled: a.disabled,
                reason: shown.map(|r| (r.reason.as_str().to_string(), r.owner, r.provisional)),
                active: active.contains(&a.name),
                // Graduation happens in routing's rounds only: with routing off the flag
                // says nothing about the account.
                pending_first_inspection: site.settings.priority_routing_enabled
                    && pr.is_some_and(|x| x.1),
                exception: l.exceptions.contains(&a.name),
                never_act: policy.never_act,
                checked_at: st.and_then(|s| s.checked_at).or(snap.map(|s| s.checked_at)),
                error: st.and_then(|s| s.last_error.clone()),
                next_real_refresh_at: freshness::next_real_refresh_at(
                    &site.site_id,
                    &a.name,
                    snap.map(|s| s.refreshed_at),
                    &site.settings,
                ),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        let key = |r: &AccountRow| (r.priority.is_none(), r.priority);
        key(a).cmp(&key(b)).then_with(|| a.name.cmp(&b.name))
    });
    rows
}
