//! The operation log's vocabulary: every probe, decision, action, routing event, settings change
//! and system event becomes one [`LogEntry`] (patrol.md §7). Pure data.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Log category (patrol.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[serde(rename_all = "lowercase")]
pub enum Source {
    Auto,
    Manual,
    System,
}

/// Severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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

/// One operation-log entry (patrol.md §7). Messages are English and never contain secrets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
