//! What a site is doing now (`GET /api/runtime/progress`): the round's operation, status, stage
//! and counters. The JSON spellings are part of the API (docs/api.md "Runtime"); the OpenAPI
//! schema shows the three state fields as strings, as it always has.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::core::oplog::Source;
use crate::core::round::RoundKind;

/// The operation a progress reports (`operationType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum OperationType {
    #[default]
    Idle,
    Inspection,
    QuotaRefresh,
    ResetCheck,
    Freshness,
}

impl OperationType {
    /// The operation a round of `kind` reports: auto, manual and warm-up rounds are inspections.
    pub fn of(kind: RoundKind) -> Self {
        match kind {
            RoundKind::QuotaRefresh => Self::QuotaRefresh,
            RoundKind::Reset => Self::ResetCheck,
            RoundKind::Freshness => Self::Freshness,
            RoundKind::Auto | RoundKind::Manual | RoundKind::Warmup => Self::Inspection,
        }
    }

    /// The JSON spelling, also the operation-log `operationType` of a round's entries.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Inspection => "inspection",
            Self::QuotaRefresh => "quotaRefresh",
            Self::ResetCheck => "resetCheck",
            Self::Freshness => "freshness",
        }
    }
}

/// Where the reported operation is (`status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ProgressStatus {
    #[default]
    Idle,
    Running,
    Completed,
    Error,
}

/// The step of the reported operation (`stage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Stage {
    #[default]
    Idle,
    Prepare,
    Probing,
    /// The pause between two probe batches.
    Delay,
    Actions,
    Completed,
    Error,
}

/// What a site is doing now (`GET /api/runtime/progress`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// `idle`, `inspection`, `quotaRefresh`, `resetCheck`, `freshness`.
    #[schema(value_type = String)]
    pub operation_type: OperationType,
    #[schema(value_type = String)]
    pub source: Source,
    /// `idle`, `running`, `completed`, `error`.
    #[schema(value_type = String)]
    pub status: ProgressStatus,
    /// `idle`, `prepare`, `probing`, `delay`, `actions`, `completed`, `error`.
    #[schema(value_type = String)]
    pub stage: Stage,
    pub message: String,
    pub total: usize,
    pub processed: usize,
    pub action_total: usize,
    pub action_processed: usize,
    // Share of the probes and actions done, in percent with one decimal (100 once completed);
    // a plain comment: a doc comment would change the OpenAPI document.
    pub percent: f64,
    pub started_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    pub current_account_name: Option<String>,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            operation_type: OperationType::Idle,
            source: Source::System,
            status: ProgressStatus::Idle,
            stage: Stage::Idle,
            message: String::new(),
            total: 0,
            processed: 0,
            action_total: 0,
            action_processed: 0,
            percent: 0.0,
            started_at: None,
            updated_at: None,
            current_account_name: None,
        }
    }
}

impl Progress {
    /// Recomputes `percent` from the counters and the status.
    pub(crate) fn recompute(&mut self) {
        let done = self.processed.min(self.total) + self.action_processed.min(self.action_total);
        let all = self.total + self.action_total;
        self.percent = if self.status == ProgressStatus::Completed {
            100.0
        } else if all == 0 {
            0.0
        } else {
            (1000.0 * done as f64 / all as f64).round() / 10.0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_fields_keep_their_json_spellings() {
        let p = Progress {
            operation_type: OperationType::of(RoundKind::Reset),
            source: Source::Manual,
            status: ProgressStatus::Running,
            stage: Stage::Delay,
            ..Progress::default()
        };
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["operationType"], "resetCheck");
        assert_eq!(v["source"], "manual");
        assert_eq!(v["status"], "running");
        assert_eq!(v["stage"], "delay");
        let idle = serde_json::to_value(Progress::default()).unwrap();
        for field in ["operationType", "status", "stage"] {
            assert_eq!(idle[field], "idle", "{field}");
        }
        assert_eq!(idle["source"], "system");
        // (kind, operationType spelling)
        for (kind, spelled) in [
            (RoundKind::Auto, "inspection"),
            (RoundKind::Manual, "inspection"),
            (RoundKind::Warmup, "inspection"),
            (RoundKind::QuotaRefresh, "quotaRefresh"),
            (RoundKind::Reset, "resetCheck"),
            (RoundKind::Freshness, "freshness"),
        ] {
            let op = OperationType::of(kind);
            assert_eq!(op.as_str(), spelled, "{kind:?}");
            assert_eq!(serde_json::to_value(op).unwrap(), spelled, "{kind:?}");
        }
        // (stage, spelling)
        for (stage, spelled) in [
            (Stage::Prepare, "prepare"),
            (Stage::Probing, "probing"),
            (Stage::Actions, "actions"),
            (Stage::Completed, "completed"),
            (Stage::Error, "error"),
        ] {
            assert_eq!(serde_json::to_value(stage).unwrap(), spelled);
        }
        for (status, spelled) in [
            (ProgressStatus::Completed, "completed"),
            (ProgressStatus::Error, "error"),
        ] {
            assert_eq!(serde_json::to_value(status).unwrap(), spelled);
        }
    }

    #[test]
    fn percent_counts_probes_and_actions_and_is_100_once_completed() {
        // (total, processed, action total, action processed, status, percent)
        let table = [
            (0, 0, 0, 0, ProgressStatus::Running, 0.0),
            (2, 1, 0, 0, ProgressStatus::Running, 50.0),
            (3, 1, 0, 0, ProgressStatus::Running, 33.3),
            (2, 2, 2, 1, ProgressStatus::Running, 75.0),
            (2, 5, 0, 0, ProgressStatus::Running, 100.0),
            (4, 1, 0, 0, ProgressStatus::Completed, 100.0),
            (4, 1, 0, 0, ProgressStatus::Error, 25.0),
        ];
        for (total, processed, action_total, action_processed, status, percent) in table {
            let mut p = Progress {
                total,
                processed,
                action_total,
                action_processed,
                status,
                ..Progress::default()
            };
            p.recompute();
            assert_eq!(
                p.percent, percent,
                "{total} {processed} {action_total} {action_processed} {status:?}"
            );
        }
    }
}
