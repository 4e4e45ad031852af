//! Result shapes of an inspection round, shared by the jobs that produce them, the store that
//! keeps them and the API that shows them (docs/rules/api.md §5). Pure data.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::account::DisableReason;
use super::inspect::Action;
use super::policy::AppliedThreshold;
use super::quota::WindowKind;

/// One account's decision in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    pub account_name: String,
    pub display_account: String,
    pub plan_type: Option<String>,
    pub action: Action,
    /// Decision-table row (docs/rules/patrol.md §5).
    pub rule: u8,
    pub reason: String,
    pub disable_reason: Option<DisableReason>,
    /// Upstream status of the probe (`None` when reused or not evaluated).
    pub status_code: Option<u16>,
    /// Main weekly (or monthly) used percent.
    pub used_percent: Option<f64>,
    /// The real kind of the window `usedPercent` was read from (`weekly`, or `monthly` for a
    /// monthly-only account; docs/rules/patrol.md §9); `null` when there is none.
    #[serde(default)]
    pub used_window: Option<WindowKind>,
    pub five_hour_used_percent: Option<f64>,
    /// The threshold that applied (deciding window, its threshold and source); `null` without
    /// a snapshot.
    #[serde(default)]
    pub threshold: Option<AppliedThreshold>,
    pub is_quota_reached: bool,
    pub from_cache: bool,
    /// The refresh probe was spared by fresh passive evidence well below the thresholds
    /// (docs/rules/patrol.md §4.7); the decision still rests on the last probe's snapshot.
    #[serde(default)]
    pub spared_by_passive: bool,
    /// Evaluated this round: a successful probe, or fresh cached data reused. `false` for
    /// failures and skips (back-off, no auth_index): those graduate nothing (docs/rules/patrol.md §6.2).
    #[serde(default)]
    pub evaluated: bool,
    pub error: Option<String>,
    /// When the account gets its next real probe at the latest.
    pub next_real_refresh_at: Option<DateTime<Utc>>,
}

/// Outcome of one CPA action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ActionOutcome {
    pub action: Action,
    pub account_name: String,
    pub success: bool,
    pub error: Option<String>,
}

/// Status of a round (API and database spelling: lowercase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
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

impl RunStatus {
    /// The API / database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Partial => "partial",
            RunStatus::Failed => "failed",
            RunStatus::Error => "error",
        }
    }

    /// Whether the round evaluated most of the pool, so pool-wide conclusions (alerts) may be
    /// drawn from it: `completed` and `partial`.
    pub fn evaluated_pool(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Partial)
    }
}

/// Status of a round that ran to its end, from its probe counts (docs/decisions.md §2): `attempted`
/// real probes, of which `cpa_failed` failed at the CPA level (no answer from CPA: transport error,
/// CPA 5xx, and timeouts when CPA was seen going away in the same round or every probe timed out —
/// `jobs::inspect`).
/// None failed ⇒ `Completed`; more than half ⇒ `Failed`; otherwise ⇒ `Partial`.
pub fn status_from_probes(attempted: usize, cpa_failed: usize) -> RunStatus {
    if cpa_failed == 0 {
        RunStatus::Completed
    } else if cpa_failed * 2 > attempted {
        RunStatus::Failed
    } else {
        RunStatus::Partial
    }
}

/// Result of one inspection round (api.md `POST /api/inspection/run`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct InspectionRunResult {
    pub run_id: String,
    pub site_id: String,
    /// `auto`, `manual`, `reset` or `freshness`.
    pub source: String,
    /// An operator's dry run: decided, nothing executed or stored but this record
    /// (docs/patrol.md "What a round does", dry runs).
    pub dry_run: bool,
    pub decisions: Vec<DecisionRecord>,
    pub action_outcomes: Vec<ActionOutcome>,
    /// Filled by priority routing (docs/rules/patrol.md §6).
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
    /// What the round did with a banked reset credit (docs/reset-credits.md); a dry run says
    /// what it would redeem. Absent when nothing was considered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_credit: Option<crate::reset_credits::RedeemReport>,
}

/// The counts of a round without its decisions and outcomes (the status page's round list):
/// the same JSON fields as [`InspectionRunResult`], read without building the per-account parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub run_id: String,
    /// `auto`, `manual`, `reset`, `freshness`, `quotaRefresh`, `warmup`.
    pub source: String,
    pub dry_run: bool,
    pub total_accounts: usize,
    pub probed_count: usize,
    pub reused_count: usize,
    pub failed_count: usize,
    pub delete_count: usize,
    pub disable_count: usize,
    pub enable_count: usize,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub status: RunStatus,
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_is_partial_up_to_half_failed_at_cpa_and_failed_beyond() {
        assert_eq!(status_from_probes(0, 0), RunStatus::Completed);
        assert_eq!(status_from_probes(10, 0), RunStatus::Completed);
        assert_eq!(status_from_probes(10, 1), RunStatus::Partial);
        assert_eq!(status_from_probes(10, 5), RunStatus::Partial);
        assert_eq!(status_from_probes(10, 6), RunStatus::Failed);
        assert_eq!(status_from_probes(1, 1), RunStatus::Failed);
        assert_eq!(status_from_probes(6, 4), RunStatus::Failed);
    }

    #[test]
    fn statuses_are_spelled_as_serde_spells_them() {
        for s in [
            RunStatus::Running,
            RunStatus::Completed,
            RunStatus::Partial,
            RunStatus::Failed,
            RunStatus::Error,
        ] {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::String(s.as_str().into())
            );
        }
        assert!(RunStatus::Partial.evaluated_pool());
        assert!(!RunStatus::Failed.evaluated_pool());
        assert!(!RunStatus::Error.evaluated_pool());
    }
}
