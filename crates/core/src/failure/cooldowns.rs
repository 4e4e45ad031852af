//! The cooldowns the router's observations put on a lane's candidates (docs/rules/router.md §3 "account
//! effect").

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::verdict::{FailureClass, Verdict, reset_ceiling};
use crate::retry::{Backoff, JITTER_SPREAD};
use crate::selection::EngineState;

/// A plain 429 without `Retry-After` (docs/rules/router.md §3): 2 s doubling to 5 min by backoff level,
/// [`JITTER_SPREAD`] off at most.
pub const RATE_LIMIT_BACKOFF: Backoff =
    Backoff::new(Duration::seconds(2), Duration::minutes(5)).with_spread(JITTER_SPREAD);

/// The kind of a router cooldown (docs/rules/router.md §3 "account effect").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum CooldownKind {
    Quota,
    RateLimit,
    SessionDead,
    Transient,
    /// The whole pool answered plain 429s at once (an IP-level throttle, [`super::ThrottleDetector`]).
    PoolThrottle,
}

impl CooldownKind {
    /// Every kind (metric labels, iteration).
    pub const ALL: [CooldownKind; 5] = [
        Self::Quota,
        Self::RateLimit,
        Self::SessionDead,
        Self::Transient,
        Self::PoolThrottle,
    ];

    /// The cooldown a failure class puts on an account; `None` for request errors.
    pub fn of(class: FailureClass) -> Option<Self> {
        match class {
            FailureClass::Quota => Some(Self::Quota),
            FailureClass::RateLimit => Some(Self::RateLimit),
            FailureClass::SessionDead => Some(Self::SessionDead),
            FailureClass::Transient => Some(Self::Transient),
            FailureClass::RequestError => None,
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// Quota exclusion when the reset is not known (docs/rules/router.md §3 "else 10 min").
pub const QUOTA_UNKNOWN_RESET: Duration = Duration::minutes(10);
/// Exclusion after a session_dead answer (docs/rules/router.md §3: 30 min, never permanent).
pub const SESSION_DEAD_COOLDOWN: Duration = Duration::minutes(30);
/// Cooldown after a transient failure (docs/rules/router.md §3: 30 s).
pub const TRANSIENT_COOLDOWN: Duration = Duration::seconds(30);

/// One candidate's observations: per cooldown kind its end, and the rate-limit backoff level.
#[derive(Debug, Clone, Default, PartialEq)]
struct Observed {
    ends: [Option<DateTime<Utc>>; 5],
    rate_level: u32,
}

/// The router's own observations of one lane's candidates (docs/rules/router.md §3): per candidate the
/// cooldown kind and end, the rate-limit backoff level. Writes the effective end (the latest of
/// its running cooldowns — a short rate limit never shortens a quota exclusion) into the lane's
/// `EngineState.cooldowns`. Candidates are the lane's `CandidateSet` indexes; an index beyond
/// `candidates` grows the table. A verdict is recorded in this lane only: the caller propagates
/// an account-scoped one to the account's other lanes with [`Observations::cool`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observations {
    slots: Vec<Observed>,
}

impl Observations {
    /// Observations for `candidates` candidates, none cooling down.
    pub fn new(candidates: usize) -> Self {
        Self {
            slots: vec![Observed::default(); candidates],
        }
    }

    fn slot(&mut self, index: usize) -> &mut Observed {
        if index >= self.slots.len() {
            self.slots.resize(index + 1, Observed::default());
        }
        &mut self.slots[index]
    }

    /// Records a failed attempt: sets the cooldown per the table (quota until `reset_at` else
    /// 10 min; rate_limit `Retry-After` else [`RATE_LIMIT_BACKOFF`] by level; session_dead
    /// 30 min; transient 30 s; request_error nothing) and returns its end (`None` for request
    /// errors). Ends are capped at now + 31 days; `jitter` in 0..=1.
    pub fn observe(
        &mut self,
        index: usize,
        verdict: &Verdict,
        now: DateTime<Utc>,
        jitter: f64,
        state: &mut EngineState,
    ) -> Option<DateTime<Utc>> {
        let kind = CooldownKind::of(verdict.class)?;
        let wait = match kind {
            CooldownKind::Quota => verdict
                .reset_at
                .filter(|t| *t > now)
                .map_or(QUOTA_UNKNOWN_RESET, |t| t - now),
            CooldownKind::RateLimit => {
                let slot = self.slot(index);
                slot.rate_level = slot.rate_level.saturating_add(1);
                let level = slot.rate_level;
                verdict
                    .retry_after
                    .unwrap_or_else(|| RATE_LIMIT_BACKOFF.delay(level, jitter))
            }
            CooldownKind::SessionDead => SESSION_DEAD_COOLDOWN,
            CooldownKind::Transient | CooldownKind::PoolThrottle => TRANSIENT_COOLDOWN,
        };
        let until = now + wait.clamp(Duration::zero(), reset_ceiling());
        self.cool(index, kind, until, state);
        Some(until)
    }

    /// A 2xx: resets the rate-limit backoff level of `index`.
    pub fn success(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index) {
            slot.rate_level = 0;
        }
    }

    /// Cools `index` down with `kind` until `until` (pool throttle, account-wide propagation
    /// from another lane). A kind's end only grows; the effective end written to `state` is the
    /// latest end of any kind.
    pub fn cool(
        &mut self,
        index: usize,
        kind: CooldownKind,
        until: DateTime<Utc>,
        state: &mut EngineState,
    ) {
        let slot = self.slot(index);
        let end = &mut slot.ends[kind.slot()];
        *end = Some(end.map_or(until, |e| e.max(until)));
        self.publish(index, state);
    }

    /// Clears a quota cooldown early (a fresh patrol snapshot shows the linked account usable,
    /// docs/rules/router.md §3); the other kinds' cooldowns stay.
    pub fn clear_quota(&mut self, index: usize, state: &mut EngineState) {
        if let Some(slot) = self.slots.get_mut(index) {
            slot.ends[CooldownKind::Quota.slot()] = None;
            self.publish(index, state);
        }
    }

    /// The kind of `index`'s cooldown running at `now` (the one with the latest end).
    pub fn kind(&self, index: usize, now: DateTime<Utc>) -> Option<CooldownKind> {
        let slot = self.slots.get(index)?;
        CooldownKind::ALL
            .into_iter()
            .filter_map(|k| slot.ends[k.slot()].filter(|e| *e > now).map(|e| (e, k)))
            .max_by_key(|(e, _)| *e)
            .map(|(_, k)| k)
    }

    /// The end of `index`'s cooldown running at `now` (the latest of its kinds).
    pub fn until(&self, index: usize, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let slot = self.slots.get(index)?;
        slot.ends
            .iter()
            .flatten()
            .copied()
            .filter(|e| *e > now)
            .max()
    }

    /// Writes `index`'s effective end (latest of its kinds) into the engine's cooldowns.
    fn publish(&self, index: usize, state: &mut EngineState) {
        match self.slots[index].ends.iter().flatten().max() {
            Some(end) => state.cooldowns.set(index, *end),
            None => state.cooldowns.clear(index),
        }
    }
}

#[cfg(test)]
#[path = "cooldowns_tests.rs"]
mod tests;
