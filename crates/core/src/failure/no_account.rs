//! The answer when every account of every leg is excluded (docs/rules/router.md §4).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::Value;

/// One exclusion as the all-excluded answer sees it.
#[derive(Clone, Copy, Debug)]
pub struct ExcludedEnd {
    /// Excluded for quota (patrol-reported exhaustion or a router quota cooldown).
    pub quota: bool,
    /// When the exclusion ends, if known.
    pub until: Option<DateTime<Utc>>,
}

/// The answer when every account of every leg is excluded (docs/rules/router.md §4): 429
/// all_accounts_exhausted / usage_limit_reached with resets_at; 429 no_healthy_account /
/// rate_limit_exceeded; 503 no_healthy_account.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NoAccount {
    /// HTTP status: 429 or 503.
    pub status: u16,
    /// OpenAI error `code`: `all_accounts_exhausted` or `no_healthy_account`.
    pub code: &'static str,
    /// OpenAI error `type`: `usage_limit_reached`, `rate_limit_exceeded` or `server_error`.
    pub kind: &'static str,
    /// Human-readable message (no account ids, no secrets).
    pub message: String,
    /// Seconds for the `Retry-After` header (rounded up, ≥ 1); `None` = no header.
    pub retry_after_seconds: Option<i64>,
    /// Quota only: unix seconds of the earliest reset.
    pub resets_at: Option<i64>,
    /// Quota only: seconds until the earliest reset (= `retry_after_seconds`).
    pub resets_in_seconds: Option<i64>,
}

/// The answer when every account of every leg is excluded (docs/rules/router.md §4):
/// - every exclusion that can end is quota ⇒ 429 `all_accounts_exhausted`, type
///   `usage_limit_reached`, `Retry-After`, `resets_at`, `resets_in_seconds` = the earliest known
///   reset (omitted when no reset is known). Exclusions that never end on their own (admin
///   disabled, invalid: no `until`, not quota) do not turn a quota-exhausted pool into
///   "no healthy account";
/// - else at least one known end ⇒ 429 `no_healthy_account`, type `rate_limit_exceeded`,
///   `Retry-After` = seconds until the earliest end;
/// - else (no exclusion, none with a known end) ⇒ 503 `no_healthy_account`, type
///   `server_error`, no `Retry-After`.
///
/// Ends at or before `now` are treated as unknown.
pub fn no_account(exclusions: &[ExcludedEnd], now: DateTime<Utc>) -> NoAccount {
    let known = |e: &ExcludedEnd| e.until.filter(|t| *t > now);
    let ending: Vec<&ExcludedEnd> = exclusions
        .iter()
        .filter(|e| e.quota || known(e).is_some())
        .collect();
    let earliest = |it: &mut dyn Iterator<Item = &&ExcludedEnd>| it.filter_map(|e| known(e)).min();
    let wait = |t: DateTime<Utc>| ((t - now).num_milliseconds() + 999).div_euclid(1000).max(1);
    if !ending.is_empty() && ending.iter().all(|e| e.quota) {
        let reset = earliest(&mut ending.iter());
        let message = match reset {
            Some(t) => format!(
                "Every account is out of quota; the earliest resets at {} (in {} s).",
                t.to_rfc3339_opts(SecondsFormat::Secs, false),
                wait(t)
            ),
            None => "Every account is out of quota; no reset time is known.".to_owned(),
        };
        return NoAccount {
            status: 429,
            code: "all_accounts_exhausted",
            kind: "usage_limit_reached",
            message,
            retry_after_seconds: reset.map(wait),
            resets_at: reset.map(|t| t.timestamp()),
            resets_in_seconds: reset.map(wait),
        };
    }
    match earliest(&mut ending.iter()) {
        Some(t) => NoAccount {
            status: 429,
            code: "no_healthy_account",
            kind: "rate_limit_exceeded",
            message: format!(
                "No healthy account: every account is excluded; the earliest is back in {} s.",
                wait(t)
            ),
            retry_after_seconds: Some(wait(t)),
            resets_at: None,
            resets_in_seconds: None,
        },
        None => NoAccount {
            status: 503,
            code: "no_healthy_account",
            kind: "server_error",
            message: "No healthy account: every account is disabled or none serves this model."
                .to_owned(),
            retry_after_seconds: None,
            resets_at: None,
            resets_in_seconds: None,
        },
    }
}

impl NoAccount {
    /// The OpenAI error body: `{"error":{"message","type","code","resets_at"?,
    /// "resets_in_seconds"?}}` (docs/rules/router.md §4; the reset fields only for quota exhaustion).
    pub fn body(&self) -> Value {
        let mut error = serde_json::json!({
            "message": self.message,
            "type": self.kind,
            "code": self.code,
        });
        if let (Some(at), Some(map)) = (self.resets_at, error.as_object_mut()) {
            map.insert("resets_at".into(), at.into());
            if let Some(s) = self.resets_in_seconds {
                map.insert("resets_in_seconds".into(), s.into());
            }
        }
        serde_json::json!({ "error": error })
    }
}

#[cfg(test)]
#[path = "no_account_tests.rs"]
mod tests;
