//! What a round is asked to do: its kind ([`RoundKind`], why it runs and whether it acts)
//! and its options. Shared by the round, alerting and the callers that start rounds, so none
//! of them needs the round module to name a round.

use std::collections::HashSet;

use crate::core::oplog::Source;

/// Why a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundKind {
    /// Regular round from the scheduler.
    Auto,
    /// `POST /api/inspection/run`, `quota-patrol inspect`.
    Manual,
    /// `POST /api/quotas/refresh`: evaluate everything (exceptions included), no actions.
    QuotaRefresh,
    /// Re-probe at a quota reset (patrol.md §4.5).
    Reset,
    /// Background real-refresh of due accounts (patrol.md §4.3); no actions.
    Freshness,
    /// Startup warm-up (patrol.md §4.6); no actions.
    Warmup,
}

impl RoundKind {
    /// The spelling in `InspectionRunResult.source` and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RoundKind::Auto => "auto",
            RoundKind::Manual => "manual",
            RoundKind::QuotaRefresh => "quotaRefresh",
            RoundKind::Reset => "reset",
            RoundKind::Freshness => "freshness",
            RoundKind::Warmup => "warmup",
        }
    }

    /// The operation-log source of the round's entries.
    pub fn log_source(self) -> Source {
        match self {
            RoundKind::Manual | RoundKind::QuotaRefresh => Source::Manual,
            RoundKind::Auto => Source::Auto,
            _ => Source::System,
        }
    }

    /// Whether rounds of this kind act (auto, manual, reset re-checks): the full rounds whose
    /// result alerts evaluate and the demo prints.
    pub fn acts(self) -> bool {
        matches!(self, RoundKind::Auto | RoundKind::Manual | RoundKind::Reset)
    }

    /// The kind an `InspectionRunResult.source` names (its `as_str` spelling).
    pub fn from_source(source: &str) -> Option<Self> {
        [
            RoundKind::Auto,
            RoundKind::Manual,
            RoundKind::QuotaRefresh,
            RoundKind::Reset,
            RoundKind::Freshness,
            RoundKind::Warmup,
        ]
        .into_iter()
        .find(|k| k.as_str() == source)
    }
}

/// Options of one round.
#[derive(Debug, Clone)]
pub struct RoundOptions {
    pub kind: RoundKind,
    /// Probe every evaluated account for real.
    pub force: bool,
    /// The operator's dry run (`inspect --dry-run`, `dryRun=true`): read CPA and decide, write
    /// nothing — no action, no stored state, no log entry, no runtime counter; the run record
    /// (marked `dryRun`) is all it keeps (README "How decisions are made", dry runs). Kinds
    /// that never act (`acts()` false) are not dry runs: they store what they probed.
    pub dry_run: bool,
    /// Restrict the round to these accounts (reset checks, freshness, single refresh).
    pub only: Option<HashSet<String>>,
}

impl RoundOptions {
    /// A round of `kind` over the whole site.
    pub fn new(kind: RoundKind) -> Self {
        Self {
            kind,
            force: false,
            dry_run: false,
            only: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RoundKind;

    #[test]
    fn a_round_kind_reads_back_from_its_source_spelling() {
        for k in [
            RoundKind::Auto,
            RoundKind::Manual,
            RoundKind::Reset,
            RoundKind::Warmup,
        ] {
            assert_eq!(RoundKind::from_source(k.as_str()), Some(k));
        }
        assert_eq!(
            RoundKind::from_source("quotaRefresh"),
            Some(RoundKind::QuotaRefresh)
        );
        assert_eq!(RoundKind::from_source("bogus"), None);
        assert!(RoundKind::Reset.acts() && !RoundKind::Freshness.acts());
    }
}
