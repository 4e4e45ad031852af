//! Per-account decisions: what the patrol does with an account given what this round learned.
//! Owns the decision table of docs/rules/patrol.md §5 (rules 0–9), action modes and the ownership
//! rules of disable reasons (§5.1). Whether a snapshot is exhausted or usable is read from
//! `core::availability`; this module only adds the explanation. Pure: no I/O; `now` is an
//! argument.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::account::{DisableReason, QuotaSnapshot, ReasonOwner};
use super::availability::{Availability, snapshot_availability};
use super::oplog::FlipReset;
use super::policy::{PolicySource, QuotaPolicy, applied_threshold, kind_name};
use super::quota::WindowKind;
use super::settings::AutoActionMode;

/// What to do with an account in CPA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Keep,
    Disable,
    Enable,
    Delete,
}

impl Action {
    /// The API / log spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Keep => "keep",
            Action::Disable => "disable",
            Action::Enable => "enable",
            Action::Delete => "delete",
        }
    }
}

/// What the round learned about one account.
#[derive(Debug, Clone, PartialEq)]
pub enum Evidence<'a> {
    /// A usable snapshot: fresh from a probe or reused from the cache.
    Snapshot(&'a QuotaSnapshot),
    /// 401; `streak` = consecutive 401 answers including this one.
    Invalid { streak: u32 },
    /// 402: `deactivated` when the body says the workspace/account is deactivated.
    Payment { deactivated: bool },
    /// Any other probe failure (timeouts, 5xx, 429, HTML 403, unparsable, inconclusive 2xx).
    /// The last good snapshot is kept unchanged.
    Error { message: &'a str },
    /// No evaluation this round (no auth_index, back-off, skip rule): keep.
    NotEvaluated { why: &'a str },
}

/// The account facts a decision needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Subject {
    /// Disabled in CPA.
    pub disabled: bool,
    /// Persisted reason and owner; `None` = no record of ours.
    pub reason: Option<(DisableReason, ReasonOwner)>,
    /// The reset the account waited for by its stored snapshot, before this round's probe
    /// (`core::freshness::awaited_reset`); a re-enable names it as the reset that passed.
    pub awaited_reset: Option<DateTime<Utc>>,
}

/// The knobs a decision depends on (docs/rules/patrol.md §1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// The account's effective quota policy (per-window thresholds, `fiveHourRule`,
    /// `neverAct`; docs/rules/patrol.md §9).
    pub quota: QuotaPolicy,
    pub invalid_confirmations: u32,
    pub mode: AutoActionMode,
    pub auto_enable_recovered: bool,
    pub priority_routing: bool,
}

/// A disable reason the caller must persist (or clear) after the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasonChange {
    /// Leave the stored reason as it is.
    Unchanged,
    /// Store this reason with this owner.
    Set(DisableReason, ReasonOwner),
    /// Remove the stored reason (the account is or becomes enabled).
    Clear,
}

/// Outcome of [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Action to execute (after the action mode was applied).
    pub action: Action,
    /// Row of the decision table that matched (0–9; docs/rules/patrol.md §5).
    pub rule: u8,
    /// Human explanation, English.
    pub reason: String,
    /// Reason the account carries after this decision (for the API), if any.
    pub disable_reason: Option<DisableReason>,
    /// What to persist.
    pub reason_change: ReasonChange,
    /// Quota reached by the plan rules (threshold or limit reached).
    pub is_quota_reached: bool,
    /// The reset this decision is about, for its operation-log entries: for a quota-exhausted
    /// snapshot (rules 3, 4: disable, already disabled, adopted) the one the account waits
    /// for (`Availability::Exhausted`'s `until`; `None` when unknown, as for a plain 402); for
    /// a re-enable (rule 5) the one that passed ([`Subject::awaited_reset`]); else `None`.
    pub reset_at: Option<DateTime<Utc>>,
}

impl Decision {
    /// The reset this decision's log entries name: a quota disable the one it waits for
    /// (unknown included), an exhausted account kept disabled its known one, a re-enable the
    /// one that passed (when known); nothing for other decisions.
    pub fn flip_reset(&self) -> FlipReset {
        match (self.action, self.reset_at) {
            (Action::Disable, at) if self.is_quota_reached => FlipReset::Awaited(at),
            (Action::Keep, Some(at)) => FlipReset::Awaited(Some(at)),
            (Action::Enable, Some(at)) => FlipReset::Passed(at),
            _ => FlipReset::None,
        }
    }
}

fn keep(rule: u8, reason: impl Into<String>, subject: &Subject) -> Decision {
    Decision {
        action: Action::Keep,
        rule,
        reason: reason.into(),
        disable_reason: subject.reason.map(|(r, _)| r),
        reason_change: ReasonChange::Unchanged,
        is_quota_reached: false,
        reset_at: None,
    }
}

fn fmt_pct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.0}%"))
}

/// Rule 8 of the decision table: the probe failed (timeout, 5xx, 429, HTML 403, garbage) and
/// the account is kept as it was (docs/rules/patrol.md §5).
pub const RULE_PROBE_ERROR: u8 = 8;

/// Decides what to do with one account (docs/rules/patrol.md §5, top-down; §5.1 ownership).
///
/// Guarantees: an [`Evidence::Error`] or [`Evidence::NotEvaluated`] never yields an action;
/// a ManualDisabled account is never enabled; a disabled account without a record of ours is
/// classified only from a snapshot (exhausted ⇒ adopted as QuotaExhausted, usable ⇒
/// ManualDisabled/external); a `neverAct` account (docs/rules/patrol.md §9) is never acted on and its
/// stored reason never changes: the decision the table would take is kept in the text
/// ("…; neverAct: observed only"), `is_quota_reached` still counts it.
pub fn decide(
    subject: &Subject,
    evidence: &Evidence<'_>,
    policy: &Policy,
    now: DateTime<Utc>,
) -> Decision {
    let d = decide_table(subject, evidence, policy, now);
    if !policy.quota.never_act {
        return d;
    }
    let reason = if d.action == Action::Keep {
        d.reason
    } else {
        format!(
            "{}; neverAct: observed only, not {}d",
            d.reason,
            d.action.as_str()
        )
    };
    Decision {
        action: Action::Keep,
        reason,
        disable_reason: subject.reason.map(|(r, _)| r),
        reason_change: ReasonChange::Unchanged,
        ..d
    }
}

fn decide_table(
    subject: &Subject,
    evidence: &Evidence<'_>,
    policy: &Policy,
    now: DateTime<Utc>,
) -> Decision {
    let reason = subject.reason.map(|(r, _)| r);
    // Rule 0: a person's (or another tool's) disable is never undone.
    let manual = subject.disabled && reason == Some(DisableReason::ManualDisabled);
    let unowned = subject.disabled && reason.is_none();

    match evidence {
        Evidence::NotEvaluated { why } => keep(9, format!("not evaluated: {why}"), subject),
        Evidence::Error { message } => keep(
            RULE_PROBE_ERROR,
            format!("probe failed, nothing changed: {message}"),
            subject,
        ),
        _ if manual => {
            let mut d = keep(0, "disabled manually; the patrol leaves it alone", subject);
            if let Evidence::Snapshot(s) = evidence {
                d.is_quota_reached = snapshot_availability(s, &policy.quota, now).is_exhausted();
            }
            d
        }
        Evidence::Invalid { streak } => decide_invalid(subject, *streak, policy, unowned),
        Evidence::Payment { deactivated: true } => {
            if unowned {
                return keep(
                    0,
                    "deactivated (402), disabled by someone else: left alone",
                    subject,
                );
            }
            disable_for(
                subject,
                3,
                DisableReason::ErrorDisabled,
                "workspace or account deactivated (402)",
                policy,
                true,
            )
        }
        Evidence::Payment { deactivated: false } => {
            if unowned {
                return keep(
                    0,
                    "payment required (402), disabled by someone else: left alone",
                    subject,
                );
            }
            disable_for(
                subject,
                3,
                DisableReason::QuotaExhausted,
                "payment required (402): counted as exhausted",
                policy,
                true,
            )
        }
        Evidence::Snapshot(s) => decide_snapshot(subject, s, policy, now, unowned),
    }
}

fn decide_invalid(subject: &Subject, streak: u32, policy: &Policy, unowned: bool) -> Decision {
    let needed = policy.invalid_confirmations.max(1);
    if streak < needed {
        return keep(
            2,
            format!("401 invalid credential, awaiting confirmation {streak}/{needed}"),
            subject,
        );
    }
    if unowned {
        return keep(
            0,
            "401 confirmed, but disabled by someone else: left alone",
            subject,
        );
    }
    let text = format!("401 invalid credential confirmed {streak}/{needed}");
    match policy.mode {
        AutoActionMode::None => {
            let mut d = keep(
                1,
                format!("{text}; action mode none: not acted on"),
                subject,
            );
            d.disable_reason = Some(DisableReason::ErrorDisabled);
            d
        }
        AutoActionMode::Delete => Decision {
            action: Action::Delete,
            rule: 1,
            reason: text,
            disable_reason: Some(DisableReason::ErrorDisabled),
            reason_change: ReasonChange::Set(DisableReason::ErrorDisabled, ReasonOwner::Patrol),
            is_quota_reached: false,
            reset_at: None,
        },
        AutoActionMode::Disable => disable_for(
            subject,
            1,
            DisableReason::ErrorDisabled,
            &text,
            policy,
            false,
        ),
    }
}

/// Disable (or keep disabled) with `why`, honouring mode `none`.
fn disable_for(
    subject: &Subject,
    rule: u8,
    why: DisableReason,
    text: &str,
    policy: &Policy,
    quota: bool,
) -> Decision {
    let change = ReasonChange::Set(why, ReasonOwner::Patrol);
    if subject.disabled {
        return Decision {
            action: Action::Keep,
            rule,
            reason: format!("{text}; already disabled"),
            disable_reason: Some(why),
            reason_change: change,
            is_quota_reached: quota,
            reset_at: None,
        };
    }
    if policy.mode == AutoActionMode::None {
        return Decision {
            action: Action::Keep,
            rule,
            reason: format!("{text}; action mode none: not disabled"),
            disable_reason: None,
            reason_change: ReasonChange::Unchanged,
            is_quota_reached: quota,
            reset_at: None,
        };
    }
    Decision {
        action: Action::Disable,
        rule,
        reason: text.to_string(),
        disable_reason: Some(why),
        reason_change: change,
        is_quota_reached: quota,
        reset_at: None,
    }
}

fn decide_snapshot(
    subject: &Subject,
    s: &QuotaSnapshot,
    policy: &Policy,
    now: DateTime<Utc>,
    unowned: bool,
) -> Decision {
    let q = &policy.quota;
    let weekly = s.weekly_used();
    let five = s.five_hour_used();
    let long = kind_name(s.long_window().map_or(WindowKind::Weekly, |w| w.kind));
    // Whether the snapshot is exhausted or usable is the one rule's answer; the windows below
    // only explain it.
    let (exhausted, until) = match snapshot_availability(s, q, now) {
        Availability::Exhausted { until } => (true, until),
        Availability::Usable => (false, None),
        _ if s.is_stale(now) => {
            return keep(
                8,
                "window reported at 100% but its reset already passed (stale): re-probe shortly",
                subject,
            );
        }
        _ => {
            return keep(
                9,
                "no weekly or monthly figure in the snapshot: quota unknown, nothing changed",
                subject,
            );
        }
    };

    if unowned {
        // §5.1: classify a disable we do not know at its first successful probe.
        return if exhausted {
            Decision {
                action: Action::Keep,
                rule: 3,
                reason: format!(
                    "found disabled with quota exhausted ({long} {}, 5-hour {}): adopted, re-enabled after its reset",
                    fmt_pct(weekly),
                    fmt_pct(five)
                ),
                disable_reason: Some(DisableReason::QuotaExhausted),
                reason_change: ReasonChange::Set(
                    DisableReason::QuotaExhausted,
                    ReasonOwner::Patrol,
                ),
                is_quota_reached: true,
                reset_at: until,
            }
        } else {
            Decision {
                action: Action::Keep,
                rule: 0,
                reason: "found disabled with usable quota: treated as a manual disable, never re-enabled automatically".into(),
                disable_reason: Some(DisableReason::ManualDisabled),
                reason_change: ReasonChange::Set(DisableReason::ManualDisabled, ReasonOwner::External),
                is_quota_reached: false,
                reset_at: None,
            }
        };
    }

    if exhausted {
        let (rule, text) = explain_exhaustion(s, q, now);
        return Decision {
            reset_at: until,
            ..disable_for(
                subject,
                rule,
                DisableReason::QuotaExhausted,
                &text,
                policy,
                true,
            )
        };
    }

    // Quota usable from here on.
    let usable_text = match five {
        Some(_) => format!(
            "quota usable ({long} {}, 5-hour {})",
            fmt_pct(weekly),
            fmt_pct(five)
        ),
        None => format!("quota usable ({long} {})", fmt_pct(weekly)),
    };
    if subject.disabled {
        if policy.priority_routing {
            return Decision {
                action: Action::Keep,
                rule: 6,
                reason: format!("{usable_text}; standby candidate for priority routing"),
                disable_reason: Some(DisableReason::OrderedStandby),
                reason_change: ReasonChange::Set(
                    DisableReason::OrderedStandby,
                    ReasonOwner::Routing,
                ),
                is_quota_reached: false,
                reset_at: None,
            };
        }
        if policy.auto_enable_recovered {
            return Decision {
                action: Action::Enable,
                rule: 5,
                reason: format!("{usable_text}; recovered, re-enabled"),
                disable_reason: None,
                reason_change: ReasonChange::Clear,
                is_quota_reached: false,
                reset_at: subject.awaited_reset,
            };
        }
        return keep(
            5,
            format!("{usable_text}; recovered, autoEnableRecovered is off"),
            subject,
        );
    }
    let mut d = keep(9, usable_text, subject);
    if subject.reason.is_some() {
        // Enabled in CPA (by someone) while we still held a reason: the reason is obsolete.
        d.reason_change = ReasonChange::Clear;
        d.disable_reason = None;
    }
    d
}

/// Why an exhausted snapshot is exhausted: the decision-table rule (3, or 4 when the 5-hour
/// threshold decided) and the reason text, naming the deciding window by its real kind
/// (docs/rules/patrol.md §9: a free plan's 30-day window reads "monthly 96% >= threshold 95%").
/// Order: a weekly / monthly window over its threshold, then the 5-hour window over its
/// threshold, then any main window at 100 %, else the upstream's limit-reached flag. A
/// threshold from the account's own policy says so: "(account policy)".
pub fn explain_exhaustion(s: &QuotaSnapshot, q: &QuotaPolicy, now: DateTime<Utc>) -> (u8, String) {
    let Some(a) = applied_threshold(s, q, now).filter(|a| a.reached) else {
        return (3, "limit reached reported by the upstream".to_string());
    };
    let used = a.used_percent.unwrap_or(0.0);
    match a.threshold.filter(|t| used >= f64::from(*t)) {
        Some(t) => {
            let origin = match a.source {
                PolicySource::Account => " (account policy)",
                PolicySource::Site => "",
            };
            let text = format!(
                "{} {} >= threshold {t}%{origin}",
                kind_name(a.window),
                fmt_pct(a.used_percent)
            );
            if a.window != WindowKind::FiveHour {
                return (3, text);
            }
            let plan = if s.is_free_like() {
                " (fiveHourRule all)"
            } else {
                " (paid plan)"
            };
            (4, format!("{text}{plan}"))
        }
        None => {
            let w = s.windows.iter().find(|w| w.id == a.window_id);
            let name = match w {
                Some(w) if !w.label.is_empty() => w.label.as_str(),
                _ => a.window_id.as_str(),
            };
            (
                3,
                format!("{name} window reached {}", fmt_pct(a.used_percent)),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::{QuotaWindow, WindowKind};
    use chrono::{Duration, TimeZone};

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn w(kind: WindowKind, used: f64, reset_in: Duration) -> QuotaWindow {
        crate::testkit::main_window(kind, used, now() + reset_in)
    }

    fn snap(plan: &str, weekly: Option<f64>, five: Option<f64>) -> QuotaSnapshot {
        let mut windows = Vec::new();
        if let Some(f) = five {
            windows.push(w(WindowKind::FiveHour, f, Duration::hours(2)));
        }
        if let Some(x) = weekly {
            windows.push(w(WindowKind::Weekly, x, Duration::days(3)));
        }
        crate::testkit::snapshot(plan, windows, now())
    }

    fn policy() -> Policy {
        Policy {
            quota: QuotaPolicy::uniform(95),
            invalid_confirmations: 2,
            mode: AutoActionMode::Disable,
            auto_enable_recovered: true,
            priority_routing: false,
        }
    }

    const ENABLED: Subject = Subject {
        disabled: false,
        reason: None,
        awaited_reset: None,
    };

    fn disabled_by(reason: DisableReason, owner: ReasonOwner) -> Subject {
        Subject {
            disabled: true,
            reason: Some((reason, owner)),
            awaited_reset: None,
        }
    }

    fn run(subject: Subject, e: Evidence<'_>, p: Policy) -> Decision {
        decide(&subject, &e, &p, now())
    }

    #[test]
    fn a_quota_disable_names_the_reset_it_waits_for_and_a_re_enable_the_one_that_passed() {
        // Plus, 5-hour and weekly both over: back only at the later, weekly reset.
        let d = run(
            ENABLED,
            Evidence::Snapshot(&snap("plus", Some(97.0), Some(99.0))),
            policy(),
        );
        assert_eq!((d.action, d.rule), (Action::Disable, 3));
        assert_eq!(d.reset_at, Some(now() + Duration::days(3)));
        let d = run(
            ENABLED,
            Evidence::Snapshot(&snap("plus", Some(40.0), Some(99.0))),
            policy(),
        );
        assert_eq!((d.action, d.rule), (Action::Disable, 4));
        assert_eq!(d.reset_at, Some(now() + Duration::hours(2)));
        // A plain 402 counts as exhausted with no known reset.
        let d = run(ENABLED, Evidence::Payment { deactivated: false }, policy());
        assert_eq!((d.action, d.reset_at), (Action::Disable, None));
        let passed = now() - Duration::minutes(3);
        let subject = Subject {
            awaited_reset: Some(passed),
            ..disabled_by(DisableReason::QuotaExhausted, ReasonOwner::Patrol)
        };
        let usable = snap("plus", Some(5.0), Some(5.0));
        let d = run(subject, Evidence::Snapshot(&usable), policy());
        assert_eq!(
            (d.action, d.rule, d.reset_at),
            (Action::Enable, 5, Some(passed))
        );
        // A usable account kept as it is carries none.
        assert_eq!(
            run(ENABLED, Evidence::Snapshot(&usable), policy()).reset_at,
            None
        );
    }

    #[test]
    fn rule0_manual_disable_is_kept_whatever_the_probe_says() {
        let s = snap("plus", Some(10.0), Some(10.0));
        let d = run(
            disabled_by(DisableReason::ManualDisabled, ReasonOwner::Manual),
            Evidence::Snapshot(&s),
            policy(),
        );
        assert_eq!((d.action, d.rule), (Action::Keep, 0));
        assert_eq!(d.reason_change, ReasonChange::Unchanged);
        assert_eq!(d.disable_reason, Some(DisableReason::ManualDisabled));
        let mut p = policy();
        p.priority_routing = true;
        let d = run(
            disabled_by(DisableReason::ManualDisabled, ReasonOwner::External),
            Evidence::Snapshot(&s),
            p,
        );
        assert_eq!(d.action, Action::Keep);
    }

    #[test]
    fn rule1_confirmed_invalid_is_disabled_in_mode_disable() {
        let d = run(ENABLED, Evidence::Invalid { streak: 2 }, policy());
        assert_eq!((d.action, d.rule), (Action::Disable, 1));
        assert_eq!(
            d.reason_change,
            ReasonChange::Set(DisableReason::ErrorDisabled, ReasonOwner::Patrol)
        );
    }

    #[test]
    fn rule1_confirmed_invalid_is_deleted_in_mode_delete_even_when_disabled_by_us() {
        let p = Policy {
            mode: AutoActionMode::Delete,
            ..policy()
        };
        assert_eq!(
            run(ENABLED, Evidence::Invalid { streak: 3 }, p).action,
            Action::Delete
        );
        let d = run(
            disabled_by(DisableReason::ErrorDisabled, ReasonOwner::Patrol),
            Evidence::Invalid { streak: 2 },
            p,
        );
        assert_eq!(d.action, Action::Delete);
    }

    #[test]
    fn rule1_mode_none_decides_only() {
        let p = Policy {
            mode: AutoActionMode::None,
            ..policy()
        };
        let d = run(ENABLED, Evidence::Invalid { streak: 2 }, p);
        assert_eq!((d.action, d.rule), (Action::Keep, 1));
    }

    #[test]
    fn rule2_unconfirmed_invalid_waits_for_confirmation() {
        let d = run(ENABLED, Evidence::Invalid { streak: 1 }, policy());
        assert_eq!((d.action, d.rule), (Action::Keep, 2));
        assert!(d.reason.contains("1/2"), "{}", d.reason);
    }

    #[test]
    fn rule3_weekly_at_threshold_disables() {
        let s = snap("plus", Some(95.0), Some(10.0));
        let d = run(ENABLED, Evidence::Snapshot(&s), policy());
        assert_eq!((d.action, d.rule), (Action::Disable, 3));
        assert_eq!(d.disable_reason, Some(DisableReason::QuotaExhausted));
        assert!(d.is_quota_reached);
        let s = snap("plus", Some(94.9), Some(10.0));
        assert_eq!(
            run(ENABLED, Evidence::Snapshot(&s), policy()).action,
            Action::Keep
        );
    }

    #[test]
    fn rule3_already_disabled_is_kept_with_the_reason_recorded() {
        let s = snap("free", Some(100.0), None);
        let d = run(
            disabled_by(DisableReason::QuotaExhausted, ReasonOwner::Patrol),
            Evidence::Snapshot(&s),
            policy(),
        );
        assert_eq!((d.action, d.rule), (Action::Keep, 3));
        assert_eq!(
            d.reason_change,
            ReasonChange::Set(DisableReason::QuotaExhausted, ReasonOwner::Patrol)
        );
    }

    #[test]
    fn rule3_monthly_only_accounts_use_the_monthly_window() {
        let mut s = snap("free", None, None);
        s.windows
            .push(w(WindowKind::Monthly, 96.0, Duration::days(20)));
        assert_eq!(
            run(ENABLED, Evidence::Snapshot(&s), policy()).action,
            Action::Disable
        );
    }

    #[test]
    fn rule3_limit_reached_disables_even_below_threshold() {
        let mut s = snap("plus", Some(50.0), Some(50.0));
        s.main_limit_reached = true;
        assert_eq!(
            run(ENABLED, Evidence::Snapshot(&s), policy()).action,
            Action::Disable
        );
    }

    #[test]
    fn rule3_plain_402_counts_as_exhausted() {
        let d = run(ENABLED, Evidence::Payment { deactivated: false }, policy());
        assert_eq!(
            (d.action, d.disable_reason),
            (Action::Disable, Some(DisableReason::QuotaExhausted))
        );
    }

    #[test]
    fn rule3a_deactivated_402_is_error_disabled_and_never_deleted() {
        let p = Policy {
            mode: AutoActionMode::Delete,
            ..policy()
        };
        let d = run(ENABLED, Evidence::Payment { deactivated: true }, p);
        assert_eq!(
            (d.action, d.disable_reason),
            (Action::Disable, Some(DisableReason::ErrorDisabled))
        );
    }

    #[test]
    fn rule4_paid_five_hour_at_threshold_disables() {
        let s = snap("pro", Some(20.0), Some(96.0));
        let d = run(ENABLED, Evidence::Snapshot(&s), policy());
        assert_eq!((d.action, d.rule), (Action::Disable, 4));
    }

    #[test]
    fn rule4_does_not_apply_to_free_like_plans() {
        let s = snap("free", Some(20.0), Some(97.0));
        assert_eq!(
            run(ENABLED, Evidence::Snapshot(&s), policy()).action,
            Action::Keep
        );
    }

    #[test]
    fn rule3_any_main_window_at_100_exhausts_even_a_free_plan_or_an_odd_duration() {
        let s = snap("free", Some(20.0), Some(100.0));
        let d = run(ENABLED, Evidence::Snapshot(&s), policy());
        assert_eq!((d.action, d.rule), (Action::Disable, 3));
        let mut s = snap("plus", Some(10.0), Some(10.0));
        let mut odd = w(WindowKind::Other, 100.0, Duration::days(1));
        odd.id = "main:odd".into();
        s.windows.push(odd);
        assert_eq!(
            run(ENABLED, Evidence::Snapshot(&s), policy()).action,
            Action::Disable
        );
    }

    #[test]
    fn a_snapshot_without_a_weekly_or_monthly_figure_neither_enables_nor_classifies() {
        // The one rule reads it as NoData (docs/rules/patrol.md §6.3 "no weekly data ⇒ not usable"); the
        // old table called it "quota usable" and re-enabled it.
        let s = snap("plus", None, Some(10.0));
        let d = run(
            disabled_by(DisableReason::QuotaExhausted, ReasonOwner::Patrol),
            Evidence::Snapshot(&s),
            policy(),
        );
        assert_eq!(
            (d.action, d.rule, d.reason_change),
            (Action::Keep, 9, ReasonChange::Unchanged)
        );
        let unowned = Subject {
            disabled: true,
            reason: None,
            awaited_reset: None,
        };
        let d = run(unowned, Evidence::Snapshot(&s), policy());
        assert_eq!(
            (d.action, d.reason_change),
            (Action::Keep, ReasonChange::Unchanged),
            "not classified as ManualDisabled from a snapshot that says nothing"
        );
    }

    #[test]
    fn rule5_recovered_account_is_enabled_when_auto_enable_is_on() {
        let s = snap("plus", Some(10.0), Some(10.0));
        for reason in [
            DisableReason::QuotaExhausted,
            DisableReason::ErrorDisabled,
            DisableReason::OrderedStandby,
        ] {
            let d = run(
                disabled_by(reason, ReasonOwner::Patrol),
                Evidence::Snapshot(&s),
                policy(),
            );
            assert_eq!(
                (d.action, d.rule, d.reason_change),
                (Action::Enable, 5, ReasonChange::Clear)
            );
        }
        let p = Policy {
            auto_enable_recovered: false,
            ..policy()
        };
        let d = run(
            disabled_by(DisableReason::QuotaExhausted, ReasonOwner::Patrol),
            Evidence::Snapshot(&s),
            p,
        );
        assert_eq!((d.action, d.rule), (Action::Keep, 5));
    }

    #[test]
    fn rule5_enables_even_in_mode_none() {
        let s = snap("plus", Some(10.0), Some(10.0));
        let p = Policy {
            mode: AutoActionMode::None,
            ..policy()
        };
        let d = run(
            disabled_by(DisableReason::QuotaExhausted, ReasonOwner::Patrol),
            Evidence::Snapshot(&s),
            p,
        );
        assert_eq!(d.action, Action::Enable);
    }

    #[test]
    fn rule6_with_routing_a_recovered_account_becomes_a_standby_candidate() {
        let s = snap("plus", Some(10.0), Some(10.0));
        let p = Policy {
            priority_routing: true,
            ..policy()
        };
        let d = run(
            disabled_by(DisableReason::QuotaExhausted, ReasonOwner::Patrol),
            Evidence::Snapshot(&s),
            p,
        );
        assert_eq!((d.action, d.rule), (Action::Keep, 6));
        assert_eq!(
            d.reason_change,
            ReasonChange::Set(DisableReason::OrderedStandby, ReasonOwner::Routing)
        );
    }

    #[test]
    fn rule8_a_probe_error_never_acts() {
        for subject in [
            ENABLED,
            disabled_by(DisableReason::QuotaExhausted, ReasonOwner::Patrol),
        ] {
            let d = run(subject, Evidence::Error { message: "timeout" }, policy());
            assert_eq!(
                (d.action, d.rule, d.reason_change),
                (Action::Keep, 8, ReasonChange::Unchanged)
            );
        }
    }

    #[test]
    fn rule9_usable_enabled_account_is_kept() {
        let s = snap("plus", Some(10.0), Some(10.0));
        let d = run(ENABLED, Evidence::Snapshot(&s), policy());
        assert_eq!((d.action, d.rule), (Action::Keep, 9));
    }

    #[test]
    fn stale_window_is_neither_exhaustion_nor_recovery() {
        let mut s = snap("free", None, None);
        s.windows
            .push(w(WindowKind::Weekly, 100.0, -Duration::minutes(3)));
        let d = run(ENABLED, Evidence::Snapshot(&s), policy());
        assert_eq!(d.action, Action::Keep);
        let d = run(
            disabled_by(DisableReason::QuotaExhausted, ReasonOwner::Patrol),
            Evidence::Snapshot(&s),
            policy(),
        );
        assert_eq!(
            (d.action, d.reason_change),
            (Action::Keep, ReasonChange::Unchanged)
        );
    }

    #[test]
    fn unknown_disable_with_exhausted_quota_is_adopted_as_quota_exhausted() {
        let s = snap("free", Some(100.0), None);
        let d = run(
            Subject {
                disabled: true,
                reason: None,
                awaited_reset: None,
            },
            Evidence::Snapshot(&s),
            policy(),
        );
        assert_eq!(d.action, Action::Keep);
        assert_eq!(
            d.reason_change,
            ReasonChange::Set(DisableReason::QuotaExhausted, ReasonOwner::Patrol)
        );
    }

    #[test]
    fn unknown_disable_with_usable_quota_becomes_manual_and_is_not_enabled() {
        let s = snap("plus", Some(10.0), Some(10.0));
        let d = run(
            Subject {
                disabled: true,
                reason: None,
                awaited_reset: None,
            },
            Evidence::Snapshot(&s),
            policy(),
        );
        assert_eq!(d.action, Action::Keep);
        assert_eq!(
            d.reason_change,
            ReasonChange::Set(DisableReason::ManualDisabled, ReasonOwner::External)
        );
    }

    #[test]
    fn unknown_disable_is_never_acted_on_before_a_successful_probe() {
        let subject = Subject {
            disabled: true,
            reason: None,
            awaited_reset: None,
        };
        for e in [
            Evidence::Invalid { streak: 5 },
            Evidence::Payment { deactivated: true },
            Evidence::Error { message: "x" },
        ] {
            let d = run(
                subject,
                e,
                Policy {
                    mode: AutoActionMode::Delete,
                    ..policy()
                },
            );
            assert_eq!(d.action, Action::Keep);
        }
    }

    #[test]
    fn enabled_account_with_a_leftover_reason_gets_it_cleared() {
        let s = snap("plus", Some(10.0), Some(10.0));
        let subject = Subject {
            disabled: false,
            reason: Some((DisableReason::QuotaExhausted, ReasonOwner::Patrol)),
            awaited_reset: None,
        };
        assert_eq!(
            run(subject, Evidence::Snapshot(&s), policy()).reason_change,
            ReasonChange::Clear
        );
    }

    #[test]
    fn model_scoped_limits_never_disable_the_account() {
        let mut s = snap("pro", Some(10.0), Some(10.0));
        let mut extra = w(WindowKind::FiveHour, 100.0, Duration::hours(1));
        extra.group = "additional:GPT-5.3-Codex-Spark".into();
        extra.id = "additional:GPT-5.3-Codex-Spark:primary".into();
        s.windows.push(extra);
        assert_eq!(
            run(ENABLED, Evidence::Snapshot(&s), policy()).action,
            Action::Keep
        );
    }

    #[test]
    fn a_free_accounts_30_day_window_is_named_monthly_in_the_reason() {
        let mut s = snap("free", None, None);
        s.windows
            .push(w(WindowKind::Monthly, 96.0, Duration::days(20)));
        let d = run(ENABLED, Evidence::Snapshot(&s), policy());
        assert_eq!((d.action, d.rule), (Action::Disable, 3));
        assert_eq!(d.reason, "monthly 96% >= threshold 95%");
        let mut under = snap("free", None, None);
        under
            .windows
            .push(w(WindowKind::Monthly, 40.0, Duration::days(20)));
        let d = run(ENABLED, Evidence::Snapshot(&under), policy());
        assert_eq!(d.reason, "quota usable (monthly 40%)");
    }

    #[test]
    fn a_five_hour_threshold_of_80_disables_a_paid_account_at_85_under_a_weekly_95() {
        let p = Policy {
            quota: QuotaPolicy {
                five_hour: 80,
                ..QuotaPolicy::uniform(95)
            },
            ..policy()
        };
        let s = snap("plus", Some(90.0), Some(85.0));
        let d = run(ENABLED, Evidence::Snapshot(&s), p);
        assert_eq!((d.action, d.rule), (Action::Disable, 4));
        assert_eq!(d.reason, "5-hour 85% >= threshold 80% (paid plan)");
        let s = snap("plus", Some(90.0), Some(79.0));
        assert_eq!(run(ENABLED, Evidence::Snapshot(&s), p).action, Action::Keep);
    }

    #[test]
    fn an_account_threshold_says_where_it_came_from() {
        let settings = crate::settings::PatrolSettings::default();
        let own = crate::policy::AccountPolicy {
            weekly_threshold: Some(70),
            ..Default::default()
        };
        let p = Policy {
            quota: QuotaPolicy::resolve(&settings, Some(&own)),
            ..policy()
        };
        let s = snap("plus", Some(72.0), Some(10.0));
        let d = run(ENABLED, Evidence::Snapshot(&s), p);
        assert_eq!(d.action, Action::Disable);
        assert_eq!(d.reason, "weekly 72% >= threshold 70% (account policy)");
    }

    #[test]
    fn a_never_act_account_is_never_acted_on_nor_its_reason_changed() {
        let p = Policy {
            quota: QuotaPolicy {
                never_act: true,
                ..QuotaPolicy::uniform(95)
            },
            mode: AutoActionMode::Delete,
            ..policy()
        };
        let exhausted = snap("plus", Some(99.0), Some(10.0));
        let usable = snap("plus", Some(10.0), Some(10.0));
        let cases = [
            (ENABLED, Evidence::Snapshot(&exhausted)),
            (ENABLED, Evidence::Invalid { streak: 5 }),
            (ENABLED, Evidence::Payment { deactivated: true }),
            (
                disabled_by(DisableReason::QuotaExhausted, ReasonOwner::Patrol),
                Evidence::Snapshot(&usable),
            ),
            (
                Subject {
                    disabled: true,
                    reason: None,
                    awaited_reset: None,
                },
                Evidence::Snapshot(&exhausted),
            ),
        ];
        for (subject, e) in cases {
            let d = run(subject, e.clone(), p);
            assert_eq!(
                (d.action, d.reason_change),
                (Action::Keep, ReasonChange::Unchanged),
                "{e:?}: {}",
                d.reason
            );
        }
        let d = run(ENABLED, Evidence::Snapshot(&exhausted), p);
        assert!(d.is_quota_reached, "still counted as exhausted");
        assert_eq!(
            d.reason,
            "weekly 99% >= threshold 95%; neverAct: observed only, not disabled"
        );
    }
}
