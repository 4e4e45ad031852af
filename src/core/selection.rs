//! The selection engine shared by the patrol's active set and the request router: from a slice
//! of candidates (tier, weight, admin state, availability, a caller's hold) and the engine's own
//! observations (cooldowns with their end) to an ordered ranking of the eligible candidates plus,
//! for every excluded one, the reason and until when. Pure: no I/O, no clock reads (`now` is an
//! argument), no allocation per call beyond the caller-owned [`Ranking`] buffer.
//! Rules: spec/router.md §1 (eligibility order: admin, reported state, cooldown; priority tiers
//! first, a lower tier only when the higher tier is entirely excluded; every exclusion says why
//! and until when; ≤ 2 µs at p99 for 1,000 candidates), spec/patrol.md §6.3 (the active set is
//! the first `priorityMinActiveCount` of this ranking over the priority list).
//!
//! Tier direction: the **lower tier number wins** (tier 1 before tier 2), like the patrol's
//! priority list where position 1 is best. A router whose pools say "higher priority wins" maps
//! its priorities to tiers by negation / `u32::MAX - priority` when it builds its candidates.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::account::{DisableReason, ReasonOwner};
use super::availability::Availability;

/// Admin state of a candidate, set by whoever owns the pool (router.md §1 `adminState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Admin {
    Enabled,
    /// Excluded first, whatever its availability.
    Disabled,
}

/// A caller-supplied exclusion for reasons only the caller knows (patrol.md §6.3: the patrol's
/// pending, exception and unknown accounts), so the patrol and the router share one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Hold {
    /// Not inspected successfully yet (priority list `pendingFirstInspection`).
    Pending,
    /// On the site's exception list: never part of routing.
    Exception,
    /// In the priority list but not in CPA's account list.
    Unknown,
}

/// One candidate. Its identity is its position in the slice given to [`rank`]; the ranking and
/// the cooldowns refer to candidates by that index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Priority tier; **lower wins** (see the module doc). Candidates should come in ascending
    /// tier order (one linear pass); any other order is still ranked correctly, by a sort.
    pub tier: u32,
    /// Optional weight for a weighted spread inside a tier (router.md §1 `weight?`). Carried for
    /// the router; the ranking does not read it yet.
    pub weight: Option<u32>,
    /// Admin state (`Disabled` ⇒ [`ExclusionReason::AdminDisabled`]).
    pub admin: Admin,
    /// The one usability reading (`core::availability::availability`).
    pub availability: Availability,
    /// The caller's own exclusion, checked before anything else; `None` = no hold.
    pub hold: Option<Hold>,
}

/// Why a candidate is excluded (router.md §1 "why not account X").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ExclusionReason {
    /// [`Hold::Pending`].
    Pending,
    /// [`Hold::Exception`].
    Exception,
    /// [`Hold::Unknown`].
    Unknown,
    /// [`Admin::Disabled`].
    AdminDisabled,
    /// Disabled by a person or another tool ([`Availability::Disabled`]).
    Disabled {
        reason: DisableReason,
        owner: ReasonOwner,
    },
    /// Quota exhausted ([`Availability::Exhausted`]); `until` = its reset when known.
    Exhausted,
    /// Credential rejected (401, [`Availability::Invalid`]).
    Invalid,
    /// Workspace or account deactivated (402, [`Availability::Deactivated`]).
    Deactivated,
    /// The last probe failed otherwise ([`Availability::Failing`]).
    Failing,
    /// No long-window quota data ([`Availability::NoData`]).
    NoData,
    /// The engine's own cooldown (router.md §3); `until` = its end.
    CoolingDown,
}

/// An exclusion: why, and until when if the end is known (a quota reset, a cooldown's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Exclusion {
    pub reason: ExclusionReason,
    /// The earliest instant the exclusion may end; `None` = unknown or not time-bound.
    pub until: Option<DateTime<Utc>>,
}

/// One excluded candidate of a [`Ranking`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Excluded {
    /// Index of the candidate in the slice given to [`rank`].
    pub index: usize,
    pub exclusion: Exclusion,
}

/// The engine's cooldowns (router.md §3): candidate index → end of the cooldown. A cooldown
/// excludes while its end lies after `now`; one that ended no longer excludes even before
/// [`Cooldowns::expire`] drops it. Backed by a `Vec` of unix-microsecond ends indexed by
/// candidate index (one integer compare per candidate in [`rank`]); ends are kept to the
/// microsecond.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cooldowns {
    /// Unix microseconds (compared in the hot pass), `NO_END` when none.
    ends: Vec<i64>,
    /// The same ends as given (answered in exclusions without a conversion).
    at: Vec<Option<DateTime<Utc>>>,
    active: usize,
}

/// No cooldown in a [`Cooldowns`] slot.
const NO_END: i64 = i64::MIN;

impl Cooldowns {
    /// Cools candidate `index` down until `until` (replaces an earlier end or a later one: the
    /// latest observation wins).
    pub fn set(&mut self, index: usize, until: DateTime<Utc>) {
        if index >= self.ends.len() {
            self.ends.resize(index + 1, NO_END);
            self.at.resize(index + 1, None);
        }
        self.at[index] = Some(until);
        let end = until.timestamp_micros().max(NO_END + 1);
        if std::mem::replace(&mut self.ends[index], end) == NO_END {
            self.active += 1;
        }
    }

    /// Ends candidate `index`'s cooldown now (e.g. after a success).
    pub fn clear(&mut self, index: usize) {
        if let Some(slot) = self.ends.get_mut(index)
            && std::mem::replace(slot, NO_END) != NO_END
        {
            self.at[index] = None;
            self.active -= 1;
        }
    }

    /// Drops every cooldown that ended at or before `now`; returns how many were dropped.
    pub fn expire(&mut self, now: DateTime<Utc>) -> usize {
        let now = now.timestamp_micros();
        let mut dropped = 0;
        for (slot, at) in self.ends.iter_mut().zip(&mut self.at) {
            if *slot != NO_END && *slot <= now {
                *slot = NO_END;
                *at = None;
                dropped += 1;
            }
        }
        self.active -= dropped;
        dropped
    }

    /// The end of candidate `index`'s cooldown if it is still running at `now`.
    pub fn until(&self, index: usize, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.running(index, now.timestamp_micros())
    }

    /// [`Cooldowns::until`] with `now` in unix microseconds.
    fn running(&self, index: usize, now_us: i64) -> Option<DateTime<Utc>> {
        match self.ends.get(index) {
            Some(&end) if end != NO_END && end > now_us => self.at[index],
            _ => None,
        }
    }

    /// No cooldown recorded (ended ones not yet expired count as recorded).
    pub fn is_empty(&self) -> bool {
        self.active == 0
    }
}

/// The engine's own observations (router.md §1 "the engine's own state"). Bindings, block
/// residency and cache samples (router.md §2) join it with affinity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineState {
    pub cooldowns: Cooldowns,
}

/// The result of [`rank`], owned by the caller and reused across calls (never shrunk, so a
/// warm buffer allocates nothing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ranking {
    /// Slots for every candidate; the first `ranked` are the ranking.
    order: Vec<usize>,
    ranked: usize,
    /// Scratch slots: indexes the first pass set aside as possibly excluded.
    held: Vec<usize>,
    excluded: Vec<Excluded>,
}

impl Ranking {
    /// A buffer for up to `n` candidates without reallocation.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            order: vec![0; n],
            ranked: 0,
            held: vec![0; n],
            excluded: Vec::with_capacity(n),
        }
    }

    /// Eligible candidate indexes, first = preferred; the rest is the fail-over order.
    pub fn order(&self) -> &[usize] {
        &self.order[..self.ranked]
    }

    /// Excluded candidates with their exclusion, in candidate order.
    pub fn excluded(&self) -> &[Excluded] {
        &self.excluded
    }

    /// The preferred candidate, if any is eligible.
    pub fn first(&self) -> Option<usize> {
        self.order().first().copied()
    }

    /// Why candidate `index` is excluded (`None` when it is ranked or unknown). Linear in the
    /// number of exclusions: for "why not X", not for the request path.
    pub fn exclusion_of(&self, index: usize) -> Option<Exclusion> {
        self.excluded
            .iter()
            .find(|e| e.index == index)
            .map(|e| e.exclusion)
    }

    /// Moves the ranked candidate `index` to the front, keeping the others' order; `false` when
    /// it is not ranked (excluded candidates are never promoted). The tool of an [`Affinity`]
    /// (router.md §2.2: a bound account first while it is eligible).
    pub fn promote(&mut self, index: usize) -> bool {
        match self.order().iter().position(|&i| i == index) {
            Some(at) => {
                self.order[..=at].rotate_right(1);
                true
            }
            None => false,
        }
    }

    /// Empties the ranking and makes room for `n` candidates (grows only).
    fn reset(&mut self, n: usize) {
        if self.order.len() < n {
            self.order.resize(n, 0);
            self.held.resize(n, 0);
        }
        self.ranked = 0;
        self.excluded.clear();
    }
}

/// The seam where affinity plugs in (router.md §2): called once at the end of
/// [`rank_with`], after eligibility, tiers and rotation, with the finished ranking. An
/// implementation may only reorder eligible candidates (e.g. [`Ranking::promote`] the account
/// bound to the request's session key, whatever its tier, or spread new sessions over free
/// accounts of the best tier); it must not rank an excluded one. The patrol uses [`NoAffinity`].
pub trait Affinity {
    /// Reorders `ranking` for the request this affinity stands for.
    fn apply(&self, candidates: &[Candidate], ranking: &mut Ranking);
}

/// No affinity: the ranking stays tier order plus rotation (the patrol, key-less requests).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoAffinity;

impl Affinity for NoAffinity {
    fn apply(&self, _candidates: &[Candidate], _ranking: &mut Ranking) {}
}

/// Ranks `candidates` into `out` (cleared first) with no affinity: see [`rank_with`].
pub fn rank(
    candidates: &[Candidate],
    state: &EngineState,
    now: DateTime<Utc>,
    cursor: usize,
    out: &mut Ranking,
) {
    rank_with(candidates, state, now, cursor, &NoAffinity, out);
}

/// Ranks `candidates` into `out` (router.md §1). Eligibility, in order: the caller's hold,
/// admin-disabled, the availability (an `Exhausted` whose `until` is at or before `now` has
/// lapsed and no longer excludes), the engine's cooldown. Eligible candidates are ordered by
/// tier (lower first; equal tiers keep candidate order), then the best tier is rotated left by
/// `cursor % len` (the patrol passes 0: its order is the priority list order), then `affinity`
/// applies. Linear when candidates come in ascending tier order; otherwise one in-place sort.
pub fn rank_with<A: Affinity + ?Sized>(
    candidates: &[Candidate],
    state: &EngineState,
    now: DateTime<Utc>,
    cursor: usize,
    affinity: &A,
    out: &mut Ranking,
) {
    out.reset(candidates.len());
    let (ranked, held, sorted) = split(candidates, &state.cooldowns, now, out);
    let cooldowns = (!state.cooldowns.is_empty()).then_some(&state.cooldowns);
    let now_us = now.timestamp_micros();
    let mut ranked = ranked;
    let mut sorted = sorted;
    for k in 0..held {
        let index = out.held[k];
        match exclusion(&candidates[index], index, cooldowns, now, now_us) {
            Some(exclusion) => out.excluded.push(Excluded { index, exclusion }),
            None => {
                // A lapsed quota reset: eligible after all, ranked by the sort below.
                out.order[ranked] = index;
                ranked += 1;
                sorted = false;
            }
        }
    }
    out.ranked = ranked;
    let order = &mut out.order[..ranked];
    if !sorted {
        // Index as second key: equal tiers keep candidate order without a stable (allocating) sort.
        order.sort_unstable_by_key(|&i| (candidates[i].tier, i));
    }
    if let Some(&first) = order.first() {
        let best = candidates[first].tier;
        let len = order
            .iter()
            .position(|&i| candidates[i].tier != best)
            .unwrap_or(order.len());
        if len > 1 {
            order[..len].rotate_left(cursor % len);
        }
    }
    affinity.apply(candidates, out);
}

/// The hot first pass, without data-dependent branches: every candidate that is plainly
/// eligible (no hold, enabled, `Usable`, not cooling down) goes to `out.order`, every other one
/// to `out.held` for [`exclusion`] to explain. Returns (ranked, held, eligible tiers ascending).
fn split(
    candidates: &[Candidate],
    cooldowns: &Cooldowns,
    now: DateTime<Utc>,
    out: &mut Ranking,
) -> (usize, usize, bool) {
    let now = now.timestamp_micros();
    let ends: &[i64] = if cooldowns.is_empty() {
        &[]
    } else {
        &cooldowns.ends
    };
    let order = &mut out.order[..candidates.len()];
    let held = &mut out.held[..candidates.len()];
    let (mut ranked, mut kept, mut sorted, mut last_tier) = (0usize, 0usize, true, 0u32);
    for (index, c) in candidates.iter().enumerate() {
        let cooling = ends.get(index).is_some_and(|&end| end > now);
        let ok = c.hold.is_none()
            & (c.admin == Admin::Enabled)
            & matches!(c.availability, Availability::Usable)
            & !cooling;
        order[ranked] = index;
        held[kept] = index;
        ranked += usize::from(ok);
        kept += usize::from(!ok);
        sorted &= !ok | (c.tier >= last_tier);
        last_tier = if ok { c.tier } else { last_tier };
    }
    (ranked, kept, sorted)
}

/// Why `c` (at `index`) is excluded, or `None` when it is eligible.
#[inline]
fn exclusion(
    c: &Candidate,
    index: usize,
    cooldowns: Option<&Cooldowns>,
    now: DateTime<Utc>,
    now_us: i64,
) -> Option<Exclusion> {
    let reason = |reason| {
        Some(Exclusion {
            reason,
            until: None,
        })
    };
    if let Some(hold) = c.hold {
        return reason(match hold {
            Hold::Pending => ExclusionReason::Pending,
            Hold::Exception => ExclusionReason::Exception,
            Hold::Unknown => ExclusionReason::Unknown,
        });
    }
    if c.admin == Admin::Disabled {
        return reason(ExclusionReason::AdminDisabled);
    }
    match c.availability {
        Availability::Usable => {}
        Availability::Exhausted { until } => {
            if until.is_none_or(|t| t > now) {
                return Some(Exclusion {
                    reason: ExclusionReason::Exhausted,
                    until,
                });
            }
        }
        Availability::Invalid => return reason(ExclusionReason::Invalid),
        Availability::Deactivated => return reason(ExclusionReason::Deactivated),
        Availability::Failing { .. } => return reason(ExclusionReason::Failing),
        Availability::NoData => return reason(ExclusionReason::NoData),
        Availability::Disabled { reason: r, owner } => {
            return reason(ExclusionReason::Disabled { reason: r, owner });
        }
    }
    let end = cooldowns?.running(index, now_us)?;
    Some(Exclusion {
        reason: ExclusionReason::CoolingDown,
        until: Some(end),
    })
}

/// For a `Retry-After` when nothing is eligible (router.md §4): the earliest known end among
/// the exclusions of `ranking`; `None` when a candidate is eligible (nothing to wait for) or
/// when no exclusion has a known end.
pub fn earliest_until(ranking: &Ranking) -> Option<DateTime<Utc>> {
    if ranking.ranked > 0 {
        return None;
    }
    ranking
        .excluded
        .iter()
        .filter_map(|e| e.exclusion.until)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};
    use proptest::prelude::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn cand(tier: u32, availability: Availability) -> Candidate {
        Candidate {
            tier,
            weight: None,
            admin: Admin::Enabled,
            availability,
            hold: None,
        }
    }

    fn ranked(cs: &[Candidate], state: &EngineState, cursor: usize) -> Ranking {
        let mut r = Ranking::default();
        rank(cs, state, now(), cursor, &mut r);
        r
    }

    #[test]
    fn the_best_tier_comes_first_and_the_cursor_rotates_inside_it_only() {
        let u = Availability::Usable;
        let cs = [cand(2, u), cand(1, u), cand(1, u), cand(1, u), cand(3, u)];
        let state = EngineState::default();
        assert_eq!(ranked(&cs, &state, 0).order(), &[1, 2, 3, 0, 4]);
        assert_eq!(ranked(&cs, &state, 1).order(), &[2, 3, 1, 0, 4]);
        assert_eq!(ranked(&cs, &state, 5).order(), &[3, 1, 2, 0, 4]);
    }

    #[test]
    fn each_exclusion_says_why_and_until_when() {
        let reset = now() + Duration::hours(5);
        let cool = now() + Duration::seconds(30);
        let mut cs = vec![
            cand(1, Availability::Exhausted { until: Some(reset) }),
            cand(1, Availability::Invalid),
            cand(1, Availability::Usable),
            cand(1, Availability::Usable),
            cand(2, Availability::Usable),
        ];
        cs[3].admin = Admin::Disabled;
        cs[4].hold = Some(Hold::Pending);
        let mut state = EngineState::default();
        state.cooldowns.set(2, cool);
        let r = ranked(&cs, &state, 0);
        assert!(r.order().is_empty());
        let why = |i| r.exclusion_of(i).unwrap();
        assert_eq!(why(0).reason, ExclusionReason::Exhausted);
        assert_eq!(why(0).until, Some(reset));
        assert_eq!(why(1).reason, ExclusionReason::Invalid);
        assert_eq!(why(2).reason, ExclusionReason::CoolingDown);
        assert_eq!(why(2).until, Some(cool));
        assert_eq!(why(3).reason, ExclusionReason::AdminDisabled);
        assert_eq!(why(4).reason, ExclusionReason::Pending);
        assert_eq!(earliest_until(&r), Some(cool));
        // Once the cooldown ended the account is back, and nothing is left to wait for.
        let later = now() + Duration::minutes(1);
        let mut r2 = Ranking::default();
        rank(&cs, &state, later, 0, &mut r2);
        assert_eq!(r2.order(), &[2]);
        assert_eq!(earliest_until(&r2), None);
    }

    #[test]
    fn a_lapsed_quota_reset_no_longer_excludes_but_an_unknown_one_does() {
        let past = now() - Duration::minutes(1);
        let cs = [
            cand(1, Availability::Exhausted { until: Some(past) }),
            cand(1, Availability::Exhausted { until: None }),
        ];
        let r = ranked(&cs, &EngineState::default(), 0);
        assert_eq!(r.order(), &[0]);
        assert_eq!(r.exclusion_of(1).map(|e| e.until), Some(None));
    }

    #[test]
    fn cooldowns_set_clear_and_expire() {
        let mut c = Cooldowns::default();
        assert!(c.is_empty());
        c.set(3, now() + Duration::seconds(10));
        c.set(1, now() + Duration::seconds(100));
        c.set(3, now() + Duration::seconds(5));
        assert_eq!(c.until(3, now()), Some(now() + Duration::seconds(5)));
        assert_eq!(c.until(3, now() + Duration::seconds(5)), None, "ended");
        assert_eq!(c.until(7, now()), None);
        assert_eq!(c.expire(now() + Duration::seconds(6)), 1);
        assert!(!c.is_empty());
        c.clear(1);
        c.clear(1);
        assert!(c.is_empty());
    }

    #[test]
    fn promote_moves_only_a_ranked_candidate() {
        let u = Availability::Usable;
        let cs = [
            cand(1, u),
            cand(1, Availability::NoData),
            cand(2, u),
            cand(3, u),
        ];
        let mut r = ranked(&cs, &EngineState::default(), 0);
        assert!(!r.promote(1), "excluded: never promoted");
        assert!(r.promote(3));
        assert_eq!(r.order(), &[3, 0, 2]);
    }

    #[test]
    fn a_warm_buffer_is_reused_without_growing() {
        let cs: Vec<Candidate> = (0..100)
            .map(|i| cand(i % 4, Availability::Usable))
            .collect();
        let mut r = Ranking::with_capacity(cs.len());
        let (po, pe) = (r.order.as_ptr(), r.excluded.as_ptr());
        for cursor in 0..3 {
            rank(&cs, &EngineState::default(), now(), cursor, &mut r);
        }
        assert_eq!(r.order().len(), 100);
        assert_eq!((po, pe), (r.order.as_ptr(), r.excluded.as_ptr()));
    }

    fn availability() -> impl Strategy<Value = Availability> {
        let at = |m: i64| now() + Duration::minutes(m);
        prop_oneof![
            4 => Just(Availability::Usable),
            1 => (-30i64..600).prop_map(move |m| Availability::Exhausted { until: Some(at(m)) }),
            1 => Just(Availability::Exhausted { until: None }),
            1 => Just(Availability::Invalid),
            1 => Just(Availability::Deactivated),
            1 => Just(Availability::Failing { since: None }),
            1 => Just(Availability::NoData),
            1 => Just(Availability::Disabled {
                reason: DisableReason::ManualDisabled,
                owner: ReasonOwner::Manual
            }),
        ]
    }

    fn candidate() -> impl Strategy<Value = Candidate> {
        let hold = prop_oneof![
            6 => Just(None),
            1 => Just(Some(Hold::Pending)),
            1 => Just(Some(Hold::Exception)),
            1 => Just(Some(Hold::Unknown)),
        ];
        (
            0u32..4,
            any::<bool>(),
            availability(),
            hold,
            any::<Option<u32>>(),
        )
            .prop_map(|(tier, disabled, availability, hold, weight)| Candidate {
                tier,
                weight,
                admin: if disabled && tier == 0 {
                    Admin::Disabled
                } else {
                    Admin::Enabled
                },
                availability,
                hold,
            })
    }

    /// Whether the rules of the module doc exclude `c` (written from the spec, not the code).
    fn should_exclude(c: &Candidate, cooling: Option<DateTime<Utc>>) -> bool {
        c.hold.is_some()
            || c.admin == Admin::Disabled
            || match c.availability {
                Availability::Usable => false,
                Availability::Exhausted { until } => until.is_none_or(|t| t > now()),
                _ => true,
            }
            || cooling.is_some_and(|t| t > now())
    }

    proptest! {
        #[test]
        fn the_ranking_honours_exclusions_and_tiers(
            mut cs in proptest::collection::vec(candidate(), 0..60),
            cools in proptest::collection::vec((0usize..60, -5i64..120), 0..10),
            cursor in 0usize..100,
            shuffle in any::<bool>(),
        ) {
            if !shuffle {
                cs.sort_by_key(|c| c.tier);
            }
            let mut state = EngineState::default();
            for (i, secs) in &cools {
                state.cooldowns.set(*i, now() + Duration::seconds(*secs));
            }
            let r = ranked(&cs, &state, cursor);
            let excluded: Vec<usize> = r.excluded().iter().map(|e| e.index).collect();
            for (i, c) in cs.iter().enumerate() {
                let cooling = state.cooldowns.until(i, now());
                let expected = should_exclude(c, cooling);
                prop_assert_eq!(excluded.contains(&i), expected, "candidate {} {:?}", i, c);
                prop_assert!(!(expected && r.order().contains(&i)), "an excluded candidate is never ranked");
            }
            // The ranking is a permutation of the eligible candidates.
            let mut sorted = r.order().to_vec();
            sorted.sort_unstable();
            let eligible: Vec<usize> = (0..cs.len()).filter(|i| !excluded.contains(i)).collect();
            prop_assert_eq!(sorted, eligible);
            // A lower tier only when every better-tier candidate is excluded or ranked before it.
            for (pos, &i) in r.order().iter().enumerate() {
                for (j, other) in cs.iter().enumerate() {
                    if other.tier < cs[i].tier {
                        prop_assert!(excluded.contains(&j) || r.order()[..pos].contains(&j));
                    }
                }
            }
            // Every exclusion has a reason; a quota one carries its known reset, a cooldown its end.
            for e in r.excluded() {
                match (e.exclusion.reason, cs[e.index].availability) {
                    (ExclusionReason::Exhausted, Availability::Exhausted { until }) => {
                        prop_assert_eq!(e.exclusion.until, until);
                    }
                    (ExclusionReason::Exhausted, a) => prop_assert!(false, "exhausted from {:?}", a),
                    (ExclusionReason::CoolingDown, _) => prop_assert!(e.exclusion.until.is_some_and(|t| t > now())),
                    _ => prop_assert_eq!(e.exclusion.until, None),
                }
            }
            if r.order().is_empty() {
                prop_assert_eq!(earliest_until(&r), r.excluded().iter().filter_map(|e| e.exclusion.until).min());
            }
        }
    }
}
