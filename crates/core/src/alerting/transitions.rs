//! The transition function (docs/rules/alerts.md §1–§2): one observation of a site and its previous
//! alert state in, the next state and the events out — exhaustion and recovery, the thin pool,
//! invalid accounts, reachability and `pool_low`, each family stepped by `family::step`. Pure:
//! `now` comes from the caller, ids are given to the events later.

use chrono::{DateTime, Duration, Utc};

use super::details::AlertDetails;
use super::event::{EventKind, Family};
use super::family::{AlertPolicy, Guard, SiteAlertState, Step, interval_passed, step};
use super::pool::{ForecastView, PoolView};

/// CPA management reachability of a site, as the caller knows it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reachability {
    /// First failed management call of the current failure streak; `None` ⇒ the last call worked.
    pub failing_since: Option<DateTime<Utc>>,
    /// Last successful management call (persisted across restarts).
    pub last_contact_at: Option<DateTime<Utc>>,
    /// CPA refused the management key (stored refusal): unreachable at once, since it does
    /// not heal by waiting and CPA bans the host after 5 refused keys (docs/rules/patrol.md §11).
    pub key_refused: bool,
    /// Why the calls fail, for the message (e.g. "management key refused at …").
    pub cause: Option<String>,
}

impl Reachability {
    /// Failing, and no success for `after` (counted from the last contact, or from the first
    /// failure when the site never answered).
    pub fn is_unreachable(&self, after: Duration, now: DateTime<Utc>) -> bool {
        if self.key_refused {
            return true;
        }
        match self.failing_since {
            None => false,
            Some(since) => now - self.last_contact_at.unwrap_or(since) >= after,
        }
    }
}

/// What one evaluation saw. Every part is optional: a completed round brings the pool and the
/// invalidated accounts, a scheduler tick or a failed round only the reachability.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub pool: Option<PoolView>,
    /// `priorityMinActiveCount` when priority routing is on.
    pub min_active: Option<u32>,
    /// Display names of accounts deleted or disabled as invalid (rule 1) in the round.
    pub invalid_accounts: Vec<String>,
    pub reachability: Option<Reachability>,
    /// The site's exhaustion forecast (`None`: not computed, e.g. it failed): `pool_low` and
    /// the projected dry time of every pool message.
    pub forecast: Option<ForecastView>,
    /// The site's `pool_low` settings; `None` = no `pool_low` evaluation.
    pub pool_low: Option<PoolLowRule>,
}

/// The site settings of `pool_low` (`earlyWarningMinutes`, `lowCapacityAccounts`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolLowRule {
    /// Raise when the site runs dry more than this before its earliest reset.
    pub early_warning: Duration,
    /// Raise when fewer usable accounts remain (capped at the accounts that count); 0 = off.
    pub low_capacity_accounts: u32,
}

/// Hysteresis of `pool_low` (docs/rules/alerts.md §1): the forecast part clears only once the site
/// runs dry at most `earlyWarningMinutes` − 30 min before its earliest reset (or not at all).
pub const POOL_LOW_CLEAR_MARGIN_MINUTES: i64 = 30;

/// Whether `pool_low` holds (docs/rules/alerts.md §4, docs/rules/alerts.md §1 with the hysteresis of
/// [`POOL_LOW_CLEAR_MARGIN_MINUTES`]):
/// - `Some(true)`: usable < min(`lowCapacityAccounts`, counted accounts), or the site runs dry
///   more than `earlyWarningMinutes` before its earliest reset (or runs dry and no reset is
///   known: nothing says capacity comes back, as `SiteForecast::dry_before_reset` reads it);
/// - `Some(false)`: capacity at or above that limit *and* the forecast either projects no dry
///   time before the reset or one at most `earlyWarningMinutes` − 30 min before it;
/// - `None` (no change): inside the hysteresis band, no forecast known while capacity is fine,
///   no account counts, or no account is usable (that is `all_exhausted`'s news, not a forecast).
pub fn pool_low_holds(
    pool: &PoolView,
    forecast: Option<&ForecastView>,
    rule: &PoolLowRule,
) -> Option<bool> {
    if pool.total == 0 || pool.usable == 0 {
        return None;
    }
    let limit = (rule.low_capacity_accounts as usize).min(pool.total);
    if pool.usable < limit {
        return Some(true);
    }
    let f = forecast?;
    if f.projected_dry_at.is_some() && f.earliest_reset_at.is_none() {
        return Some(true);
    }
    let clear_below = rule.early_warning - Duration::minutes(POOL_LOW_CLEAR_MARGIN_MINUTES);
    match f.lead() {
        Some(lead) if lead > rule.early_warning => Some(true),
        Some(lead) if lead > clear_below => None,
        _ => Some(false),
    }
}

/// An event the evaluation raised; the caller gives it a transition id and queues it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: EventKind,
    /// A repeat of a raised condition (`repeatHours`), not a new transition.
    pub reminder: bool,
    pub details: AlertDetails,
}

/// Result of [`evaluate`]: the next state (persist the families in `changed`) and the events.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub state: SiteAlertState,
    pub events: Vec<NewEvent>,
    pub changed: Vec<Family>,
}

/// Derives the events of one observation from the previous state (docs/rules/alerts.md §2):
/// - a condition (exhaustion, below minimum, unreachable) is told once when it starts, unless a
///   raising message of the family went out less than `min_interval` ago — then it is told at
///   the first evaluation after the interval if it still holds;
/// - `recovered` / `site_reachable` only after the good state held `recovery_confirm` *and* two
///   evaluations in a row; a relapse inside that span sends nothing;
/// - reminders every `repeat` while exhausted or unreachable;
/// - `below_min_active` stays quiet while the site is (being confirmed) exhausted or has no
///   usable account, and clears silently;
/// - invalid accounts are told once per round, pooled while the minimum interval holds them back.
pub fn evaluate(
    prev: &SiteAlertState,
    obs: &Observation,
    policy: &AlertPolicy,
    now: DateTime<Utc>,
) -> Evaluation {
    let mut state = prev.clone();
    let mut events = Vec::new();
    let fc = obs.forecast.as_ref();
    if let Some(pool) = &obs.pool {
        // Exhaustion: no account counting ⇒ no evidence either way.
        let exhausted = (pool.total > 0).then_some(pool.all_exhausted);
        match step(&mut state.exhaustion, exhausted, policy, now, Guard::FULL) {
            Some(Step::Raise { reminder }) => events.push(NewEvent {
                kind: EventKind::AllExhausted,
                reminder,
                details: AlertDetails::from_pool(pool, fc),
            }),
            Some(Step::Clear { raised_at }) => events.push(NewEvent {
                kind: EventKind::Recovered,
                reminder: false,
                details: AlertDetails {
                    raised_at,
                    ..AlertDetails::from_pool(pool, fc)
                },
            }),
            None => {}
        }
        let below = match obs.min_active {
            Some(m) if pool.usable < m as usize => {
                if pool.usable == 0 || state.exhaustion.raised {
                    None
                } else {
                    Some(true)
                }
            }
            _ => Some(false),
        };
        if let Some(Step::Raise { reminder }) =
            step(&mut state.min_active, below, policy, now, Guard::SILENT)
        {
            events.push(NewEvent {
                kind: EventKind::BelowMinActive,
                reminder,
                details: AlertDetails {
                    min_active: obs.min_active,
                    ..AlertDetails::from_pool(pool, fc)
                },
            });
        }
        if let Some(rule) = &obs.pool_low {
            pool_low_step(&mut state, pool, fc, rule, policy, now, &mut events);
        }
    }

    let inv = &mut state.invalid_accounts;
    for name in &obs.invalid_accounts {
        if !inv.pending_accounts.contains(name) {
            inv.pending_accounts.push(name.clone());
        }
    }
    if !inv.pending_accounts.is_empty() && interval_passed(inv, policy, now) {
        inv.last_raise_sent_at = Some(now);
        let names = std::mem::take(&mut inv.pending_accounts);
        events.push(NewEvent {
            kind: EventKind::InvalidAccounts,
            reminder: false,
            details: AlertDetails {
                invalid_accounts: names,
                ..obs
                    .pool
                    .as_ref()
                    .map(|p| AlertDetails::from_pool(p, fc))
                    .unwrap_or_default()
            },
        });
    }

    if let Some(r) = &obs.reachability {
        let st = &state.reachability;
        let holds = if r.is_unreachable(policy.unreachable_after, now) {
            Some(true)
        } else if !st.raised {
            Some(false)
        } else if r.failing_since.is_some() {
            // Still failing while told unreachable: the confirm span of a recovery restarts.
            Some(true)
        } else if r
            .last_contact_at
            .is_some_and(|c| st.raised_at.is_none_or(|t| c > t))
        {
            Some(false)
        } else {
            // No failure known but no success since it was told either (e.g. after a restart).
            None
        };
        let details = AlertDetails {
            last_contact_at: r.last_contact_at,
            failing_since: r.failing_since,
            cause: r.cause.clone(),
            ..Default::default()
        };
        match step(&mut state.reachability, holds, policy, now, Guard::FULL) {
            Some(Step::Raise { reminder }) => events.push(NewEvent {
                kind: EventKind::SiteUnreachable,
                reminder,
                details,
            }),
            Some(Step::Clear { raised_at }) => events.push(NewEvent {
                kind: EventKind::SiteReachable,
                reminder: false,
                details: AlertDetails {
                    raised_at,
                    ..details
                },
            }),
            None => {}
        }
    }

    let changed = Family::ALL
        .into_iter()
        .filter(|f| prev.get(*f) != state.get(*f))
        .collect();
    Evaluation {
        state,
        events,
        changed,
    }
}

/// The `pool_low` family: quiet while the site is (being confirmed) exhausted, like
/// `below_min_active`; a clear is told as `pool_low_cleared` after the flap guard; no reminders.
fn pool_low_step(
    state: &mut SiteAlertState,
    pool: &PoolView,
    fc: Option<&ForecastView>,
    rule: &PoolLowRule,
    policy: &AlertPolicy,
    now: DateTime<Utc>,
    events: &mut Vec<NewEvent>,
) {
    let holds = if state.exhaustion.raised {
        None
    } else {
        pool_low_holds(pool, fc, rule)
    };
    let details = AlertDetails {
        early_warning_minutes: Some(rule.early_warning.num_minutes()),
        low_capacity_accounts: Some(rule.low_capacity_accounts),
        ..AlertDetails::from_pool(pool, fc)
    };
    match step(&mut state.pool_low, holds, policy, now, Guard::TOLD) {
        Some(Step::Raise { reminder }) => events.push(NewEvent {
            kind: EventKind::PoolLow,
            reminder,
            details,
        }),
        Some(Step::Clear { raised_at }) => events.push(NewEvent {
            kind: EventKind::PoolLowCleared,
            reminder: false,
            details: AlertDetails {
                raised_at,
                ..details
            },
        }),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerting::event::Severity;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn min(n: i64) -> Duration {
        Duration::minutes(n)
    }

    fn pool(total: usize, usable: usize) -> PoolView {
        PoolView {
            total,
            usable,
            all_exhausted: total > 0 && usable == 0,
            earliest_reset_at: Some(t0() + Duration::hours(3)),
            accounts: vec![],
            omitted_accounts: 0,
            exhausted: total - usable,
            invalid: 0,
        }
    }

    fn round(total: usize, usable: usize) -> Observation {
        Observation {
            pool: Some(pool(total, usable)),
            ..Default::default()
        }
    }

    /// Runs `obs` at `t0 + minutes` and returns the kinds raised (reminders marked with `+`).
    struct Run {
        state: SiteAlertState,
        policy: AlertPolicy,
    }

    impl Run {
        fn new(policy: AlertPolicy) -> Self {
            Self {
                state: SiteAlertState::default(),
                policy,
            }
        }

        fn at(&mut self, minutes: i64, obs: Observation) -> Vec<String> {
            let e = evaluate(&self.state, &obs, &self.policy, t0() + min(minutes));
            self.state = e.state;
            e.events
                .iter()
                .map(|ev| format!("{}{}", ev.kind.as_str(), if ev.reminder { "+" } else { "" }))
                .collect()
        }
    }

    #[test]
    fn exhaustion_is_told_once_per_transition_not_per_round() {
        let mut r = Run::new(AlertPolicy::default());
        assert!(r.at(0, round(3, 2)).is_empty());
        assert_eq!(r.at(10, round(3, 0)), vec!["all_exhausted"]);
        assert!(r.at(20, round(3, 0)).is_empty(), "dedupe");
        assert!(r.at(30, round(3, 0)).is_empty());
        assert!(r.state.exhaustion.raised);
    }

    #[test]
    fn recovery_waits_for_the_confirm_time_and_two_evaluations_whichever_is_later() {
        let mut r = Run::new(AlertPolicy::default());
        r.at(0, round(3, 0));
        assert!(r.at(1, round(3, 1)).is_empty(), "first good evaluation");
        assert!(
            r.at(2, round(3, 1)).is_empty(),
            "two evaluations but only 1 of 10 minutes"
        );
        assert_eq!(r.at(11, round(3, 1)), vec!["recovered"]);
        assert!(r.at(12, round(3, 1)).is_empty());

        // The time alone is not enough either: one evaluation long after.
        let mut r = Run::new(AlertPolicy::default());
        r.at(0, round(3, 0));
        assert!(r.at(60, round(3, 1)).is_empty(), "one evaluation only");
        assert!(
            r.at(61, round(3, 1)).is_empty(),
            "the span counts from the first good evaluation"
        );
        assert_eq!(r.at(70, round(3, 1)), vec!["recovered"]);
    }

    #[test]
    fn a_flap_inside_the_confirm_span_sends_nothing_new() {
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, round(3, 0)), vec!["all_exhausted"]);
        assert!(r.at(3, round(3, 1)).is_empty());
        assert!(r.at(6, round(3, 0)).is_empty(), "relapse: still raised");
        assert!(r.at(9, round(3, 1)).is_empty(), "the confirm span restarts");
        assert!(r.at(15, round(3, 1)).is_empty(), "6 of 10 minutes");
        assert_eq!(r.at(19, round(3, 1)), vec!["recovered"]);
    }

    #[test]
    fn recovered_carries_when_the_exhaustion_was_told() {
        let mut state = SiteAlertState::default();
        let p = AlertPolicy::default();
        for (m, usable) in [(0, 0), (1, 1), (11, 1)] {
            let e = evaluate(&state, &round(2, usable), &p, t0() + min(m));
            state = e.state;
            if m == 11 {
                assert_eq!(e.events[0].kind, EventKind::Recovered);
                assert_eq!(e.events[0].details.raised_at, Some(t0()));
                assert_eq!(e.events[0].details.usable_accounts, Some(1));
            }
        }
    }

    #[test]
    fn a_new_exhaustion_within_the_minimum_interval_waits_for_it_and_is_dropped_if_it_ends() {
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, round(2, 0)), vec!["all_exhausted"]);
        r.at(1, round(2, 1));
        assert_eq!(
            r.at(11, round(2, 1)),
            vec!["recovered"],
            "recovered is exempt"
        );
        assert!(
            r.at(15, round(2, 0)).is_empty(),
            "15 < 30 minutes since the last"
        );
        assert!(r.at(25, round(2, 0)).is_empty());
        assert_eq!(
            r.at(31, round(2, 0)),
            vec!["all_exhausted"],
            "still exhausted after the interval"
        );

        let mut r = Run::new(AlertPolicy::default());
        r.at(0, round(2, 0));
        r.at(1, round(2, 1));
        r.at(11, round(2, 1));
        assert!(r.at(15, round(2, 0)).is_empty());
        assert!(
            r.at(20, round(2, 1)).is_empty(),
            "held back, then over: nothing to clear"
        );
        assert!(r.at(40, round(2, 1)).is_empty());
        assert!(!r.state.exhaustion.raised);
    }

    #[test]
    fn reminders_repeat_while_exhausted_only_when_configured() {
        let mut r = Run::new(AlertPolicy {
            repeat: Some(Duration::hours(2)),
            ..Default::default()
        });
        assert_eq!(r.at(0, round(1, 0)), vec!["all_exhausted"]);
        assert!(r.at(60, round(1, 0)).is_empty());
        assert_eq!(r.at(120, round(1, 0)), vec!["all_exhausted+"]);
        assert!(r.at(180, round(1, 0)).is_empty());
        assert_eq!(r.at(245, round(1, 0)), vec!["all_exhausted+"]);

        let mut never = Run::new(AlertPolicy::default());
        never.at(0, round(1, 0));
        assert!(never.at(60 * 24 * 7, round(1, 0)).is_empty());
    }

    #[test]
    fn a_site_without_counted_accounts_neither_raises_nor_clears() {
        let mut r = Run::new(AlertPolicy::default());
        assert!(r.at(0, round(0, 0)).is_empty());
        r.at(1, round(2, 0));
        assert!(r.at(20, round(0, 0)).is_empty());
        assert!(r.at(40, round(0, 0)).is_empty());
        assert!(r.state.exhaustion.raised, "no account is not a recovery");
    }

    #[test]
    fn below_min_active_is_told_when_the_pool_thins_and_stays_quiet_while_exhausted() {
        let with_min = |total, usable| Observation {
            min_active: Some(2),
            ..round(total, usable)
        };
        let mut r = Run::new(AlertPolicy::default());
        assert!(r.at(0, with_min(4, 3)).is_empty());
        assert_eq!(r.at(10, with_min(4, 1)), vec!["below_min_active"]);
        assert!(r.at(20, with_min(4, 1)).is_empty(), "dedupe");
        assert_eq!(r.at(30, with_min(4, 0)), vec!["all_exhausted"]);
        assert!(
            r.at(31, with_min(4, 1)).is_empty(),
            "exhaustion being confirmed"
        );
        assert_eq!(r.at(41, with_min(4, 1)), vec!["recovered"]);
        assert!(
            r.at(50, with_min(4, 2)).is_empty(),
            "back to the minimum clears quietly"
        );
        assert!(!r.state.min_active.raised);
        assert_eq!(r.at(60, with_min(4, 1)), vec!["below_min_active"]);
        // Without priority routing there is no minimum.
        assert!(r.at(70, round(4, 1)).is_empty());
        assert!(!r.state.min_active.raised);
    }

    #[test]
    fn a_straight_fall_to_zero_tells_exhaustion_and_the_way_back_tells_the_thin_pool() {
        let with_min = |usable| Observation {
            min_active: Some(3),
            ..round(5, usable)
        };
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, with_min(0)), vec!["all_exhausted"]);
        r.at(5, with_min(1));
        assert_eq!(
            r.at(15, with_min(1)),
            vec!["recovered", "below_min_active"],
            "recovery first, then the thin pool"
        );
    }

    #[test]
    fn invalid_accounts_are_told_per_round_and_pooled_inside_the_minimum_interval() {
        let invalid = |names: &[&str]| Observation {
            invalid_accounts: names.iter().map(|s| s.to_string()).collect(),
            ..round(3, 2)
        };
        let mut state = SiteAlertState::default();
        let p = AlertPolicy::default();
        let mut at = |m: i64, obs: Observation| {
            let e = evaluate(&state, &obs, &p, t0() + min(m));
            state = e.state;
            e.events
        };
        let first = at(0, invalid(&["a@example.com"]));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].kind, EventKind::InvalidAccounts);
        assert_eq!(first[0].details.invalid_accounts, vec!["a@example.com"]);
        assert_eq!(first[0].details.total_accounts, Some(3));
        assert!(at(5, invalid(&[])).is_empty(), "nothing new, nothing sent");
        assert!(at(10, invalid(&["b@example.com"])).is_empty(), "held back");
        assert!(at(20, invalid(&["c@example.com", "b@example.com"])).is_empty());
        let later = at(31, invalid(&[]));
        assert_eq!(
            later[0].details.invalid_accounts,
            vec!["b@example.com", "c@example.com"],
            "pooled, each once"
        );
        assert!(at(70, invalid(&[])).is_empty());
    }

    #[test]
    fn unreachable_counts_from_the_last_contact_and_reachable_is_flap_guarded() {
        let contact = t0();
        let reach = |failing_min: Option<i64>| Observation {
            reachability: Some(Reachability {
                failing_since: failing_min.map(|m| t0() + min(m)),
                last_contact_at: Some(contact),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut r = Run::new(AlertPolicy::default());
        assert!(r.at(5, reach(Some(3))).is_empty(), "5 < 15 minutes");
        assert!(r.at(14, reach(Some(3))).is_empty());
        assert_eq!(r.at(15, reach(Some(3))), vec!["site_unreachable"]);
        assert!(r.at(16, reach(Some(3))).is_empty(), "dedupe");
        // CPA answers again (the caller's contact moves on, failures end).
        let back = |m: i64| Observation {
            reachability: Some(Reachability {
                failing_since: None,
                last_contact_at: Some(t0() + min(m)),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(r.at(20, back(20)).is_empty());
        assert!(r.at(21, back(21)).is_empty());
        assert_eq!(r.at(30, back(30)), vec!["site_reachable"]);
        // Not failing at all is never unreachable, however old the last contact.
        assert!(
            !Reachability {
                failing_since: None,
                last_contact_at: Some(t0()),
                ..Default::default()
            }
            .is_unreachable(min(15), t0() + Duration::days(3))
        );
        // A site that never answered counts from its first failure.
        let never = Reachability {
            failing_since: Some(t0()),
            last_contact_at: None,
            ..Default::default()
        };
        assert!(!never.is_unreachable(min(15), t0() + min(14)));
        assert!(never.is_unreachable(min(15), t0() + min(15)));
    }

    #[test]
    fn reachable_needs_a_success_after_the_alert_and_a_relapse_restarts_the_span() {
        let obs = |failing: Option<i64>, contact: Option<i64>| Observation {
            reachability: Some(Reachability {
                failing_since: failing.map(|m| t0() + min(m)),
                last_contact_at: contact.map(|m| t0() + min(m)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(15, obs(Some(1), Some(0))), vec!["site_unreachable"]);
        // A restart forgets the failures; the old contact is no evidence of recovery.
        assert!(r.at(16, obs(None, Some(0))).is_empty());
        assert!(r.at(40, obs(None, Some(0))).is_empty());
        assert!(r.state.reachability.raised);
        assert_eq!(r.state.reachability.clear_evaluations, 0);
        // CPA answers at 41, fails again at 45: the recovery is not confirmed.
        assert!(r.at(41, obs(None, Some(41))).is_empty());
        assert!(r.at(45, obs(Some(45), Some(41))).is_empty());
        assert!(
            r.at(52, obs(None, Some(52))).is_empty(),
            "the span restarted at 52"
        );
        assert!(r.at(60, obs(None, Some(60))).is_empty());
        assert_eq!(r.at(62, obs(None, Some(62))), vec!["site_reachable"]);
    }

    #[test]
    fn an_observation_without_the_family_leaves_its_state_alone() {
        let mut r = Run::new(AlertPolicy::default());
        r.at(0, round(2, 0));
        let before = r.state.clone();
        let e = evaluate(&before, &Observation::default(), &r.policy, t0() + min(90));
        assert!(e.events.is_empty());
        assert!(e.changed.is_empty());
        assert_eq!(e.state, before);
    }

    #[test]
    fn changed_names_exactly_the_families_whose_state_moved() {
        let e = evaluate(
            &SiteAlertState::default(),
            &Observation {
                invalid_accounts: vec!["x".into()],
                ..round(1, 0)
            },
            &AlertPolicy::default(),
            t0(),
        );
        assert_eq!(e.changed, vec![Family::Exhaustion, Family::InvalidAccounts]);
    }

    /// A round whose forecast runs dry `lead` minutes before a reset at t0 + 10 h (`None`: not
    /// projected dry), with `earlyWarningMinutes` 120 and `lowCapacityAccounts` 2.
    fn burning(total: usize, usable: usize, lead: Option<i64>) -> Observation {
        let reset = t0() + Duration::hours(10);
        Observation {
            forecast: Some(ForecastView {
                projected_dry_at: lead.map(|m| reset - min(m)),
                earliest_reset_at: Some(reset),
                burn_per_hour: 12.5,
                remaining_percent: 80.0,
            }),
            pool_low: Some(PoolLowRule {
                early_warning: min(120),
                low_capacity_accounts: 2,
            }),
            ..round(total, usable)
        }
    }

    #[test]
    fn pool_low_is_raised_once_when_the_forecast_runs_dry_inside_the_warning_window() {
        let mut r = Run::new(AlertPolicy::default());
        assert!(r.at(0, burning(4, 4, None)).is_empty(), "no dry time");
        assert!(
            r.at(10, burning(4, 4, Some(120))).is_empty(),
            "exactly 120 min is not more"
        );
        assert_eq!(r.at(20, burning(4, 4, Some(121))), vec!["pool_low"]);
        assert!(r.at(30, burning(4, 4, Some(300))).is_empty(), "dedupe");
        assert!(
            r.at(600, burning(4, 4, Some(300))).is_empty(),
            "no reminders for a warning"
        );
        let e = evaluate(
            &SiteAlertState::default(),
            &burning(4, 4, Some(180)),
            &AlertPolicy::default(),
            t0(),
        );
        let d = &e.events[0].details;
        assert_eq!(e.events[0].kind, EventKind::PoolLow);
        assert_eq!(
            d.projected_dry_at,
            Some(t0() + Duration::hours(10) - min(180))
        );
        assert_eq!(d.forecast_reset_at, Some(t0() + Duration::hours(10)));
        assert_eq!(d.burn_per_hour, Some(12.5));
        assert_eq!(
            (d.early_warning_minutes, d.low_capacity_accounts),
            (Some(120), Some(2))
        );
        assert_eq!(EventKind::PoolLow.severity(), Severity::Warning);
    }

    #[test]
    fn pool_low_clears_only_30_minutes_back_outside_the_window_and_after_the_flap_guard() {
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, burning(4, 4, Some(200))), vec!["pool_low"]);
        // 91..=120 min before the reset: inside the hysteresis band, nothing moves.
        assert!(r.at(5, burning(4, 4, Some(110))).is_empty());
        assert!(r.at(30, burning(4, 4, Some(91))).is_empty());
        assert!(r.state.pool_low.raised);
        assert_eq!(
            r.state.pool_low.clear_evaluations, 0,
            "the band is no clear"
        );
        // 90 min: clear, but told only after 10 minutes and two evaluations.
        assert!(r.at(40, burning(4, 4, Some(90))).is_empty());
        assert!(r.at(45, burning(4, 4, None)).is_empty());
        assert_eq!(r.at(50, burning(4, 4, None)), vec!["pool_low_cleared"]);
        assert!(!r.state.pool_low.raised);
        assert!(
            r.at(60, burning(4, 4, Some(100))).is_empty(),
            "band: stays clear"
        );
        // A relapse inside the confirm span of a clear sends nothing.
        let mut r = Run::new(AlertPolicy::default());
        r.at(0, burning(4, 4, Some(200)));
        r.at(1, burning(4, 4, None));
        assert!(r.at(5, burning(4, 4, Some(200))).is_empty());
        assert!(r.at(12, burning(4, 4, None)).is_empty(), "span restarted");
        assert!(r.at(20, burning(4, 4, None)).is_empty());
        assert_eq!(r.at(22, burning(4, 4, None)), vec!["pool_low_cleared"]);
    }

    #[test]
    fn pool_low_is_raised_by_low_capacity_and_cleared_back_at_the_limit() {
        let mut r = Run::new(AlertPolicy::default());
        assert!(
            r.at(0, burning(4, 2, None)).is_empty(),
            "2 usable = the limit"
        );
        assert_eq!(r.at(10, burning(4, 1, None)), vec!["pool_low"]);
        // Capacity back, but the forecast now says dry too early: still held.
        assert!(r.at(20, burning(4, 3, Some(150))).is_empty());
        assert!(r.at(40, burning(4, 3, Some(150))).is_empty());
        assert!(r.state.pool_low.raised);
        r.at(50, burning(4, 3, None));
        assert_eq!(r.at(60, burning(4, 3, None)), vec!["pool_low_cleared"]);
        // The limit is capped at the accounts that count: a one-account site is not "low".
        let mut one = Run::new(AlertPolicy::default());
        assert!(one.at(0, burning(1, 1, None)).is_empty());
        // Dry with no reset known: nothing says capacity comes back.
        let no_reset = ForecastView {
            projected_dry_at: Some(t0() + min(30)),
            earliest_reset_at: None,
            ..Default::default()
        };
        let rule = PoolLowRule {
            early_warning: min(120),
            low_capacity_accounts: 2,
        };
        assert_eq!(
            pool_low_holds(&pool(4, 4), Some(&no_reset), &rule),
            Some(true)
        );
        // 0 turns the capacity rule off.
        let off = PoolLowRule {
            early_warning: min(120),
            low_capacity_accounts: 0,
        };
        assert_eq!(pool_low_holds(&pool(4, 1), None, &off), None);
    }

    #[test]
    fn pool_low_stays_quiet_while_the_site_is_exhausted_and_without_a_forecast() {
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, burning(3, 0, Some(500))), vec!["all_exhausted"]);
        assert!(
            !r.state.pool_low.raised,
            "no usable account: exhaustion's news"
        );
        r.at(5, burning(3, 3, Some(500)));
        assert!(
            r.at(8, burning(3, 3, Some(500))).is_empty(),
            "recovery being confirmed: still quiet"
        );
        assert_eq!(
            r.at(15, burning(3, 3, Some(500))),
            vec!["recovered", "pool_low"],
            "after the recovery, the early warning"
        );
        // No forecast known: the forecast part says nothing (a raised warning is kept).
        let held = r.state.clone();
        let e = evaluate(
            &held,
            &Observation {
                forecast: None,
                ..burning(3, 3, None)
            },
            &r.policy,
            t0() + min(100),
        );
        assert!(e.events.is_empty());
        assert!(e.state.pool_low.raised);
    }

    #[test]
    fn a_restart_resumes_pool_low_from_the_stored_state_without_resending() {
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, burning(4, 4, Some(200))), vec!["pool_low"]);
        r.at(3, burning(4, 4, None));
        // What the store keeps: the family's JSON; a new process loads it.
        let json = serde_json::to_string(&r.state.pool_low).unwrap();
        let mut after = Run::new(AlertPolicy::default());
        after.state.pool_low = serde_json::from_str(&json).unwrap();
        assert!(
            after.at(5, burning(4, 4, Some(200))).is_empty(),
            "no resend"
        );
        after.at(6, burning(4, 4, None));
        assert!(after.at(10, burning(4, 4, None)).is_empty());
        assert_eq!(after.at(16, burning(4, 4, None)), vec!["pool_low_cleared"]);
    }

    proptest! {
        #[test]
        fn one_raise_per_transition_whatever_the_sequence(
            seq in proptest::collection::vec(0usize..3, 1..40),
        ) {
            // Usable counts over 2 accounts, one evaluation every 7 minutes: between two
            // `all_exhausted` there is always a `recovered`, and vice versa.
            let mut state = SiteAlertState::default();
            let p = AlertPolicy::default();
            let mut last: Option<EventKind> = None;
            for (i, usable) in seq.into_iter().enumerate() {
                let e = evaluate(&state, &round(2, usable.min(2)), &p, t0() + min(7 * i as i64));
                state = e.state;
                for ev in e.events {
                    prop_assert_ne!(Some(ev.kind), last);
                    last = Some(ev.kind);
                }
            }
        }
    }
}
