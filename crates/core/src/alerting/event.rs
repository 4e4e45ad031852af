//! The alert events (docs/rules/alerts.md §1): their kinds, the families that share one persisted
//! state, and their severities, with the API / database spellings. Pure names.

use serde::{Deserialize, Serialize};

/// An alert event (docs/rules/alerts.md §1). `Test` is the message of `POST /api/alerts/test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    AllExhausted,
    Recovered,
    BelowMinActive,
    InvalidAccounts,
    SiteUnreachable,
    SiteReachable,
    /// The forecast says the site runs dry well before its earliest reset, or too few usable
    /// accounts remain (docs/rules/alerts.md §4).
    PoolLow,
    /// The `pool_low` condition cleared (with hysteresis and the flap guard).
    PoolLowCleared,
    /// The optional once-a-day summary of a site (`[alerts] daily_digest_at`).
    DailyDigest,
    /// The patrol redeemed a banked reset credit on an account (docs/reset-credits.md).
    ResetCreditRedeemed,
    Test,
}

impl EventKind {
    /// The API / database / template spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::AllExhausted => "all_exhausted",
            EventKind::Recovered => "recovered",
            EventKind::BelowMinActive => "below_min_active",
            EventKind::InvalidAccounts => "invalid_accounts",
            EventKind::SiteUnreachable => "site_unreachable",
            EventKind::SiteReachable => "site_reachable",
            EventKind::PoolLow => "pool_low",
            EventKind::PoolLowCleared => "pool_low_cleared",
            EventKind::DailyDigest => "daily_digest",
            EventKind::ResetCreditRedeemed => "reset_credit_redeemed",
            EventKind::Test => "test",
        }
    }

    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 11] = [
        EventKind::AllExhausted,
        EventKind::Recovered,
        EventKind::BelowMinActive,
        EventKind::InvalidAccounts,
        EventKind::SiteUnreachable,
        EventKind::SiteReachable,
        EventKind::PoolLow,
        EventKind::PoolLowCleared,
        EventKind::DailyDigest,
        EventKind::ResetCreditRedeemed,
        EventKind::Test,
    ];

    /// Parses the API / database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The family whose state the event changes (`None` for `Test` and `DailyDigest`, whose
    /// once-a-day rule keeps its own state: the last digest's local date).
    pub fn family(self) -> Option<Family> {
        match self {
            EventKind::AllExhausted | EventKind::Recovered => Some(Family::Exhaustion),
            EventKind::BelowMinActive => Some(Family::MinActive),
            EventKind::InvalidAccounts => Some(Family::InvalidAccounts),
            EventKind::SiteUnreachable | EventKind::SiteReachable => Some(Family::Reachability),
            EventKind::PoolLow | EventKind::PoolLowCleared => Some(Family::PoolLow),
            EventKind::DailyDigest | EventKind::ResetCreditRedeemed | EventKind::Test => None,
        }
    }

    /// Severity of the event (docs/rules/alerts.md §1 table).
    pub fn severity(self) -> Severity {
        match self {
            EventKind::AllExhausted | EventKind::SiteUnreachable => Severity::Critical,
            EventKind::BelowMinActive | EventKind::InvalidAccounts | EventKind::PoolLow => {
                Severity::Warning
            }
            EventKind::Recovered
            | EventKind::SiteReachable
            | EventKind::PoolLowCleared
            | EventKind::DailyDigest
            | EventKind::ResetCreditRedeemed
            | EventKind::Test => Severity::Info,
        }
    }
}

/// A family of events sharing one persisted state (a condition and its clearing, or the
/// per-round invalid-account notice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Exhaustion,
    MinActive,
    InvalidAccounts,
    Reachability,
    /// `pool_low` / `pool_low_cleared` (docs/rules/alerts.md §4).
    PoolLow,
}

impl Family {
    /// Every family, in evaluation order.
    pub const ALL: [Family; 5] = [
        Family::Exhaustion,
        Family::MinActive,
        Family::InvalidAccounts,
        Family::Reachability,
        Family::PoolLow,
    ];

    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Exhaustion => "exhaustion",
            Family::MinActive => "min_active",
            Family::InvalidAccounts => "invalid_accounts",
            Family::Reachability => "reachability",
            Family::PoolLow => "pool_low",
        }
    }

    /// Parses the database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Family::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

/// Severity of an event (`level` of the webhook and the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Warning,
    Info,
}

impl Severity {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_round_trip() {
        for f in Family::ALL {
            assert_eq!(Family::parse(f.as_str()), Some(f));
        }
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.as_str())
            );
        }
        assert_eq!(EventKind::AllExhausted.severity(), Severity::Critical);
        assert_eq!(EventKind::InvalidAccounts.severity(), Severity::Warning);
        assert_eq!(EventKind::Recovered.severity(), Severity::Info);
    }
}
