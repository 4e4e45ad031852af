//! What finishing a request records, whether the attempt loop finishes it (a complete answer,
//! a failed attempt) or the streaming pass-through does when its body is dropped (router.md
//! §2.2, §3): a failure's cooldowns on the lane, the pool throttle and the account's other
//! lanes of its pool, the affinity's view of it; a success's binding, cache sample and
//! Responses id link; the reported [`Tokens`] copied into the usage record; and the metric
//! labels of cooldown kinds and affinity choices. Must not: hold a lane lock across an
//! `.await` (nothing here awaits) or lock two lanes at once.

use chrono::{DateTime, Utc};

use super::Shared;
use super::lanes::{Lane, LaneState, Lanes};
use crate::core::affinity::{AffinityChoice, SessionKey};
use crate::core::failure::{CooldownKind, FailureClass, Scope, Verdict};
use crate::core::router::UsageRecord;

/// Tokens an upstream reported (docs/rules/router.md §2.3, §5 usage): prompt, completion, cached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tokens {
    pub prompt: u64,
    pub completion: u64,
    pub cached: u64,
}

/// Records a failed attempt (docs/rules/router.md §3): the lane's cooldown; the pool throttle (every
/// account of the lane a plain 429 within 2 s ⇒ every lane of the pool cools down as a whole,
/// [`cool_pool`]); the affinity, told whether this leaves `index` briefly excluded (router.md
/// §2.2: a session bound to `index` keeps its binding, else the account that serves the
/// request takes it); and for an account-wide quota, session_dead or rate limit the same
/// cooldown on the account's other lanes of its pool. Locks one lane at a time.
pub(crate) fn record_failure(
    shared: &Shared,
    lanes: &Lanes,
    lane: &Lane,
    index: usize,
    key: Option<SessionKey>,
    verdict: &Verdict,
    now: DateTime<Utc>,
) {
    let jitter = shared.random.fraction();
    let (until, throttled) = {
        let mut st = lane.lock();
        let LaneState {
            engine,
            affinity,
            obs,
            throttle,
            ..
        } = &mut *st;
        let until = obs.observe(index, verdict, now, jitter, engine);
        let throttled = (verdict.class == FailureClass::RateLimit)
            .then(|| throttle.rate_limited(index, verdict.retry_after, now))
            .flatten()
            .map(|pause| now + pause);
        // The session bound to `index` keeps its binding only when this leaves `index` briefly
        // excluded (docs/rules/router.md §2.2): judged on its running cooldown (the latest of its kinds: a
        // short 429 never shortens a longer exclusion) and the pool throttle about to start.
        let excluded_until = obs.until(index, now).max(throttled);
        let brief_kind = super::lanes::brief_kind(obs.kind(index, now));
        let exclusion = affinity.failure_exclusion(brief_kind, excluded_until, now);
        affinity.record_failure(key, index, exclusion, now);
        (until, throttled)
    };
    if let Some(end) = throttled {
        cool_pool(lanes, &lane.pool, end);
    }
    let Some(kind) = CooldownKind::of(verdict.class) else {
        return;
    };
    metrics::counter!("quota_patrol_router_exclusions_total", "reason" => kind_name(kind))
        .increment(1);
    let account_wide = verdict.scope == Scope::Account
        && matches!(
            verdict.class,
            FailureClass::Quota | FailureClass::SessionDead | FailureClass::RateLimit
        );
    if let (true, Some(until)) = (account_wide, until) {
        for (other, j) in lanes.siblings(lane, &lane.accounts[index].id) {
            let mut st = other.lock();
            let LaneState { obs, engine, .. } = &mut *st;
            obs.cool(j, kind, until, engine);
        }
    }
}

/// The pool throttle (docs/rules/router.md §3 "cool the pool down as a whole"): every account of every
/// lane of `pool` (all its models) cools down with `PoolThrottle` until `end`. Locks one lane
/// at a time.
fn cool_pool(lanes: &Lanes, pool: &str, end: DateTime<Utc>) {
    for other in lanes.by_leg.values().filter(|l| l.pool == pool) {
        let mut st = other.lock();
        let LaneState { obs, engine, .. } = &mut *st;
        for i in 0..other.accounts.len() {
            obs.cool(i, CooldownKind::PoolThrottle, end, engine);
        }
    }
    metrics::counter!("quota_patrol_router_pool_throttles_total").increment(1);
}

/// The metric label of an affinity choice (`quota_patrol_router_affinity_total{choice}`).
pub(crate) fn choice_name(choice: AffinityChoice) -> &'static str {
    match choice {
        AffinityChoice::Bound => "bound",
        AffinityChoice::KeptBriefExclusion => "kept_brief_exclusion",
        AffinityChoice::Rebound => "rebound",
        AffinityChoice::Fresh => "fresh",
        AffinityChoice::Shared => "shared",
        AffinityChoice::Block => "block",
        AffinityChoice::NoCandidate => "no_candidate",
    }
}

/// Every affinity choice, for registering its counter at start.
pub(crate) const CHOICES: [AffinityChoice; 7] = [
    AffinityChoice::Bound,
    AffinityChoice::KeptBriefExclusion,
    AffinityChoice::Rebound,
    AffinityChoice::Fresh,
    AffinityChoice::Shared,
    AffinityChoice::Block,
    AffinityChoice::NoCandidate,
];

/// The metric label of a cooldown kind.
pub(crate) fn kind_name(kind: CooldownKind) -> &'static str {
    match kind {
        CooldownKind::Quota => "quota",
        CooldownKind::RateLimit => "rate_limit",
        CooldownKind::SessionDead => "session_dead",
        CooldownKind::Transient => "transient",
        CooldownKind::PoolThrottle => "pool_throttle",
    }
}

/// Records a served request on the lane: affinity (binding, cache sample), cache metrics and
/// the Responses id link.
pub(crate) fn finish_success(
    shared: &Shared,
    lane: &Lane,
    index: usize,
    key: Option<SessionKey>,
    tokens: Tokens,
    response_id: Option<&str>,
    now: DateTime<Utc>,
) {
    let hit = tokens.cached > 0;
    lane.lock().affinity.record_success(key, index, hit, now);
    let hot = shared.hot();
    hot.cache_samples.increment(1);
    if hit {
        hot.cache_hits.increment(1);
    }
    if let (Some(id), Some(key)) = (response_id, key) {
        shared.links.lock().expect("links lock").link(id, key);
    }
}

/// Copies reported tokens into a record.
pub(crate) fn set_tokens(record: &mut UsageRecord, t: Tokens) {
    record.prompt_tokens = t.prompt;
    record.completion_tokens = t.completion;
    record.cached_tokens = t.cached;
}
