//! What the tests of `core::failure` share: the instant the upstream fixtures are written
//! around, the fixtures, and shorthands for classifying them.

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::*;

/// The probe instant the upstream fixtures are written around: 2026-05-26T12:00:00Z.
pub(super) const NOW_UNIX: i64 = 1_779_796_800;

pub(super) fn now() -> DateTime<Utc> {
    Utc.timestamp_opt(NOW_UNIX, 0).unwrap()
}

pub(super) fn at(unix: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(unix, 0).unwrap()
}

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("../../../../fixtures/upstream/", $name))
    };
}

pub(super) const USAGE_LIMIT: &str = fixture!("responses__429-usage-limit-reached.json");
pub(super) const USAGE_LIMIT_MS: &str = fixture!("responses__429-usage-limit-reached-ms.json");
pub(super) const USAGE_NOT_INCLUDED: &str = fixture!("responses__429-usage-not-included.json");
pub(super) const INSUFFICIENT_QUOTA: &str =
    fixture!("chat-completions__429-insufficient-quota.json");
pub(super) const RATE_LIMIT: &str = fixture!("chat-completions__429-rate-limit-exceeded.json");
pub(super) const INSUFFICIENT_BALANCE: &str =
    fixture!("chat-completions__402-insufficient-balance.json");
pub(super) const INSUFFICIENT_CREDITS: &str =
    fixture!("chat-completions__400-insufficient-credits.json");
pub(super) const INVALID_KEY: &str = fixture!("chat-completions__401-invalid-api-key.json");
pub(super) const MODEL_NOT_FOUND: &str = fixture!("chat-completions__404-model-not-found.json");
pub(super) const CLOUDFLARE: &str = fixture!("wham-usage__403-cloudflare.html");
pub(super) const FORBIDDEN_JSON: &str = fixture!("wham-usage__403-json.json");
pub(super) const SSE_USAGE_LIMIT: &str = fixture!("responses__sse-usage-limit-frame.txt");
pub(super) const SSE_FAILED: &str = fixture!("responses__sse-response-failed-rate-limit.txt");
pub(super) const SSE_RATE_LIMITS: &str = fixture!("responses__sse-rate-limits-then-content.txt");
pub(super) const SSE_CHAT: &str = fixture!("chat-completions__sse-content.txt");

/// Classifies a status answer with these headers.
pub(super) fn status_with(
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
    html: bool,
) -> Option<Verdict> {
    let headers = HeaderList(headers);
    classify(
        &Outcome::Status {
            status,
            headers: &headers,
            body: body.as_bytes(),
            html,
        },
        now(),
    )
}

pub(super) fn class_of(status: u16, body: &str, html: bool) -> Option<FailureClass> {
    status_with(status, &[], body, html).map(|v| v.class)
}

/// The `data:` payloads of an SSE fixture, in order.
pub(super) fn frames(sse: &str) -> Vec<&str> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect()
}

/// A verdict of `class` with this `Retry-After`.
pub(super) fn verdict(class: FailureClass, retry_after: Option<Duration>) -> Verdict {
    Verdict {
        retry_after,
        ..Verdict::of(class)
    }
}
