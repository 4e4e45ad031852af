//! The operation log's vocabulary: every probe, decision, action, routing event, settings change
//! and system event becomes one [`LogEntry`] (docs/rules/patrol.md §7). Pure data.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Log category (docs/rules/patrol.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Category {
    Inspection,
    Quota,
    Account,
    Priority,
    Alert,
    System,
}

/// Who triggered the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Auto,
    Manual,
    System,
}

/// Severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Warning,
    Error,
}

macro_rules! spelled {
    ($t:ty { $($v:ident => $s:literal),* $(,)? }) => {
        impl $t {
            /// The API / database spelling.
            pub fn as_str(self) -> &'static str { match self { $(Self::$v => $s),* } }
            /// Parses the API / database spelling.
            pub fn parse(s: &str) -> Option<Self> { match s { $($s => Some(Self::$v),)* _ => None } }
        }
    };
}
spelled!(Category { Inspection => "inspection", Quota => "quota", Account => "account", Priority => "priority", Alert => "alert", System => "system" });
spelled!(Source { Auto => "auto", Manual => "manual", System => "system" });
spelled!(Level { Info => "info", Warning => "warning", Error => "error" });

/// One operation-log entry (docs/rules/patrol.md §7). Messages are English and never contain secrets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LogEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub site_id: Option<String>,
    pub category: Category,
    pub operation_type: String,
    pub source: Source,
    pub level: Level,
    pub message: String,
    pub account_name: Option<String>,
    /// The quota reset a state flip is about (docs/patrol.md "How a decision is made", operation
    /// log): a quota disable's reset the account waits for, a re-enable's reset that passed; `None`
    /// for every other entry. Also in `message`, as RFC 3339.
    pub reset_at: Option<DateTime<Utc>>,
}

/// A log entry to append (id and time are assigned by the writer).
#[derive(Debug, Clone, PartialEq)]
pub struct NewLogEntry {
    pub site_id: Option<String>,
    pub category: Category,
    pub operation_type: &'static str,
    pub source: Source,
    pub level: Level,
    pub message: String,
    pub account_name: Option<String>,
    /// See [`LogEntry::reset_at`].
    pub reset_at: Option<DateTime<Utc>>,
}

impl NewLogEntry {
    /// An info entry for a site.
    pub fn info(
        site_id: &str,
        category: Category,
        op: &'static str,
        source: Source,
        message: impl Into<String>,
    ) -> Self {
        Self {
            site_id: Some(site_id.to_string()),
            category,
            operation_type: op,
            source,
            level: Level::Info,
            message: message.into(),
            account_name: None,
            reset_at: None,
        }
    }

    /// Same entry at another level.
    pub fn at_level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }

    /// Same entry about one account.
    pub fn for_account(mut self, name: &str) -> Self {
        self.account_name = Some(name.to_string());
        self
    }

    /// Same entry about the quota reset `r`: its time in [`LogEntry::reset_at`] and at the end
    /// of the message ([`FlipReset::note`]), so the two always agree.
    pub fn with_reset(mut self, r: FlipReset) -> Self {
        self.message.push_str(&r.note());
        self.reset_at = r.at();
        self
    }
}

/// The quota reset a state flip's log entry names (docs/patrol.md "How a decision is made",
/// operation log).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FlipReset {
    /// Not about a reset (401, routing steps, manual actions).
    #[default]
    None,
    /// A quota disable (or an exhausted account kept disabled): the reset it waits for, `None`
    /// when unknown (a plain 402, a window without a reset time).
    Awaited(Option<DateTime<Utc>>),
    /// A re-enable: the reset that passed.
    Passed(DateTime<Utc>),
}

impl FlipReset {
    /// The reset's time, if one is named.
    pub fn at(self) -> Option<DateTime<Utc>> {
        match self {
            FlipReset::Awaited(at) => at,
            FlipReset::Passed(at) => Some(at),
            FlipReset::None => None,
        }
    }

    /// The message's ending, times as the log writes them (RFC 3339):
    /// `"; back after its reset at 2026-05-24T03:00:00+00:00"`, `"; no reset known"`,
    /// `"; its reset at 2026-05-21T03:04:00+00:00 passed"`, or empty.
    pub fn note(self) -> String {
        match self {
            FlipReset::Awaited(Some(t)) => format!("; back after its reset at {}", t.to_rfc3339()),
            FlipReset::Awaited(None) => "; no reset known".to_string(),
            FlipReset::Passed(t) => format!("; its reset at {} passed", t.to_rfc3339()),
            FlipReset::None => String::new(),
        }
    }
}

/// Filters of `GET /api/runtime/logs` (api.md).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogQuery {
    pub site_id: Option<String>,
    pub category: Option<Category>,
    /// Minimum level.
    pub level: Option<Level>,
    pub account: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub limit: u32,
}
