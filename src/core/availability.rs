//! The one usability rule of the crate: from an account's admin state, disable reason, last good
//! snapshot and probe state to an [`Availability`] — usable, or why not and until when. The
//! decision table, the active set, the free-account reorder, freshness, the alert pool view, the
//! pool gauges, the API and the router's patrol link all read this; nothing else decides
//! "usable". Pure: `now` and the threshold are arguments.
//! Rules: spec/patrol.md §5 (rules 0–4: exhausted by plan; 401/402), §5.1 (a person's disable is
//! never undone), §6.3 (usable = long window known and < T, paid five-hour < T), spec/router.md §1
//! (every exclusion says why and until when).

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::account::{DisableReason, ProbeState, QuotaSnapshot, ReasonOwner};

/// Whether an account can serve requests now, and if not why and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Availability {
    /// Long window known and under the threshold (paid plans: five-hour too), last probe fine.
    Usable,
    /// Quota reached by the plan rules, or a 402 that is not a deactivation (counted as
    /// exhausted, patrol.md §5 rule 3). `until` = the earliest instant the account is usable
    /// again: the latest reset among its exhausted windows; `None` when a needed reset is unknown.
    Exhausted { until: Option<DateTime<Utc>> },
    /// The last probe answered 401 (credential rejected; patrol.md §5 rules 1–2).
    Invalid,
    /// The last probe answered 402 with a deactivated workspace or account.
    Deactivated,
    /// The last probe failed otherwise (timeout, 5xx, 429, HTML, garbage): the older snapshot
    /// does not speak for the account. `since` = when that failure was seen.
    Failing { since: Option<DateTime<Utc>> },
    /// Never read successfully, or no long-window (weekly / monthly) figure in the snapshot.
    NoData,
    /// Disabled by a person or another tool (ManualDisabled, or disabled with no record of ours
    /// — provisional ManualDisabled, patrol.md §5.1): never used or enabled automatically.
    Disabled {
        reason: DisableReason,
        owner: ReasonOwner,
    },
}

impl Availability {
    /// Usable now.
    pub fn is_usable(self) -> bool {
        matches!(self, Availability::Usable)
    }

    /// Excluded because of quota (the state a router answers with `usage_limit_reached`).
    pub fn is_exhausted(self) -> bool {
        matches!(self, Availability::Exhausted { .. })
    }

    /// The earliest instant this account may be usable again, when known.
    pub fn until(self) -> Option<DateTime<Utc>> {
        match self {
            Availability::Exhausted { until } => until,
            _ => None,
        }
    }

    /// The API spelling of the state (`usable`, `exhausted`, `invalid`, `deactivated`,
    /// `failing`, `noData`, `disabled`).
    pub fn as_str(self) -> &'static str {
        match self {
            Availability::Usable => "usable",
            Availability::Exhausted { .. } => "exhausted",
            Availability::Invalid => "invalid",
            Availability::Deactivated => "deactivated",
            Availability::Failing { .. } => "failing",
            Availability::NoData => "noData",
            Availability::Disabled { .. } => "disabled",
        }
    }
}

/// The account facts the rule reads.
#[derive(Debug, Clone, Copy)]
pub struct AccountFacts<'a> {
    /// Disabled in CPA (CPA is the source of truth for it).
    pub disabled: bool,
    /// Persisted disable reason and owner; `None` = no record of ours.
    pub reason: Option<(DisableReason, ReasonOwner)>,
    /// Last good snapshot and probe bookkeeping; `None` = never probed.
    pub probe: Option<&'a ProbeState>,
}

/// The availability of one account (see the module rules). Order: a person's disable first;
/// then the last probe's failure (401 ⇒ Invalid, 402 ⇒ Deactivated / Exhausted, other ⇒
/// Failing); then the snapshot (none or no long window ⇒ NoData, exhausted ⇒ Exhausted with
/// its recovery time, else Usable). Patrol-owned disables (QuotaExhausted, OrderedStandby,
/// ErrorDisabled) are judged on the evidence: a standby account with usable quota is Usable,
/// so routing may enable it.
pub fn availability(facts: AccountFacts<'_>, threshold: u8, now: DateTime<Utc>) -> Availability {
    if facts.disabled {
        match facts.reason {
            None => {
                return Availability::Disabled {
                    reason: DisableReason::ManualDisabled,
                    owner: ReasonOwner::External,
                };
            }
            Some((DisableReason::ManualDisabled, owner)) => {
                return Availability::Disabled {
                    reason: DisableReason::ManualDisabled,
                    owner,
                };
            }
            Some(_) => {}
        }
    }
    let Some(state) = facts.probe else {
        return Availability::NoData;
    };
    if state.last_error.is_some() {
        if state.consecutive_invalid > 0 {
            return Availability::Invalid;
        }
        match state.payment_problem {
            Some(true) => return Availability::Deactivated,
            Some(false) => return Availability::Exhausted { until: None },
            None => {
                return Availability::Failing {
                    since: state.last_error_at,
                };
            }
        }
    }
    match state.snapshot.as_ref() {
        Some(s) => snapshot_availability(s, threshold, now),
        None => Availability::NoData,
    }
}

/// The quota reading of a snapshot alone (patrol.md §5 rules 3–4, §6.3): no long-window figure
/// ⇒ NoData; exhausted ⇒ Exhausted until [`QuotaSnapshot::recovery_at`]; else Usable. A window
/// at 100 % whose reset already passed (stale) is no evidence of exhaustion.
pub fn snapshot_availability(s: &QuotaSnapshot, threshold: u8, now: DateTime<Utc>) -> Availability {
    if s.weekly_used().is_none() {
        return Availability::NoData;
    }
    if s.is_exhausted(threshold, now) {
        return Availability::Exhausted {
            until: s.recovery_at(threshold, now),
        };
    }
    Availability::Usable
}

/// A pool's "usable until" (alerts, router patrol link): `None` when some account is usable or
/// when no exhausted account has a known reset; otherwise the earliest `until` over the
/// exhausted accounts — the first instant the pool may have capacity again.
pub fn pool_usable_until(
    accounts: impl IntoIterator<Item = Availability>,
) -> Option<DateTime<Utc>> {
    let mut earliest: Option<DateTime<Utc>> = None;
    for a in accounts {
        match a {
            Availability::Usable => return None,
            Availability::Exhausted { until: Some(t) } => {
                earliest = Some(earliest.map_or(t, |e| e.min(t)));
            }
            _ => {}
        }
    }
    earliest
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn facts(
        disabled: bool,
        reason: Option<(DisableReason, ReasonOwner)>,
    ) -> AccountFacts<'static> {
        AccountFacts {
            disabled,
            reason,
            probe: None,
        }
    }

    #[test]
    fn a_persons_disable_wins_over_any_evidence() {
        assert_eq!(
            availability(facts(true, None), 90, now()),
            Availability::Disabled {
                reason: DisableReason::ManualDisabled,
                owner: ReasonOwner::External
            }
        );
        let manual = Some((DisableReason::ManualDisabled, ReasonOwner::Manual));
        assert!(matches!(
            availability(facts(true, manual), 90, now()),
            Availability::Disabled {
                owner: ReasonOwner::Manual,
                ..
            }
        ));
        let standby = Some((DisableReason::OrderedStandby, ReasonOwner::Routing));
        assert_eq!(
            availability(facts(true, standby), 90, now()),
            Availability::NoData
        );
    }

    #[test]
    fn probe_failures_say_which_failure() {
        let mut st = ProbeState {
            last_error: Some("401".into()),
            consecutive_invalid: 1,
            ..ProbeState::default()
        };
        fn f(st: &ProbeState) -> AccountFacts<'_> {
            AccountFacts {
                disabled: false,
                reason: None,
                probe: Some(st),
            }
        }
        assert_eq!(availability(f(&st), 90, now()), Availability::Invalid);
        st.consecutive_invalid = 0;
        st.payment_problem = Some(true);
        assert_eq!(availability(f(&st), 90, now()), Availability::Deactivated);
        st.payment_problem = Some(false);
        assert_eq!(
            availability(f(&st), 90, now()),
            Availability::Exhausted { until: None }
        );
        st.payment_problem = None;
        st.last_error_at = Some(now());
        assert_eq!(
            availability(f(&st), 90, now()),
            Availability::Failing { since: Some(now()) }
        );
    }

    #[test]
    fn the_pool_is_usable_until_the_earliest_known_reset_of_its_exhausted_accounts() {
        let soon = now() + Duration::hours(3);
        let later = now() + Duration::days(2);
        let ex = |t| Availability::Exhausted { until: t };
        assert_eq!(
            pool_usable_until([ex(Some(later)), ex(Some(soon)), ex(None)]),
            Some(soon)
        );
        assert_eq!(
            pool_usable_until([ex(Some(soon)), Availability::Usable]),
            None
        );
        assert_eq!(pool_usable_until([Availability::Invalid]), None);
    }
}
