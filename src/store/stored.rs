//! The JSON forms the store writes into SQLite columns, one type per stored shape, apart from
//! the core types whose serde form is also the REST API's: renaming a core field changes the
//! API, not a stored row. Each type converts from and to its core twin; the field names and
//! order are the ones rows have always been written with (byte-identical to what the core
//! types serialised to before this module existed), so existing databases keep loading and
//! migrations stay as they are. `fixtures/store/*.json` pin each form (tests below).
//!
//! Nested values that are enums or small leaf records of the core (`WindowKind`, `Credits`,
//! `Digest`) are still stored through their core serde form, and so are the shapes whose
//! stored form is by design the API's (`sites.settings_json`: `PatrolSettings`,
//! `account_policies.policy_json`: `AccountPolicy`, `inspection_runs.result_json`:
//! `InspectionRunResult`, `router_chains.legs_json`: `[Leg]`; `models_json` columns are plain
//! arrays of strings); the golden fixtures catch a rename in those too.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::core::account::{Account, ProbeState, QuotaSnapshot};
use crate::core::alerting::pool::AccountLine;
use crate::core::alerting::{AlertDetails, FamilyState};
use crate::core::digest::Digest;
use crate::core::quota::{Credits, QuotaWindow, WindowKind};
use crate::core::reset_credits::CreditHint;

/// One account as CPA listed it: table `accounts`, column `account_json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredAccount {
    pub name: String,
    pub auth_index: Option<String>,
    pub email: Option<String>,
    pub label: Option<String>,
    pub plan_type: Option<String>,
    pub chatgpt_account_id: Option<String>,
    pub disabled: bool,
    pub status: String,
    pub status_message: String,
    pub cpa_priority: i64,
    pub request_total: Option<u64>,
    pub recent_requests: Option<u64>,
    /// Absent in rows written before CPA's cooling-down flag was read.
    #[serde(default)]
    pub unavailable: bool,
    #[serde(default)]
    pub next_retry_after: Option<DateTime<Utc>>,
    #[serde(default)]
    pub last_refresh: Option<DateTime<Utc>>,
}

impl From<&Account> for StoredAccount {
    fn from(a: &Account) -> Self {
        Self {
            name: a.name.clone(),
            auth_index: a.auth_index.clone(),
            email: a.email.clone(),
            label: a.label.clone(),
            plan_type: a.plan_type.clone(),
            chatgpt_account_id: a.chatgpt_account_id.clone(),
            disabled: a.disabled,
            status: a.status.clone(),
            status_message: a.status_message.clone(),
            cpa_priority: a.cpa_priority,
            request_total: a.request_total,
            recent_requests: a.recent_requests,
            unavailable: a.unavailable,
            next_retry_after: a.next_retry_after,
            last_refresh: a.last_refresh,
        }
    }
}

impl From<StoredAccount> for Account {
    fn from(a: StoredAccount) -> Self {
        Self {
            name: a.name,
            auth_index: a.auth_index,
            email: a.email,
            label: a.label,
            plan_type: a.plan_type,
            chatgpt_account_id: a.chatgpt_account_id,
            disabled: a.disabled,
            status: a.status,
            status_message: a.status_message,
            cpa_priority: a.cpa_priority,
            request_total: a.request_total,
            recent_requests: a.recent_requests,
            unavailable: a.unavailable,
            next_retry_after: a.next_retry_after,
            last_refresh: a.last_refresh,
            passive: None,
        }
    }
}

/// One rate-limit window of a [`StoredSnapshot`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredWindow {
    pub id: String,
    pub label: String,
    pub group: String,
    pub kind: WindowKind,
    pub used_percent: Option<f64>,
    pub limit_window_seconds: Option<i64>,
    pub reset_at: Option<DateTime<Utc>>,
    pub reset_after_seconds: Option<i64>,
}

impl From<&QuotaWindow> for StoredWindow {
    fn from(w: &QuotaWindow) -> Self {
        Self {
            id: w.id.clone(),
            label: w.label.clone(),
            group: w.group.clone(),
            kind: w.kind,
            used_percent: w.used_percent,
            limit_window_seconds: w.limit_window_seconds,
            reset_at: w.reset_at,
            reset_after_seconds: w.reset_after_seconds,
        }
    }
}

impl From<StoredWindow> for QuotaWindow {
    fn from(w: StoredWindow) -> Self {
        Self {
            id: w.id,
            label: w.label,
            group: w.group,
            kind: w.kind,
            used_percent: w.used_percent,
            limit_window_seconds: w.limit_window_seconds,
            reset_at: w.reset_at,
            reset_after_seconds: w.reset_after_seconds,
        }
    }
}

/// A good quota reading: table `snapshot_history`, column `snapshot_json`, and the `snapshot`
/// of a [`StoredProbeState`]. `store::accounts::window_readings` reads `windows[].id`,
/// `usedPercent` and `resetAt` of it directly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredSnapshot {
    pub plan_type: Option<String>,
    pub windows: Vec<StoredWindow>,
    pub credits: Option<Credits>,
    pub main_limit_reached: bool,
    pub status_code: u16,
    pub checked_at: DateTime<Utc>,
    pub refreshed_at: DateTime<Utc>,
    pub from_cache: bool,
    pub cache_reason: Option<String>,
    /// The usage body's reset-credit hint (docs/rules/cpa.md §10); absent in rows written
    /// before it was read, and when the body had none (unknown, not zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_credits: Option<CreditHint>,
}

impl From<&QuotaSnapshot> for StoredSnapshot {
    fn from(s: &QuotaSnapshot) -> Self {
        Self {
            plan_type: s.plan_type.clone(),
            windows: s.windows.iter().map(StoredWindow::from).collect(),
            credits: s.credits.clone(),
            main_limit_reached: s.main_limit_reached,
            status_code: s.status_code,
            checked_at: s.checked_at,
            refreshed_at: s.refreshed_at,
            from_cache: s.from_cache,
            cache_reason: s.cache_reason.clone(),
            reset_credits: s.reset_credits,
        }
    }
}

impl From<StoredSnapshot> for QuotaSnapshot {
    fn from(s: StoredSnapshot) -> Self {
        Self {
            plan_type: s.plan_type,
            windows: s.windows.into_iter().map(QuotaWindow::from).collect(),
            credits: s.credits,
            main_limit_reached: s.main_limit_reached,
            status_code: s.status_code,
            checked_at: s.checked_at,
            refreshed_at: s.refreshed_at,
            from_cache: s.from_cache,
            cache_reason: s.cache_reason,
            reset_credits: s.reset_credits,
        }
    }
}

/// One account's probe state: table `probe_states`, column `state_json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredProbeState {
    pub snapshot: Option<StoredSnapshot>,
    pub last_status_code: Option<u16>,
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    pub consecutive_failures: u32,
    pub consecutive_invalid: u32,
    pub payment_problem: Option<bool>,
    pub last_probe_at: Option<DateTime<Utc>>,
    pub request_total_at_probe: Option<u64>,
    pub retry_not_before: Option<DateTime<Utc>>,
    pub checked_at: Option<DateTime<Utc>>,
}

impl From<&ProbeState> for StoredProbeState {
    fn from(s: &ProbeState) -> Self {
        Self {
            snapshot: s.snapshot.as_ref().map(StoredSnapshot::from),
            last_status_code: s.last_status_code,
            last_error: s.last_error.clone(),
            last_error_at: s.last_error_at,
            consecutive_failures: s.consecutive_failures,
            consecutive_invalid: s.consecutive_invalid,
            payment_problem: s.payment_problem,
            last_probe_at: s.last_probe_at,
            request_total_at_probe: s.request_total_at_probe,
            retry_not_before: s.retry_not_before,
            checked_at: s.checked_at,
        }
    }
}

impl From<StoredProbeState> for ProbeState {
    fn from(s: StoredProbeState) -> Self {
        Self {
            snapshot: s.snapshot.map(QuotaSnapshot::from),
            last_status_code: s.last_status_code,
            last_error: s.last_error,
            last_error_at: s.last_error_at,
            consecutive_failures: s.consecutive_failures,
            consecutive_invalid: s.consecutive_invalid,
            payment_problem: s.payment_problem,
            last_probe_at: s.last_probe_at,
            request_total_at_probe: s.request_total_at_probe,
            retry_not_before: s.retry_not_before,
            checked_at: s.checked_at,
        }
    }
}

/// The alert state of one (site, family): table `alert_states`, column `state_json`. Every
/// field may be absent (rows of older builds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StoredFamilyState {
    pub raised: bool,
    pub raised_at: Option<DateTime<Utc>>,
    pub last_raise_sent_at: Option<DateTime<Utc>>,
    pub clear_since: Option<DateTime<Utc>>,
    pub clear_evaluations: u32,
    pub pending_accounts: Vec<String>,
}

impl From<&FamilyState> for StoredFamilyState {
    fn from(s: &FamilyState) -> Self {
        Self {
            raised: s.raised,
            raised_at: s.raised_at,
            last_raise_sent_at: s.last_raise_sent_at,
            clear_since: s.clear_since,
            clear_evaluations: s.clear_evaluations,
            pending_accounts: s.pending_accounts.clone(),
        }
    }
}

impl From<StoredFamilyState> for FamilyState {
    fn from(s: StoredFamilyState) -> Self {
        Self {
            raised: s.raised,
            raised_at: s.raised_at,
            last_raise_sent_at: s.last_raise_sent_at,
            clear_since: s.clear_since,
            clear_evaluations: s.clear_evaluations,
            pending_accounts: s.pending_accounts,
        }
    }
}

/// One row of the accounts table of a [`StoredAlertDetails`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredAccountLine {
    pub name: String,
    pub display_name: String,
    pub plan: Option<String>,
    pub disabled: bool,
    pub usable: bool,
    pub exhausted: bool,
    pub weekly_used_percent: Option<f64>,
    /// Absent in records stored before monthly windows were told apart.
    #[serde(default)]
    pub long_window: Option<WindowKind>,
    pub five_hour_used_percent: Option<f64>,
    pub reset_at: Option<DateTime<Utc>>,
}

impl From<&AccountLine> for StoredAccountLine {
    fn from(l: &AccountLine) -> Self {
        Self {
            name: l.name.clone(),
            display_name: l.display_name.clone(),
            plan: l.plan.clone(),
            disabled: l.disabled,
            usable: l.usable,
            exhausted: l.exhausted,
            weekly_used_percent: l.weekly_used_percent,
            long_window: l.long_window,
            five_hour_used_percent: l.five_hour_used_percent,
            reset_at: l.reset_at,
        }
    }
}

impl From<StoredAccountLine> for AccountLine {
    fn from(l: StoredAccountLine) -> Self {
        Self {
            name: l.name,
            display_name: l.display_name,
            plan: l.plan,
            disabled: l.disabled,
            usable: l.usable,
            exhausted: l.exhausted,
            weekly_used_percent: l.weekly_used_percent,
            long_window: l.long_window,
            five_hour_used_percent: l.five_hour_used_percent,
            reset_at: l.reset_at,
        }
    }
}

/// What an alert says beyond its kind: table `alert_events`, column `details_json`. The same
/// object is flattened into the webhook body (`alerts::webhook::WebhookPayload`), so it is
/// also the webhook's contract. Every field may be absent (rows of older builds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StoredAlertDetails {
    pub total_accounts: Option<usize>,
    pub usable_accounts: Option<usize>,
    pub earliest_reset_at: Option<DateTime<Utc>>,
    pub accounts: Vec<StoredAccountLine>,
    pub omitted_accounts: usize,
    pub invalid_accounts: Vec<String>,
    pub min_active: Option<u32>,
    pub last_contact_at: Option<DateTime<Utc>>,
    pub failing_since: Option<DateTime<Utc>>,
    pub cause: Option<String>,
    pub raised_at: Option<DateTime<Utc>>,
    pub projected_dry_at: Option<DateTime<Utc>>,
    pub forecast_reset_at: Option<DateTime<Utc>>,
    /// Percent per hour.
    pub burn_per_hour: Option<f64>,
    pub early_warning_minutes: Option<i64>,
    pub low_capacity_accounts: Option<u32>,
    pub digest: Option<Digest>,
}

impl From<&AlertDetails> for StoredAlertDetails {
    fn from(d: &AlertDetails) -> Self {
        Self {
            total_accounts: d.total_accounts,
            usable_accounts: d.usable_accounts,
            earliest_reset_at: d.earliest_reset_at,
            accounts: d.accounts.iter().map(StoredAccountLine::from).collect(),
            omitted_accounts: d.omitted_accounts,
            invalid_accounts: d.invalid_accounts.clone(),
            min_active: d.min_active,
            last_contact_at: d.last_contact_at,
            failing_since: d.failing_since,
            cause: d.cause.clone(),
            raised_at: d.raised_at,
            projected_dry_at: d.projected_dry_at,
            forecast_reset_at: d.forecast_reset_at,
            burn_per_hour: d.burn_per_hour,
            early_warning_minutes: d.early_warning_minutes,
            low_capacity_accounts: d.low_capacity_accounts,
            digest: d.digest.clone(),
        }
    }
}

impl From<StoredAlertDetails> for AlertDetails {
    fn from(d: StoredAlertDetails) -> Self {
        Self {
            total_accounts: d.total_accounts,
            usable_accounts: d.usable_accounts,
            earliest_reset_at: d.earliest_reset_at,
            accounts: d.accounts.into_iter().map(AccountLine::from).collect(),
            omitted_accounts: d.omitted_accounts,
            invalid_accounts: d.invalid_accounts,
            min_active: d.min_active,
            last_contact_at: d.last_contact_at,
            failing_since: d.failing_since,
            cause: d.cause,
            raised_at: d.raised_at,
            projected_dry_at: d.projected_dry_at,
            forecast_reset_at: d.forecast_reset_at,
            burn_per_hour: d.burn_per_hour,
            early_warning_minutes: d.early_warning_minutes,
            low_capacity_accounts: d.low_capacity_accounts,
            digest: d.digest,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use chrono::{Duration, NaiveDate, TimeZone};
    use serde::de::DeserializeOwned;

    use super::*;
    use crate::core::digest::{ActionCounts, StateChange};
    use crate::core::inspect::Action;
    use crate::golden;

    /// The instant the fixed values are built around (as in the upstream fixtures).
    pub(crate) fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 26, 12, 0, 0).unwrap()
    }

    /// A listed Plus account.
    pub(crate) fn fixed_account() -> Account {
        Account {
            name: "codex-alice@example.com-plus.json".into(),
            auth_index: Some("3f9a1c0b7d2e4a61".into()),
            email: Some("alice@example.com".into()),
            label: Some("Alice".into()),
            plan_type: Some("plus".into()),
            chatgpt_account_id: Some("00000000-0000-4000-8000-00000000a11c".into()),
            disabled: false,
            status: "active".into(),
            status_message: String::new(),
            cpa_priority: 10,
            request_total: Some(1234),
            recent_requests: Some(17),
            unavailable: true,
            next_retry_after: Some(t0() + Duration::minutes(5)),
            last_refresh: Some(t0() - Duration::days(2)),
            passive: None,
        }
    }

    /// A fresh snapshot with a 5-hour and a weekly window.
    pub(crate) fn fixed_snapshot() -> QuotaSnapshot {
        let window = |slot: &str, label: &str, kind, used, secs: i64| QuotaWindow {
            id: format!("main:{slot}"),
            label: label.into(),
            group: "main".into(),
            kind,
            used_percent: Some(used),
            limit_window_seconds: Some(secs),
            reset_at: Some(t0() + Duration::seconds(secs / 2)),
            reset_after_seconds: Some(secs / 2),
        };
        QuotaSnapshot {
            plan_type: Some("plus".into()),
            windows: vec![
                window("primary", "5-hour", WindowKind::FiveHour, 42.5, 18_000),
                window("secondary", "weekly", WindowKind::Weekly, 96.0, 604_800),
            ],
            credits: Some(Credits {
                has_credits: Some(false),
                unlimited: Some(false),
                balance: Some("0".into()),
            }),
            main_limit_reached: false,
            status_code: 200,
            checked_at: t0(),
            refreshed_at: t0() - Duration::minutes(10),
            from_cache: true,
            cache_reason: Some("fresh for 15 min".into()),
            reset_credits: Some(CreditHint {
                available: Some(2),
                applicable: Some(1),
            }),
        }
    }

    /// The state after a good snapshot and one later transport failure.
    pub(crate) fn fixed_probe_state() -> ProbeState {
        ProbeState {
            snapshot: Some(fixed_snapshot()),
            last_status_code: Some(0),
            last_error: Some("connection reset".into()),
            last_error_at: Some(t0() + Duration::minutes(1)),
            consecutive_failures: 1,
            consecutive_invalid: 0,
            payment_problem: None,
            last_probe_at: Some(t0() + Duration::minutes(1)),
            request_total_at_probe: Some(1234),
            retry_not_before: Some(t0() + Duration::minutes(6)),
            checked_at: Some(t0() + Duration::minutes(1)),
        }
    }

    /// A raised exhaustion family waiting for its clear to hold.
    pub(crate) fn fixed_family_state() -> FamilyState {
        FamilyState {
            raised: true,
            raised_at: Some(t0() - Duration::hours(3)),
            last_raise_sent_at: Some(t0() - Duration::hours(1)),
            clear_since: Some(t0() - Duration::minutes(5)),
            clear_evaluations: 1,
            pending_accounts: vec!["codex-bob@example.com-free.json".into()],
        }
    }

    /// Details of an `all_exhausted` alert of two accounts, with a forecast.
    pub(crate) fn fixed_details() -> AlertDetails {
        let line = |who: &str, plan: &str, weekly, five, reset| AccountLine {
            name: format!("codex-{who}-{plan}.json"),
            display_name: who.into(),
            plan: Some(plan.into()),
            disabled: true,
            usable: false,
            exhausted: true,
            weekly_used_percent: Some(weekly),
            long_window: Some(WindowKind::Weekly),
            five_hour_used_percent: five,
            reset_at: Some(t0() + reset),
        };
        AlertDetails {
            total_accounts: Some(2),
            usable_accounts: Some(0),
            earliest_reset_at: Some(t0() + Duration::minutes(192)),
            accounts: vec![
                line(
                    "alice@example.com",
                    "plus",
                    97.0,
                    Some(40.0),
                    Duration::minutes(192),
                ),
                line("bob@example.com", "free", 100.0, None, Duration::days(2)),
            ],
            omitted_accounts: 0,
            invalid_accounts: vec![],
            min_active: Some(1),
            last_contact_at: Some(t0()),
            failing_since: None,
            cause: None,
            raised_at: None,
            projected_dry_at: Some(t0() + Duration::minutes(45)),
            forecast_reset_at: Some(t0() + Duration::minutes(190)),
            burn_per_hour: Some(12.5),
            early_warning_minutes: Some(60),
            low_capacity_accounts: Some(1),
            digest: None,
        }
    }

    /// Details of a `daily_digest` alert (the digest is part of the stored form).
    pub(crate) fn fixed_digest_details() -> AlertDetails {
        AlertDetails {
            total_accounts: Some(2),
            usable_accounts: Some(1),
            digest: Some(Digest {
                local_date: NaiveDate::from_ymd_opt(2026, 5, 26).unwrap(),
                since: t0() - Duration::hours(24),
                total_accounts: 2,
                usable_accounts: 1,
                exhausted_accounts: 1,
                invalid_accounts: 0,
                changes: vec![StateChange {
                    at: t0() - Duration::hours(2),
                    account: "bob@example.com".into(),
                    action: Action::Disable,
                    success: true,
                    reason: Some("weekly 100% >= threshold 95%".into()),
                }],
                omitted_changes: 0,
                actions: ActionCounts {
                    disabled: 1,
                    enabled: 0,
                    deleted: 0,
                    failed: 0,
                },
                reset_credits: Some(crate::core::digest::DigestCredits {
                    mode: "redeem".into(),
                    available: 3,
                    applicable: 1,
                    accounts_known: 2,
                    soonest_expires_at: Some(t0() + Duration::days(9)),
                    redeemed: 1,
                }),
            }),
            ..Default::default()
        }
    }

    /// Pins `stored` to `fixtures/store/<name>.json` and parses the file back into `core`.
    fn pin<S, C>(name: &str, core: C, stored: S)
    where
        S: Serialize + DeserializeOwned + Into<C>,
        C: PartialEq + std::fmt::Debug,
    {
        let rel = format!("store/{name}.json");
        golden::check(&rel, &golden::pretty(&stored));
        let back: S = serde_json::from_str(&golden::read(&rel)).expect("the fixture parses");
        assert_eq!(back.into(), core, "{rel} reads back into the value it pins");
    }

    #[test]
    fn account_json_matches_its_golden_file() {
        let a = fixed_account();
        pin("accounts.account_json", a.clone(), StoredAccount::from(&a));
    }

    #[test]
    fn snapshot_json_matches_its_golden_file() {
        let s = fixed_snapshot();
        pin(
            "snapshot_history.snapshot_json",
            s.clone(),
            StoredSnapshot::from(&s),
        );
    }

    #[test]
    fn probe_state_json_matches_its_golden_file() {
        let s = fixed_probe_state();
        pin(
            "probe_states.state_json",
            s.clone(),
            StoredProbeState::from(&s),
        );
    }

    #[test]
    fn alert_state_json_matches_its_golden_file() {
        let s = fixed_family_state();
        pin(
            "alert_states.state_json",
            s.clone(),
            StoredFamilyState::from(&s),
        );
    }

    #[test]
    fn alert_details_json_matches_its_golden_files() {
        let d = fixed_details();
        pin(
            "alert_events.details_json__all-exhausted",
            d.clone(),
            StoredAlertDetails::from(&d),
        );
        let d = fixed_digest_details();
        pin(
            "alert_events.details_json__daily-digest",
            d.clone(),
            StoredAlertDetails::from(&d),
        );
    }

    #[test]
    fn rows_of_older_builds_still_load() {
        // Fields added later default when absent.
        let a: StoredAccount = serde_json::from_str(
            r#"{"name":"a.json","authIndex":null,"email":null,"label":null,"planType":null,
            "chatgptAccountId":null,"disabled":false,"status":"active","statusMessage":"",
            "cpaPriority":0,"requestTotal":null,"recentRequests":null}"#,
        )
        .unwrap();
        assert!(!a.unavailable && a.next_retry_after.is_none() && a.last_refresh.is_none());
        let d: StoredAlertDetails = serde_json::from_str(
            r#"{"accounts":[{"name":"a.json",
            "displayName":"a","plan":null,"disabled":true,"usable":false,"exhausted":true,
            "weeklyUsedPercent":100.0,"fiveHourUsedPercent":null,"resetAt":null}]}"#,
        )
        .unwrap();
        assert_eq!(d.accounts[0].long_window, None);
        assert_eq!(
            serde_json::from_str::<StoredFamilyState>("{}").unwrap(),
            StoredFamilyState::default()
        );
    }

    /// Pins a shape stored through its core serde form: `fixtures/store/<name>.json` parses
    /// as `T` and serialises back to the same text (a renamed or dropped field fails here).
    fn pin_core<T: Serialize + DeserializeOwned>(name: &str) {
        let rel = format!("store/{name}.json");
        let value: T = serde_json::from_str(&golden::read(&rel)).expect("the fixture parses");
        golden::check(&rel, &golden::pretty(&value));
    }

    #[test]
    fn shapes_stored_in_their_core_form_match_their_golden_files() {
        pin_core::<crate::core::settings::PatrolSettings>("sites.settings_json");
        pin_core::<crate::core::policy::AccountPolicy>("account_policies.policy_json");
        pin_core::<crate::core::report::InspectionRunResult>("inspection_runs.result_json");
        pin_core::<Vec<crate::core::router::Leg>>("router_chains.legs_json");
    }
}
