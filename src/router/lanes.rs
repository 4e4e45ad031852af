//! Lanes: one per (pool, model) — the pool's accounts that serve the model, in tier order,
//! with the engine state of that lane behind one `Mutex` (never held across an `.await`): the
//! prepared `CandidateSet`, cooldowns, affinity, observations, the throttle detector and a
//! reusable `Ranking`. The candidate set is rebuilt when the spec reloads or a linked site's
//! published snapshot changes version (docs/rules/router.md §4 patrol link). Also the parsing of an
//! account's upstream endpoints, done once per lane build.

use std::sync::{Arc, Mutex, MutexGuard};

use axum::http::{HeaderValue, Uri};
use chrono::{DateTime, Utc};
use secrecy::ExposeSecret;

use super::{FeedSource, LaneMap};
use crate::core::affinity::{AffinityChoice, AffinityConfig, LaneAffinity, SessionKey};
use crate::core::availability::Availability;
use crate::core::failure::{CooldownKind, ExcludedEnd, Observations, ThrottleDetector};
use crate::core::pool::{PoolFeed, PoolSnapshot};
use crate::core::router::{Leg, RouterSpec, UpstreamAccount};
use crate::core::selection::{
    Admin, Candidate, CandidateSet, EngineState, ExclusionReason, Ranking,
};

/// Every lane of one spec.
pub(crate) struct Lanes {
    pub spec: Arc<RouterSpec>,
    pub by_leg: LaneMap,
    /// Client model name → its lanes in leg order (resolved once per spec, not per request).
    by_model: std::collections::HashMap<String, Vec<Arc<Lane>>>,
}

impl Lanes {
    /// One lane per (pool, model served by at least the pool); a lane of `old` whose accounts
    /// are identical is kept with its state.
    pub fn build(
        spec: RouterSpec,
        affinity: &AffinityConfig,
        feeds: &FeedSource,
        old: Option<&Lanes>,
    ) -> Self {
        let mut by_leg = LaneMap::new();
        for pool in &spec.pools {
            for model in &pool.models {
                let mut accounts: Vec<&UpstreamAccount> = spec
                    .accounts
                    .iter()
                    .filter(|a| a.pool == pool.id && a.serves(model))
                    .collect();
                accounts.sort_by_key(|a| a.tier);
                let key = (pool.id.clone(), model.clone());
                let sig: Vec<String> = accounts.iter().map(|a| signature(a)).collect();
                let kept = old
                    .and_then(|o| o.by_leg.get(&key))
                    .filter(|l| l.signature == sig)
                    .cloned();
                let lane = kept.unwrap_or_else(|| {
                    Arc::new(Lane::new(&pool.id, model, &accounts, sig, affinity, feeds))
                });
                by_leg.insert(key, lane);
            }
        }
        let names = spec
            .chains
            .iter()
            .map(|c| c.name.clone())
            .chain(spec.pools.iter().flat_map(|p| p.models.iter().cloned()));
        let by_model = names
            .map(|name| {
                let lanes = spec
                    .legs_for(&name)
                    .iter()
                    .filter_map(|Leg { pool, model }| by_leg.get(&(pool.clone(), model.clone())))
                    .cloned()
                    .collect();
                (name, lanes)
            })
            .collect();
        Self {
            spec: Arc::new(spec),
            by_leg,
            by_model,
        }
    }

    /// The lanes a client model name stands for (chain legs, else every pool serving it);
    /// empty = unknown model.
    pub fn legs(&self, model: &str) -> &[Arc<Lane>] {
        self.by_model.get(model).map_or(&[], Vec::as_slice)
    }

    /// Other lanes of `pool` holding account `id`, with its index there (account-wide effects).
    pub fn siblings<'a>(
        &'a self,
        lane: &'a Lane,
        id: &'a str,
    ) -> impl Iterator<Item = (&'a Arc<Lane>, usize)> + 'a {
        self.by_leg
            .values()
            .filter(move |l| l.pool == lane.pool && !std::ptr::eq(l.as_ref(), lane))
            .filter_map(move |l| l.accounts.iter().position(|a| a.id == id).map(|i| (l, i)))
    }
}

/// What identifies an account for lane reuse across reloads (the key by its hash only).
fn signature(a: &UpstreamAccount) -> String {
    let key = a
        .api_key
        .as_ref()
        .map(|k| crate::core::router::key_hash(k.expose_secret()))
        .unwrap_or_default();
    format!(
        "{}|{}|{}|{}|{:?}|{:?}|{key}",
        a.id, a.base_url, a.tier, a.enabled, a.site, a.weight
    )
}

/// One upstream account as a lane uses it.
pub(crate) struct LaneAccount {
    pub id: String,
    pub tier: u32,
    pub weight: Option<u32>,
    pub enabled: bool,
    /// `{base}/chat/completions`, `{base}/responses`, `{base}/responses/compact`, parsed once
    /// (a URL parse per request was ~5 % of the router's CPU); `None` when the base does not
    /// parse (every attempt is then a transport failure, as before).
    pub chat_url: Option<Uri>,
    pub responses_url: Option<Uri>,
    pub compact_url: Option<Uri>,
    /// `Bearer <key>`, marked sensitive (never logged by hyper).
    pub authorization: Option<HeaderValue>,
    /// The linked site's published pool.
    pub feed: Option<Arc<dyn PoolFeed>>,
}

/// One (pool, model).
pub(crate) struct Lane {
    pub pool: String,
    pub model: String,
    pub accounts: Vec<LaneAccount>,
    signature: Vec<String>,
    state: Mutex<LaneState>,
}

/// The mutable part of a lane (behind its lock).
pub(crate) struct LaneState {
    pub set: CandidateSet,
    /// Per account: the version of the linked snapshot `set` was built from (0 = none).
    pub versions: Vec<u64>,
    pub engine: EngineState,
    pub affinity: LaneAffinity,
    pub obs: Observations,
    pub throttle: ThrottleDetector,
    pub ranking: Ranking,
}

/// The ranking of one request on one lane, copied out of the lock.
pub(crate) struct Plan {
    /// Candidate indexes, first = preferred; the rest is the fail-over order.
    pub order: Vec<usize>,
    pub choice: AffinityChoice,
}

impl Lane {
    fn new(
        pool: &str,
        model: &str,
        accounts: &[&UpstreamAccount],
        signature: Vec<String>,
        affinity: &AffinityConfig,
        feeds: &FeedSource,
    ) -> Self {
        let accounts: Vec<LaneAccount> = accounts
            .iter()
            .map(|a| LaneAccount {
                id: a.id.clone(),
                tier: a.tier,
                weight: a.weight,
                enabled: a.enabled,
                chat_url: endpoint(&format!("{}/chat/completions", a.base_url)),
                responses_url: endpoint(&format!("{}/responses", a.base_url)),
                compact_url: endpoint(&format!("{}/responses/compact", a.base_url)),
                authorization: a.api_key.as_ref().and_then(|k| {
                    let mut v =
                        HeaderValue::from_str(&format!("Bearer {}", k.expose_secret())).ok()?;
                    v.set_sensitive(true);
                    Some(v)
                }),
                feed: a.site.as_deref().map(|s| feeds(s)),
            })
            .collect();
        let n = accounts.len();
        let mut state = LaneState {
            set: CandidateSet::default(),
            versions: vec![u64::MAX; n],
            engine: EngineState::default(),
            affinity: LaneAffinity::new(*affinity, n),
            obs: Observations::new(n),
            throttle: ThrottleDetector::new(n),
            ranking: Ranking::with_capacity(n),
        };
        let snapshots = Self::snapshots(&accounts);
        refresh(&accounts, &mut state, &snapshots, true);
        Self {
            pool: pool.into(),
            model: model.into(),
            accounts,
            signature,
            state: Mutex::new(state),
        }
    }

    /// The lane's state, locked (never hold it across an `.await`).
    pub fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.state.lock().expect("lane lock")
    }

    /// The lane's state brought up to the linked snapshots first: what the next request would
    /// rank from (snapshots loaded before the lock is taken).
    pub fn lock_fresh(&self) -> MutexGuard<'_, LaneState> {
        let snapshots = Self::snapshots(&self.accounts);
        let mut st = self.lock();
        refresh(&self.accounts, &mut st, &snapshots, false);
        st
    }

    /// Loads the linked snapshots (lock-free loads, before taking the lane lock); empty (no
    /// allocation) when no account of the lane is linked.
    fn snapshots(accounts: &[LaneAccount]) -> Vec<Option<Arc<PoolSnapshot>>> {
        if accounts.iter().all(|a| a.feed.is_none()) {
            return Vec::new();
        }
        accounts
            .iter()
            .map(|a| a.feed.as_ref().and_then(|f| f.current()))
            .collect()
    }

    /// Ranks one request: refreshes the candidates from the linked snapshots when a version
    /// changed, then `LaneAffinity::rank` (which may bind `key` at once, docs/rules/router.md §2.2).
    pub fn plan(&self, key: Option<SessionKey>, now: DateTime<Utc>) -> Plan {
        let mut st = self.lock_fresh();
        let LaneState {
            set,
            engine,
            affinity,
            ranking,
            obs,
            ..
        } = &mut *st;
        let obs = &*obs;
        let brief_kind = |i: usize| brief_kind(obs.kind(i, now));
        let choice = affinity.rank_judged(set, engine, key, now, &brief_kind, ranking);
        Plan {
            order: ranking.order().to_vec(),
            choice,
        }
    }

    /// Whether account `index` has a router cooldown running at `now` (set after a ranking).
    pub fn cooling(&self, index: usize, now: DateTime<Utc>) -> bool {
        self.lock().engine.cooldowns.until(index, now).is_some()
    }

    /// Every exclusion of this lane at `now`, as the all-excluded answer reads them
    /// (docs/rules/router.md §4): quota = exhausted by the patrol link or a quota cooldown. Empty when a
    /// candidate is eligible.
    pub fn exclusions(&self, now: DateTime<Utc>) -> Option<Vec<ExcludedEnd>> {
        let mut st = self.lock_fresh();
        let LaneState {
            set,
            engine,
            ranking,
            obs,
            ..
        } = &mut *st;
        crate::core::selection::rank(set, engine, now, 0, ranking);
        if ranking.first().is_some() {
            return None;
        }
        Some(
            ranking
                .excluded(set, engine)
                .map(|e| ExcludedEnd {
                    quota: match e.exclusion.reason {
                        ExclusionReason::Exhausted => true,
                        ExclusionReason::CoolingDown => {
                            obs.kind(e.index, now) == Some(CooldownKind::Quota)
                        }
                        _ => false,
                    },
                    until: e.exclusion.until,
                })
                .collect(),
        )
    }
}

/// Whether a running cooldown of this kind may count as a brief exclusion that keeps a session's
/// binding (docs/rules/router.md §2.2: rate_limit / transient; the pool throttle is an IP-level rate limit).
/// A quota or session_dead cooldown re-binds whatever its length. Read when ranking (a bound
/// account's cooldown) and when recording a failure (`outcome::record_failure`).
pub(crate) fn brief_kind(kind: Option<CooldownKind>) -> bool {
    matches!(
        kind,
        Some(CooldownKind::RateLimit | CooldownKind::Transient | CooldownKind::PoolThrottle)
    )
}

/// Rebuilds `st.set` when `force` or a linked snapshot's version changed; a fresh snapshot
/// showing its site usable clears that account's quota cooldown early (docs/rules/router.md §3).
fn refresh(
    accounts: &[LaneAccount],
    st: &mut LaneState,
    snapshots: &[Option<Arc<PoolSnapshot>>],
    force: bool,
) {
    let version = |s: &Option<Arc<PoolSnapshot>>| s.as_ref().map_or(0, |s| s.version);
    let changed = snapshots
        .iter()
        .zip(&st.versions)
        .zip(accounts)
        .any(|((s, &v), a)| a.feed.is_some() && version(s) != v);
    if !force && !changed {
        return;
    }
    let mut candidates = Vec::with_capacity(accounts.len());
    for (i, a) in accounts.iter().enumerate() {
        let snap = snapshots.get(i).unwrap_or(&None);
        let availability = match (&a.feed, snap) {
            (None, _) => Availability::Usable,
            (Some(_), None) => Availability::NoData,
            (Some(_), Some(s)) if s.counts.usable > 0 => Availability::Usable,
            (Some(_), Some(s)) => Availability::Exhausted {
                until: s.usable_until,
            },
        };
        if a.feed.is_some() && version(snap) != st.versions[i] && availability.is_usable() {
            st.obs.clear_quota(i, &mut st.engine);
        }
        st.versions[i] = version(snap);
        candidates.push(Candidate {
            tier: a.tier,
            weight: a.weight,
            admin: if a.enabled {
                Admin::Enabled
            } else {
                Admin::Disabled
            },
            availability,
            hold: None,
        });
    }
    st.set = CandidateSet::new(candidates);
}

/// Parses an upstream endpoint (`{base}/chat/completions`); `None` unless it is an absolute
/// `http` or `https` URI (an attempt to it is then a transport failure).
pub(crate) fn endpoint(url: &str) -> Option<Uri> {
    let uri: Uri = url.parse().ok()?;
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    (scheme_ok && uri.authority().is_some()).then_some(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_an_absolute_http_or_https_uri() {
        let ok = endpoint("https://api.openai.com/v1/chat/completions").expect("https");
        assert_eq!(ok.host(), Some("api.openai.com"));
        assert_eq!(ok.path(), "/v1/chat/completions");
        assert!(endpoint("http://127.0.0.1:8317/v1/responses").is_some());
        for bad in [
            "ftp://host/v1",
            "/v1/chat/completions",
            "not a url",
            "http:///v1",
        ] {
            assert!(endpoint(bad).is_none(), "{bad} must not parse");
        }
    }
}
