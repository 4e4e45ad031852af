//! The state machine of one (site, event family) (docs/rules/alerts.md §2): a condition is raised
//! once per transition (dedupe), held back by the minimum interval, repeated as reminders when
//! configured, and cleared after the flap guard. Persisted per family ([`FamilyState`]). Pure:
//! `now` comes from the caller.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::event::Family;

/// Delivery rules of docs/rules/alerts.md §2 (from `[alerts]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlertPolicy {
    /// Flap guard: the good state must hold this long (and two evaluations) before it is told.
    pub recovery_confirm: Duration,
    /// At most one raising message per (site, family) this often (clearing ones are exempt).
    pub min_interval: Duration,
    /// Reminder while exhausted or unreachable; `None` = never.
    pub repeat: Option<Duration>,
    /// CPA management failing this long ⇒ unreachable.
    pub unreachable_after: Duration,
}

impl Default for AlertPolicy {
    fn default() -> Self {
        Self {
            recovery_confirm: Duration::minutes(10),
            min_interval: Duration::minutes(30),
            repeat: None,
            unreachable_after: Duration::minutes(15),
        }
    }
}

/// Persisted state of one (site, family).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FamilyState {
    /// The raising event went out and no clearing event since.
    pub raised: bool,
    /// When the raising event (not a reminder) went out.
    pub raised_at: Option<DateTime<Utc>>,
    /// Last raising message, first or reminder: the minimum interval and reminders count from it.
    pub last_raise_sent_at: Option<DateTime<Utc>>,
    /// First evaluation that found the condition cleared while raised (flap guard).
    pub clear_since: Option<DateTime<Utc>>,
    /// Evaluations in a row that found it cleared.
    pub clear_evaluations: u32,
    /// Invalid accounts not told yet (held back by the minimum interval).
    pub pending_accounts: Vec<String>,
}

/// The alert state of a site: one [`FamilyState`] per family.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SiteAlertState {
    pub exhaustion: FamilyState,
    pub min_active: FamilyState,
    pub invalid_accounts: FamilyState,
    pub reachability: FamilyState,
    pub pool_low: FamilyState,
}

impl SiteAlertState {
    /// The state of `family`.
    pub fn get(&self, family: Family) -> &FamilyState {
        match family {
            Family::Exhaustion => &self.exhaustion,
            Family::MinActive => &self.min_active,
            Family::InvalidAccounts => &self.invalid_accounts,
            Family::Reachability => &self.reachability,
            Family::PoolLow => &self.pool_low,
        }
    }

    /// The state of `family`, mutable.
    pub fn get_mut(&mut self, family: Family) -> &mut FamilyState {
        match family {
            Family::Exhaustion => &mut self.exhaustion,
            Family::MinActive => &mut self.min_active,
            Family::InvalidAccounts => &mut self.invalid_accounts,
            Family::Reachability => &mut self.reachability,
            Family::PoolLow => &mut self.pool_low,
        }
    }
}

/// How a condition family ends and repeats.
#[derive(Debug, Clone, Copy)]
pub(super) struct Guard {
    /// Send a clearing event (after the flap guard); otherwise clear silently at once.
    pub(super) clear_event: bool,
    pub(super) reminders: bool,
}

impl Guard {
    pub(super) const FULL: Guard = Guard {
        clear_event: true,
        reminders: true,
    };
    pub(super) const SILENT: Guard = Guard {
        clear_event: false,
        reminders: false,
    };
    /// Told both ways (flap-guarded clear), never repeated.
    pub(super) const TOLD: Guard = Guard {
        clear_event: true,
        reminders: false,
    };
}

/// What [`step`] tells: a raise (first or reminder) or a clear, with when it was raised.
pub(super) enum Step {
    Raise { reminder: bool },
    Clear { raised_at: Option<DateTime<Utc>> },
}

/// The minimum interval since the family's last raising message has passed.
pub(super) fn interval_passed(st: &FamilyState, policy: &AlertPolicy, now: DateTime<Utc>) -> bool {
    st.last_raise_sent_at
        .is_none_or(|t| now - t >= policy.min_interval)
}

/// One condition family: `holds` is `Some(true)` when the condition holds, `Some(false)` when it
/// is clear, `None` when this observation says nothing about it.
pub(super) fn step(
    st: &mut FamilyState,
    holds: Option<bool>,
    policy: &AlertPolicy,
    now: DateTime<Utc>,
    guard: Guard,
) -> Option<Step> {
    match holds? {
        true => {
            st.clear_since = None;
            st.clear_evaluations = 0;
            if !st.raised {
                if !interval_passed(st, policy, now) {
                    return None;
                }
                st.raised = true;
                st.raised_at = Some(now);
                st.last_raise_sent_at = Some(now);
                return Some(Step::Raise { reminder: false });
            }
            let every = policy.repeat.filter(|_| guard.reminders)?;
            let last = st.last_raise_sent_at.unwrap_or(now);
            if now - last >= every.max(policy.min_interval) {
                st.last_raise_sent_at = Some(now);
                return Some(Step::Raise { reminder: true });
            }
            None
        }
        false => {
            if !st.raised {
                return None;
            }
            if !guard.clear_event {
                st.raised = false;
                st.raised_at = None;
                return None;
            }
            st.clear_evaluations += 1;
            let since = *st.clear_since.get_or_insert(now);
            if st.clear_evaluations >= 2 && now - since >= policy.recovery_confirm {
                let raised_at = st.raised_at.take();
                st.raised = false;
                st.clear_since = None;
                st.clear_evaluations = 0;
                return Some(Step::Clear { raised_at });
            }
            None
        }
    }
}
