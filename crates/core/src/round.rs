//! Why a round runs ([`RoundKind`]) and the rules that follow from the kind alone: whether it
//! acts, its log source, whether priority routing runs after it (docs/patrol.md "What a round
//! does"; docs/rules/patrol.md §4.5, §6.3).

use super::oplog::Source;

/// Why a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundKind {
    /// Regular round from the scheduler.
    Auto,
    /// `POST /api/inspection/run`, `quota-patrol inspect`.
    Manual,
    /// `POST /api/quotas/refresh`: evaluate everything (exceptions included), no actions.
    QuotaRefresh,
    /// Re-probe at a quota reset (docs/rules/patrol.md §4.5).
    Reset,
    /// Background real-refresh of due accounts (docs/rules/patrol.md §4.3); no actions.
    Freshness,
    /// Startup warm-up (docs/rules/patrol.md §4.6); no actions.
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

    /// Whether priority routing runs after a round of this kind (when the site enables it):
    /// after every inspection, auto or manual, and after a reset re-check only while
    /// `auto_polling_enabled` (docs/rules/patrol.md §4.5, §6.3); never after refreshes or warm-up.
    pub fn routes_after(self, auto_polling_enabled: bool) -> bool {
        match self {
            RoundKind::Auto | RoundKind::Manual => true,
            RoundKind::Reset => auto_polling_enabled,
            RoundKind::QuotaRefresh | RoundKind::Freshness | RoundKind::Warmup => false,
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

    #[test]
    fn routing_follows_inspections_and_reset_checks_only_while_auto_polling() {
        // (kind, auto polling enabled, routes after)
        let table = [
            (RoundKind::Auto, true, true),
            (RoundKind::Auto, false, true),
            (RoundKind::Manual, false, true),
            (RoundKind::Reset, true, true),
            (RoundKind::Reset, false, false),
            (RoundKind::QuotaRefresh, true, false),
            (RoundKind::Freshness, true, false),
            (RoundKind::Warmup, true, false),
        ];
        for (kind, auto, routes) in table {
            assert_eq!(kind.routes_after(auto), routes, "{kind:?} auto={auto}");
        }
    }
}
