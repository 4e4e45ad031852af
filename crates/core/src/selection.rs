//! The selection engine shared by the patrol's active set and the request router: from a slice
//! of candidates (tier, weight, admin state, availability, a caller's hold) and the engine's own
//! observations (cooldowns with their end) to an ordered ranking of the eligible candidates plus,
//! for every excluded one, the reason and until when. Pure: no I/O, no clock reads (`now` is an
//! argument), no allocation per call beyond the caller-owned [`Ranking`] buffer.
//! Rules: docs/rules/router.md §1 (eligibility order: admin, reported state, cooldown; priority tiers
//! first, a lower tier only when the higher tier is entirely excluded; every exclusion says why
//! and until when; ≤ 2 µs at p99 for 1,000 candidates), docs/rules/patrol.md §6.3 (the active set is
//! the first `priorityMinActiveCount` of this ranking over the priority list).
//!
//! Tier direction: the **lower tier number wins** (tier 1 before tier 2), like the patrol's
//! priority list where position 1 is best. A router whose pools say "higher priority wins" maps
//! its priorities to tiers by negation / `u32::MAX - priority` when it builds its candidates.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::account::{DisableReason, ReasonOwner};
use super::availability::Availability;

/// Admin state of a candidate, set by whoever owns the pool (docs/rules/router.md §1 `adminState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Admin {
    Enabled,
    /// Excluded first, whatever its availability.
    Disabled,
}

/// A caller-supplied exclusion for reasons only the caller knows (docs/rules/patrol.md §6.3: the patrol's
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
    /// Optional weight for a weighted spread inside a tier (docs/rules/router.md §1 `weight?`). Carried for
    /// the router; the ranking does not read it yet.
    pub weight: Option<u32>,
    /// Admin state (`Disabled` ⇒ [`ExclusionReason::AdminDisabled`]).
    pub admin: Admin,
    /// The one usability reading (`core::availability::availability`).
    pub availability: Availability,
    /// The caller's own exclusion, checked before anything else; `None` = no hold.
    pub hold: Option<Hold>,
}

/// Why a candidate is excluded (docs/rules/router.md §1 "why not account X").
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
    /// The engine's own cooldown (docs/rules/router.md §3); `until` = its end.
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

/// The engine's cooldowns (docs/rules/router.md §3): candidate index → end of the cooldown. A cooldown
/// excludes while its end lies after `now`; one that ended no longer excludes even before
/// [`Cooldowns::expire`] drops it. Backed by a `Vec` of unix-microsecond ends indexed by
/// candidate index (one integer compare per candidate in [`rank`]); ends are kept to the
/// microsecond and answered as instants only when asked ([`Cooldowns::until`], exclusions).
/// A bit set beside the ends marks the candidates with an end recorded, so that a ranking
/// looks only at those (64 candidates per word) instead of comparing every end.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cooldowns {
    /// Unix microseconds (compared in the hot pass), `NO_END` when none.
    ends: Vec<i64>,
    /// Bit `i % 64` of word `i / 64` set ⇔ `ends[i] != NO_END`.
    recorded: Vec<u64>,
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
            self.recorded.resize(index / 64 + 1, 0);
        }
        let end = until.timestamp_micros().max(NO_END + 1);
        if std::mem::replace(&mut self.ends[index], end) == NO_END {
            self.active += 1;
            self.recorded[index / 64] |= 1 << (index % 64);
        }
    }

    /// Ends candidate `index`'s cooldown now (e.g. after a success).
    pub fn clear(&mut self, index: usize) {
        if let Some(slot) = self.ends.get_mut(index)
            && std::mem::replace(slot, NO_END) != NO_END
        {
            self.active -= 1;
            self.recorded[index / 64] &= !(1 << (index % 64));
        }
    }

    /// Drops every cooldown that ended at or before `now`; returns how many were dropped.
    pub fn expire(&mut self, now: DateTime<Utc>) -> usize {
        let now = now.timestamp_micros();
        let mut dropped = 0;
        for (index, slot) in self.ends.iter_mut().enumerate() {
            if *slot != NO_END && *slot <= now {
                *slot = NO_END;
                self.recorded[index / 64] &= !(1 << (index % 64));
                dropped += 1;
            }
        }
        self.active -= dropped;
        dropped
    }

    /// The end of candidate `index`'s cooldown if it is still running at `now`.
    pub fn until(&self, index: usize, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let end = self.end_of(index);
        (end > now.timestamp_micros())
            .then(|| instant(end))
            .flatten()
    }

    /// Candidate `index`'s cooldown end in unix microseconds, `NO_END` when none.
    fn end_of(&self, index: usize) -> i64 {
        self.ends.get(index).copied().unwrap_or(NO_END)
    }

    /// No cooldown recorded (ended ones not yet expired count as recorded).
    pub fn is_empty(&self) -> bool {
        self.active == 0
    }
}

/// The engine's own observations (docs/rules/router.md §1 "the engine's own state"). Bindings, block
/// residency and cache samples (docs/rules/router.md §2) join it with affinity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineState {
    pub cooldowns: Cooldowns,
}

/// The candidates of one pool, prepared once for many [`rank`] calls (docs/rules/router.md §1: the
/// per-request path allocates nothing and reads each candidate once). Built when the pool
/// changes — a published pool snapshot, a router config reload, the patrol's priority list —
/// not per request. Holds the candidates in caller order (a candidate's identity is its index
/// there) and, by tier order (lower tier first, equal tiers in candidate order): the instant each
/// candidate's own state stops excluding it (`i64::MIN` when usable now, a quota reset for an
/// exhausted one with a known reset, `i64::MAX` otherwise) and its exclusion; and, for the hot
/// pass, the bits (64 per word) of the candidates whose own state never excludes them and the
/// list of those excluded until a known instant, so that a ranking costs a few instructions per
/// 64 candidates plus one compare per timed or cooled-down candidate and one store per ranked
/// slot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CandidateSet {
    candidates: Vec<Candidate>,
    /// Tier-order position → candidate index.
    by_tier: Vec<usize>,
    /// Tier-order position → unix microseconds from which its own state no longer excludes it.
    ready_at: Vec<i64>,
    /// Tier-order position → end (exclusive position) of its tier's run.
    tier_end: Vec<usize>,
    /// Tier-order position → the candidate's index and its own exclusion (hold, admin or
    /// availability), which holds while `ready_at` lies after `now`; a usable candidate carries
    /// a placeholder only a cooldown replaces.
    own_by_tier: Vec<Excluded>,
    /// `by_tier` is the identity (candidates came in ascending tier order).
    in_order: bool,
    /// Tier-order position bits (64 per word) of the candidates whose own state never
    /// excludes them (`ready_at == i64::MIN`).
    usable: Vec<u64>,
    /// The candidates whose own state excludes them until a known instant (an exhausted
    /// account with a known reset), by ascending tier-order position: (that instant in unix
    /// microseconds, the position). The only ones a ranking compares to `now` besides the
    /// cooled-down ones.
    timed: Vec<(i64, usize)>,
    /// Word `w` of `usable` → the first entry of `timed` at or after position `64 * w`
    /// (one more entry at the end: `timed.len()`).
    timed_from: Vec<usize>,
}

/// Never eligible by its own state (excluded until something republishes it).
const NEVER: i64 = i64::MAX;

impl CandidateSet {
    /// Prepares `candidates` (any order; ascending tiers skip a sort).
    pub fn new(candidates: Vec<Candidate>) -> Self {
        let mut by_tier: Vec<usize> = (0..candidates.len()).collect();
        let in_order = candidates.windows(2).all(|w| w[0].tier <= w[1].tier);
        if !in_order {
            by_tier.sort_by_key(|&i| (candidates[i].tier, i));
        }
        let own: Vec<Option<Exclusion>> = candidates.iter().map(own_exclusion).collect();
        let ready_at: Vec<i64> = by_tier
            .iter()
            .map(|&i| match own[i] {
                None => i64::MIN,
                Some(Exclusion {
                    reason: ExclusionReason::Exhausted,
                    until: Some(t),
                }) => t.timestamp_micros(),
                Some(_) => NEVER,
            })
            .collect();
        let mut tier_end = vec![0; by_tier.len()];
        let mut end = by_tier.len();
        for k in (0..by_tier.len()).rev() {
            if k + 1 < by_tier.len()
                && candidates[by_tier[k]].tier != candidates[by_tier[k + 1]].tier
            {
                end = k + 1;
            }
            tier_end[k] = end;
        }
        let own_by_tier = by_tier
            .iter()
            .map(|&index| Excluded {
                index,
                exclusion: own[index].unwrap_or(Exclusion {
                    reason: ExclusionReason::CoolingDown,
                    until: None,
                }),
            })
            .collect();
        let words = ready_at.len().div_ceil(64);
        let mut usable = vec![0u64; words];
        let mut timed = Vec::new();
        let mut timed_from = Vec::with_capacity(words + 1);
        for (pos, &ready) in ready_at.iter().enumerate() {
            if pos % 64 == 0 {
                timed_from.push(timed.len());
            }
            match ready {
                i64::MIN => usable[pos / 64] |= 1 << (pos % 64),
                NEVER => {}
                _ => timed.push((ready, pos)),
            }
        }
        timed_from.push(timed.len());
        Self {
            candidates,
            by_tier,
            ready_at,
            tier_end,
            own_by_tier,
            in_order,
            usable,
            timed,
            timed_from,
        }
    }

    /// Length of the leading run of `order` whose candidates share the tier of its first one
    /// (0 when empty). `order` must list candidates by ascending tier except that the first
    /// tier's run may be in any order (a [`Ranking::order`] rotated, promoted or with demoted
    /// candidates left out). Candidates in tier order answer by bisection, others by a scan.
    pub fn tier_run(&self, order: &[usize]) -> usize {
        let Some(&first) = order.first() else {
            return 0;
        };
        if self.in_order {
            let end = self.tier_end[first];
            order.partition_point(|&i| i < end)
        } else {
            let tier = self.candidates[first].tier;
            order
                .iter()
                .position(|&i| self.candidates[i].tier != tier)
                .unwrap_or(order.len())
        }
    }

    /// The candidates in caller order (index = identity).
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// Number of candidates.
    pub fn len(&self) -> usize {
        self.candidates.len()
    }

    /// No candidate at all.
    pub fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }
}

impl FromIterator<Candidate> for CandidateSet {
    fn from_iter<I: IntoIterator<Item = Candidate>>(iter: I) -> Self {
        Self::new(iter.into_iter().collect())
    }
}

/// The exclusion a candidate's own state gives, in docs/rules/router.md §1 order: the caller's hold, admin
/// state, availability (an `Exhausted` carries its reset as `until`). `None` = usable.
fn own_exclusion(c: &Candidate) -> Option<Exclusion> {
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
        Availability::Usable => None,
        Availability::Exhausted { until } => Some(Exclusion {
            reason: ExclusionReason::Exhausted,
            until,
        }),
        Availability::Invalid => reason(ExclusionReason::Invalid),
        Availability::Deactivated => reason(ExclusionReason::Deactivated),
        Availability::Failing { .. } => reason(ExclusionReason::Failing),
        Availability::NoData => reason(ExclusionReason::NoData),
        Availability::Disabled { reason: r, owner } => {
            reason(ExclusionReason::Disabled { reason: r, owner })
        }
    }
}

/// The result of [`rank`], owned by the caller and reused across calls (never shrunk, so a
/// warm buffer allocates nothing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ranking {
    /// Slots for every candidate; the first `ranked` are the ranking.
    order: Vec<usize>,
    /// As many slots again, where the best tier's rotation parks the slots it moves to its
    /// end (two copies and a `memmove` instead of an element-wise rotation).
    spare: Vec<usize>,
    ranked: usize,
    /// Candidates ranked over; the `total - ranked` others are excluded (which and why is
    /// resolved when read: [`Ranking::excluded`]).
    total: usize,
    /// The instant ranked at, unix microseconds (to resolve the exclusions as of then).
    now_us: i64,
}

impl Ranking {
    /// A buffer for up to `n` candidates without reallocation.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            order: vec![0; n],
            spare: vec![0; n],
            ranked: 0,
            total: 0,
            now_us: 0,
        }
    }

    /// Eligible candidate indexes, first = preferred; the rest is the fail-over order.
    pub fn order(&self) -> &[usize] {
        &self.order[..self.ranked]
    }

    /// Excluded candidates with their exclusion (reason and until), in tier order (candidate
    /// order inside a tier). `set` and `state` must be the ones [`rank`] was given: the reasons
    /// are resolved here, off the request path (docs/rules/router.md §1 "why not account X", a
    /// `Retry-After`), so that a ranking stays off them.
    pub fn excluded<'a>(
        &'a self,
        set: &'a CandidateSet,
        state: &'a EngineState,
    ) -> impl Iterator<Item = Excluded> + 'a {
        let now = self.now_us;
        (0..self.total.min(set.len())).filter_map(move |pos| {
            let mut e = set.own_by_tier[pos];
            let end = state.cooldowns.end_of(e.index);
            if eligible(set.ready_at[pos], end, now) {
                return None; // ranked
            }
            if set.ready_at[pos] <= now {
                // Its own state lapsed (an exhausted account past its reset) or never excluded
                // it: a cooldown did.
                e.exclusion = Exclusion {
                    reason: ExclusionReason::CoolingDown,
                    until: instant(end),
                };
            }
            Some(e)
        })
    }

    /// Number of excluded candidates.
    pub fn excluded_count(&self) -> usize {
        self.total - self.ranked
    }

    /// The preferred candidate, if any is eligible.
    pub fn first(&self) -> Option<usize> {
        self.order().first().copied()
    }

    /// Why candidate `index` is excluded (`None` when it is ranked or unknown); `set` and
    /// `state` as for [`Ranking::excluded`]. Linear in the number of exclusions: for "why not
    /// X", not for the request path.
    pub fn exclusion_of(
        &self,
        index: usize,
        set: &CandidateSet,
        state: &EngineState,
    ) -> Option<Exclusion> {
        self.excluded(set, state)
            .find(|e| e.index == index)
            .map(|e| e.exclusion)
    }

    /// Moves the ranked candidate `index` to the front, keeping the others' order; `false` when
    /// it is not ranked (excluded candidates are never promoted). The tool of an [`Affinity`]
    /// (docs/rules/router.md §2.2: a bound account first while it is eligible).
    pub fn promote(&mut self, index: usize) -> bool {
        match self.position(index) {
            Some(at) => {
                self.promote_at(at);
                true
            }
            None => false,
        }
    }

    /// Where the ranked candidate `index` stands in [`Ranking::order`] (`None`: not ranked).
    /// Scans 16 slots at a time with a branch-free compare (vectorised), then finds the slot.
    pub fn position(&self, index: usize) -> Option<usize> {
        let order = self.order();
        let chunks = order.chunks_exact(16);
        let tail = chunks.remainder();
        for (c, chunk) in chunks.enumerate() {
            if chunk.iter().fold(false, |hit, &i| hit | (i == index)) {
                return chunk.iter().position(|&i| i == index).map(|at| c * 16 + at);
            }
        }
        let start = order.len() - tail.len();
        tail.iter().position(|&i| i == index).map(|at| start + at)
    }

    /// Moves the candidate at position `at` of [`Ranking::order`] to the front, keeping the
    /// others' order ([`Ranking::promote`] when the position is known). Panics when `at` is not
    /// a ranked position.
    pub fn promote_at(&mut self, at: usize) {
        let order = &mut self.order[..self.ranked];
        let index = order[at];
        order.copy_within(..at, 1);
        order[0] = index;
    }

    /// Moves the ranked candidate `index` to the end of the ranking, keeping the others' order;
    /// `false` when it is not ranked. Never removes a candidate, so a non-empty ranking stays
    /// non-empty (docs/rules/router.md §1 item 4: a demoted account is used only if nothing else is
    /// eligible; §2.3 demotion).
    pub fn demote(&mut self, index: usize) -> bool {
        let ranked = self.ranked;
        match self.position(index) {
            Some(at) => {
                self.order.copy_within(at + 1..ranked, at);
                self.order[ranked - 1] = index;
                true
            }
            None => false,
        }
    }

    /// Empties the ranking and makes room for `n` candidates (grows only).
    fn reset(&mut self, n: usize) {
        if self.order.len() < n {
            self.order.resize(n, 0);
            self.spare.resize(n, 0);
        }
        self.ranked = 0;
        self.total = n;
    }
}

/// The seam where affinity plugs in (docs/rules/router.md §2): called once at the end of
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

/// Ranks the prepared `set` into `out` (cleared first) with no affinity: see [`rank_with`].
pub fn rank(
    set: &CandidateSet,
    state: &EngineState,
    now: DateTime<Utc>,
    cursor: usize,
    out: &mut Ranking,
) {
    rank_with(set, state, now, cursor, &NoAffinity, out);
}

/// Ranks the prepared `set` into `out` (docs/rules/router.md §1). Eligibility, in order: the caller's hold,
/// admin-disabled, the availability (an `Exhausted` whose `until` is at or before `now` has
/// lapsed and no longer excludes), the engine's cooldown. Eligible candidates come in tier order
/// (lower first; equal tiers keep candidate order), the best tier rotated left by
/// `cursor % len` (the patrol passes 0: its order is the priority list order); then `affinity`
/// applies. One pass over the candidates plus one over the excluded ones; no allocation once
/// `out` is warm.
pub fn rank_with<A: Affinity + ?Sized>(
    set: &CandidateSet,
    state: &EngineState,
    now: DateTime<Utc>,
    cursor: usize,
    affinity: &A,
    out: &mut Ranking,
) {
    let n = set.len();
    out.reset(n);
    let now_us = now.timestamp_micros();
    out.ranked = if set.in_order {
        split(set, &state.cooldowns, now_us, &mut out.order[..n])
    } else {
        let cool: &[i64] = if state.cooldowns.is_empty() {
            &[]
        } else {
            &state.cooldowns.ends
        };
        split_mapped(set, cool, now_us, &mut out.order[..n])
    };
    out.now_us = now_us;
    rotate_best_tier(set, cursor, out);
    affinity.apply(&set.candidates, out);
}

/// The hot pass for candidates in tier order (position = index): each goes to `order` when its
/// own state no longer excludes it at `now` and no cooldown runs. Works on 64 candidates per
/// word: the word starts from the prepared bits of the candidates whose own state never
/// excludes them, adds the timed ones (a known quota reset) whose instant has come, removes
/// those with a cooldown still running (only the candidates with an end recorded are looked
/// at), then the set bits are written out (`trailing_zeros`). The cost is a few instructions
/// per 64 candidates, per timed or cooled candidate and per ranked slot, not a compare per
/// candidate. Returns the number ranked.
fn split(set: &CandidateSet, cooldowns: &Cooldowns, now: i64, order: &mut [usize]) -> usize {
    let mut ranked = 0usize;
    for (word, &usable) in set.usable.iter().enumerate() {
        let base = word * 64;
        let mut mask = usable;
        for &(ready, pos) in &set.timed[set.timed_from[word]..set.timed_from[word + 1]] {
            mask |= u64::from(ready <= now) << (pos % 64);
        }
        let mut cooled = mask & cooldowns.recorded.get(word).copied().unwrap_or(0);
        while cooled != 0 {
            let bit = cooled.trailing_zeros() as usize;
            cooled &= cooled - 1;
            if cooldowns.ends[base + bit] > now {
                mask &= !(1 << bit);
            }
        }
        ranked = emit(mask, base, order, ranked);
    }
    ranked
}

/// The one eligibility test of a ranking (unix microseconds): the candidate's own state no
/// longer excludes it (`ready`) and no cooldown runs (`end`) at `now`.
#[inline]
fn eligible(ready: i64, end: i64, now: i64) -> bool {
    ready.max(end) <= now
}

/// A cooldown end as an instant (`None` for `NO_END`).
fn instant(end: i64) -> Option<DateTime<Utc>> {
    (end != NO_END)
        .then(|| DateTime::from_timestamp_micros(end))
        .flatten()
}

/// Writes `base + bit` for every set bit of `mask` (ascending) into `out` from `at`; returns
/// the new length.
#[inline]
fn emit(mut mask: u64, base: usize, out: &mut [usize], at: usize) -> usize {
    let count = mask.count_ones() as usize;
    for slot in &mut out[at..at + count] {
        *slot = base + mask.trailing_zeros() as usize;
        mask &= mask - 1;
    }
    at + count
}

/// [`split`] for candidates that did not come in tier order: `order` receives candidate
/// indexes, in tier order.
fn split_mapped(set: &CandidateSet, cool: &[i64], now: i64, order: &mut [usize]) -> usize {
    let mut ranked = 0usize;
    for (&index, &ready) in set.by_tier.iter().zip(&set.ready_at) {
        let end = cool.get(index).copied().unwrap_or(NO_END);
        order[ranked] = index;
        ranked += usize::from(eligible(ready, end, now));
    }
    ranked
}

/// Rotates the eligible candidates of the best tier left by `cursor % len`.
fn rotate_best_tier(set: &CandidateSet, cursor: usize, out: &mut Ranking) {
    // Eligible candidates are in tier order: the best tier is a prefix of `order`.
    let order = &mut out.order[..out.ranked];
    let len = set.tier_run(order);
    let k = if len > 1 { cursor % len } else { 0 };
    if k > 0 {
        let parked = &mut out.spare[..k];
        parked.copy_from_slice(&order[..k]);
        order.copy_within(k..len, 0);
        order[len - k..len].copy_from_slice(parked);
    }
}

/// For a `Retry-After` when nothing is eligible (docs/rules/router.md §4): the earliest known end among
/// the exclusions of `ranking` (`set` and `state` as given to [`rank`]); `None` when a
/// candidate is eligible (nothing to wait for) or when no exclusion has a known end.
pub fn earliest_until(
    ranking: &Ranking,
    set: &CandidateSet,
    state: &EngineState,
) -> Option<DateTime<Utc>> {
    if ranking.ranked > 0 {
        return None;
    }
    ranking
        .excluded(set, state)
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

    /// A ranking with the set and state it was made from, to read its exclusions.
    struct Ranked {
        set: CandidateSet,
        state: EngineState,
        r: Ranking,
    }

    impl Ranked {
        fn order(&self) -> &[usize] {
            self.r.order()
        }
        fn excluded(&self) -> Vec<Excluded> {
            self.r.excluded(&self.set, &self.state).collect()
        }
        fn exclusion_of(&self, i: usize) -> Option<Exclusion> {
            self.r.exclusion_of(i, &self.set, &self.state)
        }
        fn earliest_until(&self) -> Option<DateTime<Utc>> {
            earliest_until(&self.r, &self.set, &self.state)
        }
    }

    fn ranked_at(
        cs: &[Candidate],
        state: &EngineState,
        cursor: usize,
        at: DateTime<Utc>,
    ) -> Ranked {
        let set = CandidateSet::new(cs.to_vec());
        let mut r = Ranking::default();
        rank(&set, state, at, cursor, &mut r);
        Ranked {
            set,
            state: state.clone(),
            r,
        }
    }

    fn ranked(cs: &[Candidate], state: &EngineState, cursor: usize) -> Ranked {
        ranked_at(cs, state, cursor, now())
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
        assert_eq!(r.earliest_until(), Some(cool));
        // Once the cooldown ended the account is back, and nothing is left to wait for.
        let later = now() + Duration::minutes(1);
        let r2 = ranked_at(&cs, &state, 0, later);
        assert_eq!(r2.order(), &[2]);
        assert_eq!(r2.earliest_until(), None);
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
        assert!(!r.r.promote(1), "excluded: never promoted");
        assert!(r.r.promote(3));
        assert_eq!(r.order(), &[3, 0, 2]);
    }

    #[test]
    fn position_finds_every_ranked_candidate_around_the_16_slot_chunks() {
        for n in [0usize, 1, 15, 16, 17, 33, 70] {
            let cs: Vec<Candidate> = (0..n)
                .map(|i| match i % 4 {
                    3 => cand(1, Availability::Invalid),
                    _ => cand(u32::from(i % 2 == 0), Availability::Usable),
                })
                .collect();
            let r = ranked(&cs, &EngineState::default(), n / 3);
            for i in 0..n + 2 {
                let want = r.order().iter().position(|&x| x == i);
                assert_eq!(r.r.position(i), want, "n {n}, candidate {i}");
            }
        }
    }

    #[test]
    fn demote_moves_only_a_ranked_candidate_to_the_end() {
        let u = Availability::Usable;
        let cs = [
            cand(1, u),
            cand(1, Availability::NoData),
            cand(2, u),
            cand(3, u),
        ];
        let mut r = ranked(&cs, &EngineState::default(), 0);
        assert!(!r.r.demote(1), "excluded: never ranked, never demoted");
        assert!(r.r.demote(0));
        assert_eq!(r.order(), &[2, 3, 0]);
    }

    #[test]
    fn blocks_of_any_length_with_or_without_cooldowns_rank_like_a_plain_filter() {
        // Lengths around the 8- and 64-candidate groups of the hot pass, cooldowns covering the
        // whole set (the grouped path) or only its start (the per-candidate path).
        for n in [1usize, 7, 8, 9, 63, 64, 65, 130] {
            let cs: Vec<Candidate> = (0..n)
                .map(|i| match i % 5 {
                    0 => cand(1, Availability::Invalid),
                    1 => cand(
                        1,
                        Availability::Exhausted {
                            until: Some(now() - Duration::seconds(1)),
                        },
                    ),
                    _ => cand(1, Availability::Usable),
                })
                .collect();
            for covered in [n, n / 2] {
                let mut state = EngineState::default();
                for i in (0..covered).filter(|i| i % 3 == 0) {
                    state.cooldowns.set(i, now() + Duration::seconds(30));
                }
                if covered == n && n > 0 {
                    state.cooldowns.set(n - 1, now() - Duration::seconds(1));
                }
                let want: Vec<usize> = (0..n)
                    .filter(|&i| i % 5 != 0)
                    .filter(|&i| state.cooldowns.until(i, now()).is_none())
                    .collect();
                let r = ranked(&cs, &state, 0);
                assert_eq!(r.order(), &want[..], "n {n}, cooldowns over {covered}");
                assert_eq!(r.excluded().len(), n - want.len());
            }
        }
    }

    #[test]
    fn a_warm_buffer_is_reused_without_growing() {
        let cs: Vec<Candidate> = (0..100)
            .map(|i| cand(i % 4, Availability::Usable))
            .collect();
        let mut r = Ranking::with_capacity(cs.len());
        let po = r.order.as_ptr();
        let set = CandidateSet::new(cs);
        for cursor in 0..3 {
            rank(&set, &EngineState::default(), now(), cursor, &mut r);
        }
        assert_eq!(r.order().len(), 100);
        assert_eq!(po, r.order.as_ptr());
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

    /// The ranking the rules give, written as plainly as possible (docs/rules/router.md §1): the
    /// eligible candidates (no hold, not admin-disabled, usable or exhausted with a reset at or
    /// before `now`, no cooldown running), sorted by (tier, index), the best tier rotated left by
    /// `cursor % len`. The reference the optimised hot pass must match exactly.
    fn reference_order(
        cs: &[Candidate],
        state: &EngineState,
        at: DateTime<Utc>,
        cursor: usize,
    ) -> Vec<usize> {
        let mut eligible: Vec<usize> = (0..cs.len())
            .filter(|&i| {
                let c = &cs[i];
                let own = c.hold.is_none()
                    && c.admin == Admin::Enabled
                    && match c.availability {
                        Availability::Usable => true,
                        Availability::Exhausted { until } => until.is_some_and(|t| t <= at),
                        _ => false,
                    };
                own && state.cooldowns.until(i, at).is_none()
            })
            .collect();
        eligible.sort_by_key(|&i| (cs[i].tier, i));
        if let Some(&first) = eligible.first() {
            let best = eligible
                .iter()
                .take_while(|&&i| cs[i].tier == cs[first].tier)
                .count();
            eligible[..best].rotate_left(cursor % best);
        }
        eligible
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
                prop_assert_eq!(r.earliest_until(), r.excluded().iter().filter_map(|e| e.exclusion.until).min());
            }
        }

        /// The order is exactly the reference's (tiers, exclusions, rotation) for pools around
        /// the 64-candidate blocks of the hot pass, any cursor, cooldowns anywhere (beyond the
        /// pool too), a warm buffer reused from a bigger pool, in or out of tier order.
        #[test]
        fn the_order_is_exactly_the_reference_order(
            mut cs in proptest::collection::vec(candidate(), 0..300),
            cools in proptest::collection::vec((0usize..320, -5i64..120), 0..80),
            cursors in proptest::collection::vec(any::<usize>(), 1..4),
            shuffle in any::<bool>(),
            minutes in -40i64..700,
        ) {
            if !shuffle {
                cs.sort_by_key(|c| c.tier);
            }
            let mut state = EngineState::default();
            for (i, secs) in &cools {
                state.cooldowns.set(*i, now() + Duration::seconds(*secs));
            }
            let at = now() + Duration::minutes(minutes);
            let set = CandidateSet::new(cs.clone());
            let mut r = Ranking::with_capacity(cs.len() + 17);
            for cursor in cursors {
                rank(&set, &state, at, cursor, &mut r);
                let want = reference_order(&cs, &state, at, cursor);
                prop_assert_eq!(r.order(), &want[..], "cursor {}", cursor);
                prop_assert_eq!(r.excluded_count(), cs.len() - want.len());
                prop_assert_eq!(r.excluded(&set, &state).count(), cs.len() - want.len());
            }
        }
    }
}
