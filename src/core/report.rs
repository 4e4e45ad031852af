//! Result shapes of an inspection round, shared by the jobs that produce them, the store that
//! keeps them and the API that shows them (api.md "InspectionRunResult"). Pure data.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::account::DisableReason;
use super::inspect::Action;

/// One account's decision in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
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
    pub five_hour_used_percent: Option<f64>,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionOutcome {
    pub action: Action,
    pub account_name: String,
    pub success: bool,
    pub error: Option<String>,
}

/// Status of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Completed,
    Error,
}

/// Result of one inspection round (api.md `POST /api/inspection/run`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InspectionRunResult {
    pub run_id: String,
    pub site_id: String,
    /// `auto`, `manual`, `reset` or `freshness`.
    pub source: String,
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
