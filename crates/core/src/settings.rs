//! Patrol settings of one site: defaults, validation of updates, and partial-update semantics.
//! Pure; the API and the TOML bootstrap both go through [`SettingsPatch::apply`].
//! Rules: docs/rules/patrol.md §1 (defaults and clamps), docs/rules/api.md §2
//! (`PUT /api/settings`).

use serde::{Deserialize, Deserializer, Serialize};

use super::thresholds::{FiveHourRule, parse_five_hour_rule, threshold_in_range};

/// What the patrol does with rule-1 (confirmed invalid) accounts (docs/rules/patrol.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum AutoActionMode {
    /// Decide only; never disable or delete (enables still follow `autoEnableRecovered`).
    None,
    /// Disable exhausted and confirmed-invalid accounts.
    Disable,
    /// Like `disable`, but confirmed-invalid accounts are deleted.
    Delete,
}

impl AutoActionMode {
    /// Parses `none` | `disable` | `delete` (case-insensitive, trimmed).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Some(Self::None),
            "disable" => Some(Self::Disable),
            "delete" => Some(Self::Delete),
            _ => None,
        }
    }
}

/// What the patrol does with banked rate-limit reset credits (docs/rules/cpa.md §10,
/// docs/reset-credits.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ResetCreditsMode {
    /// Neither read nor shown beyond what the usage body carries; never redeemed (default).
    #[default]
    Off,
    /// Shown per account and site; never redeemed.
    Observe,
    /// Shown, and one credit is redeemed when the site runs dry.
    Redeem,
}

impl ResetCreditsMode {
    /// Parses `off` | `observe` | `redeem` (case-insensitive, trimmed).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" => Some(Self::Off),
            "observe" => Some(Self::Observe),
            "redeem" => Some(Self::Redeem),
            _ => None,
        }
    }

    /// The JSON name: `off`, `observe`, `redeem`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Observe => "observe",
            Self::Redeem => "redeem",
        }
    }
}

/// Per-site patrol settings; JSON names are part of the API (camelCase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct PatrolSettings {
    pub auto_polling_enabled: bool,
    /// Minutes between regular rounds (≥ 5 unless the dev switch `[dev] allow_short_intervals`).
    pub poll_interval_minutes: u32,
    /// Uniform integer jitter added to every regular round, in minutes.
    pub poll_random_delay_min_minutes: u32,
    pub poll_random_delay_max_minutes: u32,
    /// Probes in flight at once for the site (≥ 1).
    pub probe_workers: u32,
    /// Random pause between probe batches, in milliseconds.
    pub probe_batch_delay_min_ms: u64,
    pub probe_batch_delay_max_ms: u64,
    /// CPA actions in flight at once (≥ 1).
    pub action_workers: u32,
    /// Timeout of every CPA request, in milliseconds (≥ 1000).
    pub timeout_ms: u64,
    /// Retries of a transiently failed probe (exponential backoff with jitter).
    pub retry_count: u32,
    pub auto_action_mode: AutoActionMode,
    pub auto_enable_recovered: bool,
    /// Percent, 1..=100, compared with `>=`. The shorthand: every window without an explicit
    /// threshold below uses it (docs/rules/patrol.md §9).
    pub used_percent_threshold: u8,
    /// Weekly-window threshold, percent 1..=100; `None` (JSON `null`) = `usedPercentThreshold`.
    pub weekly_threshold: Option<u8>,
    /// 5-hour-window threshold, percent 1..=100; `None` = `usedPercentThreshold`. Which plans
    /// it disables is `fiveHourRule`'s.
    pub five_hour_threshold: Option<u8>,
    /// Monthly (30-day) window threshold, percent 1..=100; `None` = `usedPercentThreshold`.
    pub monthly_threshold: Option<u8>,
    /// When the 5-hour window may disable an account: `paid` (default, today's rule), `all`,
    /// `never` (see [`FiveHourRule`]).
    pub five_hour_rule: FiveHourRule,
    /// Consecutive 401 probes before an account is acted on as invalid (≥ 1).
    pub invalid_confirmations: u32,
    pub priority_routing_enabled: bool,
    /// 1..=10.
    pub priority_min_active_count: u32,
    /// Every non-forced check is a real probe.
    pub disable_cache_refresh: bool,
    /// Real-refresh age: `realRefreshMinHours` h + a per-account offset in
    /// `0..=realRefreshSpreadMinutes` min (docs/rules/patrol.md §4.3).
    pub real_refresh_min_hours: u32,
    pub real_refresh_spread_minutes: u32,
    /// Read CPA's destructive usage queue as activity evidence (off by default, docs/rules/patrol.md §4.4).
    pub usage_queue_enabled: bool,
    /// Call CPA's `POST /reset-quota` (CPA ≥ v7.2.22) once per cooldown episode when the patrol
    /// re-enables an account or probes an enabled one as usable while CPA still lists it as
    /// cooling down (docs/rules/patrol.md §11; CPA #5277, #5639, #5649). Default on.
    pub clear_cpa_cooldowns: bool,
    /// Priority routing: set the CPA priority of exception and pending accounts that sit above
    /// the routed accounts' to 0 (`{name, priority}` patch). Default off (they are reported).
    pub lower_stale_priorities: bool,
    /// `pool_low` (docs/rules/alerts.md §1): warn when the forecast says the site runs dry more than
    /// this many minutes before its earliest reset. 0..=10080, default 120.
    pub early_warning_minutes: u32,
    /// `pool_low`: warn when fewer usable accounts than this remain (capped at the accounts
    /// that count, so a one-account site is never "low"); 0 = off (the default: the forecast
    /// warns of a burning pool, `below_min_active` of a thin routed one). 0..=100.
    pub low_capacity_accounts: u32,
    /// Banked reset credits: `off` (default), `observe` (shown), `redeem` (one credit when the
    /// site runs dry; docs/rules/cpa.md §10).
    pub reset_credits_mode: ResetCreditsMode,
    /// Longest age, in minutes, of passive quota evidence (CPA's listed `quota` signals) that
    /// may spare a scheduled refresh probe; 0 = never spare one (docs/rules/cpa.md §9,
    /// docs/rules/patrol.md §4.7). 0..=600, default 30.
    pub passive_max_age_minutes: u32,
}

impl Default for PatrolSettings {
    fn default() -> Self {
        Self {
            auto_polling_enabled: false,
            poll_interval_minutes: 10,
            poll_random_delay_min_minutes: 1,
            poll_random_delay_max_minutes: 3,
            probe_workers: 3,
            probe_batch_delay_min_ms: 2000,
            probe_batch_delay_max_ms: 3000,
            action_workers: 4,
            timeout_ms: 15000,
            retry_count: 1,
            auto_action_mode: AutoActionMode::Disable,
            auto_enable_recovered: false,
            used_percent_threshold: 95,
            weekly_threshold: None,
            five_hour_threshold: None,
            monthly_threshold: None,
            five_hour_rule: FiveHourRule::Paid,
            invalid_confirmations: 2,
            priority_routing_enabled: false,
            priority_min_active_count: 2,
            disable_cache_refresh: false,
            real_refresh_min_hours: 8,
            real_refresh_spread_minutes: 110,
            usage_queue_enabled: false,
            clear_cpa_cooldowns: true,
            lower_stale_priorities: false,
            early_warning_minutes: 120,
            low_capacity_accounts: 0,
            reset_credits_mode: ResetCreditsMode::Off,
            passive_max_age_minutes: 30,
        }
    }
}

impl PatrolSettings {
    /// Every rule this value breaks (empty = valid). `allow_short_intervals` lowers the
    /// `pollIntervalMinutes` floor from 5 to 1 (documented dev/test switch, docs/rules/patrol.md §1).
    pub fn problems(&self, allow_short_intervals: bool) -> Vec<String> {
        let mut p = Vec::new();
        let floor = if allow_short_intervals { 1 } else { 5 };
        if self.poll_interval_minutes < floor {
            p.push(format!("pollIntervalMinutes must be >= {floor}"));
        }
        if self.poll_random_delay_max_minutes < self.poll_random_delay_min_minutes {
            p.push("pollRandomDelayMaxMinutes must be >= pollRandomDelayMinMinutes".into());
        }
        if self.probe_workers < 1 {
            p.push("probeWorkers must be >= 1".into());
        }
        if self.probe_batch_delay_max_ms < self.probe_batch_delay_min_ms {
            p.push("probeBatchDelayMaxMs must be >= probeBatchDelayMinMs".into());
        }
        if self.action_workers < 1 {
            p.push("actionWorkers must be >= 1".into());
        }
        if self.timeout_ms < 1000 {
            p.push("timeoutMs must be >= 1000".into());
        }
        if !(1..=100).contains(&self.used_percent_threshold) {
            p.push("usedPercentThreshold must be between 1 and 100".into());
        }
        for (name, value) in [
            ("weeklyThreshold", self.weekly_threshold),
            ("fiveHourThreshold", self.five_hour_threshold),
            ("monthlyThreshold", self.monthly_threshold),
        ] {
            if let Some(v) = value.filter(|v| !(1..=100).contains(v)) {
                p.push(format!("{name} must be between 1 and 100 (got {v})"));
            }
        }
        if self.invalid_confirmations < 1 {
            p.push("invalidConfirmations must be >= 1".into());
        }
        if !(1..=10).contains(&self.priority_min_active_count) {
            p.push("priorityMinActiveCount must be between 1 and 10".into());
        }
        // Upper bounds keep a typo from stalling the site for days or overflowing time maths.
        let caps: [(&str, u64, u64); 14] = [
            (
                "pollIntervalMinutes",
                self.poll_interval_minutes.into(),
                1440,
            ),
            (
                "pollRandomDelayMaxMinutes",
                self.poll_random_delay_max_minutes.into(),
                120,
            ),
            ("probeWorkers", self.probe_workers.into(), 64),
            (
                "probeBatchDelayMaxMs",
                self.probe_batch_delay_max_ms,
                60_000,
            ),
            ("actionWorkers", self.action_workers.into(), 64),
            ("timeoutMs", self.timeout_ms, 120_000),
            ("retryCount", self.retry_count.into(), 10),
            (
                "invalidConfirmations",
                self.invalid_confirmations.into(),
                20,
            ),
            (
                "realRefreshMinHours",
                self.real_refresh_min_hours.into(),
                168,
            ),
            (
                "realRefreshSpreadMinutes",
                self.real_refresh_spread_minutes.into(),
                1440,
            ),
            (
                "pollRandomDelayMinMinutes",
                self.poll_random_delay_min_minutes.into(),
                120,
            ),
            (
                "earlyWarningMinutes",
                self.early_warning_minutes.into(),
                10_080,
            ),
            (
                "lowCapacityAccounts",
                self.low_capacity_accounts.into(),
                100,
            ),
            (
                "passiveMaxAgeMinutes",
                self.passive_max_age_minutes.into(),
                600,
            ),
        ];
        for (name, value, max) in caps {
            if value > max {
                p.push(format!("{name} must be at most {max} (got {value})"));
            }
        }
        p
    }

    /// Forces loaded (old) values into range: the clamps of docs/rules/patrol.md §1. Used only for values
    /// read back from storage, never for API input (which is rejected instead).
    pub fn clamped(mut self) -> Self {
        self.poll_interval_minutes = self.poll_interval_minutes.max(1);
        self.poll_random_delay_max_minutes = self
            .poll_random_delay_max_minutes
            .max(self.poll_random_delay_min_minutes);
        self.probe_workers = self.probe_workers.max(1);
        self.probe_batch_delay_max_ms = self
            .probe_batch_delay_max_ms
            .max(self.probe_batch_delay_min_ms);
        self.action_workers = self.action_workers.max(1);
        self.timeout_ms = self.timeout_ms.max(1000);
        self.used_percent_threshold = self.used_percent_threshold.clamp(1, 100);
        for t in [
            &mut self.weekly_threshold,
            &mut self.five_hour_threshold,
            &mut self.monthly_threshold,
        ] {
            *t = t.map(|v| v.clamp(1, 100));
        }
        self.invalid_confirmations = self.invalid_confirmations.max(1);
        self.priority_min_active_count = self.priority_min_active_count.clamp(1, 10);
        self.early_warning_minutes = self.early_warning_minutes.min(10_080);
        self.low_capacity_accounts = self.low_capacity_accounts.min(100);
        self.passive_max_age_minutes = self.passive_max_age_minutes.min(600);
        self
    }
}

/// A partial settings update: omitted fields stay unchanged (docs/rules/patrol.md §1 **[divergence]**: the
/// anchor resets omitted booleans and delays). Unknown `autoActionMode` strings are rejected.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SettingsPatch {
    pub auto_polling_enabled: Option<bool>,
    pub poll_interval_minutes: Option<i64>,
    pub poll_random_delay_min_minutes: Option<i64>,
    pub poll_random_delay_max_minutes: Option<i64>,
    pub probe_workers: Option<i64>,
    pub probe_batch_delay_min_ms: Option<i64>,
    pub probe_batch_delay_max_ms: Option<i64>,
    pub action_workers: Option<i64>,
    pub timeout_ms: Option<i64>,
    pub retry_count: Option<i64>,
    pub auto_action_mode: Option<String>,
    pub auto_enable_recovered: Option<bool>,
    pub used_percent_threshold: Option<i64>,
    /// Absent = unchanged; `null` = follow `usedPercentThreshold` again; a number = explicit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub weekly_threshold: Option<Option<i64>>,
    /// As `weeklyThreshold`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub five_hour_threshold: Option<Option<i64>>,
    /// As `weeklyThreshold`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub monthly_threshold: Option<Option<i64>>,
    /// `paid` | `all` | `never`.
    pub five_hour_rule: Option<String>,
    pub invalid_confirmations: Option<i64>,
    pub priority_routing_enabled: Option<bool>,
    pub priority_min_active_count: Option<i64>,
    pub disable_cache_refresh: Option<bool>,
    pub real_refresh_min_hours: Option<i64>,
    pub real_refresh_spread_minutes: Option<i64>,
    pub usage_queue_enabled: Option<bool>,
    pub clear_cpa_cooldowns: Option<bool>,
    pub lower_stale_priorities: Option<bool>,
    pub early_warning_minutes: Option<i64>,
    pub low_capacity_accounts: Option<i64>,
    /// `off` | `observe` | `redeem`.
    pub reset_credits_mode: Option<String>,
    pub passive_max_age_minutes: Option<i64>,
}

/// A field that was sent (`null` included) is `Some(value)`; an absent one stays `None` through
/// `#[serde(default)]`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

fn non_negative<T: TryFrom<i64>>(v: i64, field: &str, problems: &mut Vec<String>) -> Option<T> {
    match T::try_from(v) {
        Ok(x) if v >= 0 => Some(x),
        _ if v < 0 => {
            problems.push(format!("{field} must be a non-negative number (got {v})"));
            None
        }
        _ => {
            problems.push(format!("{field} is too large (got {v})"));
            None
        }
    }
}

impl SettingsPatch {
    /// Applies the patch to `current`, returning the new settings or every problem found
    /// (out-of-range values, unknown mode). `current` is left untouched on error.
    pub fn apply(
        &self,
        current: &PatrolSettings,
        allow_short_intervals: bool,
    ) -> Result<PatrolSettings, Vec<String>> {
        let mut s = current.clone();
        let mut p = Vec::new();
        macro_rules! set {
            ($field:ident, $name:literal) => {
                if let Some(v) = self.$field {
                    if let Some(x) = non_negative(v, $name, &mut p) {
                        s.$field = x;
                    }
                }
            };
        }
        set!(poll_interval_minutes, "pollIntervalMinutes");
        set!(poll_random_delay_min_minutes, "pollRandomDelayMinMinutes");
        set!(poll_random_delay_max_minutes, "pollRandomDelayMaxMinutes");
        set!(probe_workers, "probeWorkers");
        set!(probe_batch_delay_min_ms, "probeBatchDelayMinMs");
        set!(probe_batch_delay_max_ms, "probeBatchDelayMaxMs");
        set!(action_workers, "actionWorkers");
        set!(timeout_ms, "timeoutMs");
        set!(retry_count, "retryCount");
        set!(used_percent_threshold, "usedPercentThreshold");
        set!(invalid_confirmations, "invalidConfirmations");
        set!(priority_min_active_count, "priorityMinActiveCount");
        set!(real_refresh_min_hours, "realRefreshMinHours");
        set!(real_refresh_spread_minutes, "realRefreshSpreadMinutes");
        self.apply_thresholds(&mut s, &mut p);
        if let Some(b) = self.auto_polling_enabled {
            s.auto_polling_enabled = b;
        }
        if let Some(b) = self.auto_enable_recovered {
            s.auto_enable_recovered = b;
        }
        if let Some(b) = self.priority_routing_enabled {
            s.priority_routing_enabled = b;
        }
        if let Some(b) = self.disable_cache_refresh {
            s.disable_cache_refresh = b;
        }
        if let Some(b) = self.usage_queue_enabled {
            s.usage_queue_enabled = b;
        }
        if let Some(b) = self.clear_cpa_cooldowns {
            s.clear_cpa_cooldowns = b;
        }
        if let Some(b) = self.lower_stale_priorities {
            s.lower_stale_priorities = b;
        }
        set!(early_warning_minutes, "earlyWarningMinutes");
        set!(low_capacity_accounts, "lowCapacityAccounts");
        set!(passive_max_age_minutes, "passiveMaxAgeMinutes");
        if let Some(mode) = &self.auto_action_mode {
            match AutoActionMode::parse(mode) {
                Some(m) => s.auto_action_mode = m,
                None => p.push(format!(
                    "autoActionMode must be one of none, disable, delete (got {mode:?})"
                )),
            }
        }
        if let Some(mode) = &self.reset_credits_mode {
            match ResetCreditsMode::parse(mode) {
                Some(m) => s.reset_credits_mode = m,
                None => p.push(format!(
                    "resetCreditsMode must be one of off, observe, redeem (got {mode:?})"
                )),
            }
        }
        // Fields refused above kept their current (valid) value in `s`, so this adds only the
        // other problems: every problem is reported at once (api.md `PUT /api/settings`).
        p.extend(s.problems(allow_short_intervals));
        if p.is_empty() { Ok(s) } else { Err(p) }
    }

    /// The per-window thresholds and `fiveHourRule` (docs/rules/patrol.md §9): a number sets the
    /// window's explicit threshold, `null` makes it follow `usedPercentThreshold` again, absent
    /// leaves it. `usedPercentThreshold` itself never touches an explicit value.
    fn apply_thresholds(&self, s: &mut PatrolSettings, p: &mut Vec<String>) {
        for (patch, field, name) in [
            (
                self.weekly_threshold,
                &mut s.weekly_threshold,
                "weeklyThreshold",
            ),
            (
                self.five_hour_threshold,
                &mut s.five_hour_threshold,
                "fiveHourThreshold",
            ),
            (
                self.monthly_threshold,
                &mut s.monthly_threshold,
                "monthlyThreshold",
            ),
        ] {
            match patch {
                None => {}
                Some(None) => *field = None,
                Some(Some(v)) => {
                    if let Some(t) = threshold_in_range(v, name, p) {
                        *field = Some(t);
                    }
                }
            }
        }
        if let Some(rule) = &self.five_hour_rule
            && let Some(r) = parse_five_hour_rule(rule, p)
        {
            s.five_hour_rule = r;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_spec_table() {
        let s = PatrolSettings::default();
        assert_eq!(s.poll_interval_minutes, 10);
        assert_eq!(
            (
                s.poll_random_delay_min_minutes,
                s.poll_random_delay_max_minutes
            ),
            (1, 3)
        );
        assert_eq!(s.probe_workers, 3);
        assert_eq!(
            (s.probe_batch_delay_min_ms, s.probe_batch_delay_max_ms),
            (2000, 3000)
        );
        assert_eq!(s.action_workers, 4);
        assert_eq!(s.timeout_ms, 15000);
        assert_eq!(s.retry_count, 1);
        assert_eq!(s.auto_action_mode, AutoActionMode::Disable);
        assert_eq!(s.used_percent_threshold, 95);
        assert_eq!(s.invalid_confirmations, 2);
        assert_eq!(s.priority_min_active_count, 2);
        assert!(s.clear_cpa_cooldowns, "clearCpaCooldowns defaults on");
        assert!(
            !s.lower_stale_priorities,
            "lowerStalePriorities defaults off"
        );
        assert_eq!(
            (s.real_refresh_min_hours, s.real_refresh_spread_minutes),
            (8, 110)
        );
        assert!(s.problems(false).is_empty());
    }

    #[test]
    fn a_partial_update_changes_only_the_fields_it_sends() {
        let current = PatrolSettings {
            auto_enable_recovered: true,
            probe_batch_delay_min_ms: 100,
            probe_batch_delay_max_ms: 200,
            ..Default::default()
        };
        let patch = SettingsPatch {
            used_percent_threshold: Some(90),
            ..Default::default()
        };
        let new = patch.apply(&current, false).unwrap();
        assert_eq!(new.used_percent_threshold, 90);
        assert!(new.auto_enable_recovered);
        assert_eq!(
            (new.probe_batch_delay_min_ms, new.probe_batch_delay_max_ms),
            (100, 200)
        );
    }

    #[test]
    fn reset_credits_mode_defaults_to_off_and_an_unknown_mode_is_refused() {
        // docs/reset-credits.md "The setting".
        assert_eq!(
            PatrolSettings::default().reset_credits_mode,
            ResetCreditsMode::Off
        );
        let set = |m: &str| {
            SettingsPatch {
                reset_credits_mode: Some(m.into()),
                ..Default::default()
            }
            .apply(&PatrolSettings::default(), false)
        };
        assert_eq!(
            set(" Redeem ").unwrap().reset_credits_mode,
            ResetCreditsMode::Redeem
        );
        assert_eq!(
            set("observe").unwrap().reset_credits_mode,
            ResetCreditsMode::Observe
        );
        let problems = set("spend").unwrap_err();
        assert!(problems[0].contains("resetCreditsMode"), "{problems:?}");
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let patch = SettingsPatch {
            poll_interval_minutes: Some(2),
            used_percent_threshold: Some(0),
            timeout_ms: Some(10),
            ..Default::default()
        };
        let problems = patch.apply(&PatrolSettings::default(), false).unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    #[test]
    fn malformed_and_out_of_range_values_are_reported_together() {
        let patch = SettingsPatch {
            retry_count: Some(-1),
            auto_action_mode: Some("explode".into()),
            timeout_ms: Some(10),
            used_percent_threshold: Some(0),
            ..Default::default()
        };
        let problems = patch.apply(&PatrolSettings::default(), false).unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        for field in [
            "retryCount",
            "autoActionMode",
            "timeoutMs",
            "usedPercentThreshold",
        ] {
            assert!(problems.iter().any(|p| p.contains(field)), "{problems:?}");
        }
    }

    #[test]
    fn an_unknown_action_mode_is_rejected_not_turned_into_none() {
        let patch = SettingsPatch {
            auto_action_mode: Some("dsiable".into()),
            ..Default::default()
        };
        let problems = patch.apply(&PatrolSettings::default(), false).unwrap_err();
        assert!(problems[0].contains("autoActionMode"));
    }

    #[test]
    fn negative_numbers_are_rejected() {
        let patch = SettingsPatch {
            retry_count: Some(-1),
            ..Default::default()
        };
        assert!(patch.apply(&PatrolSettings::default(), false).is_err());
    }

    #[test]
    fn the_dev_switch_lowers_the_interval_floor() {
        let patch = SettingsPatch {
            poll_interval_minutes: Some(1),
            ..Default::default()
        };
        assert!(patch.apply(&PatrolSettings::default(), false).is_err());
        assert_eq!(
            patch
                .apply(&PatrolSettings::default(), true)
                .unwrap()
                .poll_interval_minutes,
            1
        );
    }

    #[test]
    fn clamps_apply_to_loaded_values() {
        let s = PatrolSettings {
            priority_min_active_count: 40,
            used_percent_threshold: 0,
            probe_batch_delay_max_ms: 1,
            ..Default::default()
        };
        let c = s.clamped();
        assert_eq!(c.priority_min_active_count, 10);
        assert_eq!(c.used_percent_threshold, 1);
        assert_eq!(c.probe_batch_delay_max_ms, c.probe_batch_delay_min_ms);
    }

    #[test]
    fn the_early_warning_settings_default_to_120_minutes_and_no_capacity_limit_and_are_bounded() {
        let s = PatrolSettings::default();
        assert_eq!((s.early_warning_minutes, s.low_capacity_accounts), (120, 0));
        let patch = SettingsPatch {
            early_warning_minutes: Some(0),
            low_capacity_accounts: Some(0),
            ..Default::default()
        };
        let s = patch.apply(&PatrolSettings::default(), false).unwrap();
        assert_eq!((s.early_warning_minutes, s.low_capacity_accounts), (0, 0));
        let too_much = SettingsPatch {
            early_warning_minutes: Some(10_081),
            low_capacity_accounts: Some(101),
            ..Default::default()
        };
        let problems = too_much
            .apply(&PatrolSettings::default(), false)
            .unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        // Settings stored before docs/rules/patrol.md §9 read back with the defaults.
        let old: PatrolSettings = serde_json::from_str(r#"{"usedPercentThreshold": 90}"#).unwrap();
        assert_eq!(old.early_warning_minutes, 120);
    }

    #[test]
    fn values_beyond_the_upper_bounds_are_rejected() {
        let patch = SettingsPatch {
            real_refresh_spread_minutes: Some(4_294_967_295),
            probe_batch_delay_max_ms: Some(86_400_000),
            retry_count: Some(1000),
            ..Default::default()
        };
        let problems = patch.apply(&PatrolSettings::default(), false).unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    #[test]
    fn the_shorthand_leaves_explicit_window_thresholds_and_null_restores_following_it() {
        let patch: SettingsPatch =
            serde_json::from_str(r#"{"fiveHourThreshold":80,"fiveHourRule":"all"}"#).unwrap();
        let s = patch.apply(&PatrolSettings::default(), false).unwrap();
        assert_eq!(s.five_hour_threshold, Some(80));
        assert_eq!(s.five_hour_rule, FiveHourRule::All);
        let shorthand: SettingsPatch =
            serde_json::from_str(r#"{"usedPercentThreshold":90}"#).unwrap();
        let s = shorthand.apply(&s, false).unwrap();
        let p = crate::policy::QuotaPolicy::site(&s);
        assert_eq!((p.weekly, p.five_hour, p.monthly), (90, 80, 90));
        let reset: SettingsPatch = serde_json::from_str(r#"{"fiveHourThreshold":null}"#).unwrap();
        let s = reset.apply(&s, false).unwrap();
        assert_eq!(s.five_hour_threshold, None);
        assert_eq!(crate::policy::QuotaPolicy::site(&s).five_hour, 90);
    }

    #[test]
    fn window_thresholds_and_the_five_hour_rule_are_validated_together() {
        let patch: SettingsPatch = serde_json::from_str(
            r#"{"weeklyThreshold":0,"monthlyThreshold":150,"fiveHourRule":"paid-only"}"#,
        )
        .unwrap();
        let problems = patch.apply(&PatrolSettings::default(), false).unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        for field in ["weeklyThreshold", "monthlyThreshold", "fiveHourRule"] {
            assert!(problems.iter().any(|p| p.contains(field)), "{problems:?}");
        }
    }

    #[test]
    fn stored_settings_without_window_thresholds_follow_the_shorthand() {
        let s: PatrolSettings = serde_json::from_str(r#"{"usedPercentThreshold":88}"#).unwrap();
        assert_eq!(
            (
                s.weekly_threshold,
                s.five_hour_threshold,
                s.monthly_threshold
            ),
            (None, None, None)
        );
        assert_eq!(s.five_hour_rule, FiveHourRule::Paid);
        assert_eq!(crate::policy::QuotaPolicy::site(&s).monthly, 88);
    }
}
