//! Read-only views of the running router for the admin API (api.md `GET /api/router/status`,
//! `GET /api/router/preview`): pools and accounts with availability, cooldown and demotion,
//! bindings per lane, request counters; and "who would serve the next request for model X /
//! session S" with every exclusion's reason and end (docs/rules/router.md §1 "why not account X").
//! Must not: bind a session or change any lane state (a preview ranks without affinity writes).

use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Shared;
use super::lanes::{Lane, LaneState};
use crate::core::affinity::{KeyInput, session_key};
use crate::core::failure::CooldownKind;
use crate::core::router::Api;
use crate::core::selection::{ExclusionReason, rank};

/// `GET /api/router/status`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouterStatus {
    pub pools: Vec<PoolStatus>,
    pub requests: RequestCounters,
}

/// One pool: its accounts and lanes.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    pub id: String,
    pub models: Vec<String>,
    pub accounts: Vec<AccountStatus>,
    pub lanes: Vec<LaneStatus>,
}

/// One account of a pool (its first lane's availability; the latest cooldown over its lanes).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountStatus {
    pub id: String,
    pub tier: u32,
    pub site: Option<String>,
    pub enabled: bool,
    pub availability: AvailabilityView,
    pub cooldown: Option<CooldownView>,
    /// Demoted for poor cache quality in at least one lane (docs/rules/router.md §2.3).
    pub demoted: bool,
}

/// An availability as `{state, until}` (`until` = the known reset of an exhausted link).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AvailabilityView {
    pub state: &'static str,
    pub until: Option<DateTime<Utc>>,
}

/// A running router cooldown: its kind, its end and the lane model it was seen on.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CooldownView {
    pub kind: Option<CooldownKind>,
    pub until: DateTime<Utc>,
    pub model: String,
}

/// One (pool, model) lane: its live bindings.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneStatus {
    pub model: String,
    pub bindings: usize,
}

/// Request counters since the process started.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestCounters {
    /// Client requests received (auth refusals not counted).
    pub total: u64,
    pub served: u64,
    /// Requests nothing served (all excluded, budget spent).
    pub failed: u64,
    pub attempts: u64,
    pub failovers: u64,
    /// Usage records dropped on a full channel.
    pub usage_dropped: u64,
}

/// `GET /api/router/preview`: per leg the ranking (account ids, first = next to serve) and
/// the exclusions.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouterPreview {
    pub model: String,
    pub legs: Vec<PreviewLeg>,
}

/// One leg of a preview.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewLeg {
    pub pool: String,
    pub model: String,
    /// Eligible accounts in the order they would be tried (a bound account first, demoted
    /// ones last).
    pub ranking: Vec<String>,
    /// The account bound to the session key, when one is.
    pub bound: Option<String>,
    pub excluded: Vec<PreviewExcluded>,
}

/// Why an account is not (or only last) in the ranking.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewExcluded {
    pub account: String,
    /// `adminDisabled`, `exhausted`, `noData`, `coolingDown`, `demoted` (still ranked, last), …
    pub reason: &'static str,
    /// The cooldown kind when `coolingDown`.
    pub cooldown: Option<CooldownKind>,
    pub until: Option<DateTime<Utc>>,
}

/// Why a preview cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreviewError {
    #[error("the model {0:?} is not served by the router (no chain or pool model of that name)")]
    UnknownModel(String),
}

pub(crate) fn status(shared: &Shared) -> RouterStatus {
    let lanes = shared.lanes.load();
    let now = shared.clock.now();
    let pools = lanes
        .spec
        .pools
        .iter()
        .map(|p| {
            let pool_lanes: Vec<&Lane> = p
                .models
                .iter()
                .filter_map(|m| lanes.by_leg.get(&(p.id.clone(), m.clone())))
                .map(|l| l.as_ref())
                .collect();
            let accounts = lanes
                .spec
                .accounts
                .iter()
                .filter(|a| a.pool == p.id)
                .map(|a| account_status(a, &pool_lanes, now))
                .collect();
            let lanes = pool_lanes
                .iter()
                .map(|l| LaneStatus {
                    model: l.model.clone(),
                    bindings: l.lock().affinity.bindings(now),
                })
                .collect();
            PoolStatus {
                id: p.id.clone(),
                models: p.models.clone(),
                accounts,
                lanes,
            }
        })
        .collect();
    let c = &shared.counters;
    RouterStatus {
        pools,
        requests: RequestCounters {
            total: c.requests.load(Ordering::Relaxed),
            served: c.served.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            attempts: c.attempts.load(Ordering::Relaxed),
            failovers: c.failovers.load(Ordering::Relaxed),
            usage_dropped: c.usage_dropped.load(Ordering::Relaxed),
        },
    }
}

fn account_status(
    a: &crate::core::router::UpstreamAccount,
    lanes: &[&Lane],
    now: DateTime<Utc>,
) -> AccountStatus {
    let mut availability = AvailabilityView {
        state: if a.site.is_some() { "noData" } else { "usable" },
        until: None,
    };
    let mut cooldown: Option<CooldownView> = None;
    let mut demoted = false;
    let mut first = true;
    for lane in lanes {
        let Some(i) = lane.accounts.iter().position(|x| x.id == a.id) else {
            continue;
        };
        // Up to the linked snapshots: a round's result shows before the next request.
        let st = lane.lock_fresh();
        if std::mem::take(&mut first)
            && let Some(c) = st.set.candidates().get(i)
        {
            availability = AvailabilityView {
                state: c.availability.as_str(),
                until: c.availability.until(),
            };
        }
        demoted |= st.affinity.is_demoted(i, now);
        if let Some(until) = st.engine.cooldowns.until(i, now)
            && cooldown.as_ref().is_none_or(|c| c.until < until)
        {
            cooldown = Some(CooldownView {
                kind: st.obs.kind(i, now),
                until,
                model: lane.model.clone(),
            });
        }
    }
    AccountStatus {
        id: a.id.clone(),
        tier: a.tier,
        site: a.site.clone(),
        enabled: a.enabled,
        availability,
        cooldown,
        demoted,
    }
}

pub(crate) fn preview(
    shared: &Shared,
    model: &str,
    session: Option<&str>,
) -> Result<RouterPreview, PreviewError> {
    let lanes = shared.lanes.load();
    let legs = lanes.legs(model);
    if legs.is_empty() {
        return Err(PreviewError::UnknownModel(model.to_string()));
    }
    let body = serde_json::json!({ "model": model });
    let key = session.and_then(|s| {
        session_key(&KeyInput {
            header: Some(s),
            body: &body,
            api: Api::ChatCompletions,
            previous_response: None,
        })
    });
    let now = shared.clock.now();
    let legs = legs
        .iter()
        .map(|lane| preview_leg(lane, key, now))
        .collect();
    Ok(RouterPreview {
        model: model.to_string(),
        legs,
    })
}

fn preview_leg(
    lane: &Lane,
    key: Option<crate::core::affinity::SessionKey>,
    now: DateTime<Utc>,
) -> PreviewLeg {
    let mut st = lane.lock_fresh();
    let LaneState {
        set,
        engine,
        affinity,
        obs,
        ranking,
        ..
    } = &mut *st;
    rank(set, engine, now, 0, ranking);
    let bound = key.and_then(|k| affinity.bound(k, now));
    let mut order = ranking.order().to_vec();
    if let Some(b) = bound
        && let Some(at) = order.iter().position(|&i| i == b)
    {
        order[..=at].rotate_right(1);
    }
    let (mut keep, demoted): (Vec<usize>, Vec<usize>) =
        order.iter().partition(|&&i| !affinity.is_demoted(i, now));
    keep.extend(&demoted);
    let id = |i: usize| lane.accounts[i].id.clone();
    let mut excluded: Vec<PreviewExcluded> = ranking
        .excluded(set, engine)
        .map(|e| PreviewExcluded {
            account: id(e.index),
            reason: reason_name(e.exclusion.reason),
            cooldown: (e.exclusion.reason == ExclusionReason::CoolingDown)
                .then(|| obs.kind(e.index, now))
                .flatten(),
            until: e.exclusion.until,
        })
        .collect();
    excluded.extend(demoted.iter().map(|&i| PreviewExcluded {
        account: id(i),
        reason: "demoted",
        cooldown: None,
        until: None,
    }));
    PreviewLeg {
        pool: lane.pool.clone(),
        model: lane.model.clone(),
        ranking: keep.into_iter().map(id).collect(),
        bound: bound.map(id),
        excluded,
    }
}

fn reason_name(r: ExclusionReason) -> &'static str {
    match r {
        ExclusionReason::Pending => "pending",
        ExclusionReason::Exception => "exception",
        ExclusionReason::Unknown => "unknown",
        ExclusionReason::AdminDisabled => "adminDisabled",
        ExclusionReason::Disabled { .. } => "disabled",
        ExclusionReason::Exhausted => "exhausted",
        ExclusionReason::Invalid => "invalid",
        ExclusionReason::Deactivated => "deactivated",
        ExclusionReason::Failing => "failing",
        ExclusionReason::NoData => "noData",
        ExclusionReason::CoolingDown => "coolingDown",
    }
}
