//! Classifies an attempt's outcome before the first byte went to the client (docs/rules/router.md §3
//! table): status, body and early error frame ⇒ class, scope and reset.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::frame::strip_data;
use super::headers::Headers;
use super::hints::{codex_scope, parse_reset, parse_retry_after};
use super::verdict::{FailureClass, Verdict};

/// What an upstream attempt produced before the first byte went to the client.
pub enum Outcome<'a> {
    /// An HTTP status with its headers and (a prefix of, ≤ 64 KiB) its body; `html` =
    /// content-type text/html.
    Status {
        status: u16,
        headers: &'a dyn Headers,
        body: &'a [u8],
        html: bool,
    },
    /// A stream that opened 2xx but whose first event, before any content, is an error frame
    /// (its `data:` JSON).
    EarlyErrorFrame {
        headers: &'a dyn Headers,
        frame: &'a [u8],
    },
    /// Connection refused/reset, TLS, timeout, first-byte budget exceeded.
    Transport,
}

/// Classifies one attempt (docs/rules/router.md §3 table); `None` = a 2xx (ok).
///
/// - `Transport` ⇒ transient;
/// - a status: 2xx ⇒ `None`; a quota body on any 4xx, or 402 ⇒ quota (reset from the body, else
///   the `x-codex-*-reset-at` headers; model scope per [`codex_scope`]); 429 otherwise ⇒
///   rate_limit; 401 ⇒ session_dead; 403 ⇒ transient when HTML (edge block), else
///   session_dead; 408, 5xx ⇒ transient; 400, 404, 413, 422 and the other 4xx ⇒ request error;
///   anything else (1xx, 3xx) ⇒ transient (not an answer the router can pass on);
/// - an early error frame ⇒ per [`classify_error_json`].
///
/// `retry_after` is filled from a `Retry-After` header whatever the class.
pub fn classify(outcome: &Outcome, now: DateTime<Utc>) -> Option<Verdict> {
    match *outcome {
        Outcome::Transport => Some(Verdict::of(FailureClass::Transient)),
        Outcome::Status {
            status,
            headers,
            body,
            html,
        } => classify_status(status, headers, body, html, now),
        Outcome::EarlyErrorFrame { headers, frame } => {
            let json = serde_json::from_slice::<Value>(strip_data(frame)).unwrap_or(Value::Null);
            let class = classify_error_json(&json);
            Some(with_hints(class, headers, &json, now))
        }
    }
}

fn classify_status(
    status: u16,
    headers: &dyn Headers,
    body: &[u8],
    html: bool,
    now: DateTime<Utc>,
) -> Option<Verdict> {
    use FailureClass::*;
    if (200..300).contains(&status) {
        return None;
    }
    let json = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    let html = html || looks_like_html(body);
    let class = match status {
        400..=499 if !html && is_quota_body(&json, body) => Quota,
        402 => Quota,
        429 => RateLimit,
        401 => SessionDead,
        403 if html => Transient,
        403 => SessionDead,
        408 => Transient,
        400..=499 => RequestError,
        _ => Transient,
    };
    Some(with_hints(class, headers, &json, now))
}

/// Adds the hints of an answer to its class: `Retry-After`, and for quota the reset and scope.
fn with_hints(
    class: FailureClass,
    headers: &dyn Headers,
    json: &Value,
    now: DateTime<Utc>,
) -> Verdict {
    let mut v = Verdict::of(class);
    v.retry_after = headers
        .get("retry-after")
        .and_then(|s| parse_retry_after(s, now));
    if class == FailureClass::Quota {
        let (scope, header_reset) = codex_scope(headers, now);
        v.scope = scope;
        v.reset_at = parse_reset(json, now).or(header_reset);
    }
    v
}

/// Classifies an error object sent inside a stream (docs/rules/router.md §3 "an error event that arrives
/// before any content"), from its `type` / `code` / `message` in `error`, `response.error` or
/// the top level: quota codes and "insufficient …" messages ⇒ quota; rate-limit codes ⇒
/// rate_limit; authentication codes ⇒ session_dead; invalid-request codes (context length,
/// model not found) ⇒ request error; anything else (server_error, unknown) ⇒ transient.
pub fn classify_error_json(json: &Value) -> FailureClass {
    if is_quota_body(json, &[]) {
        return FailureClass::Quota;
    }
    let words: Vec<String> = error_objects(json)
        .flat_map(|o| ["type", "code"].map(|k| o.get(k).and_then(Value::as_str)))
        .flatten()
        .map(str::to_ascii_lowercase)
        .collect();
    let any = |needles: &[&str]| words.iter().any(|w| needles.iter().any(|n| w.contains(n)));
    if any(&["rate_limit", "rate-limit", "too_many_requests"]) {
        FailureClass::RateLimit
    } else if any(&[
        "invalid_api_key",
        "authentication",
        "unauthorized",
        "permission",
        "account_deactivated",
        "token_expired",
    ]) {
        FailureClass::SessionDead
    } else if any(&[
        "invalid_request",
        "context_length",
        "model_not_found",
        "unsupported",
        "invalid_prompt",
    ]) {
        FailureClass::RequestError
    } else {
        FailureClass::Transient
    }
}

/// Error codes / types that mean "quota exhausted" (docs/rules/router.md §3; Codex and OpenAI spellings).
const QUOTA_CODES: &[&str] = &[
    "usage_limit_reached",
    "usage_not_included",
    "insufficient_quota",
    "insufficient_credits",
    "insufficient_balance",
    "billing_hard_limit_reached",
];

/// Message phrases that mean "quota exhausted" (docs/rules/router.md §3 "insufficient
/// quota/credits/balance" bodies), matched case-insensitively.
const QUOTA_PHRASES: &[&str] = &[
    "insufficient quota",
    "insufficient credits",
    "insufficient credit",
    "insufficient balance",
    "insufficient_quota",
    "usage_limit_reached",
];

/// The objects of a body that may describe its error: `error`, `response.error`, the top level.
fn error_objects(json: &Value) -> impl Iterator<Item = &serde_json::Map<String, Value>> {
    [
        json.get("error"),
        json.get("response").and_then(|r| r.get("error")),
        Some(json),
    ]
    .into_iter()
    .flatten()
    .filter_map(Value::as_object)
}

/// Whether a body says the quota is exhausted: a quota code in `type` / `code`, or a quota
/// phrase in `message` (or, for a body that is not JSON, anywhere in the raw text).
fn is_quota_body(json: &Value, raw: &[u8]) -> bool {
    let has_phrase = |text: &str| {
        let text = text.to_ascii_lowercase();
        QUOTA_PHRASES.iter().any(|p| text.contains(p))
    };
    if json.is_null() {
        return has_phrase(&String::from_utf8_lossy(raw));
    }
    error_objects(json).any(|o| {
        let code = |k: &str| {
            o.get(k)
                .and_then(Value::as_str)
                .is_some_and(|s| QUOTA_CODES.contains(&s.to_ascii_lowercase().as_str()))
        };
        code("type")
            || code("code")
            || o.get("message")
                .and_then(Value::as_str)
                .is_some_and(has_phrase)
    })
}

/// An HTML body despite its content-type (an edge block page sent as text/plain).
fn looks_like_html(body: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&body[..body.len().min(256)]).to_ascii_lowercase();
    let head = head.trim_start();
    head.starts_with("<!doctype html") || head.starts_with("<html")
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
