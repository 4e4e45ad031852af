//! What the router learns from a failed upstream attempt (spec/router.md §3, §4 last bullet):
//! the classification of an outcome before the first byte went to the client (quota,
//! rate_limit, session_dead, transient, request error; account- or model-scoped), the parsing of
//! its reset hints (`resets_at` / `resets_in_seconds`, `x-codex-*` headers, `Retry-After`), the
//! kind of a streaming frame, what to do next (retry on the same account, move on, return to the
//! client), the cooldowns it puts on a lane's candidates, the IP-level throttle detector and the
//! answer when every account of every leg is excluded.
//!
//! Pure: no I/O, no clock reads (`now` is an argument), no randomness (the jitter is an argument),
//! no HTTP crate (headers come through [`Headers`]). It must not decide which account serves a
//! request (that is `core::selection` + `core::affinity`) nor send anything: the adapter
//! (`crate::router`) acts on its verdicts.

use chrono::{DateTime, Duration, NaiveDateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::codex_json;
use super::retry::{Backoff, JITTER_SPREAD};
use super::selection::EngineState;

// ---------------------------------------------------------------------------------------------
// Inputs

/// Header access without an HTTP crate in core. Names are asked for in lower case; an
/// implementation over a case-insensitive map (the adapter's `http::HeaderMap`) answers them
/// as is.
pub trait Headers {
    /// The first value of header `name` (lower case), if present and valid UTF-8.
    fn get(&self, name: &str) -> Option<&str>;
    /// Every header name present (lower case, repeats allowed). Needed for the Codex
    /// model-scoped limit headers `x-codex-<name>-primary-used-percent`, whose `<name>` is not
    /// known in advance (router.md §3). Only read on the failure path.
    fn names(&self) -> Vec<&str>;
}

/// No headers at all (an outcome without headers, tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHeaders;

impl Headers for NoHeaders {
    fn get(&self, _name: &str) -> Option<&str> {
        None
    }
    fn names(&self) -> Vec<&str> {
        Vec::new()
    }
}

/// Headers as a borrowed list of `(name, value)` pairs, names matched case-insensitively.
#[derive(Debug, Clone, Copy)]
pub struct HeaderList<'a>(pub &'a [(&'a str, &'a str)]);

impl Headers for HeaderList<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
    fn names(&self) -> Vec<&str> {
        self.0.iter().map(|(n, _)| *n).collect()
    }
}

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

// ---------------------------------------------------------------------------------------------
// Verdicts

/// The failure classes of router.md §3.
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

/// Whether a verdict concerns the whole account or only the model asked (router.md §3 "A
/// quota 429 scoped to a model").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Scope {
    Account,
    Model,
}

/// The verdict for one attempt (router.md §3 table).
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
    fn of(class: FailureClass) -> Self {
        Self {
            class,
            scope: Scope::Account,
            reset_at: None,
            retry_after: None,
        }
    }
}

/// Sanity ceiling of any stated reset or wait: 31 days (router.md §3).
pub fn reset_ceiling() -> Duration {
    Duration::days(31)
}

/// Classifies one attempt (router.md §3 table); `None` = a 2xx (ok).
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

/// Classifies an error object sent inside a stream (router.md §3 "an error event that arrives
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

/// Error codes / types that mean "quota exhausted" (router.md §3; Codex and OpenAI spellings).
const QUOTA_CODES: &[&str] = &[
    "usage_limit_reached",
    "usage_not_included",
    "insufficient_quota",
    "insufficient_credits",
    "insufficient_balance",
    "billing_hard_limit_reached",
];

/// Message phrases that mean "quota exhausted" (router.md §3 "insufficient
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

/// A frame's JSON without an optional leading `data:`.
fn strip_data(frame: &[u8]) -> &[u8] {
    let trimmed = frame.trim_ascii_start();
    trimmed.strip_prefix(b"data:").unwrap_or(trimmed)
}

// ---------------------------------------------------------------------------------------------
// Reset and Retry-After parsing

/// The quota reset a body states (router.md §3): `resets_at` (unix seconds, or milliseconds
/// above 10^11; a number, a numeric string or an RFC 3339 string) wins over `resets_in_seconds`
/// (from `now`); looks in `error.*`, `response.error.*` and the top level, snake_case or
/// camelCase. A reset at or before `now` is ignored; one beyond now + 31 days is capped there.
pub fn parse_reset(body: &Value, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    codex_json::reset_fields(body).find_map(|fields| {
        let at = fields.resets_at.and_then(codex_json::instant);
        let after = fields
            .resets_in_seconds
            .and_then(codex_json::number)
            .filter(|s| *s > 0.0)
            .map(|s| now + seconds(s));
        [at, after]
            .into_iter()
            .flatten()
            .find(|t| *t > now)
            .map(|t| t.min(now + reset_ceiling()))
    })
}

/// A duration of `s` seconds (finite, ≥ 0), saturating at the 31-day ceiling.
fn seconds(s: f64) -> Duration {
    let ceiling = reset_ceiling();
    if s >= ceiling.num_seconds() as f64 {
        ceiling
    } else {
        Duration::milliseconds((s * 1000.0).round() as i64)
    }
}

/// A `Retry-After` value (RFC 9110 §10.2.3): delay-seconds (a non-negative integer; a decimal is
/// accepted too) or an HTTP-date (IMF-fixdate, also the obsolete RFC 850 and asctime forms),
/// as the wait from `now`. A date in the past ⇒ zero; garbage or a negative number ⇒ `None`;
/// waits beyond 31 days are capped there.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(
            value
                .parse::<u64>()
                .map_or(reset_ceiling(), |s| seconds(s as f64)),
        );
    }
    if let Ok(s) = value.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then(|| seconds(s));
    }
    let at = DateTime::parse_from_rfc2822(value)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            ["%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"]
                .iter()
                .find_map(|f| NaiveDateTime::parse_from_str(value, f).ok())
                .map(|n| n.and_utc())
        })?;
    Some((at - now).clamp(Duration::zero(), reset_ceiling()))
}

/// The scope of a quota answer from Codex's headers (router.md §3), with the reset the headers
/// give: the main windows (`x-codex-primary-used-percent`, `x-codex-secondary-used-percent`) —
/// at least one present, all present below 100 — while some `x-codex-<name>-primary-` /
/// `-secondary-used-percent` is at 100 ⇒ [`Scope::Model`], reset = the latest
/// `x-codex-<name>-<slot>-reset-at` (unix seconds; or `-reset-after-seconds`) of those at 100.
/// Otherwise ⇒ [`Scope::Account`], reset = the latest reset of the main windows at 100 (if any).
/// Resets at or before `now` are ignored, later ones capped at now + 31 days.
pub fn codex_scope(headers: &dyn Headers, now: DateTime<Utc>) -> (Scope, Option<DateTime<Utc>>) {
    let percent = |name: &str| headers.get(name).and_then(|v| v.trim().parse::<f64>().ok());
    let main: Vec<(&str, f64)> = ["primary", "secondary"]
        .into_iter()
        .filter_map(|slot| Some((slot, percent(&format!("x-codex-{slot}-used-percent"))?)))
        .collect();
    let exhausted = |p: f64| p >= 100.0;
    let latest = |windows: &mut dyn Iterator<Item = String>| {
        windows
            .filter_map(|prefix| header_reset(headers, &prefix, now))
            .max()
    };
    if !main.is_empty() && main.iter().all(|(_, p)| !exhausted(*p)) {
        let names = headers.names();
        let mut model_windows = names.iter().filter_map(|n| {
            let n = n.to_ascii_lowercase();
            let rest = n.strip_prefix("x-codex-")?;
            ["primary", "secondary"].into_iter().find_map(|slot| {
                let name = rest.strip_suffix(&format!("-{slot}-used-percent"))?;
                (!name.is_empty() && percent(&n).is_some_and(exhausted))
                    .then(|| format!("x-codex-{name}-{slot}"))
            })
        });
        if let Some(first) = model_windows.next() {
            let mut all = std::iter::once(first).chain(model_windows);
            return (Scope::Model, latest(&mut all));
        }
    }
    let mut at_limit = main
        .into_iter()
        .filter(|(_, p)| exhausted(*p))
        .map(|(slot, _)| format!("x-codex-{slot}"));
    (Scope::Account, latest(&mut at_limit))
}

/// The reset of one Codex window (`<prefix>-reset-at`, else `<prefix>-reset-after-seconds`).
fn header_reset(headers: &dyn Headers, prefix: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let at = headers
        .get(&format!("{prefix}-reset-at"))
        .and_then(|v| codex_json::instant(&Value::String(v.to_owned())));
    let after = headers
        .get(&format!("{prefix}-reset-after-seconds"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| now + seconds(s));
    at.or(after)
        .filter(|t| *t > now)
        .map(|t| t.min(now + reset_ceiling()))
}

// ---------------------------------------------------------------------------------------------
// Streaming frames

/// A streaming event's JSON `data:` (Chat or Responses): content, an error before content,
/// informational rate-limit, or other (role/created frames).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    Content,
    Error,
    RateLimitInfo,
    Other,
}

/// The kind of one streaming event's `data:` payload (router.md §3 "an error event that arrives
/// before any content … is a pre-first-byte failure; an informational rate-limit event followed
/// by content is not"). Accepts the payload with or without a leading `data:`.
///
/// - `{"error": …}` (non-null), `type` `error` / `response.failed` / `response.error` ⇒ Error;
/// - `type` containing `rate_limit` (Codex `codex.rate_limits`) ⇒ RateLimitInfo;
/// - Responses `response.output_*`, `response.content_part.*`, `response.reasoning*`,
///   `response.function_call_arguments.*`, `response.refusal.*`, and `response.completed` /
///   `response.done` (the whole output in one event) ⇒ Content;
/// - Chat chunks with a non-empty `delta.content` / `tool_calls` / `function_call` /
///   `reasoning` / `reasoning_content` / `refusal` in any choice ⇒ Content;
/// - anything else (`response.created`, `response.in_progress`, role-only or empty deltas,
///   usage-only chunks, `[DONE]`, non-JSON) ⇒ Other.
pub fn frame_kind(data: &[u8]) -> FrameKind {
    let Ok(json) = serde_json::from_slice::<Value>(strip_data(data)) else {
        return FrameKind::Other;
    };
    if json.get("error").is_some_and(|e| !e.is_null()) {
        return FrameKind::Error;
    }
    if let Some(kind) = json.get("type").and_then(Value::as_str) {
        return responses_kind(kind);
    }
    let content = json
        .get("choices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("delta").or_else(|| c.get("message")))
        .any(|d| {
            [
                "content",
                "tool_calls",
                "function_call",
                "reasoning",
                "reasoning_content",
                "refusal",
            ]
            .iter()
            .any(|k| d.get(*k).is_some_and(non_empty))
        });
    if content {
        FrameKind::Content
    } else {
        FrameKind::Other
    }
}

/// The kind of a Responses API (or Codex) event by its `type`.
fn responses_kind(kind: &str) -> FrameKind {
    const CONTENT_PREFIXES: &[&str] = &[
        "response.output_",
        "response.content_part.",
        "response.reasoning",
        "response.function_call_arguments.",
        "response.refusal.",
    ];
    match kind {
        "error" | "response.failed" | "response.error" => FrameKind::Error,
        "response.completed" | "response.done" => FrameKind::Content,
        k if k.contains("rate_limit") => FrameKind::RateLimitInfo,
        k if CONTENT_PREFIXES.iter().any(|p| k.starts_with(p)) => FrameKind::Content,
        _ => FrameKind::Other,
    }
}

/// A non-empty string, array or object (any other non-null value counts as present).
fn non_empty(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

// ---------------------------------------------------------------------------------------------
// In-route retries

/// In-route retries (router.md §3, seed 001): 500 ms doubling to 10 s; the ±10 % jitter of the
/// spec is taken downwards only ([`JITTER_SPREAD`], as every backoff of the crate) so the 10 s
/// cap holds.
pub const IN_ROUTE_RETRY: Backoff =
    Backoff::new(Duration::milliseconds(500), Duration::seconds(10)).with_spread(JITTER_SPREAD);

/// A plain 429 without `Retry-After` (router.md §3): 2 s doubling to 5 min by backoff level,
/// [`JITTER_SPREAD`] off at most.
pub const RATE_LIMIT_BACKOFF: Backoff =
    Backoff::new(Duration::seconds(2), Duration::minutes(5)).with_spread(JITTER_SPREAD);

/// Default number of in-route retries on one account (router.md §3 `maxRetries`).
pub const DEFAULT_MAX_RETRIES: u32 = 2;

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Retry on the same account after this pause.
    RetrySameAfter(std::time::Duration),
    /// Fail over to the next ranked account (then the next leg).
    NextAccount,
    /// Give the upstream's answer back to the client (a request error).
    ReturnToClient,
}

/// What to do after a failed attempt (router.md §3 "In-route retries"): `retries_done` on this
/// account so far, `jitter` in 0..=1 from the injected random source.
/// Transient ⇒ retry on the same account while `retries_done < max_retries`, after the
/// `Retry-After` when it is below the 10 s cap (else move on at once), or after
/// [`IN_ROUTE_RETRY`]`.delay(retries_done + 1, jitter)`; retries spent ⇒ next account.
/// Quota, rate_limit, session_dead ⇒ next account at once. Request error ⇒ back to the client.
pub fn next_step(verdict: &Verdict, retries_done: u32, max_retries: u32, jitter: f64) -> Next {
    match verdict.class {
        FailureClass::RequestError => Next::ReturnToClient,
        FailureClass::Quota | FailureClass::RateLimit | FailureClass::SessionDead => {
            Next::NextAccount
        }
        FailureClass::Transient => {
            if retries_done >= max_retries {
                return Next::NextAccount;
            }
            let pause = match verdict.retry_after {
                Some(wait) if wait < IN_ROUTE_RETRY.cap => wait,
                Some(_) => return Next::NextAccount,
                None => IN_ROUTE_RETRY.delay(retries_done + 1, jitter),
            };
            Next::RetrySameAfter(pause.to_std().unwrap_or_default())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Observations (cooldowns)

/// The kind of a router cooldown (router.md §3 "account effect").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum CooldownKind {
    Quota,
    RateLimit,
    SessionDead,
    Transient,
    /// The whole pool answered plain 429s at once (an IP-level throttle, [`ThrottleDetector`]).
    PoolThrottle,
}

impl CooldownKind {
    /// Every kind (metric labels, iteration).
    pub const ALL: [CooldownKind; 5] = [
        Self::Quota,
        Self::RateLimit,
        Self::SessionDead,
        Self::Transient,
        Self::PoolThrottle,
    ];

    /// The cooldown a failure class puts on an account; `None` for request errors.
    pub fn of(class: FailureClass) -> Option<Self> {
        match class {
            FailureClass::Quota => Some(Self::Quota),
            FailureClass::RateLimit => Some(Self::RateLimit),
            FailureClass::SessionDead => Some(Self::SessionDead),
            FailureClass::Transient => Some(Self::Transient),
            FailureClass::RequestError => None,
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// Quota exclusion when the reset is not known (router.md §3 "else 10 min").
pub const QUOTA_UNKNOWN_RESET: Duration = Duration::minutes(10);
/// Exclusion after a session_dead answer (router.md §3: 30 min, never permanent).
pub const SESSION_DEAD_COOLDOWN: Duration = Duration::minutes(30);
/// Cooldown after a transient failure (router.md §3: 30 s).
pub const TRANSIENT_COOLDOWN: Duration = Duration::seconds(30);

/// One candidate's observations: per cooldown kind its end, and the rate-limit backoff level.
#[derive(Debug, Clone, Default, PartialEq)]
struct Observed {
    ends: [Option<DateTime<Utc>>; 5],
    rate_level: u32,
}

/// The router's own observations of one lane's candidates (router.md §3): per candidate the
/// cooldown kind and end, the rate-limit backoff level. Writes the effective end (the latest of
/// its running cooldowns — a short rate limit never shortens a quota exclusion) into the lane's
/// `EngineState.cooldowns`. Candidates are the lane's `CandidateSet` indexes; an index beyond
/// `candidates` grows the table. A verdict is recorded in this lane only: the caller propagates
/// an account-scoped one to the account's other lanes with [`Observations::cool`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observations {
    slots: Vec<Observed>,
}

impl Observations {
    /// Observations for `candidates` candidates, none cooling down.
    pub fn new(candidates: usize) -> Self {
        Self {
            slots: vec![Observed::default(); candidates],
        }
    }

    fn slot(&mut self, index: usize) -> &mut Observed {
        if index >= self.slots.len() {
            self.slots.resize(index + 1, Observed::default());
        }
        &mut self.slots[index]
    }

    /// Records a failed attempt: sets the cooldown per the table (quota until `reset_at` else
    /// 10 min; rate_limit `Retry-After` else [`RATE_LIMIT_BACKOFF`] by level; session_dead
    /// 30 min; transient 30 s; request_error nothing) and returns its end (`None` for request
    /// errors). Ends are capped at now + 31 days; `jitter` in 0..=1.
    pub fn observe(
        &mut self,
        index: usize,
        verdict: &Verdict,
        now: DateTime<Utc>,
        jitter: f64,
        state: &mut EngineState,
    ) -> Option<DateTime<Utc>> {
        let kind = CooldownKind::of(verdict.class)?;
        let wait = match kind {
            CooldownKind::Quota => verdict
                .reset_at
                .filter(|t| *t > now)
                .map_or(QUOTA_UNKNOWN_RESET, |t| t - now),
            CooldownKind::RateLimit => {
                let slot = self.slot(index);
                slot.rate_level = slot.rate_level.saturating_add(1);
                let level = slot.rate_level;
                verdict
                    .retry_after
                    .unwrap_or_else(|| RATE_LIMIT_BACKOFF.delay(level, jitter))
            }
            CooldownKind::SessionDead => SESSION_DEAD_COOLDOWN,
            CooldownKind::Transient | CooldownKind::PoolThrottle => TRANSIENT_COOLDOWN,
        };
        let until = now + wait.clamp(Duration::zero(), reset_ceiling());
        self.cool(index, kind, until, state);
        Some(until)
    }

    /// A 2xx: resets the rate-limit backoff level of `index`.
    pub fn success(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index) {
            slot.rate_level = 0;
        }
    }

    /// Cools `index` down with `kind` until `until` (pool throttle, account-wide propagation
    /// from another lane). A kind's end only grows; the effective end written to `state` is the
    /// latest end of any kind.
    pub fn cool(
        &mut self,
        index: usize,
        kind: CooldownKind,
        until: DateTime<Utc>,
        state: &mut EngineState,
    ) {
        let slot = self.slot(index);
        let end = &mut slot.ends[kind.slot()];
        *end = Some(end.map_or(until, |e| e.max(until)));
        self.publish(index, state);
    }

    /// Clears a quota cooldown early (a fresh patrol snapshot shows the linked account usable,
    /// router.md §3); the other kinds' cooldowns stay.
    pub fn clear_quota(&mut self, index: usize, state: &mut EngineState) {
        if let Some(slot) = self.slots.get_mut(index) {
            slot.ends[CooldownKind::Quota.slot()] = None;
            self.publish(index, state);
        }
    }

    /// The kind of `index`'s cooldown running at `now` (the one with the latest end).
    pub fn kind(&self, index: usize, now: DateTime<Utc>) -> Option<CooldownKind> {
        let slot = self.slots.get(index)?;
        CooldownKind::ALL
            .into_iter()
            .filter_map(|k| slot.ends[k.slot()].filter(|e| *e > now).map(|e| (e, k)))
            .max_by_key(|(e, _)| *e)
            .map(|(_, k)| k)
    }

    /// The end of `index`'s cooldown running at `now` (the latest of its kinds).
    pub fn until(&self, index: usize, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let slot = self.slots.get(index)?;
        slot.ends
            .iter()
            .flatten()
            .copied()
            .filter(|e| *e > now)
            .max()
    }

    /// Writes `index`'s effective end (latest of its kinds) into the engine's cooldowns.
    fn publish(&self, index: usize, state: &mut EngineState) {
        match self.slots[index].ends.iter().flatten().max() {
            Some(end) => state.cooldowns.set(index, *end),
            None => state.cooldowns.clear(index),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// IP-level throttle

/// Window in which every account of a pool must answer a plain 429 (router.md §3: 2 s).
pub const THROTTLE_WINDOW: Duration = Duration::seconds(2);
/// Pool cooldown when no `Retry-After` was given (5 s).
pub const THROTTLE_DEFAULT: Duration = Duration::seconds(5);
/// Longest pool cooldown (10 s).
pub const THROTTLE_MAX: Duration = Duration::seconds(10);

/// Detects an IP-level throttle (router.md §3): every account of a pool answered a plain 429
/// within 2 s ⇒ a pool cooldown of the largest `Retry-After` given, else 5 s, at most 10 s.
/// A pool of one account is never taken for throttled (its 429 cannot be told from the
/// account's own limit). Firing forgets the 429s seen, so the next detection needs a full new
/// round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThrottleDetector {
    /// Per account: when it last answered a plain 429, with its Retry-After.
    last: Vec<Option<(DateTime<Utc>, Option<Duration>)>>,
}

impl ThrottleDetector {
    /// A detector over a pool of `accounts` accounts (indexes 0..accounts).
    pub fn new(accounts: usize) -> Self {
        Self {
            last: vec![None; accounts],
        }
    }

    /// Account `index` answered a plain 429 at `now`; returns the pool cooldown when that makes
    /// every account of the pool rate-limited within the last 2 s. Out-of-range indexes are
    /// ignored.
    pub fn rate_limited(
        &mut self,
        index: usize,
        retry_after: Option<Duration>,
        now: DateTime<Utc>,
    ) -> Option<Duration> {
        *self.last.get_mut(index)? = Some((now, retry_after));
        if self.last.len() < 2 {
            return None;
        }
        let since = now - THROTTLE_WINDOW;
        let mut largest: Option<Duration> = None;
        for seen in &self.last {
            let (at, ra) = (*seen)?;
            if at < since {
                return None;
            }
            largest = largest.max(ra);
        }
        self.last.iter_mut().for_each(|s| *s = None);
        Some(
            largest
                .unwrap_or(THROTTLE_DEFAULT)
                .clamp(Duration::zero(), THROTTLE_MAX),
        )
    }

    /// Account `index` answered 2xx: its 429 no longer counts.
    pub fn success(&mut self, index: usize) {
        if let Some(s) = self.last.get_mut(index) {
            *s = None;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The all-excluded answer

/// One exclusion as the all-excluded answer sees it.
#[derive(Clone, Copy, Debug)]
pub struct ExcludedEnd {
    /// Excluded for quota (patrol-reported exhaustion or a router quota cooldown).
    pub quota: bool,
    /// When the exclusion ends, if known.
    pub until: Option<DateTime<Utc>>,
}

/// The answer when every account of every leg is excluded (router.md §4): 429
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

/// The answer when every account of every leg is excluded (router.md §4):
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
                t.to_rfc3339(),
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
    /// "resets_in_seconds"?}}` (router.md §4; the reset fields only for quota exhaustion).
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
mod tests;
