//! The verdict on one failed attempt: its class, scope and hints (docs/rules/router.md §3 table).

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

/// The failure classes of docs/rules/router.md §3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FailureClass {
    /// Quota exhausted (Codex `usage_limit_reached`, 402, "insufficient quota/credits/balance"):
    /// excluded until the reset.
    Quota,
    /// A plain 429: cooldown by `Retry-After` or exponential backoff.
    RateLimit,
    /// Credential rejected (401, 403 JSON): excluded 30 min.
    SessionDead,
    /// 403 HTML, 408, 5xx, transport: retried in route, cooldown 30 s.
    Transient,
    /// 400, 404, 413, 422: the client's request is at fault; no penalty, not failed over.
    RequestError,
}

/// Whether a verdict concerns the whole account or only the model asked (docs/rules/router.md §3 "A
/// quota 429 scoped to a model").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Scope {
    Account,
    Model,
}

/// The verdict for one attempt (docs/rules/router.md §3 table).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    pub class: FailureClass,
    pub scope: Scope,
    /// For quota: the real reset when stated (resets_at / resets_in_seconds /
    /// x-codex-*-reset-at), capped at now + 31 days.
    pub reset_at: Option<DateTime<Utc>>,
    /// A Retry-After given by the upstream (seconds or HTTP-date).
    pub retry_after: Option<Duration>,
}

impl Verdict {
    /// An account-wide verdict without hints.
    pub(super) fn of(class: FailureClass) -> Self {
        Self {
            class,
            scope: Scope::Account,
            reset_at: None,
            retry_after: None,
        }
    }
}

/// Sanity ceiling of any stated reset or wait: 31 days (docs/rules/router.md §3).
pub fn reset_ceiling() -> Duration {
    Duration::days(31)
}
