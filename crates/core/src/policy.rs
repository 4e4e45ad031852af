//! The quota policy of an account: which window disables it and at what level (docs/rules/patrol.md §9).
//! Owns the per-account overrides ([`AccountPolicy`]) and their validation, the resolution of
//! the effective [`QuotaPolicy`] from the site settings with the source of each value, and which
//! threshold applied to a snapshot. The policy type itself and its window rules live below, in
//! `core::thresholds` (re-exported here), so `core::account` and `core::settings` need not
//! import this module. Must not decide usability itself (that is `core::availability`, which reads
//! [`QuotaPolicy::deciding_threshold`]) nor perform I/O. Pure.
//! Rules: docs/rules/patrol.md §5 rules 3–4 and §6.3 (today's single threshold is the reference),
//! docs/rules/patrol.md §9 (`weeklyThreshold`, `fiveHourThreshold`, `monthlyThreshold`, `fiveHourRule`,
//! `neverAct`).

use serde::{Deserialize, Serialize};

use chrono::{DateTime, Utc};

use super::account::QuotaSnapshot;
use super::quota::WindowKind;
use super::settings::PatrolSettings;
pub use super::thresholds::{
    FiveHourRule, PolicySource, PolicySources, QuotaPolicy, parse_five_hour_rule,
    threshold_in_range,
};

/// Per-account overrides (`GET/PUT/DELETE /api/accounts/{name}/policy`), camelCase JSON, all
/// optional: an absent threshold or rule follows the site. Thresholds are percent, 1..=100,
/// compared with `>=`. `neverAct` = observe only: the account is probed, shown and counted, but
/// the patrol and priority routing never write to it in CPA (no disable, enable, delete,
/// priority or cooldown reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct AccountPolicy {
    pub weekly_threshold: Option<u8>,
    pub five_hour_threshold: Option<u8>,
    pub monthly_threshold: Option<u8>,
    pub five_hour_rule: Option<FiveHourRule>,
    pub never_act: bool,
}

impl AccountPolicy {
    /// No override at all (same as no stored policy).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The body of `PUT /api/accounts/{name}/policy` before validation: numbers and the rule as
/// sent, so every problem can be reported at once (422) instead of a serde error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct AccountPolicyInput {
    pub weekly_threshold: Option<i64>,
    pub five_hour_threshold: Option<i64>,
    pub monthly_threshold: Option<i64>,
    pub five_hour_rule: Option<String>,
    pub never_act: Option<bool>,
}

impl AccountPolicyInput {
    /// The validated policy, or every problem found (thresholds outside 1..=100, an unknown
    /// `fiveHourRule`). A PUT replaces the whole policy: absent fields are "not overridden".
    pub fn validate(&self) -> Result<AccountPolicy, Vec<String>> {
        let mut p = Vec::new();
        let mut t =
            |v: Option<i64>, name: &str| v.and_then(|v| threshold_in_range(v, name, &mut p));
        let weekly_threshold = t(self.weekly_threshold, "weeklyThreshold");
        let five_hour_threshold = t(self.five_hour_threshold, "fiveHourThreshold");
        let monthly_threshold = t(self.monthly_threshold, "monthlyThreshold");
        let five_hour_rule = self
            .five_hour_rule
            .as_deref()
            .and_then(|s| parse_five_hour_rule(s, &mut p));
        if !p.is_empty() {
            return Err(p);
        }
        Ok(AccountPolicy {
            weekly_threshold,
            five_hour_threshold,
            monthly_threshold,
            five_hour_rule,
            never_act: self.never_act.unwrap_or(false),
        })
    }
}

/// Resolution from the settings (here, not in `core::thresholds`, which must not know the
/// settings: they read its [`FiveHourRule`]).
impl QuotaPolicy {
    /// The site's policy: each per-window threshold, or `usedPercentThreshold` where the
    /// window has no explicit value (the shorthand), and `fiveHourRule`.
    pub fn site(settings: &PatrolSettings) -> Self {
        let base = settings.used_percent_threshold;
        Self {
            weekly: settings.weekly_threshold.unwrap_or(base),
            five_hour: settings.five_hour_threshold.unwrap_or(base),
            monthly: settings.monthly_threshold.unwrap_or(base),
            five_hour_rule: settings.five_hour_rule,
            never_act: false,
            sources: PolicySources::default(),
        }
    }

    /// The effective policy of an account: the site's, with every value the account overrides
    /// replaced (and its source set to [`PolicySource::Account`]). `None` = no override.
    pub fn resolve(settings: &PatrolSettings, account: Option<&AccountPolicy>) -> Self {
        let mut p = Self::site(settings);
        let Some(a) = account else {
            return p;
        };
        let pick = |own: Option<u8>, site: u8, src: &mut PolicySource| match own {
            Some(v) => {
                *src = PolicySource::Account;
                v
            }
            None => site,
        };
        p.weekly = pick(a.weekly_threshold, p.weekly, &mut p.sources.weekly);
        p.five_hour = pick(a.five_hour_threshold, p.five_hour, &mut p.sources.five_hour);
        p.monthly = pick(a.monthly_threshold, p.monthly, &mut p.sources.monthly);
        if let Some(rule) = a.five_hour_rule {
            p.five_hour_rule = rule;
            p.sources.five_hour_rule = PolicySource::Account;
        }
        if a.never_act {
            p.never_act = true;
            p.sources.never_act = PolicySource::Account;
        }
        p
    }
}

/// Which threshold applied to an account (`/api/quotas` `appliedThreshold`, the round table's
/// "threshold" column, `DecisionRecord.threshold`): the window that decided, named by its real
/// kind, its used percent, the threshold it was compared with and where that came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AppliedThreshold {
    /// The window's id (`main:primary`, …).
    pub window_id: String,
    /// Its real kind (`weekly`, `monthly`, `fiveHour`, `other`).
    pub window: WindowKind,
    pub used_percent: Option<f64>,
    /// Percent compared with `>=`; `None` = this window only counts at 100 %.
    pub threshold: Option<u8>,
    /// Where `threshold` came from (`site` for windows without one).
    pub source: PolicySource,
    /// The window exhausts the account now (at or over its threshold, or at 100 %).
    pub reached: bool,
}

impl AppliedThreshold {
    /// Short text for tables: `weekly 95% (site)`, `monthly 90% (account)`, `5-hour 100%`.
    pub fn describe(&self) -> String {
        match self.threshold {
            Some(t) => format!("{} {t}% ({})", kind_name(self.window), self.source.as_str()),
            None => format!("{} 100%", kind_name(self.window)),
        }
    }
}

/// The threshold that applies to a snapshot under `policy`: the window that exhausts it (a
/// weekly / monthly window over its threshold first, then the 5-hour one, then any main window
/// at 100 %, as `core::inspect` explains it), else — not exhausted — the long window (weekly,
/// or monthly for monthly-only accounts) with its threshold. `None` when neither exists.
pub fn applied_threshold(
    s: &QuotaSnapshot,
    policy: &QuotaPolicy,
    now: DateTime<Utc>,
) -> Option<AppliedThreshold> {
    let over = s.exhausted_windows(policy, now);
    let by_threshold = |kinds: &[WindowKind]| {
        over.iter().copied().find(|w| {
            kinds.contains(&w.kind)
                && s.threshold_for(w, policy)
                    .is_some_and(|t| w.used_percent.unwrap_or(0.0) >= f64::from(t))
        })
    };
    let (w, reached) = match by_threshold(&[WindowKind::Weekly, WindowKind::Monthly])
        .or_else(|| by_threshold(&[WindowKind::FiveHour]))
        .or_else(|| over.first().copied())
    {
        Some(w) => (w, true),
        None => (s.long_window()?, false),
    };
    Some(AppliedThreshold {
        window_id: w.id.clone(),
        window: w.kind,
        used_percent: w.used_percent,
        threshold: s.threshold_for(w, policy),
        source: policy.source_of(w.kind),
        reached,
    })
}

/// The name of a window kind in reasons, table cells and API fields: `5-hour`, `weekly`,
/// `monthly`, or `window` for other durations (the real kind, never "weekly" for a 30-day
/// window; docs/rules/patrol.md §9).
pub fn kind_name(kind: WindowKind) -> &'static str {
    match kind {
        WindowKind::FiveHour => "5-hour",
        WindowKind::Weekly => "weekly",
        WindowKind::Monthly => "monthly",
        WindowKind::Other => "window",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(base: u8) -> PatrolSettings {
        PatrolSettings {
            used_percent_threshold: base,
            ..PatrolSettings::default()
        }
    }

    #[test]
    fn the_shorthand_alone_sets_every_window() {
        let p = QuotaPolicy::site(&settings(90));
        assert_eq!((p.weekly, p.five_hour, p.monthly), (90, 90, 90));
        assert_eq!(p.five_hour_rule, FiveHourRule::Paid);
        assert_eq!(p, QuotaPolicy::uniform(90));
    }

    #[test]
    fn an_explicit_window_threshold_wins_over_the_shorthand() {
        let s = PatrolSettings {
            five_hour_threshold: Some(80),
            ..settings(90)
        };
        let p = QuotaPolicy::site(&s);
        assert_eq!((p.weekly, p.five_hour, p.monthly), (90, 80, 90));
        assert_eq!(p.source_of(WindowKind::FiveHour), PolicySource::Site);
    }

    #[test]
    fn an_account_override_replaces_only_what_it_sets_and_says_so() {
        let s = PatrolSettings {
            monthly_threshold: Some(99),
            ..settings(95)
        };
        let a = AccountPolicy {
            weekly_threshold: Some(70),
            five_hour_rule: Some(FiveHourRule::Never),
            ..AccountPolicy::default()
        };
        let p = QuotaPolicy::resolve(&s, Some(&a));
        assert_eq!((p.weekly, p.five_hour, p.monthly), (70, 95, 99));
        assert_eq!(p.source_of(WindowKind::Weekly), PolicySource::Account);
        assert_eq!(p.source_of(WindowKind::FiveHour), PolicySource::Site);
        assert_eq!(p.source_of(WindowKind::Monthly), PolicySource::Site);
        assert_eq!(p.sources.five_hour_rule, PolicySource::Account);
        assert!(!p.never_act);
        assert_eq!(QuotaPolicy::resolve(&s, None), QuotaPolicy::site(&s));
        let observe = AccountPolicy {
            never_act: true,
            ..AccountPolicy::default()
        };
        let p = QuotaPolicy::resolve(&s, Some(&observe));
        assert!(p.never_act);
        assert_eq!(p.sources.never_act, PolicySource::Account);
        assert_eq!(p.weekly, 95);
    }

    #[test]
    fn an_account_policy_input_reports_every_problem() {
        let bad = AccountPolicyInput {
            weekly_threshold: Some(0),
            monthly_threshold: Some(101),
            five_hour_rule: Some("sometimes".into()),
            ..AccountPolicyInput::default()
        };
        let problems = bad.validate().unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        for field in ["weeklyThreshold", "monthlyThreshold", "fiveHourRule"] {
            assert!(problems.iter().any(|p| p.contains(field)), "{problems:?}");
        }
        let ok = AccountPolicyInput {
            five_hour_threshold: Some(80),
            five_hour_rule: Some("ALL".into()),
            never_act: Some(true),
            ..AccountPolicyInput::default()
        };
        assert_eq!(
            ok.validate().unwrap(),
            AccountPolicy {
                five_hour_threshold: Some(80),
                five_hour_rule: Some(FiveHourRule::All),
                never_act: true,
                ..AccountPolicy::default()
            }
        );
    }

    #[test]
    fn account_policy_json_is_camel_case_and_all_optional() {
        let a: AccountPolicy = serde_json::from_str(r#"{"fiveHourRule":"never"}"#).unwrap();
        assert_eq!(a.five_hour_rule, Some(FiveHourRule::Never));
        assert!(!a.never_act);
        let json = serde_json::to_value(AccountPolicy {
            never_act: true,
            ..AccountPolicy::default()
        })
        .unwrap();
        assert_eq!(json["neverAct"], true);
        assert!(json["weeklyThreshold"].is_null());
    }
}
