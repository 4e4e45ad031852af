//! The effective per-window thresholds of an account ([`QuotaPolicy`]) and the rules they
//! apply to a window (which threshold decides, whether 100 % counts), with the `fiveHourRule`
//! values and the validation of thresholds as sent. The bottom of the policy rules: it knows no
//! settings nor snapshots (`core::policy` resolves a [`QuotaPolicy`] from the site settings and
//! an account's override; `core::account` judges snapshots against one). Pure.
//! Rules: docs/rules/patrol.md §5 rules 3–4, docs/patrol.md "Thresholds per window and per
//! account".

use serde::{Deserialize, Serialize};

use super::quota::WindowKind;

/// When the 5-hour window may disable an account (docs/rules/patrol.md §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum FiveHourRule {
    /// Today's rule (docs/rules/patrol.md §5 rule 4): the 5-hour threshold disables paid plans only; a
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// Where each value of a [`QuotaPolicy`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// (docs/rules/patrol.md §5 rule 3 "any main window reached 100"): every kind, except the five-hour
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
