//! The status page's read model (docs/rules/api.md §7): per site a [`SiteCard`] (reachability, counts,
//! resets, forecast, last round, raised alerts) and per account an [`AccountRow`] in priority
//! order, with the site's recent rounds, operation log and 7-day pool samples. Reads only (no CPA
//! call, nothing written); the web adapter formats it. Availability is `core::availability`'s
//! one rule, as in `GET /api/accounts`. Beside it, the page's sign-in sessions
//! ([`session_valid_until`], [`open_session`], [`close_session`]): the store keeps only hashes
//! (docs/status-page.md "Sign-in and sessions"), the web adapter computes them.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Duration, Utc};

use super::connection::KeyRefusalView;
use super::{JobError, Patrol, PoolData};
use crate::core::account::{QuotaSnapshot, ReasonOwner, shown_reason};
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

/// How a site's CPA answers and when its rounds run (the card's first line).
#[derive(Debug, Clone)]
pub struct Contact {
    /// A round is running now.
    pub is_polling: bool,
    /// The next automatic round (`None`: auto polling off).
    pub next_scheduled_at: Option<DateTime<Utc>>,
    /// The last successful call to CPA's management API.
    pub last_cpa_contact_at: Option<DateTime<Utc>>,
    /// CPA's management API has failed since then (`None`: the last call worked).
    pub cpa_failing_since: Option<DateTime<Utc>>,
    /// Automatic work is paused until then (failures, refused key).
    pub paused_until: Option<DateTime<Utc>>,
    /// CPA refused the management key: why and when it is tried again.
    pub key_refusal: Option<KeyRefusalView>,
    /// Why this CPA's management API cannot be used (an 8.x that dropped `/v0`, management
    /// off or a cluster node; docs/rules/cpa.md §11), until a call works again.
    pub cpa_unsupported: Option<String>,
    /// The `X-CPA-VERSION` CPA last reported.
    pub cpa_version: Option<String>,
}

/// One site as its card shows it.
#[derive(Debug, Clone)]
pub struct SiteCard {
    pub site_id: String,
    pub site_name: String,
    pub site_enabled: bool,
    pub contact: Contact,
    /// Published counts; `None` before the site's first publish.
    pub counts: Option<PoolCounts>,
    /// Usable accounts in use: the active set under priority routing, else every usable one.
    pub active: usize,
    /// The earliest reset of any account's window (usable or exhausted), else (no forecast)
    /// the published pool's `usableUntil`.
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
    /// Banked reset credits (`None`: mode `off` or nothing known; docs/reset-credits.md).
    pub reset_credits: Option<super::reset_credits::AccountCreditsView>,
    /// The account's passive evidence (docs/rules/patrol.md §4.7), when any was read.
    pub passive: Option<PassiveCell>,
}

/// Passive evidence in a row: what CPA saw on the account's last served response.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassiveCell {
    /// When CPA saw it.
    pub observed_at: DateTime<Utc>,
    /// Its long window's kind (weekly, else monthly) and used percent, and the five-hour used
    /// percent it carries.
    pub long_kind: Option<WindowKind>,
    pub long_used: Option<f64>,
    pub five_hour_used: Option<f64>,
    /// Seen after the last real probe.
    pub newer_than_probe: bool,
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
    /// The site's banked reset credits (`None`: mode `off`).
    pub reset_credits: Option<super::reset_credits::SiteCreditsView>,
}

/// The card of every site, by site id. Errors: store failures.
pub async fn overview(p: &Patrol) -> Result<Vec<SiteCard>, JobError> {
    let mut cards = Vec::new();
    for site in super::queries::sites(p).await? {
        cards.push(card(p, &site, 1).await?.0);
    }
    Ok(cards)
}

/// The card of `site` and its newest `rounds` rounds (the card shows the first), from one
/// small store read
/// (runtime row, key refusal, rounds, alert state) and the published pool and forecast: no
/// account is loaded. Errors: store failures.
pub async fn card(
    p: &Patrol,
    site: &Site,
    rounds: u32,
) -> Result<(SiteCard, Vec<RunSummary>), JobError> {
    let sid = site.site_id.clone();
    let (runtime, key_refusal, rounds, alerts) = p
        .store
        .run(move |c| {
            Ok((
                store::sites::runtime(c, &sid)?,
                store::key_refusals::get(c, &sid)?,
                store::runs::summaries(c, &sid, rounds)?,
                store::alerts::load_state(c, &sid)?,
            ))
        })
        .await?;
    let rt = p.runtime(&site.site_id);
    let now = p.now();
    let snapshot = p.pool_snapshot(&site.site_id);
    let forecast = match snapshot {
        Some(_) => super::forecast::published(p, &site.site_id).await?,
        None => None,
    };
    let counts = snapshot.as_ref().map(|s| s.counts);
    let contact = Contact {
        is_polling: rt.is_running(),
        next_scheduled_at: if site.settings.auto_polling_enabled {
            rt.next_scheduled_at.lock().ok().and_then(|n| *n)
        } else {
            None
        },
        last_cpa_contact_at: runtime.last_cpa_contact_at,
        cpa_failing_since: rt.cpa_failing_since(),
        paused_until: super::queries::paused_until(&rt, key_refusal.as_ref(), now),
        key_refusal: key_refusal
            .as_ref()
            .map(|r| KeyRefusalView::new(&site.site_id, r)),
        cpa_unsupported: rt.cpa_unsupported().map(|e| e.to_string()),
        cpa_version: runtime.cpa_version,
    };
    let card = SiteCard {
        site_id: site.site_id.clone(),
        site_name: site.site_name.clone(),
        site_enabled: site.site_enabled,
        contact,
        active: forecast
            .as_ref()
            .map_or(counts.map_or(0, |c| c.usable), |f| f.active_accounts),
        earliest_reset_at: forecast
            .as_ref()
            .and_then(|f| f.earliest_reset_at)
            .or(snapshot.as_ref().and_then(|s| s.usable_until)),
        counts,
        forecast,
        last_round: rounds.first().cloned(),
        raised: raised(&alerts),
    };
    Ok((card, rounds))
}

fn raised(s: &SiteAlertState) -> Vec<(Family, Option<DateTime<Utc>>)> {
    Family::ALL
        .into_iter()
        .filter(|f| s.get(*f).raised)
        .map(|f| (f, s.get(f).raised_at))
        .collect()
}

/// The page of `site`: its card, one load of its accounts (the rows and the active set come
/// from the same read), the operation log and the chart's samples. Errors: store failures.
pub async fn site_page(p: &Patrol, site: &Site) -> Result<SitePage, JobError> {
    let (card, rounds) = card(p, site, RECENT_ROUNDS).await?;
    let pool = p.pool(&site.site_id).await?;
    let sid = site.site_id.clone();
    let now = p.now();
    let since = now - Duration::days(CHART_DAYS);
    let (log, samples, lists, passive) = p
        .store
        .run(move |c| {
            let q = LogQuery {
                site_id: Some(sid.clone()),
                limit: RECENT_LOG,
                ..LogQuery::default()
            };
            Ok((
                store::log::query(c, &q)?,
                store::samples::since(c, &sid, since)?,
                super::reset_credits::lists_by_name(c, &sid)?,
                store::passive::load(c, &sid)?,
            ))
        })
        .await?;
    let active: HashSet<String> = super::priority::active_set(site, &pool, now)
        .into_iter()
        .collect();
    let rows = rows(site, &pool, &active, &lists, &passive, now);
    let reset_credits = super::reset_credits::site_summary(
        site.settings.reset_credits_mode,
        rows.iter().map(|r| r.reset_credits.as_ref()),
    );
    Ok(SitePage {
        card,
        routing_enabled: site.settings.priority_routing_enabled,
        min_active: site.settings.priority_min_active_count,
        rows,
        reset_credits,
        rounds,
        log,
        samples,
        router: p.router_admin().map(|a| a.control().status_json()),
    })
}

/// The rows of a site in priority order (unlisted accounts after the listed ones, by name).
fn rows(
    site: &Site,
    l: &PoolData,
    active: &HashSet<String>,
    lists: &HashMap<String, crate::store::reset_credits::ListedCredits>,
    passive: &HashMap<String, QuotaSnapshot>,
    now: DateTime<Utc>,
) -> Vec<AccountRow> {
    let priorities: HashMap<&str, (u32, bool)> = l
        .priorities
        .iter()
        .map(|e| (e.name.as_str(), (e.priority, e.pending_first_inspection)))
        .collect();
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
            let pr = priorities.get(a.name.as_str());
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
                reset_credits: super::reset_credits::account_view(
                    site.settings.reset_credits_mode,
                    snap,
                    lists.get(&a.name),
                ),
                passive: passive.get(&a.name).map(|ps| PassiveCell {
                    observed_at: ps.refreshed_at,
                    long_kind: ps.long_window().map(|w| w.kind),
                    long_used: ps.long_window().and_then(|w| w.used_percent),
                    five_hour_used: ps.five_hour_used(),
                    newer_than_probe: st
                        .and_then(|s| s.last_probe_at)
                        .is_none_or(|p| ps.refreshed_at > p),
                }),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        let key = |r: &AccountRow| (r.priority.is_none(), r.priority);
        key(a).cmp(&key(b)).then_with(|| a.name.cmp(&b.name))
    });
    rows
}
/// Until when the session whose id hashes to `id_hash` is valid, if it exists, was opened with
/// the admin token digesting to `token_digest` and has not expired at `now`. Errors: the store.
pub async fn session_valid_until(
    patrol: &Patrol,
    id_hash: String,
    token_digest: String,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, JobError> {
    Ok(patrol
        .store
        .run(move |c| store::sessions::valid_until(c, &id_hash, &token_digest, now))
        .await?)
}

/// Stores a new session (`id_hash`, `token_digest`), opened at `now`, expiring at `expires_at`.
/// Errors: the store.
pub async fn open_session(
    patrol: &Patrol,
    id_hash: String,
    token_digest: String,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> Result<(), JobError> {
    Ok(patrol
        .store
        .run(move |c| store::sessions::create(c, &id_hash, &token_digest, now, expires_at))
        .await?)
}

/// Deletes the session whose id hashes to `id_hash` (none: nothing happens). Errors: the store.
pub async fn close_session(patrol: &Patrol, id_hash: String) -> Result<(), JobError> {
    Ok(patrol
        .store
        .run(move |c| store::sessions::delete(c, &id_hash))
        .await
        .map(|_| ())?)
}
