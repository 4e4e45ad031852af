//! The OpenAPI schemas of the core types the API shows: `core` stays free of `utoipa`
//! (ARCHITECTURE.md, issue 8 item 7), so each such type has here a schema twin — the same
//! fields, serde attributes and docs, deriving `ToSchema` under the core type's name — and
//! [`schema_as!`] makes the core type answer with its twin's schema. The document therefore
//! lists the same components as when core derived them.
//!
//! Drift guard: each twin has a `From<core type>` that destructures every field (or matches
//! every variant) without `..`, so adding, removing or renaming one on either side fails to
//! compile until both agree. Serde attributes are copied by hand: keep them in step.
#![allow(rustdoc::broken_intra_doc_links)]

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::core::account::{DisableReason, ReasonOwner};
use crate::core::alerting::{
    AccountLine, AlertDetails, ChannelKind, DeliveryStatus, EventKind, Severity,
};
use crate::core::digest::{ActionCounts, Digest, StateChange};
use crate::core::forecast::Projection;
use crate::core::inspect::Action;
use crate::core::oplog::{Category, Level, LogEntry, Source};
use crate::core::policy::{
    AccountPolicy, AccountPolicyInput, AppliedThreshold, FiveHourRule, PolicySource, PolicySources,
    QuotaPolicy,
};
use crate::core::priority::{PriorityEntry, SavedPriorityEntry};
use crate::core::quota::{Credits, QuotaWindow, WindowKind};
use crate::core::report::{ActionOutcome, DecisionRecord, InspectionRunResult, RunStatus};
use crate::core::settings::{AutoActionMode, PatrolSettings, SettingsPatch};

/// Gives each core type (left) the OpenAPI schema, name and nested components of its twin
/// (right), exactly as a `#[derive(ToSchema)]` on the core type would.
macro_rules! schema_as {
    ($($core:ty => $twin:ty,)*) => {$(
        impl utoipa::__dev::ComposeSchema for $core {
            fn compose(
                generics: Vec<utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>>,
            ) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                <$twin as utoipa::__dev::ComposeSchema>::compose(generics)
            }
        }

        impl utoipa::ToSchema for $core {
            fn name() -> std::borrow::Cow<'static, str> {
                <$twin as utoipa::ToSchema>::name()
            }

            fn schemas(
                schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>,
            ) {
                <$twin as utoipa::ToSchema>::schemas(schemas)
            }
        }
    )*};
}

schema_as! {
    WindowKind => WindowKindSchema,
    QuotaWindow => QuotaWindowSchema,
    Credits => CreditsSchema,
    Projection => ProjectionSchema,
    EventKind => EventKindSchema,
    Severity => SeveritySchema,
    AccountLine => AccountLineSchema,
    AlertDetails => AlertDetailsSchema,
    Digest => DigestSchema,
    StateChange => StateChangeSchema,
    ActionCounts => ActionCountsSchema,
    ChannelKind => ChannelKindSchema,
    DeliveryStatus => DeliveryStatusSchema,
    DisableReason => DisableReasonSchema,
    ReasonOwner => ReasonOwnerSchema,
    PriorityEntry => PriorityEntrySchema,
    SavedPriorityEntry => SavedPriorityEntrySchema,
    Action => ActionSchema,
    Category => CategorySchema,
    Source => SourceSchema,
    Level => LevelSchema,
    LogEntry => LogEntrySchema,
    DecisionRecord => DecisionRecordSchema,
    ActionOutcome => ActionOutcomeSchema,
    RunStatus => RunStatusSchema,
    InspectionRunResult => InspectionRunResultSchema,
    AutoActionMode => AutoActionModeSchema,
    PatrolSettings => PatrolSettingsSchema,
    SettingsPatch => SettingsPatchSchema,
    FiveHourRule => FiveHourRuleSchema,
    PolicySource => PolicySourceSchema,
    AccountPolicy => AccountPolicySchema,
    AccountPolicyInput => AccountPolicyInputSchema,
    PolicySources => PolicySourcesSchema,
    QuotaPolicy => QuotaPolicySchema,
    AppliedThreshold => AppliedThresholdSchema,
}

/// What a rate-limit window measures, judged by `limit_window_seconds` (patrol.md §3).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = WindowKind)]
#[serde(rename_all = "camelCase")]
pub enum WindowKindSchema {
    /// 18000 s.
    FiveHour,
    /// 604800 s.
    Weekly,
    /// 2592000 s or 2628000 s (30 days / one month).
    Monthly,
    /// Any other duration.
    Other,
}

/// One rate-limit window of a snapshot.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = QuotaWindow)]
#[serde(rename_all = "camelCase")]
pub struct QuotaWindowSchema {
    /// Stable id `"<group>:<slot>"`, e.g. `"main:primary"`, `"codeReview:primary"`,
    /// `"additional:GPT-5.3-Codex-Spark:primary"`.
    pub id: String,
    /// Human label, e.g. `"5-hour"`, `"weekly"`, `"GPT-5.3-Codex-Spark 5-hour"`.
    pub label: String,
    /// `"main"`, `"codeReview"` or `"additional:<limit_name|metered_feature>"`.
    pub group: String,
    /// Classified by duration.
    pub kind: WindowKind,
    /// Used share in percent, as reported (may exceed 100). `None` when missing and not reached.
    pub used_percent: Option<f64>,
    /// Window length in seconds, as reported.
    pub limit_window_seconds: Option<i64>,
    /// When the window resets (UTC), rounded to the minute when derived from
    /// `reset_after_seconds` so that the window identity is stable between probes.
    pub reset_at: Option<DateTime<Utc>>,
    /// Seconds until reset as reported (negative values are dropped).
    pub reset_after_seconds: Option<i64>,
}

/// When a window reaches its threshold at its burn rate (`core::forecast::Projection`).
#[derive(Serialize, ToSchema)]
#[schema(as = Projection)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ProjectionSchema {
    /// Already at or over the threshold.
    AlreadyExhausted,
    /// Reaches the threshold at `at`, before the window resets.
    At { at: DateTime<Utc> },
    /// The window resets before it would reach the threshold (or it does not burn at all).
    NotBeforeReset,
    /// No burn rate yet, no reset known for a window that does not burn, or a reset time
    /// already past (the reading is stale).
    Unknown,
}

/// `credits` object of the usage payload.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = Credits)]
#[serde(rename_all = "camelCase")]
pub struct CreditsSchema {
    /// `has_credits` (bool or `"true"`/`"false"`): overage can be paid from credits.
    pub has_credits: Option<bool>,
    /// `unlimited` (bool or `"true"`/`"false"`).
    pub unlimited: Option<bool>,
    /// Balance as text (the payload sends a string or a number).
    pub balance: Option<String>,
}

/// An alert event (spec/alerts.md §1). `Test` is the message of `POST /api/alerts/test`.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = EventKind)]
#[serde(rename_all = "snake_case")]
pub enum EventKindSchema {
    AllExhausted,
    Recovered,
    BelowMinActive,
    InvalidAccounts,
    SiteUnreachable,
    SiteReachable,
    /// The forecast says the site runs dry well before its earliest reset, or too few usable
    /// accounts remain (issue 10 item 3).
    PoolLow,
    /// The `pool_low` condition cleared (with hysteresis and the flap guard).
    PoolLowCleared,
    /// The optional once-a-day summary of a site (`[alerts] daily_digest_at`).
    DailyDigest,
    Test,
}

/// Severity of an event (`level` of the webhook and the API).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = Severity)]
#[serde(rename_all = "lowercase")]
pub enum SeveritySchema {
    Critical,
    Warning,
    Info,
}

/// One row of the accounts table of a message.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = AccountLine)]
#[serde(rename_all = "camelCase")]
pub struct AccountLineSchema {
    pub name: String,
    pub display_name: String,
    pub plan: Option<String>,
    pub disabled: bool,
    pub usable: bool,
    /// Over the threshold (or limit reached) by its last snapshot.
    pub exhausted: bool,
    /// Main weekly (or monthly) used percent.
    pub weekly_used_percent: Option<f64>,
    /// The real kind of that window (`weekly`, or `monthly` for a monthly-only account; issue
    /// 10 item 1); `null` without one (and in records stored before it).
    #[serde(default)]
    pub long_window: Option<WindowKind>,
    pub five_hour_used_percent: Option<f64>,
    /// Exhausted: when it can serve again; otherwise when its long window resets.
    pub reset_at: Option<DateTime<Utc>>,
}

/// What a message says beyond its kind: stored with the event, rendered at delivery.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = AlertDetails)]
#[serde(rename_all = "camelCase", default)]
pub struct AlertDetailsSchema {
    pub total_accounts: Option<usize>,
    pub usable_accounts: Option<usize>,
    pub earliest_reset_at: Option<DateTime<Utc>>,
    /// The site's accounts (soonest reset first).
    pub accounts: Vec<AccountLine>,
    /// Accounts left out of `accounts` (table size limit).
    pub omitted_accounts: usize,
    /// `invalid_accounts`: the accounts deleted or disabled as invalid.
    pub invalid_accounts: Vec<String>,
    /// `below_min_active`: the configured minimum.
    pub min_active: Option<u32>,
    /// Reachability events: last successful CPA contact and the start of the failures.
    pub last_contact_at: Option<DateTime<Utc>>,
    pub failing_since: Option<DateTime<Utc>>,
    /// Reachability events: why the management calls fail, when known.
    pub cause: Option<String>,
    /// Clearing events: when the condition was told.
    pub raised_at: Option<DateTime<Utc>>,
    /// Pool events: when the forecast projects the site to run dry (`None`: not projected, or
    /// no forecast).
    pub projected_dry_at: Option<DateTime<Utc>>,
    /// Pool events: the earliest window reset among the site's accounts, by the forecast.
    pub forecast_reset_at: Option<DateTime<Utc>>,
    /// Pool events: summed burn of the accounts in use, percent per hour.
    pub burn_per_hour: Option<f64>,
    /// `pool_low`: the site's `earlyWarningMinutes` and `lowCapacityAccounts`.
    pub early_warning_minutes: Option<i64>,
    pub low_capacity_accounts: Option<u32>,
    /// `daily_digest`: the summary of the last 24 h.
    pub digest: Option<Digest>,
}

/// One thing the patrol did to an account (a CPA write it attempted).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = StateChange)]
#[serde(rename_all = "camelCase")]
pub struct StateChangeSchema {
    /// When the round that acted finished (or started, if unfinished).
    pub at: DateTime<Utc>,
    /// Display name (e-mail, label or file name).
    pub account: String,
    pub action: Action,
    pub success: bool,
    /// The decision's reason (e.g. "weekly 96% >= threshold 95%"); `None` for priority-routing
    /// writes, whose reason is the routing itself.
    pub reason: Option<String>,
}

/// The actions of the last 24 h, counted.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = ActionCounts)]
#[serde(rename_all = "camelCase", default)]
pub struct ActionCountsSchema {
    pub disabled: usize,
    pub enabled: usize,
    pub deleted: usize,
    /// Attempted writes CPA did not take.
    pub failed: usize,
}

/// The digest of one site (stored with the `daily_digest` event, rendered at delivery).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = Digest)]
#[serde(rename_all = "camelCase")]
pub struct DigestSchema {
    /// The local date (in `alerts.timezone`) the digest is for.
    pub local_date: chrono::NaiveDate,
    /// Start of the span it covers (`now` − 24 h).
    pub since: DateTime<Utc>,
    pub total_accounts: usize,
    pub usable_accounts: usize,
    pub exhausted_accounts: usize,
    /// Answered 401 or 402-deactivated at their last probe.
    pub invalid_accounts: usize,
    /// Oldest first; at most 100.
    pub changes: Vec<StateChange>,
    pub omitted_changes: usize,
    pub actions: ActionCounts,
}

/// A delivery channel.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = ChannelKind)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKindSchema {
    Email,
    Webhook,
}

/// Where a queued message stands.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = DeliveryStatus)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatusSchema {
    /// Waiting for its (next) attempt.
    Pending,
    Delivered,
    /// Refused for good (e.g. SMTP 5xx, webhook 4xx): not retried.
    Failed,
    /// Not delivered within [`DELIVERY_EXPIRY_HOURS`].
    Expired,
}

/// Why an account is disabled (patrol.md §5.1).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = DisableReason)]
pub enum DisableReasonSchema {
    QuotaExhausted,
    OrderedStandby,
    ManualDisabled,
    ErrorDisabled,
}

/// Who set a disable reason; only the owner may re-enable automatically (patrol.md §5.1).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = ReasonOwner)]
#[serde(rename_all = "lowercase")]
pub enum ReasonOwnerSchema {
    Patrol,
    Routing,
    Manual,
    External,
}

/// One entry of a site's priority list (1 = first).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = PriorityEntry)]
#[serde(rename_all = "camelCase")]
pub struct PriorityEntrySchema {
    pub name: String,
    pub priority: u32,
    pub pending_first_inspection: bool,
}

/// One entry of a list as saved through `PUT /api/settings/priority-routing` (api.md): as
/// [`PriorityEntry`], except that `pendingFirstInspection` may be omitted (default `false`: an
/// entry the operator places is not pending).
#[derive(Deserialize, ToSchema)]
#[schema(as = SavedPriorityEntry)]
#[allow(dead_code)] // deserialize-only, like the core type: a schema twin is never read
#[serde(rename_all = "camelCase")]
pub struct SavedPriorityEntrySchema {
    pub name: String,
    /// 1 = first; entries below 1 are dropped on save (patrol.md §6.4).
    pub priority: u32,
    /// Default `false`.
    #[serde(default)]
    pub pending_first_inspection: bool,
}

/// What to do with an account in CPA.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = Action)]
#[serde(rename_all = "lowercase")]
pub enum ActionSchema {
    Keep,
    Disable,
    Enable,
    Delete,
}

/// Log category (patrol.md §7).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = Category)]
#[serde(rename_all = "lowercase")]
pub enum CategorySchema {
    Inspection,
    Quota,
    Account,
    Priority,
    Alert,
    System,
}

/// Who triggered the operation.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = Source)]
#[serde(rename_all = "lowercase")]
pub enum SourceSchema {
    Auto,
    Manual,
    System,
}

/// Severity.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = Level)]
#[serde(rename_all = "lowercase")]
pub enum LevelSchema {
    Info,
    Warning,
    Error,
}

/// One operation-log entry (patrol.md §7). Messages are English and never contain secrets.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = LogEntry)]
#[serde(rename_all = "camelCase")]
pub struct LogEntrySchema {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub site_id: Option<String>,
    pub category: Category,
    pub operation_type: String,
    pub source: Source,
    pub level: Level,
    pub message: String,
    pub account_name: Option<String>,
    /// The quota reset a state flip is about: a quota disable's reset the account waits for, a
    /// re-enable's reset that passed; `null` for other entries. The message names it too.
    pub reset_at: Option<DateTime<Utc>>,
}

/// One account's decision in a round.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = DecisionRecord)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecordSchema {
    pub account_name: String,
    pub display_account: String,
    pub plan_type: Option<String>,
    pub action: Action,
    /// Decision-table row (patrol.md §5).
    pub rule: u8,
    pub reason: String,
    pub disable_reason: Option<DisableReason>,
    /// Upstream status of the probe (`None` when reused or not evaluated).
    pub status_code: Option<u16>,
    /// Main weekly (or monthly) used percent.
    pub used_percent: Option<f64>,
    /// The real kind of the window `usedPercent` was read from (`weekly`, or `monthly` for a
    /// monthly-only account; issue 10 item 1); `null` when there is none.
    #[serde(default)]
    pub used_window: Option<WindowKind>,
    pub five_hour_used_percent: Option<f64>,
    /// The threshold that applied (deciding window, its threshold and source); `null` without
    /// a snapshot.
    #[serde(default)]
    pub threshold: Option<AppliedThreshold>,
    pub is_quota_reached: bool,
    pub from_cache: bool,
    /// Evaluated this round: a successful probe, or fresh cached data reused. `false` for
    /// failures and skips (back-off, no auth_index): those graduate nothing (patrol.md §6.2).
    #[serde(default)]
    pub evaluated: bool,
    pub error: Option<String>,
    /// When the account gets its next real probe at the latest.
    pub next_real_refresh_at: Option<DateTime<Utc>>,
}

/// Outcome of one CPA action.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = ActionOutcome)]
#[serde(rename_all = "camelCase")]
pub struct ActionOutcomeSchema {
    pub action: Action,
    pub account_name: String,
    pub success: bool,
    pub error: Option<String>,
}

/// Status of a round (API and database spelling: lowercase).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = RunStatus)]
#[serde(rename_all = "lowercase")]
pub enum RunStatusSchema {
    /// Still running.
    Running,
    /// Every attempted probe got an answer from CPA (upstream errors such as 401, 429 or an
    /// HTML 403 are answers).
    Completed,
    /// Some probes failed because CPA did not answer (transport error, timeout, CPA 5xx), at
    /// most half of the attempted ones; the rest was decided and acted on. `error` says why.
    Partial,
    /// More than half of the attempted probes failed because CPA did not answer; what did get
    /// an answer was still decided. `error` says why.
    Failed,
    /// The round stopped before deciding anything (listing failed, management key refused).
    Error,
}

/// Result of one inspection round (api.md `POST /api/inspection/run`).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = InspectionRunResult)]
#[serde(rename_all = "camelCase")]
pub struct InspectionRunResultSchema {
    pub run_id: String,
    pub site_id: String,
    /// `auto`, `manual`, `reset` or `freshness`.
    pub source: String,
    /// An operator's dry run: decided, nothing executed or stored but this record (README "How
    /// decisions are made", dry runs).
    pub dry_run: bool,
    pub decisions: Vec<DecisionRecord>,
    pub action_outcomes: Vec<ActionOutcome>,
    /// Filled by priority routing (patrol.md §6).
    pub priority_routing_outcomes: Vec<ActionOutcome>,
    pub total_accounts: usize,
    pub probed_count: usize,
    pub reused_count: usize,
    pub failed_count: usize,
    pub delete_count: usize,
    pub disable_count: usize,
    pub enable_count: usize,
    pub keep_count: usize,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub status: RunStatus,
    /// Why the round failed (e.g. CPA unreachable, management key rejected).
    pub error: Option<String>,
}

/// What the patrol does with rule-1 (confirmed invalid) accounts (patrol.md §5).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = AutoActionMode)]
#[serde(rename_all = "lowercase")]
pub enum AutoActionModeSchema {
    /// Decide only; never disable or delete (enables still follow `autoEnableRecovered`).
    None,
    /// Disable exhausted and confirmed-invalid accounts.
    Disable,
    /// Like `disable`, but confirmed-invalid accounts are deleted.
    Delete,
}

/// When the 5-hour window may disable an account (issue 10 item 1).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = FiveHourRule)]
#[serde(rename_all = "lowercase")]
pub enum FiveHourRuleSchema {
    /// Today's rule: the 5-hour threshold disables paid plans only; a free plan's 5-hour
    /// window counts only once it reaches 100 %.
    Paid,
    /// The 5-hour threshold disables every plan, free ones included.
    All,
    /// The 5-hour window never disables an account, not even at 100 %.
    Never,
}

/// Where an effective value came from.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = PolicySource)]
#[serde(rename_all = "lowercase")]
pub enum PolicySourceSchema {
    /// The site settings (a per-window threshold or the `usedPercentThreshold` shorthand).
    Site,
    /// The account's own override (`PUT /api/accounts/{name}/policy`).
    Account,
}

/// Per-account overrides (`GET/PUT/DELETE /api/accounts/{name}/policy`), all optional: an
/// absent threshold or rule follows the site. Thresholds are percent, 1..=100, compared with
/// `>=`. `neverAct` = observe only: probed, shown and counted, never written to in CPA by the
/// patrol or priority routing.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = AccountPolicy)]
#[serde(rename_all = "camelCase", default)]
pub struct AccountPolicySchema {
    pub weekly_threshold: Option<u8>,
    pub five_hour_threshold: Option<u8>,
    pub monthly_threshold: Option<u8>,
    pub five_hour_rule: Option<FiveHourRule>,
    pub never_act: bool,
}

/// The body of `PUT /api/accounts/{name}/policy`: thresholds 1..=100, `fiveHourRule` one of
/// `paid`, `all`, `never`; every problem is reported at once (422). A PUT replaces the whole
/// policy: absent fields are not overridden.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = AccountPolicyInput)]
#[serde(rename_all = "camelCase", default)]
pub struct AccountPolicyInputSchema {
    pub weekly_threshold: Option<i64>,
    pub five_hour_threshold: Option<i64>,
    pub monthly_threshold: Option<i64>,
    pub five_hour_rule: Option<String>,
    pub never_act: Option<bool>,
}

/// Where each value of a [`QuotaPolicy`] came from.
#[derive(Serialize, ToSchema)]
#[schema(as = PolicySources)]
#[serde(rename_all = "camelCase")]
pub struct PolicySourcesSchema {
    pub weekly: PolicySource,
    pub five_hour: PolicySource,
    pub monthly: PolicySource,
    pub five_hour_rule: PolicySource,
    pub never_act: PolicySource,
}

/// The effective policy of one account (site settings overlaid with its account policy).
/// Thresholds are percent, 1..=100, compared with `>=`.
#[derive(Serialize, ToSchema)]
#[schema(as = QuotaPolicy)]
#[serde(rename_all = "camelCase")]
pub struct QuotaPolicySchema {
    pub weekly: u8,
    pub five_hour: u8,
    pub monthly: u8,
    pub five_hour_rule: FiveHourRule,
    /// Observe only: never written to in CPA by the patrol or routing.
    pub never_act: bool,
    pub sources: PolicySources,
}

/// Which threshold applied to an account: the window that decided, named by its real kind,
/// its used percent, the threshold it was compared with and where that came from.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = AppliedThreshold)]
#[serde(rename_all = "camelCase")]
pub struct AppliedThresholdSchema {
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

/// Per-site patrol settings; JSON names are part of the API (camelCase).
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = PatrolSettings)]
#[serde(rename_all = "camelCase", default)]
pub struct PatrolSettingsSchema {
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
    /// threshold below uses it (issue 10 item 1).
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
    /// `0..=realRefreshSpreadMinutes` min (patrol.md §4.3).
    pub real_refresh_min_hours: u32,
    pub real_refresh_spread_minutes: u32,
    /// Read CPA's destructive usage queue as activity evidence (off by default, patrol.md §4.4).
    pub usage_queue_enabled: bool,
    /// Call CPA's `POST /reset-quota` (CPA ≥ v7.2.22) once per cooldown episode when the patrol
    /// re-enables an account or probes an enabled one as usable while CPA still lists it as
    /// cooling down (issue 7; CPA #5277, #5639, #5649). Default on.
    pub clear_cpa_cooldowns: bool,
    /// Priority routing: set the CPA priority of exception and pending accounts that sit above
    /// the routed accounts' to 0 (`{name, priority}` patch). Default off (they are reported).
    pub lower_stale_priorities: bool,
    /// `pool_low` (spec/alerts.md §1): warn when the forecast says the site runs dry more than
    /// this many minutes before its earliest reset. 0..=10080, default 120.
    pub early_warning_minutes: u32,
    /// `pool_low`: warn when fewer usable accounts than this remain (capped at the accounts
    /// that count, so a one-account site is never "low"); 0 = off (the default: the forecast
    /// warns of a burning pool, `below_min_active` of a thin routed one). 0..=100.
    pub low_capacity_accounts: u32,
}

/// A partial settings update: omitted fields stay unchanged (patrol.md §1 **[divergence]**: the
/// anchor resets omitted booleans and delays). Unknown `autoActionMode` strings are rejected.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = SettingsPatch)]
#[serde(rename_all = "camelCase")]
pub struct SettingsPatchSchema {
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>)]
    pub weekly_threshold: Option<Option<i64>>,
    /// As `weeklyThreshold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>)]
    pub five_hour_threshold: Option<Option<i64>>,
    /// As `weeklyThreshold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>)]
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
}

impl From<WindowKind> for WindowKindSchema {
    fn from(v: WindowKind) -> Self {
        match v {
            WindowKind::FiveHour => Self::FiveHour,
            WindowKind::Weekly => Self::Weekly,
            WindowKind::Monthly => Self::Monthly,
            WindowKind::Other => Self::Other,
        }
    }
}

impl From<QuotaWindow> for QuotaWindowSchema {
    fn from(v: QuotaWindow) -> Self {
        let QuotaWindow {
            id,
            label,
            group,
            kind,
            used_percent,
            limit_window_seconds,
            reset_at,
            reset_after_seconds,
        } = v;
        Self {
            id,
            label,
            group,
            kind,
            used_percent,
            limit_window_seconds,
            reset_at,
            reset_after_seconds,
        }
    }
}

impl From<Projection> for ProjectionSchema {
    fn from(v: Projection) -> Self {
        match v {
            Projection::AlreadyExhausted => Self::AlreadyExhausted,
            Projection::At { at } => Self::At { at },
            Projection::NotBeforeReset => Self::NotBeforeReset,
            Projection::Unknown => Self::Unknown,
        }
    }
}

impl From<Credits> for CreditsSchema {
    fn from(v: Credits) -> Self {
        let Credits {
            has_credits,
            unlimited,
            balance,
        } = v;
        Self {
            has_credits,
            unlimited,
            balance,
        }
    }
}

impl From<EventKind> for EventKindSchema {
    fn from(v: EventKind) -> Self {
        match v {
            EventKind::AllExhausted => Self::AllExhausted,
            EventKind::Recovered => Self::Recovered,
            EventKind::BelowMinActive => Self::BelowMinActive,
            EventKind::InvalidAccounts => Self::InvalidAccounts,
            EventKind::SiteUnreachable => Self::SiteUnreachable,
            EventKind::SiteReachable => Self::SiteReachable,
            EventKind::PoolLow => Self::PoolLow,
            EventKind::PoolLowCleared => Self::PoolLowCleared,
            EventKind::DailyDigest => Self::DailyDigest,
            EventKind::Test => Self::Test,
        }
    }
}

impl From<Severity> for SeveritySchema {
    fn from(v: Severity) -> Self {
        match v {
            Severity::Critical => Self::Critical,
            Severity::Warning => Self::Warning,
            Severity::Info => Self::Info,
        }
    }
}

impl From<AccountLine> for AccountLineSchema {
    fn from(v: AccountLine) -> Self {
        let AccountLine {
            name,
            display_name,
            plan,
            disabled,
            usable,
            exhausted,
            weekly_used_percent,
            long_window,
            five_hour_used_percent,
            reset_at,
        } = v;
        Self {
            name,
            display_name,
            plan,
            disabled,
            usable,
            exhausted,
            weekly_used_percent,
            long_window,
            five_hour_used_percent,
            reset_at,
        }
    }
}

impl From<AlertDetails> for AlertDetailsSchema {
    fn from(v: AlertDetails) -> Self {
        let AlertDetails {
            total_accounts,
            usable_accounts,
            earliest_reset_at,
            accounts,
            omitted_accounts,
            invalid_accounts,
            min_active,
            last_contact_at,
            failing_since,
            cause,
            raised_at,
            projected_dry_at,
            forecast_reset_at,
            burn_per_hour,
            early_warning_minutes,
            low_capacity_accounts,
            digest,
        } = v;
        Self {
            total_accounts,
            usable_accounts,
            earliest_reset_at,
            accounts,
            omitted_accounts,
            invalid_accounts,
            min_active,
            last_contact_at,
            failing_since,
            cause,
            raised_at,
            projected_dry_at,
            forecast_reset_at,
            burn_per_hour,
            early_warning_minutes,
            low_capacity_accounts,
            digest,
        }
    }
}

impl From<StateChange> for StateChangeSchema {
    fn from(v: StateChange) -> Self {
        let StateChange {
            at,
            account,
            action,
            success,
            reason,
        } = v;
        Self {
            at,
            account,
            action,
            success,
            reason,
        }
    }
}

impl From<ActionCounts> for ActionCountsSchema {
    fn from(v: ActionCounts) -> Self {
        let ActionCounts {
            disabled,
            enabled,
            deleted,
            failed,
        } = v;
        Self {
            disabled,
            enabled,
            deleted,
            failed,
        }
    }
}

impl Default for ActionCountsSchema {
    fn default() -> Self {
        ActionCounts::default().into()
    }
}

impl From<Digest> for DigestSchema {
    fn from(v: Digest) -> Self {
        let Digest {
            local_date,
            since,
            total_accounts,
            usable_accounts,
            exhausted_accounts,
            invalid_accounts,
            changes,
            omitted_changes,
            actions,
        } = v;
        Self {
            local_date,
            since,
            total_accounts,
            usable_accounts,
            exhausted_accounts,
            invalid_accounts,
            changes,
            omitted_changes,
            actions,
        }
    }
}

impl From<ChannelKind> for ChannelKindSchema {
    fn from(v: ChannelKind) -> Self {
        match v {
            ChannelKind::Email => Self::Email,
            ChannelKind::Webhook => Self::Webhook,
        }
    }
}

impl From<DeliveryStatus> for DeliveryStatusSchema {
    fn from(v: DeliveryStatus) -> Self {
        match v {
            DeliveryStatus::Pending => Self::Pending,
            DeliveryStatus::Delivered => Self::Delivered,
            DeliveryStatus::Failed => Self::Failed,
            DeliveryStatus::Expired => Self::Expired,
        }
    }
}

impl From<DisableReason> for DisableReasonSchema {
    fn from(v: DisableReason) -> Self {
        match v {
            DisableReason::QuotaExhausted => Self::QuotaExhausted,
            DisableReason::OrderedStandby => Self::OrderedStandby,
            DisableReason::ManualDisabled => Self::ManualDisabled,
            DisableReason::ErrorDisabled => Self::ErrorDisabled,
        }
    }
}

impl From<ReasonOwner> for ReasonOwnerSchema {
    fn from(v: ReasonOwner) -> Self {
        match v {
            ReasonOwner::Patrol => Self::Patrol,
            ReasonOwner::Routing => Self::Routing,
            ReasonOwner::Manual => Self::Manual,
            ReasonOwner::External => Self::External,
        }
    }
}

impl From<PriorityEntry> for PriorityEntrySchema {
    fn from(v: PriorityEntry) -> Self {
        let PriorityEntry {
            name,
            priority,
            pending_first_inspection,
        } = v;
        Self {
            name,
            priority,
            pending_first_inspection,
        }
    }
}

impl From<SavedPriorityEntry> for SavedPriorityEntrySchema {
    fn from(v: SavedPriorityEntry) -> Self {
        let SavedPriorityEntry {
            name,
            priority,
            pending_first_inspection,
        } = v;
        Self {
            name,
            priority,
            pending_first_inspection,
        }
    }
}

impl From<Action> for ActionSchema {
    fn from(v: Action) -> Self {
        match v {
            Action::Keep => Self::Keep,
            Action::Disable => Self::Disable,
            Action::Enable => Self::Enable,
            Action::Delete => Self::Delete,
        }
    }
}

impl From<Category> for CategorySchema {
    fn from(v: Category) -> Self {
        match v {
            Category::Inspection => Self::Inspection,
            Category::Quota => Self::Quota,
            Category::Account => Self::Account,
            Category::Priority => Self::Priority,
            Category::Alert => Self::Alert,
            Category::System => Self::System,
        }
    }
}

impl From<Source> for SourceSchema {
    fn from(v: Source) -> Self {
        match v {
            Source::Auto => Self::Auto,
            Source::Manual => Self::Manual,
            Source::System => Self::System,
        }
    }
}

impl From<Level> for LevelSchema {
    fn from(v: Level) -> Self {
        match v {
            Level::Info => Self::Info,
            Level::Warning => Self::Warning,
            Level::Error => Self::Error,
        }
    }
}

impl From<LogEntry> for LogEntrySchema {
    fn from(v: LogEntry) -> Self {
        let LogEntry {
            id,
            at,
            site_id,
            category,
            operation_type,
            source,
            level,
            message,
            account_name,
            reset_at,
        } = v;
        Self {
            id,
            at,
            site_id,
            category,
            operation_type,
            source,
            level,
            message,
            account_name,
            reset_at,
        }
    }
}

impl From<DecisionRecord> for DecisionRecordSchema {
    fn from(v: DecisionRecord) -> Self {
        let DecisionRecord {
            account_name,
            display_account,
            plan_type,
            action,
            rule,
            reason,
            disable_reason,
            status_code,
            used_percent,
            used_window,
            five_hour_used_percent,
            threshold,
            is_quota_reached,
            from_cache,
            evaluated,
            error,
            next_real_refresh_at,
        } = v;
        Self {
            account_name,
            display_account,
            plan_type,
            action,
            rule,
            reason,
            disable_reason,
            status_code,
            used_percent,
            used_window,
            five_hour_used_percent,
            threshold,
            is_quota_reached,
            from_cache,
            evaluated,
            error,
            next_real_refresh_at,
        }
    }
}

impl From<ActionOutcome> for ActionOutcomeSchema {
    fn from(v: ActionOutcome) -> Self {
        let ActionOutcome {
            action,
            account_name,
            success,
            error,
        } = v;
        Self {
            action,
            account_name,
            success,
            error,
        }
    }
}

impl From<RunStatus> for RunStatusSchema {
    fn from(v: RunStatus) -> Self {
        match v {
            RunStatus::Running => Self::Running,
            RunStatus::Completed => Self::Completed,
            RunStatus::Partial => Self::Partial,
            RunStatus::Failed => Self::Failed,
            RunStatus::Error => Self::Error,
        }
    }
}

impl From<InspectionRunResult> for InspectionRunResultSchema {
    fn from(v: InspectionRunResult) -> Self {
        let InspectionRunResult {
            run_id,
            site_id,
            source,
            dry_run,
            decisions,
            action_outcomes,
            priority_routing_outcomes,
            total_accounts,
            probed_count,
            reused_count,
            failed_count,
            delete_count,
            disable_count,
            enable_count,
            keep_count,
            started_at,
            finished_at,
            status,
            error,
        } = v;
        Self {
            run_id,
            site_id,
            source,
            dry_run,
            decisions,
            action_outcomes,
            priority_routing_outcomes,
            total_accounts,
            probed_count,
            reused_count,
            failed_count,
            delete_count,
            disable_count,
            enable_count,
            keep_count,
            started_at,
            finished_at,
            status,
            error,
        }
    }
}

impl From<AutoActionMode> for AutoActionModeSchema {
    fn from(v: AutoActionMode) -> Self {
        match v {
            AutoActionMode::None => Self::None,
            AutoActionMode::Disable => Self::Disable,
            AutoActionMode::Delete => Self::Delete,
        }
    }
}

impl From<FiveHourRule> for FiveHourRuleSchema {
    fn from(v: FiveHourRule) -> Self {
        match v {
            FiveHourRule::Paid => Self::Paid,
            FiveHourRule::All => Self::All,
            FiveHourRule::Never => Self::Never,
        }
    }
}

impl From<PolicySource> for PolicySourceSchema {
    fn from(v: PolicySource) -> Self {
        match v {
            PolicySource::Site => Self::Site,
            PolicySource::Account => Self::Account,
        }
    }
}

impl From<AccountPolicy> for AccountPolicySchema {
    fn from(v: AccountPolicy) -> Self {
        let AccountPolicy {
            weekly_threshold,
            five_hour_threshold,
            monthly_threshold,
            five_hour_rule,
            never_act,
        } = v;
        Self {
            weekly_threshold,
            five_hour_threshold,
            monthly_threshold,
            five_hour_rule,
            never_act,
        }
    }
}

impl From<AccountPolicyInput> for AccountPolicyInputSchema {
    fn from(v: AccountPolicyInput) -> Self {
        let AccountPolicyInput {
            weekly_threshold,
            five_hour_threshold,
            monthly_threshold,
            five_hour_rule,
            never_act,
        } = v;
        Self {
            weekly_threshold,
            five_hour_threshold,
            monthly_threshold,
            five_hour_rule,
            never_act,
        }
    }
}

impl From<PolicySources> for PolicySourcesSchema {
    fn from(v: PolicySources) -> Self {
        let PolicySources {
            weekly,
            five_hour,
            monthly,
            five_hour_rule,
            never_act,
        } = v;
        Self {
            weekly,
            five_hour,
            monthly,
            five_hour_rule,
            never_act,
        }
    }
}

impl From<QuotaPolicy> for QuotaPolicySchema {
    fn from(v: QuotaPolicy) -> Self {
        let QuotaPolicy {
            weekly,
            five_hour,
            monthly,
            five_hour_rule,
            never_act,
            sources,
        } = v;
        Self {
            weekly,
            five_hour,
            monthly,
            five_hour_rule,
            never_act,
            sources,
        }
    }
}

impl From<AppliedThreshold> for AppliedThresholdSchema {
    fn from(v: AppliedThreshold) -> Self {
        let AppliedThreshold {
            window_id,
            window,
            used_percent,
            threshold,
            source,
            reached,
        } = v;
        Self {
            window_id,
            window,
            used_percent,
            threshold,
            source,
            reached,
        }
    }
}

impl From<PatrolSettings> for PatrolSettingsSchema {
    fn from(v: PatrolSettings) -> Self {
        let PatrolSettings {
            auto_polling_enabled,
            poll_interval_minutes,
            poll_random_delay_min_minutes,
            poll_random_delay_max_minutes,
            probe_workers,
            probe_batch_delay_min_ms,
            probe_batch_delay_max_ms,
            action_workers,
            timeout_ms,
            retry_count,
            auto_action_mode,
            auto_enable_recovered,
            used_percent_threshold,
            weekly_threshold,
            five_hour_threshold,
            monthly_threshold,
            five_hour_rule,
            invalid_confirmations,
            priority_routing_enabled,
            priority_min_active_count,
            disable_cache_refresh,
            real_refresh_min_hours,
            real_refresh_spread_minutes,
            usage_queue_enabled,
            clear_cpa_cooldowns,
            lower_stale_priorities,
            early_warning_minutes,
            low_capacity_accounts,
        } = v;
        Self {
            auto_polling_enabled,
            poll_interval_minutes,
            poll_random_delay_min_minutes,
            poll_random_delay_max_minutes,
            probe_workers,
            probe_batch_delay_min_ms,
            probe_batch_delay_max_ms,
            action_workers,
            timeout_ms,
            retry_count,
            auto_action_mode,
            auto_enable_recovered,
            used_percent_threshold,
            weekly_threshold,
            five_hour_threshold,
            monthly_threshold,
            five_hour_rule,
            invalid_confirmations,
            priority_routing_enabled,
            priority_min_active_count,
            disable_cache_refresh,
            real_refresh_min_hours,
            real_refresh_spread_minutes,
            usage_queue_enabled,
            clear_cpa_cooldowns,
            lower_stale_priorities,
            early_warning_minutes,
            low_capacity_accounts,
        }
    }
}

impl From<SettingsPatch> for SettingsPatchSchema {
    fn from(v: SettingsPatch) -> Self {
        let SettingsPatch {
            auto_polling_enabled,
            poll_interval_minutes,
            poll_random_delay_min_minutes,
            poll_random_delay_max_minutes,
            probe_workers,
            probe_batch_delay_min_ms,
            probe_batch_delay_max_ms,
            action_workers,
            timeout_ms,
            retry_count,
            auto_action_mode,
            auto_enable_recovered,
            used_percent_threshold,
            weekly_threshold,
            five_hour_threshold,
            monthly_threshold,
            five_hour_rule,
            invalid_confirmations,
            priority_routing_enabled,
            priority_min_active_count,
            disable_cache_refresh,
            real_refresh_min_hours,
            real_refresh_spread_minutes,
            usage_queue_enabled,
            clear_cpa_cooldowns,
            lower_stale_priorities,
            early_warning_minutes,
            low_capacity_accounts,
        } = v;
        Self {
            auto_polling_enabled,
            poll_interval_minutes,
            poll_random_delay_min_minutes,
            poll_random_delay_max_minutes,
            probe_workers,
            probe_batch_delay_min_ms,
            probe_batch_delay_max_ms,
            action_workers,
            timeout_ms,
            retry_count,
            auto_action_mode,
            auto_enable_recovered,
            used_percent_threshold,
            weekly_threshold,
            five_hour_threshold,
            monthly_threshold,
            five_hour_rule,
            invalid_confirmations,
            priority_routing_enabled,
            priority_min_active_count,
            disable_cache_refresh,
            real_refresh_min_hours,
            real_refresh_spread_minutes,
            usage_queue_enabled,
            clear_cpa_cooldowns,
            lower_stale_priorities,
            early_warning_minutes,
            low_capacity_accounts,
        }
    }
}

/// `#[serde(default)]` twins take their defaults (and so the schema's `default` values) from
/// the core type.
impl Default for AlertDetailsSchema {
    fn default() -> Self {
        AlertDetails::default().into()
    }
}

impl Default for AccountPolicySchema {
    fn default() -> Self {
        AccountPolicy::default().into()
    }
}

impl Default for AccountPolicyInputSchema {
    fn default() -> Self {
        AccountPolicyInput::default().into()
    }
}

impl Default for PatrolSettingsSchema {
    fn default() -> Self {
        PatrolSettings::default().into()
    }
}
