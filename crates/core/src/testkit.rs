//! Builders shared by the core's unit tests (test-only).

use chrono::{DateTime, Utc};

use super::account::QuotaSnapshot;
use super::quota::{MAIN_GROUP, QuotaWindow, WindowKind};

/// A main-group window of `kind` at `used` percent, resetting at `reset_at`.
pub(crate) fn main_window(kind: WindowKind, used: f64, reset_at: DateTime<Utc>) -> QuotaWindow {
    QuotaWindow {
        id: format!("main:{kind:?}"),
        label: String::new(),
        group: MAIN_GROUP.into(),
        kind,
        used_percent: Some(used),
        limit_window_seconds: None,
        reset_at: Some(reset_at),
        reset_after_seconds: None,
    }
}

/// A successful snapshot of `plan` with `windows`, probed at `at`.
pub(crate) fn snapshot(plan: &str, windows: Vec<QuotaWindow>, at: DateTime<Utc>) -> QuotaSnapshot {
    QuotaSnapshot {
        plan_type: Some(plan.into()),
        windows,
        credits: None,
        main_limit_reached: false,
        status_code: 200,
        checked_at: at,
        refreshed_at: at,
        from_cache: false,
        cache_reason: None,
        reset_credits: None,
    }
}
