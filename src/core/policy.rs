//! The quota policy of an account: which window disables it and at what level (issue 10 item 1).
//! Owns the site-level per-window thresholds, the per-account overrides ([`AccountPolicy`]),
//! their validation, and the resolution of the effective [`QuotaPolicy`] with the source of each
//! value. Must not decide usability itself (that is `core::availability`, which reads
//! [`QuotaPolicy::deciding_threshold`]) nor perform I/O. Pure.
//! Rules: spec/patrol.md §5 rules 3–4 and §6.3 (today's single threshold is the reference),
//! issue 10 item 1 (`weeklyThreshold`, `fiveHourThreshold`, `monthlyThreshold`, `fiveHourRule`,
//! `neverAct`).

use serde::{Deserialize, Serialize};

use chrono::{DateTime, Utc};

use super::account::QuotaSnapshot;
use super::quota::WindowKind;
use super::settings::PatrolSettings;

/// When the 5-hour window may disable an account (issue 10 item 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FiveHourRule {
    /// Today's rule (patrol.md §5 rule 4): the 5-hour threshold disables paid plans only; a
    /// free plan's 5-hour window counts only once it reaches 100 %.
    #[default]
    Paid,
    /// The 5-hour threshold disables every plan, free ones included.
    All,
    /// The 5-hour window never disables an account, not even at 100 % (CPA's own cooldown
    /// handles the short window); it is still shown.
    Never,
}

impl FiveHourRule {
    /// Parses `paid` | `all` | `never` (case-insensitive, trimmed).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "paid" => Some(Self::Paid),
            "all" => Some(Self::All),
            "never" => Some(Self::Never),
            _ => None,
        }
    }

    /// The API spelling (`paid`, `all`, `never`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Paid => "paid",
            Self::All => "all",
            Self::Never => "never",
        }
    }
}

/// Where an effective value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicySource {
    /// The site settings (a per-window threshold or the `usedPercentThreshold` shorthand).
    #[default]
    Site,
    /// The account's own override (`PUT /api/accounts/{name}/policy`).
    Account,
}

impl PolicySource {
    /// The API spelling (`site`, `account`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Site => "site",
            Self::Account => "account",
        }
    }
}

/// Per-account overrides (`GET/PUT/DELETE /api/accounts/{name}/policy`), camelCase JSON, all
/// optional: an absent threshold or rule follows the site. Thresholds are percent, 1..=100,
/// compared with `>=`. `neverAct` = observe only: the account is probed, shown and counted, but
/// the patrol and priority routing never write to it in CPA (no disable, enable, delete,
/// priority or cooldown reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
#[serde(rename_all = "camelCase", default)]
pub struct AccountPolicyInput {
    pub weekly_threshold: Option<i64>,
    pub five_hour_threshold: Option<i64>,
    pub monthly_threshold: Option<i64>,
    pub five_hour_rule: Option<String>,
    pub never_act: Option<bool>,
}

/// A threshold as sent (`name` is the JSON field) into a percent 1..=100, or a problem.
pub fn threshold_in_range(v: i64, name: &str, problems: &mut Vec<String>) -> Option<u8> {
    match u8::try_from(v) {
        Ok(t) if (1..=100).contains(&t) => Some(t),
        _ => {
            problems.push(format!("{name} must be between 1 and 100 (got {v})"));
            None
        }
    }
}

/// `fiveHourRule` as sent into a rule, or a problem naming the accepted values.
pub fn parse_five_hour_rule(s: &str, problems: &mut Vec<String>) -> Option<FiveHourRule> {
    let rule = FiveHourRule::parse(s);
    if rule.is_none() {
        problems.push(format!(
            "fiveHourRule must be one of paid, all, never (got {s:?})"
        ));
    }
    rule
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

/// Where each value of a [`QuotaPolicy`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySources {
    pub weekly: PolicySource,
    pub five_hour: PolicySource,
    pub monthly: PolicySource,
    pub five_hour_rule: PolicySource,
    pub never_act: PolicySource,
}

/// The effective policy of one account (site settings overlaid with its [`AccountPolicy`]).
/// Thresholds are percent, 1..=100, compared with `>=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaPolicy {
    pub weekly: u8,
    pub five_hour: u8,
    pub monthly: u8,
    pub five_hour_rule: FiveHourRule,
    /// Observe only: never written to in CPA by the patrol or routing.
    pub never_act: bool,
    pub sources: PolicySources,
}

impl QuotaPolicy {
    /// One threshold for every window, today's 5-hour rule, acting allowed, all from the site:
    /// what a site with only `usedPercentThreshold = threshold` resolves to.
    pub fn uniform(threshold: u8) -> Self {
        Self {
            weekly: threshold,
            five_hour: threshold,
            monthly: threshold,
            five_hour_rule: FiveHourRule::Paid,
            never_act: false,
            sources: PolicySources::default(),
        }
    }

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

    /// The threshold (percent, compared with `>=`) at which a window of `kind` disables an
    /// account of this plan, or `None` when that window never disables it by threshold:
    /// weekly ⇒ `weekly`, monthly ⇒ `monthly`; five-hour ⇒ `five_hour` under `all`, under
    /// `paid` only for paid plans (`free_plan == false`), never under `never`; `Other`
    /// durations ⇒ `None` (today's behaviour: such a window, like a free plan's five-hour
    /// window under `paid`, exhausts the account only at 100 %, see [`Self::counts_at_100`]).
    pub fn deciding_threshold(&self, kind: WindowKind, free_plan: bool) -> Option<u8> {
        match kind {
            WindowKind::Weekly => Some(self.weekly),
            WindowKind::Monthly => Some(self.monthly),
            WindowKind::FiveHour => match self.five_hour_rule {
                FiveHourRule::All => Some(self.five_hour),
                FiveHourRule::Paid if !free_plan => Some(self.five_hour),
                FiveHourRule::Paid | FiveHourRule::Never => None,
            },
            WindowKind::Other => None,
        }
    }

    /// Whether a main window of `kind` at 100 % exhausts the account whatever its threshold
    /// (patrol.md §5 rule 3 "any main window reached 100"): every kind, except the five-hour
    /// window under `fiveHourRule = never`.
    pub fn counts_at_100(&self, kind: WindowKind) -> bool {
        !(kind == WindowKind::FiveHour && self.five_hour_rule == FiveHourRule::Never)
    }

    /// Where the threshold of a window of `kind` came from (`Other` kinds have none: site).
    pub fn source_of(&self, kind: WindowKind) -> PolicySource {
        match kind {
            WindowKind::Weekly => self.sources.weekly,
            WindowKind::Monthly => self.sources.monthly,
            WindowKind::FiveHour => self.sources.five_hour,
            WindowKind::Other => PolicySource::Site,
        }
    }
}

/// Which threshold applied to an account (`/api/quotas` `appliedThreshold`, the round table's
/// "threshold" column, `DecisionRecord.threshold`): the window that decided, named by its real
/// kind, its used percent, the threshold it was compared with and where that came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
/// window; issue 10 item 1).
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
    fn the_five_hour_rule_decides_which_plans_the_five_hour_window_disables() {
        let mut p = QuotaPolicy::uniform(80);
        assert_eq!(p.deciding_threshold(WindowKind::FiveHour, false), Some(80));
        assert_eq!(p.deciding_threshold(WindowKind::FiveHour, true), None);
        assert!(p.counts_at_100(WindowKind::FiveHour));
        p.five_hour_rule = FiveHourRule::All;
        assert_eq!(p.deciding_threshold(WindowKind::FiveHour, true), Some(80));
        p.five_hour_rule = FiveHourRule::Never;
        assert_eq!(p.deciding_threshold(WindowKind::FiveHour, false), None);
        assert!(!p.counts_at_100(WindowKind::FiveHour));
        assert!(p.counts_at_100(WindowKind::Weekly));
    }

    #[test]
    fn long_windows_use_their_own_threshold_and_other_durations_none() {
        let p = QuotaPolicy {
            weekly: 95,
            monthly: 90,
            ..QuotaPolicy::uniform(95)
        };
        assert_eq!(p.deciding_threshold(WindowKind::Weekly, true), Some(95));
        assert_eq!(p.deciding_threshold(WindowKind::Monthly, true), Some(90));
        assert_eq!(p.deciding_threshold(WindowKind::Other, false), None);
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
