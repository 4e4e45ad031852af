//! The one usability rule of the crate: from an account's admin state, disable reason, last good
//! snapshot and probe state to an [`Availability`] — usable, or why not and until when. The
//! decision table, the active set, the free-account reorder, freshness, the alert pool view, the
//! pool gauges, the API and the router's patrol link all read this; nothing else decides
//! "usable". Pure: `now` and the account's effective [`QuotaPolicy`] (per-window thresholds,
//! `fiveHourRule`; docs/rules/patrol.md §9) are arguments.
//! Rules: docs/rules/patrol.md §5 (rules 0–4: exhausted by plan; 401/402), §5.1 (a person's disable is
//! never undone), §6.3 (usable = long window known and < T, paid five-hour < T), docs/rules/router.md §1
//! (every exclusion says why and until when).

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::account::{DisableReason, DisableRecord, ProbeState, QuotaSnapshot, ReasonOwner};
use super::policy::QuotaPolicy;

/// Whether an account can serve requests now, and if not why and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Availability {
    /// Long window known and under the threshold (paid plans: five-hour too), last probe fine.
    Usable,
    /// Quota reached by the plan rules, or a 402 that is not a deactivation (counted as
    /// exhausted, docs/rules/patrol.md §5 rule 3). `until` = the earliest instant the account is usable
    /// again: the latest reset among its exhausted windows; `None` when a needed reset is unknown.
    Exhausted { until: Option<DateTime<Utc>> },
    /// The last probe answered 401 (credential rejected; docs/rules/patrol.md §5 rules 1–2).
    Invalid,
    /// The last probe answered 402 with a deactivated workspace or account.
    Deactivated,
    /// The last probe failed otherwise (timeout, 5xx, 429, HTML, garbage): the older snapshot
    /// does not speak for the account. `since` = when that failure was seen.
    Failing { since: Option<DateTime<Utc>> },
    /// Never read successfully, no long-window (weekly / monthly) figure in the snapshot, or
    /// the snapshot is stale (a main window at ≥ 100 % whose reset already passed, patrol.md
    /// §3): nothing says the account is usable, nothing says it is exhausted.
    NoData,
    /// Disabled by a person or another tool (ManualDisabled, or disabled with no record of ours
    /// — provisional ManualDisabled, docs/rules/patrol.md §5.1): never used or enabled automatically.
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

impl<'a> AccountFacts<'a> {
    /// The facts as the store keeps them: CPA's `disabled` flag, the persisted reason record
    /// (if any) and the probe state (if the account was ever probed).
    pub fn from_parts(
        disabled: bool,
        record: Option<&DisableRecord>,
        probe: Option<&'a ProbeState>,
    ) -> Self {
        Self {
            disabled,
            reason: record.map(|r| (r.reason, r.owner)),
            probe,
        }
    }
}

/// The availability of one account (see the module rules). Order: a person's disable first;
/// then the last probe's failure (401 ⇒ Invalid, 402 ⇒ Deactivated / Exhausted, other ⇒
/// Failing); then the snapshot (none or no long window ⇒ NoData, exhausted ⇒ Exhausted with
/// its recovery time, else Usable). Patrol-owned disables (QuotaExhausted, OrderedStandby,
/// ErrorDisabled) are judged on the evidence: a standby account with usable quota is Usable,
/// so routing may enable it.
pub fn availability(
    facts: AccountFacts<'_>,
    policy: &QuotaPolicy,
    now: DateTime<Utc>,
) -> Availability {
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
        Some(s) => snapshot_availability(s, policy, now),
        None => Availability::NoData,
    }
}

/// The quota reading of a snapshot alone (docs/rules/patrol.md §3, §5 rules 3–4, §6.3), in this order:
/// exhausted by the plan rules under the account's effective `policy`
/// ([`QuotaSnapshot::exhausted_windows`] — a weekly / monthly window at or over its threshold,
/// the five-hour one per `fiveHourRule`, any main window at 100 % — or the main group's `limit_reached`, none of them
/// stale) ⇒ `Exhausted` until [`QuotaSnapshot::recovery_at`]; else a stale window (≥ 100 % with
/// its reset already past: no evidence either way) ⇒ `NoData`; else no long-window (weekly or
/// monthly) figure ⇒ `NoData`; else `Usable`. Exhaustion is read before the missing long
/// window, so a snapshot with only a five-hour window at 100 % is exhausted, not "no data".
pub fn snapshot_availability(
    s: &QuotaSnapshot,
    policy: &QuotaPolicy,
    now: DateTime<Utc>,
) -> Availability {
    if s.is_exhausted(policy, now) {
        return Availability::Exhausted {
            until: s.recovery_at(policy, now),
        };
    }
    if s.is_stale(now) || s.weekly_used().is_none() {
        return Availability::NoData;
    }
    Availability::Usable
}

/// The earliest known `until` over the `Exhausted` accounts, whatever the others are (alert
/// tables of a pool that still has capacity); `None` when no exhausted account has a known
/// reset.
pub fn earliest_recovery(
    accounts: impl IntoIterator<Item = Availability>,
) -> Option<DateTime<Utc>> {
    accounts.into_iter().filter_map(Availability::until).min()
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

/// Whether an account that is enabled in CPA is usable by the one rule ([`availability`] with
/// `disabled = false` and no disable reason: its reason does not matter while it is enabled).
/// Read by the round's cooldown-reset candidates (docs/patrol.md "Usability: one rule").
pub fn enabled_and_usable(state: &ProbeState, policy: &QuotaPolicy, now: DateTime<Utc>) -> bool {
    availability(
        AccountFacts::from_parts(false, None, Some(state)),
        policy,
        now,
    )
    .is_usable()
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
            availability(facts(true, None), &QuotaPolicy::uniform(90), now()),
            Availability::Disabled {
                reason: DisableReason::ManualDisabled,
                owner: ReasonOwner::External
            }
        );
        let manual = Some((DisableReason::ManualDisabled, ReasonOwner::Manual));
        assert!(matches!(
            availability(facts(true, manual), &QuotaPolicy::uniform(90), now()),
            Availability::Disabled {
                owner: ReasonOwner::Manual,
                ..
            }
        ));
        let standby = Some((DisableReason::OrderedStandby, ReasonOwner::Routing));
        assert_eq!(
            availability(facts(true, standby), &QuotaPolicy::uniform(90), now()),
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
        assert_eq!(
            availability(f(&st), &QuotaPolicy::uniform(90), now()),
            Availability::Invalid
        );
        st.consecutive_invalid = 0;
        st.payment_problem = Some(true);
        assert_eq!(
            availability(f(&st), &QuotaPolicy::uniform(90), now()),
            Availability::Deactivated
        );
        st.payment_problem = Some(false);
        assert_eq!(
            availability(f(&st), &QuotaPolicy::uniform(90), now()),
            Availability::Exhausted { until: None }
        );
        st.payment_problem = None;
        st.last_error_at = Some(now());
        assert_eq!(
            availability(f(&st), &QuotaPolicy::uniform(90), now()),
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

    // ---- The readings that won where the old definitions disagreed (docs/patrol.md
    // "Usability: one rule"). Each test names the case and fails under the losing reading.

    use crate::quota::WindowKind;
    use crate::testkit::{main_window, snapshot};

    fn w(kind: WindowKind, used: f64, reset_in: Duration) -> crate::quota::QuotaWindow {
        main_window(kind, used, now() + reset_in)
    }

    fn probed(snap: QuotaSnapshot) -> ProbeState {
        ProbeState {
            snapshot: Some(snap),
            ..ProbeState::default()
        }
    }

    fn enabled(st: &ProbeState) -> AccountFacts<'_> {
        AccountFacts::from_parts(false, None, Some(st))
    }

    #[test]
    fn a_failing_probe_over_a_usable_snapshot_is_failing_not_usable() {
        // QuotaSnapshot::is_usable said usable (it read the snapshot only); routing said not.
        let mut st = probed(snapshot(
            "plus",
            vec![w(WindowKind::Weekly, 10.0, Duration::days(3))],
            now(),
        ));
        assert_eq!(
            availability(enabled(&st), &QuotaPolicy::uniform(95), now()),
            Availability::Usable
        );
        st.last_error = Some("timeout".into());
        st.last_error_at = Some(now());
        assert_eq!(
            availability(enabled(&st), &QuotaPolicy::uniform(95), now()),
            Availability::Failing { since: Some(now()) }
        );
    }

    #[test]
    fn a_stale_window_is_no_data_unless_another_window_exhausts_the_account() {
        // is_usable / quota_eligibility said usable, the reorder's raw `weekly >= T` said
        // exhausted, decide kept it unchanged: no evidence either way.
        let stale = snapshot(
            "free",
            vec![w(WindowKind::Weekly, 100.0, -Duration::minutes(3))],
            now(),
        );
        assert_eq!(
            snapshot_availability(&stale, &QuotaPolicy::uniform(95), now()),
            Availability::NoData
        );
        let mut limit = stale.clone();
        limit.main_limit_reached = true;
        assert_eq!(
            snapshot_availability(&limit, &QuotaPolicy::uniform(95), now()),
            Availability::NoData,
            "a stale snapshot's limit_reached is no evidence either"
        );
        let paid = snapshot(
            "plus",
            vec![
                w(WindowKind::FiveHour, 97.0, Duration::hours(2)),
                w(WindowKind::Weekly, 100.0, -Duration::minutes(3)),
            ],
            now(),
        );
        assert_eq!(
            snapshot_availability(&paid, &QuotaPolicy::uniform(95), now()),
            Availability::Exhausted {
                until: Some(now() + Duration::hours(2))
            }
        );
    }

    #[test]
    fn a_plain_402_is_exhausted_with_no_known_end_whatever_the_older_snapshot_says() {
        // The alert pool and the gauges read the snapshot alone and counted it usable.
        let mut st = probed(snapshot(
            "plus",
            vec![w(WindowKind::Weekly, 10.0, Duration::days(3))],
            now(),
        ));
        st.last_error = Some("402".into());
        st.payment_problem = Some(false);
        assert_eq!(
            availability(enabled(&st), &QuotaPolicy::uniform(95), now()),
            Availability::Exhausted { until: None }
        );
        st.payment_problem = Some(true);
        assert_eq!(
            availability(enabled(&st), &QuotaPolicy::uniform(95), now()),
            Availability::Deactivated
        );
    }

    #[test]
    fn a_monthly_only_account_is_judged_on_its_monthly_window() {
        let reset = Duration::days(20);
        let under = snapshot("team", vec![w(WindowKind::Monthly, 60.0, reset)], now());
        assert_eq!(
            snapshot_availability(&under, &QuotaPolicy::uniform(95), now()),
            Availability::Usable
        );
        let over = snapshot("team", vec![w(WindowKind::Monthly, 96.0, reset)], now());
        assert_eq!(
            snapshot_availability(&over, &QuotaPolicy::uniform(95), now()),
            Availability::Exhausted {
                until: Some(now() + reset)
            }
        );
    }

    #[test]
    fn a_free_five_hour_window_exhausts_only_at_100_percent_until_its_own_reset() {
        // Rule 3 "any main window reached 100": decide and the alert pool said exhausted, the
        // reorder (weekly only) and freshness (long window only) did not.
        let five_reset = Duration::hours(2);
        let at = |five: f64| {
            snapshot(
                "free",
                vec![
                    w(WindowKind::FiveHour, five, five_reset),
                    w(WindowKind::Weekly, 10.0, Duration::days(3)),
                ],
                now(),
            )
        };
        assert_eq!(
            snapshot_availability(&at(97.0), &QuotaPolicy::uniform(95), now()),
            Availability::Usable,
            "a free plan's five-hour window is not decisive below 100 %"
        );
        assert_eq!(
            snapshot_availability(&at(100.0), &QuotaPolicy::uniform(95), now()),
            Availability::Exhausted {
                until: Some(now() + five_reset)
            }
        );
    }

    #[test]
    fn exhaustion_is_read_before_a_missing_long_window() {
        // decide disabled such a snapshot (rule 3) while is_usable / quota_eligibility called
        // it "no data"; with nothing exhausting it, no long window is no data (decide used to
        // call it usable and could enable it).
        let five_full = snapshot(
            "plus",
            vec![w(WindowKind::FiveHour, 100.0, Duration::hours(1))],
            now(),
        );
        assert!(snapshot_availability(&five_full, &QuotaPolicy::uniform(95), now()).is_exhausted());
        let five_low = snapshot(
            "plus",
            vec![w(WindowKind::FiveHour, 10.0, Duration::hours(1))],
            now(),
        );
        assert_eq!(
            snapshot_availability(&five_low, &QuotaPolicy::uniform(95), now()),
            Availability::NoData
        );
    }

    #[test]
    fn a_paid_account_is_exhausted_until_its_latest_exhausted_reset() {
        let weekly_reset = Duration::days(3);
        let s = snapshot(
            "plus",
            vec![
                w(WindowKind::FiveHour, 99.0, Duration::hours(2)),
                w(WindowKind::Weekly, 96.0, weekly_reset),
            ],
            now(),
        );
        assert_eq!(
            snapshot_availability(&s, &QuotaPolicy::uniform(95), now()),
            Availability::Exhausted {
                until: Some(now() + weekly_reset)
            },
            "a five-hour reset alone is no recovery while the weekly window is over"
        );
    }

    #[test]
    fn a_patrol_owned_disable_is_judged_on_the_evidence() {
        let st = probed(snapshot(
            "plus",
            vec![w(WindowKind::Weekly, 10.0, Duration::days(3))],
            now(),
        ));
        let rec = DisableRecord {
            reason: DisableReason::QuotaExhausted,
            owner: ReasonOwner::Patrol,
            set_at: now(),
        };
        assert_eq!(
            availability(
                AccountFacts::from_parts(true, Some(&rec), Some(&st)),
                &QuotaPolicy::uniform(95),
                now()
            ),
            Availability::Usable
        );
    }

    #[test]
    fn the_earliest_recovery_ignores_usable_accounts() {
        let soon = now() + Duration::hours(3);
        let ex = |t| Availability::Exhausted { until: t };
        assert_eq!(
            earliest_recovery([Availability::Usable, ex(None), ex(Some(soon))]),
            Some(soon)
        );
        assert_eq!(earliest_recovery([Availability::Usable]), None);
    }

    #[test]
    fn each_window_is_judged_on_its_own_threshold_and_the_five_hour_rule() {
        let paid = |five: f64, weekly: f64| {
            snapshot(
                "plus",
                vec![
                    w(WindowKind::FiveHour, five, Duration::hours(2)),
                    w(WindowKind::Weekly, weekly, Duration::days(3)),
                ],
                now(),
            )
        };
        let policy = QuotaPolicy {
            five_hour: 80,
            ..QuotaPolicy::uniform(95)
        };
        assert_eq!(
            snapshot_availability(&paid(85.0, 50.0), &policy, now()),
            Availability::Exhausted {
                until: Some(now() + Duration::hours(2))
            }
        );
        assert!(snapshot_availability(&paid(10.0, 94.0), &policy, now()).is_usable());
        assert!(snapshot_availability(&paid(10.0, 95.0), &policy, now()).is_exhausted());
        let never = QuotaPolicy {
            five_hour_rule: crate::policy::FiveHourRule::Never,
            ..policy
        };
        assert!(
            snapshot_availability(&paid(100.0, 50.0), &never, now()).is_usable(),
            "under `never` not even a full five-hour window disables"
        );
        let free = snapshot(
            "free",
            vec![
                w(WindowKind::FiveHour, 85.0, Duration::hours(2)),
                w(WindowKind::Weekly, 10.0, Duration::days(3)),
            ],
            now(),
        );
        assert!(snapshot_availability(&free, &policy, now()).is_usable());
        let all = QuotaPolicy {
            five_hour_rule: crate::policy::FiveHourRule::All,
            ..policy
        };
        assert!(snapshot_availability(&free, &all, now()).is_exhausted());
    }

    #[test]
    fn an_enabled_account_is_usable_only_on_a_usable_snapshot_and_a_good_last_probe() {
        let usable = snapshot(
            "plus",
            vec![w(WindowKind::Weekly, 10.0, Duration::days(3))],
            now(),
        );
        let exhausted = snapshot(
            "plus",
            vec![w(WindowKind::Weekly, 99.0, Duration::days(3))],
            now(),
        );
        let failing = ProbeState {
            last_error: Some("timeout".into()),
            last_error_at: Some(now()),
            ..probed(usable.clone())
        };
        let invalid = ProbeState {
            last_error: Some("401".into()),
            consecutive_invalid: 1,
            ..probed(usable.clone())
        };
        // (case, probe state, usable)
        let table = [
            ("never probed", ProbeState::default(), false),
            ("usable snapshot", probed(usable), true),
            ("exhausted snapshot", probed(exhausted), false),
            ("failing last probe", failing, false),
            ("401 last probe", invalid, false),
        ];
        for (case, st, expected) in table {
            assert_eq!(
                enabled_and_usable(&st, &QuotaPolicy::uniform(95), now()),
                expected,
                "{case}"
            );
        }
    }
}
