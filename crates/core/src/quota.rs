//! Codex usage payload (`wham/usage`, fetched through CPA `api-call`) -> [`ProbeOutcome`].
//! Owns window classification by duration, plan normalisation and the classification of failed
//! probes; numbers and times are read by [`super::codex_json`]. Pure: no I/O, time is passed in.
//! Rules: docs/rules/patrol.md §3, docs/rules/cpa.md §4.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::codex_json::{self, float_to_i64, number_or_percent, rounded_integer};
use super::reset_credits::{CreditHint, read_hint_object};

/// What a rate-limit window measures, judged by `limit_window_seconds` (docs/rules/patrol.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum WindowKind {
    /// 18000 s.
    FiveHour,
    /// 604800 s.
    Weekly,
    /// 2592000 s or 2628000 s (30 days / one month).
    Monthly,
    /// Any other duration.
    Other,
}

/// Group name of the main rate limit (`rate_limit`); the only group decisions use.
pub const MAIN_GROUP: &str = "main";
/// Group name of `code_review_rate_limit`.
pub const CODE_REVIEW_GROUP: &str = "codeReview";

/// One rate-limit window of a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct QuotaWindow {
    /// Stable id `"<group>:<slot>"`, e.g. `"main:primary"`, `"codeReview:primary"`,
    /// `"additional:GPT-5.3-Codex-Spark:primary"`.
    pub id: String,
    /// Human label, e.g. `"5-hour"`, `"weekly"`, `"GPT-5.3-Codex-Spark 5-hour"`.
    pub label: String,
    /// `"main"`, `"codeReview"` or `"additional:<limit_name|metered_feature>"`.
    pub group: String,
    /// Classified by duration.
    pub kind: WindowKind,
    /// Used share in percent, as reported (may exceed 100). `None` when missing and not reached.
    pub used_percent: Option<f64>,
    /// Window length in seconds, as reported.
    pub limit_window_seconds: Option<i64>,
    /// When the window resets (UTC), rounded to the minute when derived from
    /// `reset_after_seconds` so that the window identity is stable between probes.
    pub reset_at: Option<DateTime<Utc>>,
    /// Seconds until reset as reported (negative values are dropped).
    pub reset_after_seconds: Option<i64>,
}

/// `credits` object of the usage payload.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Credits {
    /// `has_credits` (bool or `"true"`/`"false"`): overage can be paid from credits.
    pub has_credits: Option<bool>,
    /// `unlimited` (bool or `"true"`/`"false"`).
    pub unlimited: Option<bool>,
    /// Balance as text (the payload sends a string or a number).
    pub balance: Option<String>,
}

/// The parsed content of a successful usage payload.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    /// Normalised plan (see [`normalize_plan`]); `None` when absent.
    pub plan_type: Option<String>,
    /// Every window of every group (main, code review, additional).
    pub windows: Vec<QuotaWindow>,
    /// `credits` object; `None` when absent, `null` or not an object.
    pub credits: Option<Credits>,
    /// Main group said `limit_reached == true` or `allowed == false`.
    pub main_limit_reached: bool,
    /// `rate_limit_reset_credits` (banked reset credits, docs/rules/cpa.md §10); `None` when
    /// absent: unknown, not zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_credits: Option<CreditHint>,
}

impl UsageReport {
    /// Windows of the main group only.
    pub fn main_windows(&self) -> impl Iterator<Item = &QuotaWindow> {
        self.windows.iter().filter(|w| w.group == MAIN_GROUP)
    }
}

/// Result of one probe, classified (docs/rules/patrol.md §3 "Status").
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeOutcome {
    /// 2xx, parsable, at least one main-group window.
    Usage(UsageReport),
    /// 2xx, parsable, but no main-group window: not evidence of anything.
    Inconclusive(UsageReport),
    /// 401: credential invalid or revoked.
    Invalid { message: String },
    /// 402. `deactivated` when the body says the workspace/account is deactivated.
    Payment { deactivated: bool, message: String },
    /// 403 with an HTML body (Cloudflare or another edge): never treated as invalid.
    Blocked { message: String },
    /// 429 from the upstream.
    RateLimited { message: String },
    /// Any other non-2xx status (5xx, 403 JSON, 404, ...).
    HttpError { status: u16, message: String },
    /// 2xx whose body is not a usage payload; `message` holds the first 200 characters.
    Unparsable { status: u16, message: String },
}

impl ProbeOutcome {
    /// Whether a retry may help (429 and 5xx; docs/rules/patrol.md §1 `retryCount`).
    pub fn is_transient(&self) -> bool {
        match self {
            ProbeOutcome::RateLimited { .. } => true,
            ProbeOutcome::HttpError { status, .. } => *status >= 500,
            _ => false,
        }
    }

    /// The upstream HTTP status this outcome came from.
    pub fn status_code(&self) -> u16 {
        match self {
            ProbeOutcome::Usage(_) | ProbeOutcome::Inconclusive(_) => 200,
            ProbeOutcome::Invalid { .. } => 401,
            ProbeOutcome::Payment { .. } => 402,
            ProbeOutcome::Blocked { .. } => 403,
            ProbeOutcome::RateLimited { .. } => 429,
            ProbeOutcome::HttpError { status, .. } | ProbeOutcome::Unparsable { status, .. } => {
                *status
            }
        }
    }
}

/// Classifies an upstream answer (status + body as returned inside CPA's `api-call` envelope,
/// already decoded from its JSON string; CPA v7.1.19 api-call, docs/rules/cpa.md §3).
///
/// Rules (docs/rules/patrol.md §3 "Status"): 2xx + usage payload with a main window ⇒ [`ProbeOutcome::Usage`];
/// 2xx usage payload without a main window ⇒ [`ProbeOutcome::Inconclusive`]; any other 2xx body
/// (not JSON, not an object, no usage field, `rate_limit` not an object, empty) ⇒
/// [`ProbeOutcome::Unparsable`]; 401 ⇒ `Invalid`; 402 ⇒ `Payment` (`deactivated` when the body
/// says the workspace/account was deactivated); 403 with an HTML/Cloudflare body ⇒ `Blocked`;
/// 429 ⇒ `RateLimited`; anything else ⇒ `HttpError`. Messages are a short text, `": "` and the
/// first 200 characters of the trimmed body (whitespace runs shown as one space).
///
/// `probed_at` anchors `reset_after_seconds`. Never panics, whatever the body.
pub fn classify_probe(status: u16, body: &str, probed_at: DateTime<Utc>) -> ProbeOutcome {
    let body = body.strip_prefix('\u{feff}').unwrap_or(body);
    match status {
        200..=299 => classify_success(status, body, probed_at),
        401 => ProbeOutcome::Invalid {
            message: describe("credential rejected by the upstream (HTTP 401)", body),
        },
        402 => {
            let deactivated = mentions_deactivation(body);
            let text = if deactivated {
                "workspace or account deactivated (HTTP 402)"
            } else {
                "payment required (HTTP 402)"
            };
            ProbeOutcome::Payment {
                deactivated,
                message: describe(text, body),
            }
        }
        403 if looks_like_edge_page(body) => {
            let text = match html_title(body) {
                Some(title) => {
                    format!("blocked by an edge HTML page (HTTP 403, title \"{title}\")")
                }
                None => "blocked by an edge HTML page (HTTP 403)".to_owned(),
            };
            ProbeOutcome::Blocked {
                message: describe(&text, body),
            }
        }
        429 => ProbeOutcome::RateLimited {
            message: describe("rate limited by the upstream (HTTP 429)", body),
        },
        _ => ProbeOutcome::HttpError {
            status,
            message: describe(&format!("upstream answered HTTP {status}"), body),
        },
    }
}

/// Normalises a `plan_type` string: trims, lowercases, maps `prolite`/`pro_lite`/`pro-lite`/
/// `pro lite` to `prolite`, `education` to `edu` (and `free-workspace`/`free workspace` to
/// `free_workspace`); every other value, known ([`KNOWN_PLANS`]) or not, is kept lowercased
/// (docs/rules/patrol.md §3 `plan_type`).
pub fn normalize_plan(raw: &str) -> String {
    let lower = raw.trim().to_lowercase();
    let key: String = lower
        .chars()
        .map(|c| if c == '-' || c == ' ' { '_' } else { c })
        .collect();
    match key.as_str() {
        "prolite" | "pro_lite" => "prolite".to_owned(),
        "education" => "edu".to_owned(),
        "free_workspace" => "free_workspace".to_owned(),
        _ => lower,
    }
}

/// Plans [`normalize_plan`] knows (docs/rules/patrol.md §3; the Codex backend model in docs/rules/cpa.md §4.2 has more,
/// which are kept as opaque lowercased strings).
pub const KNOWN_PLANS: &[&str] = &[
    "free",
    "plus",
    "pro",
    "prolite",
    "team",
    "business",
    "enterprise",
    "edu",
    "go",
    "guest",
    "free_workspace",
];

/// Free-like plans are judged on the weekly (or monthly) window only: `free`, `free_workspace`,
/// `go`, `guest` (docs/rules/patrol.md §3).
pub fn is_free_like(plan: Option<&str>) -> bool {
    matches!(plan, Some("free" | "free_workspace" | "go" | "guest"))
}

/// Five-hour window length in seconds (docs/rules/cpa.md §4.3).
pub const FIVE_HOUR_SECONDS: i64 = 18_000;
/// Weekly window length in seconds (docs/rules/cpa.md §4.3).
pub const WEEKLY_SECONDS: i64 = 604_800;
/// The two 30-day window lengths seen in the wild, in seconds (docs/rules/cpa.md §4.3).
pub const MONTHLY_SECONDS: [i64; 2] = [2_592_000, 2_628_000];

/// Classifies a window by its `limit_window_seconds` (docs/rules/patrol.md §3): 18000 ⇒ five-hour,
/// 604800 ⇒ weekly, 2592000 / 2628000 ⇒ monthly, anything else ⇒ other.
pub fn kind_for_duration(limit_window_seconds: i64) -> WindowKind {
    match limit_window_seconds {
        FIVE_HOUR_SECONDS => WindowKind::FiveHour,
        WEEKLY_SECONDS => WindowKind::Weekly,
        s if MONTHLY_SECONDS.contains(&s) => WindowKind::Monthly,
        _ => WindowKind::Other,
    }
}

/// Reset hint of an upstream 429 `usage_limit_reached` body (docs/rules/cpa.md §4.4):
/// `error.resets_at` (unix seconds, or milliseconds when > 10^11) when > 0, else
/// `probed_at + error.resets_in_seconds` rounded to the minute. Also reads the fields at the top
/// level (and in `response.error`) and in camelCase, where [`codex_json::reset_fields`] looks.
/// `None` when the body carries no usable hint.
pub fn usage_limit_resets_at(body: &str, probed_at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    codex_json::reset_fields(&value).find_map(|fields| {
        let at = fields.resets_at.and_then(number_or_percent);
        let after = fields.resets_in_seconds.and_then(rounded_integer);
        resolve_reset(at, after, probed_at)
    })
}

// ---------------------------------------------------------------------------------------------
// Field spellings: snake_case as sent by wham/usage, camelCase as some proxies re-serialise it
// (the CodexPatrol panel's camelCase fields never bound; docs/decisions.md §1).

const PLAN_TYPE: &[&str] = &["plan_type", "planType"];
const RATE_LIMIT: &[&str] = &["rate_limit", "rateLimit"];
const CODE_REVIEW_RATE_LIMIT: &[&str] = &["code_review_rate_limit", "codeReviewRateLimit"];
const ADDITIONAL_RATE_LIMITS: &[&str] = &["additional_rate_limits", "additionalRateLimits"];
const CREDITS: &[&str] = &["credits"];
const RATE_LIMIT_REACHED_TYPE: &[&str] = &["rate_limit_reached_type", "rateLimitReachedType"];
const ALLOWED: &[&str] = &["allowed"];
const LIMIT_REACHED: &[&str] = &["limit_reached", "limitReached"];
const PRIMARY_WINDOW: &[&str] = &["primary_window", "primaryWindow"];
const SECONDARY_WINDOW: &[&str] = &["secondary_window", "secondaryWindow"];
const USED_PERCENT: &[&str] = &["used_percent", "usedPercent"];
const LIMIT_WINDOW_SECONDS: &[&str] = &["limit_window_seconds", "limitWindowSeconds"];
const RESET_AT: &[&str] = &["reset_at", "resetAt"];
const RESET_AFTER_SECONDS: &[&str] = &["reset_after_seconds", "resetAfterSeconds"];
const LIMIT_NAME: &[&str] = &["limit_name", "limitName"];
const METERED_FEATURE: &[&str] = &["metered_feature", "meteredFeature"];
const HAS_CREDITS: &[&str] = &["has_credits", "hasCredits"];
const UNLIMITED: &[&str] = &["unlimited"];
const BALANCE: &[&str] = &["balance"];

/// Top-level keys that make an object a usage payload (any of them, even `null`).
const USAGE_KEYS: &[&[&str]] = &[
    PLAN_TYPE,
    RATE_LIMIT,
    CODE_REVIEW_RATE_LIMIT,
    ADDITIONAL_RATE_LIMITS,
    CREDITS,
    RATE_LIMIT_REACHED_TYPE,
];

/// Longest body excerpt put into a message, in characters (docs/rules/patrol.md §3).
const SNIPPET_CHARS: usize = 200;

#[derive(Clone, Copy)]
enum Slot {
    Primary,
    Secondary,
}

impl Slot {
    fn as_str(self) -> &'static str {
        match self {
            Slot::Primary => "primary",
            Slot::Secondary => "secondary",
        }
    }

    fn aliases(self) -> &'static [&'static str] {
        match self {
            Slot::Primary => PRIMARY_WINDOW,
            Slot::Secondary => SECONDARY_WINDOW,
        }
    }

    /// Fallback when the duration is missing: primary = five-hour, secondary = weekly.
    fn fallback_kind(self) -> WindowKind {
        match self {
            Slot::Primary => WindowKind::FiveHour,
            Slot::Secondary => WindowKind::Weekly,
        }
    }
}

/// One rate-limit group being parsed: its id and the label prefix of its windows.
struct Group<'a> {
    id: &'a str,
    label_prefix: Option<&'a str>,
}

fn classify_success(status: u16, body: &str, probed_at: DateTime<Utc>) -> ProbeOutcome {
    let unparsable = |text: &str| ProbeOutcome::Unparsable {
        status,
        message: describe(text, body),
    };
    if body.trim().is_empty() {
        return unparsable("empty response body");
    }
    let value: Value = match serde_json::from_str(body) {
        Ok(value) => value,
        Err(_) => return unparsable("response is not JSON"),
    };
    let Value::Object(obj) = &value else {
        return unparsable(&format!(
            "response is a JSON {}, not a usage object",
            json_type(&value)
        ));
    };
    match parse_usage(obj, probed_at) {
        Ok(report) if report.main_windows().next().is_some() => ProbeOutcome::Usage(report),
        Ok(report) => ProbeOutcome::Inconclusive(report),
        Err(why) => unparsable(why),
    }
}

/// The usage report of a `wham/usage`-shaped object read at `at`, as a probe would read it;
/// `None` when it is not one. For readers of the same windows from other sources (passive
/// header evidence, `crate::passive`).
pub fn report_from_object(obj: &Map<String, Value>, at: DateTime<Utc>) -> Option<UsageReport> {
    parse_usage(obj, at).ok()
}

/// Reads a usage object; `Err` says why it is not one.
fn parse_usage(
    obj: &Map<String, Value>,
    probed_at: DateTime<Utc>,
) -> Result<UsageReport, &'static str> {
    let recognised = USAGE_KEYS
        .iter()
        .any(|names| names.iter().any(|n| obj.contains_key(*n)));
    if !recognised {
        return Err("response JSON has no usage fields");
    }
    let main = field(obj, RATE_LIMIT);
    if main.is_some_and(|v| !v.is_object()) {
        return Err("response JSON has a rate_limit that is not an object");
    }

    let mut report = UsageReport {
        plan_type: field(obj, PLAN_TYPE)
            .and_then(Value::as_str)
            .map(normalize_plan)
            .filter(|p| !p.is_empty()),
        credits: field(obj, CREDITS)
            .and_then(Value::as_object)
            .map(parse_credits),
        reset_credits: read_hint_object(obj),
        ..UsageReport::default()
    };

    if let Some(main) = main {
        let group = Group {
            id: MAIN_GROUP,
            label_prefix: None,
        };
        report.main_limit_reached = parse_group(main, &group, probed_at, &mut report.windows);
    }
    if let Some(review) = field(obj, CODE_REVIEW_RATE_LIMIT) {
        let group = Group {
            id: CODE_REVIEW_GROUP,
            label_prefix: Some("code review"),
        };
        parse_group(review, &group, probed_at, &mut report.windows);
    }
    if let Some(items) = field(obj, ADDITIONAL_RATE_LIMITS).and_then(Value::as_array) {
        parse_additional(items, probed_at, &mut report.windows);
    }
    Ok(report)
}

/// `additional_rate_limits[]`: group `additional:<limit_name | metered_feature | index>`.
fn parse_additional(items: &[Value], probed_at: DateTime<Utc>, out: &mut Vec<QuotaWindow>) {
    let mut used_ids: Vec<String> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let Some(obj) = item.as_object() else {
            continue;
        };
        let name = [LIMIT_NAME, METERED_FEATURE]
            .iter()
            .filter_map(|names| field(obj, names).and_then(Value::as_str))
            .map(str::trim)
            .find(|s| !s.is_empty());
        let label_prefix = name.map_or_else(|| format!("additional {index}"), str::to_owned);
        let mut id = format!(
            "additional:{}",
            name.map_or_else(|| index.to_string(), str::to_owned)
        );
        if used_ids.contains(&id) {
            // Two items with the same name: keep both, with distinct window ids.
            id = format!("{id}#{index}");
        }
        // Some payloads may inline the windows instead of nesting a `rate_limit` object.
        let limit = field(obj, RATE_LIMIT).unwrap_or(item);
        let group = Group {
            id: &id,
            label_prefix: Some(&label_prefix),
        };
        parse_group(limit, &group, probed_at, out);
        used_ids.push(id);
    }
}

/// Appends the windows of one group; returns whether the group says its limit is reached
/// (`limit_reached == true` or `allowed == false`).
fn parse_group(
    value: &Value,
    group: &Group<'_>,
    probed_at: DateTime<Utc>,
    out: &mut Vec<QuotaWindow>,
) -> bool {
    let Some(obj) = value.as_object() else {
        return false;
    };
    let limit_reached = field(obj, LIMIT_REACHED).and_then(boolean) == Some(true);
    let not_allowed = field(obj, ALLOWED).and_then(boolean) == Some(false);
    let reached = limit_reached || not_allowed;
    for slot in [Slot::Primary, Slot::Secondary] {
        let window = field(obj, slot.aliases())
            .and_then(Value::as_object)
            .and_then(|w| parse_window(w, slot, group, reached, probed_at));
        out.extend(window);
    }
    reached
}

fn parse_window(
    obj: &Map<String, Value>,
    slot: Slot,
    group: &Group<'_>,
    group_reached: bool,
    probed_at: DateTime<Utc>,
) -> Option<QuotaWindow> {
    let used = field(obj, USED_PERCENT).and_then(number_or_percent);
    // A zero or negative duration carries no information: treat it as missing.
    let seconds = field(obj, LIMIT_WINDOW_SECONDS)
        .and_then(rounded_integer)
        .filter(|s| *s > 0);
    let reset_at = field(obj, RESET_AT).and_then(number_or_percent);
    let reset_after = field(obj, RESET_AFTER_SECONDS).and_then(rounded_integer);
    if used.is_none() && seconds.is_none() && reset_at.is_none() && reset_after.is_none() {
        // `{}` or only unreadable fields: not a window.
        return None;
    }
    let kind = seconds.map_or_else(|| slot.fallback_kind(), kind_for_duration);
    let kind_label = match (kind, seconds) {
        (WindowKind::FiveHour, _) => "5-hour".to_owned(),
        (WindowKind::Weekly, _) => "weekly".to_owned(),
        (WindowKind::Monthly, _) => "monthly".to_owned(),
        (WindowKind::Other, Some(s)) => format!("{s}s window"),
        (WindowKind::Other, None) => "window".to_owned(),
    };
    Some(QuotaWindow {
        id: format!("{}:{}", group.id, slot.as_str()),
        label: match group.label_prefix {
            Some(prefix) => format!("{prefix} {kind_label}"),
            None => kind_label,
        },
        group: group.id.to_owned(),
        kind,
        used_percent: used.or(group_reached.then_some(100.0)),
        limit_window_seconds: seconds,
        reset_at: resolve_reset(reset_at, reset_after, probed_at),
        reset_after_seconds: reset_after.filter(|s| *s >= 0),
    })
}

/// `reset_at` (unix seconds, milliseconds when > 10^11) when > 0, else `probed_at +
/// reset_after` rounded to the nearest minute; a negative `reset_after` is unknown.
fn resolve_reset(
    reset_at: Option<f64>,
    reset_after: Option<i64>,
    probed_at: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    if let Some(at) = reset_at.filter(|at| *at > 0.0) {
        let seconds = if codex_json::is_unix_millis(at) {
            at / 1000.0
        } else {
            at
        };
        return float_to_i64(seconds.floor()).and_then(|s| DateTime::from_timestamp(s, 0));
    }
    let after = reset_after.filter(|s| *s >= 0)?;
    let at = probed_at.checked_add_signed(TimeDelta::try_seconds(after)?)?;
    let minutes = at
        .timestamp_millis()
        .checked_add(30_000)?
        .div_euclid(60_000);
    DateTime::from_timestamp(minutes.checked_mul(60)?, 0)
}

fn parse_credits(obj: &Map<String, Value>) -> Credits {
    Credits {
        has_credits: field(obj, HAS_CREDITS).and_then(boolean),
        unlimited: field(obj, UNLIMITED).and_then(boolean),
        balance: field(obj, BALANCE).and_then(|v| match v {
            Value::String(s) => Some(s.trim().to_owned()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Tolerant readers (numbers: [`codex_json`]).

/// The first non-null value among the spellings of a field.
fn field<'a>(obj: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names
        .iter()
        .filter_map(|name| obj.get(*name))
        .find(|v| !v.is_null())
}

/// A bool from a JSON bool, `"true"`/`"false"` (any case) or `1`/`0`.
fn boolean(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::String(s) => {
            let s = s.trim();
            if s.eq_ignore_ascii_case("true") || s == "1" {
                Some(true)
            } else if s.eq_ignore_ascii_case("false") || s == "0" {
                Some(false)
            } else {
                None
            }
        }
        Value::Number(n) => match n.as_u64() {
            Some(1) => Some(true),
            Some(0) => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

// ---------------------------------------------------------------------------------------------
// Error bodies.

/// `text` plus [`snippet`] of the body, or `text` alone for an empty body.
fn describe(text: &str, body: &str) -> String {
    let snippet = snippet(body);
    if snippet.is_empty() {
        text.to_owned()
    } else {
        format!("{text}: {snippet}")
    }
}

/// The first 200 characters (not bytes) of the trimmed body, each run of whitespace or control
/// characters shown as one space so that a pretty-printed or HTML body stays readable in a log line.
fn snippet(body: &str) -> String {
    let mut out = String::new();
    let mut count = 0;
    let mut in_space = false;
    for c in body.trim().chars() {
        if count == SNIPPET_CHARS {
            break;
        }
        if c.is_whitespace() || c.is_control() {
            if in_space {
                continue;
            }
            in_space = true;
            out.push(' ');
        } else {
            in_space = false;
            out.push(c);
        }
        count += 1;
    }
    out
}

/// The 402 body says the workspace/account was deactivated (`deactivated_workspace`,
/// `account_deactivated`, "workspace has been deactivated", ...), any case.
fn mentions_deactivation(body: &str) -> bool {
    let lower = body.to_ascii_lowercase();
    lower.contains("deactivat")
        && ["workspace", "account", "organization", "organisation"]
            .iter()
            .any(|w| lower.contains(w))
}

/// A 403 from an edge rather than the API: HTML, or a Cloudflare mention.
fn looks_like_edge_page(body: &str) -> bool {
    if body.trim_start().starts_with('<') {
        return true;
    }
    let lower = body.to_ascii_lowercase();
    lower.contains("<html") || lower.contains("<!doctype") || lower.contains("cloudflare")
}

/// The `<title>` of an HTML page, whitespace collapsed, at most 80 characters.
fn html_title(body: &str) -> Option<String> {
    // ASCII lowercasing keeps byte offsets, so indices found in `lower` slice `body` safely.
    let lower = body.to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower.get(open..)?.find('>')? + 1;
    let end = start + lower.get(start..)?.find("</title")?;
    let title: String = body
        .get(start..end)?
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(80)
        .collect();
    (!title.is_empty()).then_some(title)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 2026-05-26T12:00:00Z: the probe time the upstream fixtures are written around.
    const PROBED: i64 = 1_779_796_800;

    const PLUS: &str = include_str!("../../../fixtures/upstream/wham-usage__plus.json");
    const PRO: &str = include_str!("../../../fixtures/upstream/wham-usage__pro.json");
    const FREE_WEEKLY: &str =
        include_str!("../../../fixtures/upstream/wham-usage__free-weekly-primary.json");
    const FREE_MONTHLY: &str =
        include_str!("../../../fixtures/upstream/wham-usage__free-monthly-primary.json");
    const MONTHLY_WEEKLY: &str = include_str!(
        "../../../fixtures/upstream/wham-usage__monthly-primary-weekly-secondary.json"
    );
    const TEAM: &str = include_str!("../../../fixtures/upstream/wham-usage__team.json");
    const BUSINESS: &str = include_str!("../../../fixtures/upstream/wham-usage__business.json");
    const LEGACY: &str =
        include_str!("../../../fixtures/upstream/wham-usage__legacy-no-window-seconds.json");
    const NUMERIC_STRINGS: &str =
        include_str!("../../../fixtures/upstream/wham-usage__numeric-strings.json");
    const FLOATS: &str = include_str!("../../../fixtures/upstream/wham-usage__floats.json");
    const OVER_100: &str =
        include_str!("../../../fixtures/upstream/wham-usage__used-over-100.json");
    const REACHED_NO_PERCENT: &str = include_str!(
        "../../../fixtures/upstream/wham-usage__limit-reached-without-used-percent.json"
    );
    const ALLOWED_FALSE: &str =
        include_str!("../../../fixtures/upstream/wham-usage__allowed-false.json");
    const RESET_MS: &str =
        include_str!("../../../fixtures/upstream/wham-usage__reset-at-milliseconds.json");
    const RESET_AFTER_ONLY: &str =
        include_str!("../../../fixtures/upstream/wham-usage__reset-after-only.json");
    const NEGATIVE_RESET_AFTER: &str =
        include_str!("../../../fixtures/upstream/wham-usage__negative-reset-after.json");
    const NULL_RATE_LIMIT: &str =
        include_str!("../../../fixtures/upstream/wham-usage__null-rate-limit.json");
    const MISSING_WINDOWS: &str =
        include_str!("../../../fixtures/upstream/wham-usage__missing-windows.json");
    const REVIEW_AND_ADDITIONAL: &str =
        include_str!("../../../fixtures/upstream/wham-usage__code-review-and-additional.json");
    const CREDITS_NUMBER: &str =
        include_str!("../../../fixtures/upstream/wham-usage__credits-balance-number.json");
    const CREDITS_STRING: &str =
        include_str!("../../../fixtures/upstream/wham-usage__credits-balance-string.json");
    const CAMEL_CASE: &str = include_str!("../../../fixtures/upstream/wham-usage__camel-case.json");
    const BODY_401: &str = include_str!("../../../fixtures/upstream/wham-usage__401.json");
    const BODY_402: &str = include_str!("../../../fixtures/upstream/wham-usage__402.json");
    const BODY_402_DEACTIVATED: &str =
        include_str!("../../../fixtures/upstream/wham-usage__402-deactivated-workspace.json");
    const BODY_403_CLOUDFLARE: &str =
        include_str!("../../../fixtures/upstream/wham-usage__403-cloudflare.html");
    const BODY_403_JSON: &str =
        include_str!("../../../fixtures/upstream/wham-usage__403-json.json");
    const BODY_429: &str =
        include_str!("../../../fixtures/upstream/wham-usage__429-usage-limit-reached.json");
    const BODY_503: &str =
        include_str!("../../../fixtures/upstream/wham-usage__503-upstream-unavailable.txt");
    const GARBAGE: &str = include_str!("../../../fixtures/upstream/wham-usage__garbage.txt");
    const EMPTY: &str = include_str!("../../../fixtures/upstream/wham-usage__empty.txt");
    const JSON_ARRAY: &str = include_str!("../../../fixtures/upstream/wham-usage__json-array.json");
    const ERROR_OBJECT_200: &str =
        include_str!("../../../fixtures/upstream/wham-usage__200-error-object.json");

    const ENVELOPE_OK_PLUS: &str = include_str!("../../../fixtures/cpa/api-call__ok-plus.json");
    const ENVELOPE_401: &str = include_str!("../../../fixtures/cpa/api-call__401.json");
    const ENVELOPE_403_HTML: &str = include_str!("../../../fixtures/cpa/api-call__403-html.json");
    const CPA_502: &str = include_str!("../../../fixtures/cpa/api-call__502-request-failed.json");

    const ALL_UPSTREAM: &[&str] = &[
        PLUS,
        PRO,
        FREE_WEEKLY,
        FREE_MONTHLY,
        MONTHLY_WEEKLY,
        TEAM,
        BUSINESS,
        LEGACY,
        NUMERIC_STRINGS,
        FLOATS,
        OVER_100,
        REACHED_NO_PERCENT,
        ALLOWED_FALSE,
        RESET_MS,
        RESET_AFTER_ONLY,
        NEGATIVE_RESET_AFTER,
        NULL_RATE_LIMIT,
        MISSING_WINDOWS,
        REVIEW_AND_ADDITIONAL,
        CREDITS_NUMBER,
        CREDITS_STRING,
        CAMEL_CASE,
        BODY_401,
        BODY_402,
        BODY_402_DEACTIVATED,
        BODY_403_CLOUDFLARE,
        BODY_403_JSON,
        BODY_429,
        BODY_503,
        GARBAGE,
        EMPTY,
        JSON_ARRAY,
        ERROR_OBJECT_200,
    ];

    fn ts(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).expect("test timestamp in range")
    }

    fn probed_at() -> DateTime<Utc> {
        ts(PROBED)
    }

    fn usage(body: &str) -> UsageReport {
        match classify_probe(200, body, probed_at()) {
            ProbeOutcome::Usage(report) => report,
            other => panic!("expected Usage, got {other:?}"),
        }
    }

    fn inconclusive(body: &str) -> UsageReport {
        match classify_probe(200, body, probed_at()) {
            ProbeOutcome::Inconclusive(report) => report,
            other => panic!("expected Inconclusive, got {other:?}"),
        }
    }

    /// Expected window; the group is the id without its `:primary` / `:secondary` slot.
    fn win(
        id: &str,
        label: &str,
        kind: WindowKind,
        used_percent: Option<f64>,
        limit_window_seconds: Option<i64>,
        reset_at: Option<i64>,
        reset_after_seconds: Option<i64>,
    ) -> QuotaWindow {
        let group = id.rsplit_once(':').map_or(id, |(group, _)| group);
        QuotaWindow {
            id: id.to_owned(),
            label: label.to_owned(),
            group: group.to_owned(),
            kind,
            used_percent,
            limit_window_seconds,
            reset_at: reset_at.map(ts),
            reset_after_seconds,
        }
    }

    fn credits(has_credits: bool, unlimited: bool, balance: &str) -> Option<Credits> {
        Some(Credits {
            has_credits: Some(has_credits),
            unlimited: Some(unlimited),
            balance: Some(balance.to_owned()),
        })
    }

    fn plus_windows() -> Vec<QuotaWindow> {
        vec![
            win(
                "main:primary",
                "5-hour",
                WindowKind::FiveHour,
                Some(37.0),
                Some(18000),
                Some(1_779_807_600),
                Some(10800),
            ),
            win(
                "main:secondary",
                "weekly",
                WindowKind::Weekly,
                Some(64.0),
                Some(604800),
                Some(1_780_110_480),
                Some(313680),
            ),
        ]
    }

    // ---- 2xx usage payloads -----------------------------------------------------------------

    #[test]
    fn the_reset_credit_hint_is_read_and_absent_means_unknown() {
        // docs/rules/cpa.md §10: `rate_limit_reset_credits` in the usage body.
        let body = include_str!("../../../fixtures/upstream/wham-usage__reset-credits.json");
        let report = usage(body);
        assert_eq!(
            report.reset_credits,
            Some(crate::reset_credits::CreditHint {
                available: Some(2),
                applicable: Some(1),
            })
        );
        assert!(report.main_limit_reached);
        assert_eq!(
            usage(PLUS).reset_credits,
            None,
            "absent is unknown, not zero"
        );
    }

    #[test]
    fn plus_payload_has_five_hour_primary_and_weekly_secondary() {
        let report = usage(PLUS);
        assert_eq!(
            report,
            UsageReport {
                plan_type: Some("plus".into()),
                windows: plus_windows(),
                credits: credits(false, false, "0"),
                main_limit_reached: false,
                reset_credits: None,
            }
        );
        assert!(!is_free_like(report.plan_type.as_deref()));
    }

    #[test]
    fn pro_payload_keeps_code_review_window_out_of_the_main_group() {
        let report = usage(PRO);
        assert_eq!(report.plan_type.as_deref(), Some("pro"));
        assert_eq!(
            report.windows,
            vec![
                win(
                    "main:primary",
                    "5-hour",
                    WindowKind::FiveHour,
                    Some(8.0),
                    Some(18000),
                    Some(1_779_800_400),
                    Some(3600)
                ),
                win(
                    "main:secondary",
                    "weekly",
                    WindowKind::Weekly,
                    Some(21.0),
                    Some(604800),
                    Some(1_780_296_800),
                    Some(500000)
                ),
                win(
                    "codeReview:primary",
                    "code review weekly",
                    WindowKind::Weekly,
                    Some(0.0),
                    Some(604800),
                    Some(1_780_401_600),
                    Some(604800)
                ),
            ]
        );
        assert_eq!(report.main_windows().count(), 2);
        assert_eq!(report.credits, credits(false, false, "0"));
        assert!(!report.main_limit_reached);
    }

    #[test]
    fn free_weekly_window_in_primary_slot_is_weekly() {
        let report = usage(FREE_WEEKLY);
        assert_eq!(report.plan_type.as_deref(), Some("free"));
        assert!(is_free_like(report.plan_type.as_deref()));
        assert_eq!(
            report.windows,
            vec![win(
                "main:primary",
                "weekly",
                WindowKind::Weekly,
                Some(80.0),
                Some(604800),
                Some(1_780_142_400),
                Some(345600)
            )]
        );
        assert_eq!(report.credits, credits(false, false, "0"));
        assert!(!report.main_limit_reached);
    }

    #[test]
    fn free_thirty_day_window_in_primary_slot_is_monthly() {
        let report = usage(FREE_MONTHLY);
        assert_eq!(report.plan_type.as_deref(), Some("free"));
        assert_eq!(
            report.windows,
            vec![win(
                "main:primary",
                "monthly",
                WindowKind::Monthly,
                Some(42.0),
                Some(2_592_000),
                Some(1_781_092_800),
                Some(1_296_000)
            )]
        );
        assert_eq!(report.credits, None, "credits: null is no credits object");
    }

    #[test]
    fn thirty_day_primary_with_weekly_secondary_is_classified_by_duration_not_slot() {
        let report = usage(MONTHLY_WEEKLY);
        assert_eq!(report.plan_type.as_deref(), Some("go"));
        assert!(is_free_like(report.plan_type.as_deref()));
        assert_eq!(
            report.windows,
            vec![
                win(
                    "main:primary",
                    "monthly",
                    WindowKind::Monthly,
                    Some(15.0),
                    Some(2_628_000),
                    Some(1_781_796_800),
                    Some(2_000_000)
                ),
                win(
                    "main:secondary",
                    "weekly",
                    WindowKind::Weekly,
                    Some(55.0),
                    Some(604800),
                    Some(1_780_196_800),
                    Some(400000)
                ),
            ]
        );
        assert_eq!(report.credits, None);
    }

    #[test]
    fn team_payload_keeps_a_five_hour_window_over_threshold_as_reported() {
        let report = usage(TEAM);
        assert_eq!(
            report,
            UsageReport {
                plan_type: Some("team".into()),
                windows: vec![
                    win(
                        "main:primary",
                        "5-hour",
                        WindowKind::FiveHour,
                        Some(96.0),
                        Some(18000),
                        Some(1_779_798_600),
                        Some(1800)
                    ),
                    win(
                        "main:secondary",
                        "weekly",
                        WindowKind::Weekly,
                        Some(47.0),
                        Some(604800),
                        Some(1_780_056_000),
                        Some(259200)
                    ),
                ],
                credits: credits(false, false, "0"),
                main_limit_reached: false,
                reset_credits: None,
            }
        );
    }

    #[test]
    fn business_plan_is_lowercased_and_its_credits_are_kept() {
        let report = usage(BUSINESS);
        assert_eq!(
            report,
            UsageReport {
                plan_type: Some("business".into()),
                windows: vec![
                    win(
                        "main:primary",
                        "5-hour",
                        WindowKind::FiveHour,
                        Some(3.0),
                        Some(18000),
                        Some(1_779_813_000),
                        Some(16200)
                    ),
                    win(
                        "main:secondary",
                        "weekly",
                        WindowKind::Weekly,
                        Some(99.0),
                        Some(604800),
                        Some(1_779_883_200),
                        Some(86400)
                    ),
                ],
                credits: credits(true, false, "480"),
                main_limit_reached: false,
                reset_credits: None,
            }
        );
    }

    #[test]
    fn legacy_payload_without_durations_falls_back_to_primary_five_hour_and_secondary_weekly() {
        let report = usage(LEGACY);
        assert_eq!(report.plan_type.as_deref(), Some("plus"));
        // 12:00:00 + 7200 s = 14:00:00; 12:00:00 + 400000 s = +4d 15:06:40, rounded to 15:07.
        assert_eq!(
            report.windows,
            vec![
                win(
                    "main:primary",
                    "5-hour",
                    WindowKind::FiveHour,
                    Some(50.0),
                    None,
                    Some(PROBED + 7200),
                    Some(7200)
                ),
                win(
                    "main:secondary",
                    "weekly",
                    WindowKind::Weekly,
                    Some(20.0),
                    None,
                    Some(PROBED + 400_020),
                    Some(400000)
                ),
            ]
        );
        assert_eq!(report.credits, None);
    }

    #[test]
    fn numeric_strings_are_read_as_numbers_and_bools() {
        let report = usage(NUMERIC_STRINGS);
        assert_eq!(
            report,
            UsageReport {
                plan_type: Some("plus".into()),
                windows: vec![
                    win(
                        "main:primary",
                        "5-hour",
                        WindowKind::FiveHour,
                        Some(37.0),
                        Some(18000),
                        Some(1_779_807_600),
                        Some(10800)
                    ),
                    win(
                        "main:secondary",
                        "weekly",
                        WindowKind::Weekly,
                        Some(64.5),
                        Some(604800),
                        Some(1_780_110_480),
                        Some(313680)
                    ),
                ],
                credits: credits(true, false, "12.5"),
                main_limit_reached: false,
                reset_credits: None,
            }
        );
    }

    #[test]
    fn float_values_are_accepted_and_whole_second_fields_are_rounded() {
        let report = usage(FLOATS);
        assert_eq!(
            report.windows,
            vec![
                win(
                    "main:primary",
                    "5-hour",
                    WindowKind::FiveHour,
                    Some(37.5),
                    Some(18000),
                    Some(1_779_807_600),
                    Some(10800)
                ),
                // reset_at 1780110480.9 drops its fraction; reset_after 313680.4 rounds.
                win(
                    "main:secondary",
                    "weekly",
                    WindowKind::Weekly,
                    Some(64.25),
                    Some(604800),
                    Some(1_780_110_480),
                    Some(313680)
                ),
            ]
        );
    }

    #[test]
    fn used_percent_over_100_is_kept_as_reported() {
        let report = usage(OVER_100);
        assert_eq!(
            report.windows,
            vec![
                win(
                    "main:primary",
                    "5-hour",
                    WindowKind::FiveHour,
                    Some(100.0),
                    Some(18000),
                    Some(1_779_802_800),
                    Some(6000)
                ),
                win(
                    "main:secondary",
                    "weekly",
                    WindowKind::Weekly,
                    Some(134.5),
                    Some(604800),
                    Some(1_779_969_600),
                    Some(172800)
                ),
            ]
        );
        assert!(report.main_limit_reached);
        assert_eq!(report.credits, credits(false, false, "0"));
    }

    #[test]
    fn limit_reached_without_used_percent_counts_as_100() {
        let report = usage(REACHED_NO_PERCENT);
        assert_eq!(report.plan_type.as_deref(), Some("free"));
        assert_eq!(
            report.windows,
            vec![win(
                "main:primary",
                "weekly",
                WindowKind::Weekly,
                Some(100.0),
                Some(604800),
                Some(1_780_228_800),
                Some(432000)
            )]
        );
        assert!(report.main_limit_reached);
    }

    #[test]
    fn allowed_false_counts_as_reached_and_fills_only_missing_used_percent() {
        let report = usage(ALLOWED_FALSE);
        assert!(report.main_limit_reached);
        assert_eq!(
            report.windows,
            vec![
                win(
                    "main:primary",
                    "5-hour",
                    WindowKind::FiveHour,
                    Some(100.0),
                    Some(18000),
                    Some(PROBED + 1200),
                    Some(1200)
                ),
                win(
                    "main:secondary",
                    "weekly",
                    WindowKind::Weekly,
                    Some(71.0),
                    Some(604800),
                    Some(1_780_110_480),
                    Some(313680)
                ),
            ]
        );
    }

    #[test]
    fn reset_at_in_milliseconds_is_converted_to_seconds() {
        let report = usage(RESET_MS);
        // Same instants as the plus fixture; the 250 ms fraction is dropped.
        assert_eq!(report.windows, plus_windows());
    }

    #[test]
    fn reset_after_only_is_rounded_to_the_minute_and_stable_between_probes() {
        let report = usage(RESET_AFTER_ONLY);
        assert_eq!(report.plan_type.as_deref(), Some("pro"));
        // reset_at 0 counts as absent; 200010 s lands 30 s past a minute and rounds up.
        assert_eq!(
            report.windows,
            vec![
                win(
                    "main:primary",
                    "5-hour",
                    WindowKind::FiveHour,
                    Some(5.0),
                    Some(18000),
                    Some(PROBED + 9000),
                    Some(9000)
                ),
                win(
                    "main:secondary",
                    "weekly",
                    WindowKind::Weekly,
                    Some(30.0),
                    Some(604800),
                    Some(PROBED + 200_040),
                    Some(200_010)
                ),
            ]
        );

        // Seven seconds later the upstream counts seven seconds less: same reset instant.
        let later = RESET_AFTER_ONLY
            .replace(
                "\"reset_after_seconds\": 9000",
                "\"reset_after_seconds\": 8993",
            )
            .replace(
                "\"reset_after_seconds\": 200010",
                "\"reset_after_seconds\": 200003",
            );
        let ProbeOutcome::Usage(again) = classify_probe(200, &later, ts(PROBED + 7)) else {
            panic!("expected Usage");
        };
        let resets = |r: &UsageReport| r.windows.iter().map(|w| w.reset_at).collect::<Vec<_>>();
        assert_eq!(resets(&again), resets(&report));
    }

    #[test]
    fn negative_reset_after_means_unknown_reset() {
        let report = usage(NEGATIVE_RESET_AFTER);
        assert_eq!(
            report.windows,
            vec![
                win(
                    "main:primary",
                    "5-hour",
                    WindowKind::FiveHour,
                    Some(10.0),
                    Some(18000),
                    None,
                    None
                ),
                win(
                    "main:secondary",
                    "weekly",
                    WindowKind::Weekly,
                    Some(20.0),
                    Some(604800),
                    None,
                    None
                ),
            ]
        );
    }

    #[test]
    fn null_rate_limit_is_inconclusive_but_keeps_the_plan() {
        let report = inconclusive(NULL_RATE_LIMIT);
        assert_eq!(
            report,
            UsageReport {
                plan_type: Some("free".into()),
                windows: vec![],
                credits: None,
                main_limit_reached: false,
                reset_credits: None,
            }
        );
    }

    #[test]
    fn missing_main_windows_are_inconclusive_even_with_a_code_review_window() {
        let report = inconclusive(MISSING_WINDOWS);
        assert_eq!(report.plan_type.as_deref(), Some("plus"));
        assert_eq!(
            report.windows,
            vec![win(
                "codeReview:primary",
                "code review weekly",
                WindowKind::Weekly,
                Some(0.0),
                Some(604800),
                Some(1_780_401_600),
                Some(604800)
            )]
        );
        assert_eq!(report.main_windows().count(), 0);
    }

    #[test]
    fn code_review_and_additional_limits_are_kept_in_their_own_groups() {
        let report = usage(REVIEW_AND_ADDITIONAL);
        assert_eq!(
            report,
            UsageReport {
                plan_type: Some("plus".into()),
                windows: vec![
                    win(
                        "main:primary",
                        "5-hour",
                        WindowKind::FiveHour,
                        Some(42.0),
                        Some(18000),
                        Some(1_779_804_060),
                        Some(7260)
                    ),
                    win(
                        "main:secondary",
                        "weekly",
                        WindowKind::Weekly,
                        Some(96.5),
                        Some(604800),
                        Some(1_780_056_000),
                        Some(259200)
                    ),
                    win(
                        "codeReview:primary",
                        "code review weekly",
                        WindowKind::Weekly,
                        Some(0.0),
                        Some(604800),
                        Some(1_780_401_600),
                        Some(604800)
                    ),
                    // limit_reached without used_percent: 100, for this group only.
                    win(
                        "additional:GPT-5.3-Codex-Spark:primary",
                        "GPT-5.3-Codex-Spark 5-hour",
                        WindowKind::FiveHour,
                        Some(100.0),
                        Some(18000),
                        Some(PROBED + 600),
                        Some(600)
                    ),
                    win(
                        "additional:GPT-5.3-Codex-Spark:secondary",
                        "GPT-5.3-Codex-Spark weekly",
                        WindowKind::Weekly,
                        Some(35.0),
                        Some(604800),
                        Some(1_780_096_800),
                        Some(300000)
                    ),
                    // limit_name null: metered_feature names the group; a 1-day window is Other.
                    win(
                        "additional:codex_example_mini:primary",
                        "codex_example_mini 86400s window",
                        WindowKind::Other,
                        Some(5.0),
                        Some(86400),
                        Some(1_779_840_000),
                        Some(43200)
                    ),
                    // neither name: the index does.
                    win(
                        "additional:2:primary",
                        "additional 2 5-hour",
                        WindowKind::FiveHour,
                        Some(1.0),
                        Some(18000),
                        Some(1_779_807_600),
                        None
                    ),
                ],
                credits: credits(false, false, "0"),
                main_limit_reached: false,
                reset_credits: None,
            }
        );
    }

    #[test]
    fn numeric_credit_balance_is_kept_as_text() {
        let report = usage(CREDITS_NUMBER);
        assert_eq!(report.plan_type.as_deref(), Some("pro"));
        assert_eq!(report.credits, credits(true, false, "42.75"));
        assert_eq!(report.main_windows().count(), 2);
    }

    #[test]
    fn string_credit_balance_and_string_unlimited_are_read() {
        let report = usage(CREDITS_STRING);
        assert_eq!(report.plan_type.as_deref(), Some("enterprise"));
        assert_eq!(report.credits, credits(true, true, "1250.00"));
        assert_eq!(
            report.windows,
            vec![
                win(
                    "main:primary",
                    "5-hour",
                    WindowKind::FiveHour,
                    Some(0.0),
                    Some(18000),
                    Some(1_779_814_800),
                    Some(18000)
                ),
                win(
                    "main:secondary",
                    "weekly",
                    WindowKind::Weekly,
                    Some(2.0),
                    Some(604800),
                    Some(1_780_400_800),
                    Some(604000)
                ),
            ]
        );
    }

    #[test]
    fn camel_case_payload_binds_like_snake_case() {
        let report = usage(CAMEL_CASE);
        assert_eq!(
            report,
            UsageReport {
                plan_type: Some("prolite".into()),
                windows: vec![
                    win(
                        "main:primary",
                        "5-hour",
                        WindowKind::FiveHour,
                        Some(12.0),
                        Some(18000),
                        Some(1_779_799_800),
                        Some(3000)
                    ),
                    win(
                        "main:secondary",
                        "weekly",
                        WindowKind::Weekly,
                        Some(33.5),
                        Some(604800),
                        Some(1_780_110_480),
                        Some(313680)
                    ),
                    win(
                        "codeReview:primary",
                        "code review weekly",
                        WindowKind::Weekly,
                        Some(4.0),
                        Some(604800),
                        Some(1_780_401_600),
                        None
                    ),
                    win(
                        "additional:GPT-5.3-Codex-Spark:primary",
                        "GPT-5.3-Codex-Spark 5-hour",
                        WindowKind::FiveHour,
                        Some(9.0),
                        Some(18000),
                        Some(PROBED + 120),
                        Some(100)
                    ),
                ],
                credits: Some(Credits {
                    has_credits: Some(true),
                    unlimited: Some(false),
                    balance: Some("3".into()),
                }),
                main_limit_reached: false,
                reset_credits: None,
            }
        );
    }

    // ---- error statuses ---------------------------------------------------------------------

    #[test]
    fn status_401_is_invalid_with_a_body_snippet() {
        assert_eq!(
            classify_probe(401, BODY_401, probed_at()),
            ProbeOutcome::Invalid {
                message: "credential rejected by the upstream (HTTP 401): { \"error\": { \"message\": \
                          \"Your authentication token has been invalidated. Please try signing in again.\", \
                          \"type\": \"invalid_request_error\", \"param\": null, \"code\": \"token_invalidated\" } }"
                    .into()
            }
        );
    }

    #[test]
    fn plain_402_is_a_payment_problem_that_is_not_deactivation() {
        let outcome = classify_probe(402, BODY_402, probed_at());
        let ProbeOutcome::Payment {
            deactivated,
            message,
        } = &outcome
        else {
            panic!("expected Payment, got {outcome:?}");
        };
        assert!(!deactivated);
        assert!(message.starts_with(
            "payment required (HTTP 402): { \"detail\": { \"code\": \"payment_required\""
        ));
        assert!(!outcome.is_transient());
        assert_eq!(outcome.status_code(), 402);
    }

    #[test]
    fn deactivated_workspace_402_is_marked_deactivated() {
        let outcome = classify_probe(402, BODY_402_DEACTIVATED, probed_at());
        assert_eq!(
            outcome,
            ProbeOutcome::Payment {
                deactivated: true,
                message: "workspace or account deactivated (HTTP 402): { \"detail\": { \"code\": \
                          \"deactivated_workspace\", \"message\": \"This workspace has been deactivated. \
                          Contact the workspace owner.\" } }"
                    .into()
            }
        );
    }

    #[test]
    fn deactivation_is_recognised_in_several_spellings_and_any_case() {
        for body in [
            r#"{"detail":{"code":"deactivated_workspace"}}"#,
            r#"{"error":{"code":"account_deactivated","message":"x"}}"#,
            "Your WORKSPACE has been DEACTIVATED.",
            "This account has been deactivated",
        ] {
            assert!(
                matches!(
                    classify_probe(402, body, probed_at()),
                    ProbeOutcome::Payment {
                        deactivated: true,
                        ..
                    }
                ),
                "{body}"
            );
        }
        for body in [
            "",
            "payment_required",
            r#"{"detail":"Your plan has lapsed"}"#,
        ] {
            assert!(
                matches!(
                    classify_probe(402, body, probed_at()),
                    ProbeOutcome::Payment {
                        deactivated: false,
                        ..
                    }
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn cloudflare_html_403_is_blocked_not_invalid() {
        let outcome = classify_probe(403, BODY_403_CLOUDFLARE, probed_at());
        let ProbeOutcome::Blocked { message } = &outcome else {
            panic!("expected Blocked, got {outcome:?}");
        };
        let prefix = "blocked by an edge HTML page (HTTP 403, title \"Just a moment...\"): ";
        assert!(message.starts_with(prefix), "{message}");
        let snippet = &message[prefix.len()..];
        assert_eq!(snippet.chars().count(), 200);
        assert!(snippet.starts_with(
            "<!DOCTYPE html><html lang=\"en-US\"><head><title>Just a moment...</title>"
        ));
        assert!(!outcome.is_transient());
        assert_eq!(outcome.status_code(), 403);
    }

    #[test]
    fn other_html_or_cloudflare_403_bodies_are_blocked() {
        for body in [
            "  <html><body>Access denied</body></html>",
            "Error 1020 <!DOCTYPE html>",
            "Attention Required! | CloudFlare",
            "<p>forbidden</p>",
        ] {
            assert!(
                matches!(
                    classify_probe(403, body, probed_at()),
                    ProbeOutcome::Blocked { .. }
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn json_403_is_an_http_error_not_blocked() {
        let outcome = classify_probe(403, BODY_403_JSON, probed_at());
        let ProbeOutcome::HttpError { status, message } = &outcome else {
            panic!("expected HttpError, got {outcome:?}");
        };
        assert_eq!(*status, 403);
        assert!(message.starts_with("upstream answered HTTP 403: { \"error\": { \"code\": \"unsupported_country_region_territory\""));
        assert!(!outcome.is_transient());
    }

    #[test]
    fn status_429_usage_limit_reached_is_rate_limited_with_a_reset_hint() {
        let outcome = classify_probe(429, BODY_429, probed_at());
        assert_eq!(
            outcome,
            ProbeOutcome::RateLimited {
                message: "rate limited by the upstream (HTTP 429): { \"error\": { \"type\": \"usage_limit_reached\", \
                          \"message\": \"The usage limit has been reached\", \"plan_type\": \"plus\", \
                          \"resets_at\": 1780110480, \"resets_in_seconds\": 313680 } }"
                    .into()
            }
        );
        assert!(outcome.is_transient());
        assert_eq!(
            usage_limit_resets_at(BODY_429, probed_at()),
            Some(ts(1_780_110_480))
        );
    }

    #[test]
    fn usage_limit_reset_hint_falls_back_to_resets_in_seconds_rounded_to_the_minute() {
        let body = r#"{"error":{"type":"usage_limit_reached","resets_in_seconds":"95"}}"#;
        assert_eq!(
            usage_limit_resets_at(body, probed_at()),
            Some(ts(PROBED + 120))
        );
        let ms = r#"{"error":{"resets_at":1780110480000}}"#;
        assert_eq!(
            usage_limit_resets_at(ms, probed_at()),
            Some(ts(1_780_110_480))
        );
        assert_eq!(
            usage_limit_resets_at(r#"{"resetsAt":1780110480}"#, probed_at()),
            Some(ts(1_780_110_480))
        );
        for none in [
            "",
            "<html>",
            "[]",
            r#"{"error":"x"}"#,
            r#"{"error":{"resets_in_seconds":-4}}"#,
        ] {
            assert_eq!(usage_limit_resets_at(none, probed_at()), None, "{none}");
        }
    }

    #[test]
    fn upstream_503_is_a_transient_http_error() {
        let outcome = classify_probe(503, BODY_503, probed_at());
        assert_eq!(
            outcome,
            ProbeOutcome::HttpError {
                status: 503,
                message:
                    "upstream answered HTTP 503: upstream connect error or disconnect/reset before \
                          headers. reset reason: connection termination"
                        .into()
            }
        );
        assert!(outcome.is_transient());
    }

    #[test]
    fn statuses_without_a_rule_are_http_errors() {
        for status in [
            0,
            100,
            302,
            400,
            404,
            408,
            418,
            500,
            502,
            599,
            999,
            u16::MAX,
        ] {
            let outcome = classify_probe(status, "{}", probed_at());
            assert!(
                matches!(outcome, ProbeOutcome::HttpError { status: s, .. } if s == status),
                "{status}"
            );
            assert_eq!(outcome.is_transient(), status >= 500, "{status}");
        }
    }

    // ---- 2xx bodies that are not usage payloads ---------------------------------------------

    #[test]
    fn garbage_2xx_body_is_unparsable_with_its_first_200_characters() {
        let outcome = classify_probe(200, GARBAGE, probed_at());
        let ProbeOutcome::Unparsable { status, message } = &outcome else {
            panic!("expected Unparsable, got {outcome:?}");
        };
        assert_eq!(*status, 200);
        let expected: String = GARBAGE.trim().chars().take(200).collect();
        assert!(
            expected.len() > 200,
            "the fixture uses multi-byte characters"
        );
        assert_eq!(*message, format!("response is not JSON: {expected}"));
    }

    #[test]
    fn empty_2xx_body_is_unparsable() {
        assert_eq!(EMPTY, "");
        for body in [EMPTY, "   \n\t ", "\u{feff}"] {
            assert_eq!(
                classify_probe(200, body, probed_at()),
                ProbeOutcome::Unparsable {
                    status: 200,
                    message: "empty response body".into()
                }
            );
        }
    }

    #[test]
    fn json_array_2xx_body_is_unparsable() {
        assert_eq!(
            classify_probe(200, JSON_ARRAY, probed_at()),
            ProbeOutcome::Unparsable {
                status: 200,
                message: "response is a JSON array, not a usage object: [ { \"plan_type\": \"plus\", \"rate_limit\": null } ]".into()
            }
        );
    }

    #[test]
    fn error_object_with_a_2xx_status_is_unparsable() {
        assert_eq!(
            classify_probe(204, ERROR_OBJECT_200, probed_at()),
            ProbeOutcome::Unparsable {
                status: 204,
                message: "response JSON has no usage fields: { \"detail\": \"Not Found\" }".into()
            }
        );
    }

    #[test]
    fn json_scalars_empty_objects_and_a_non_object_rate_limit_are_unparsable() {
        for body in [
            "null",
            "true",
            "42",
            "\"plan\"",
            "{}",
            r#"{"rate_limit":"soon"}"#,
            r#"{"rateLimit":[1]}"#,
        ] {
            assert!(
                matches!(
                    classify_probe(200, body, probed_at()),
                    ProbeOutcome::Unparsable { status: 200, .. }
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn empty_window_objects_and_unreadable_fields_are_not_windows() {
        let body = r#"{"rate_limit":{"primary_window":{},"secondary_window":{"used_percent":"n/a","reset_at":"never"}}}"#;
        assert!(inconclusive(body).windows.is_empty());
    }

    #[test]
    fn a_zero_duration_is_treated_as_missing() {
        let body =
            r#"{"rate_limit":{"primary_window":{"used_percent":1,"limit_window_seconds":0}}}"#;
        assert_eq!(
            usage(body).windows,
            vec![win(
                "main:primary",
                "5-hour",
                WindowKind::FiveHour,
                Some(1.0),
                None,
                None,
                None
            )]
        );
    }

    #[test]
    fn additional_limits_with_the_same_name_keep_distinct_ids() {
        let body = r#"{"rate_limit":null,"additional_rate_limits":[
            {"limit_name":"m","rate_limit":{"primary_window":{"used_percent":1}}},
            {"limit_name":"m","rate_limit":{"primary_window":{"used_percent":2}}},
            "not an object"]}"#;
        let ids: Vec<_> = inconclusive(body)
            .windows
            .into_iter()
            .map(|w| (w.id, w.group))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("additional:m:primary".to_owned(), "additional:m".to_owned()),
                (
                    "additional:m#1:primary".to_owned(),
                    "additional:m#1".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn a_byte_order_mark_before_the_payload_is_ignored() {
        assert_eq!(usage(&format!("\u{feff}{PLUS}")), usage(PLUS));
    }

    // ---- CPA api-call envelopes -------------------------------------------------------------

    /// `(status_code, body)` of a CPA api-call answer (body decoded from its JSON string).
    fn envelope(json: &str) -> (u16, String) {
        let value: Value = serde_json::from_str(json).expect("fixture is JSON");
        let status = value["status_code"]
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .expect("status_code");
        let body = value["body"].as_str().expect("body is a string").to_owned();
        (status, body)
    }

    #[test]
    fn api_call_envelopes_decode_to_the_same_outcomes_as_the_raw_bodies() {
        let (status, body) = envelope(ENVELOPE_OK_PLUS);
        assert_eq!(status, 200);
        assert_eq!(
            classify_probe(status, &body, probed_at()),
            ProbeOutcome::Usage(usage(PLUS))
        );

        let (status, body) = envelope(ENVELOPE_401);
        assert_eq!(status, 401);
        assert!(matches!(
            classify_probe(status, &body, probed_at()),
            ProbeOutcome::Invalid { .. }
        ));

        assert!(
            ENVELOPE_403_HTML.contains("\\u003c!DOCTYPE html\\u003e"),
            "gin-style escapes"
        );
        let (status, body) = envelope(ENVELOPE_403_HTML);
        assert_eq!((status, body.as_str()), (403, BODY_403_CLOUDFLARE));
        assert_eq!(
            classify_probe(status, &body, probed_at()),
            classify_probe(403, BODY_403_CLOUDFLARE, probed_at())
        );

        let failed: Value = serde_json::from_str(CPA_502).expect("fixture is JSON");
        assert_eq!(failed, serde_json::json!({"error": "request failed"}));
    }

    // ---- plans ------------------------------------------------------------------------------

    #[test]
    fn plan_names_are_trimmed_lowercased_and_aliases_mapped() {
        for (raw, want) in [
            ("plus", "plus"),
            ("  Plus ", "plus"),
            ("PRO", "pro"),
            ("prolite", "prolite"),
            ("pro_lite", "prolite"),
            ("Pro-Lite", "prolite"),
            ("pro lite", "prolite"),
            ("education", "edu"),
            ("EDU", "edu"),
            ("free_workspace", "free_workspace"),
            ("free-workspace", "free_workspace"),
            ("Go", "go"),
            ("guest", "guest"),
            ("Enterprise", "enterprise"),
            ("Quorum", "quorum"),
            ("k12", "k12"),
            ("", ""),
        ] {
            assert_eq!(normalize_plan(raw), want, "{raw:?}");
        }
        for plan in KNOWN_PLANS {
            assert_eq!(normalize_plan(plan), *plan);
        }
    }

    #[test]
    fn blank_or_non_string_plan_is_absent() {
        for body in [
            r#"{"plan_type":"  ","rate_limit":null}"#,
            r#"{"plan_type":7,"rate_limit":null}"#,
        ] {
            assert_eq!(inconclusive(body).plan_type, None, "{body}");
        }
    }

    #[test]
    fn free_like_plans_are_free_workspace_go_guest_and_free() {
        for plan in ["free", "free_workspace", "go", "guest"] {
            assert!(is_free_like(Some(plan)));
        }
        for plan in [
            Some("plus"),
            Some("prolite"),
            Some("edu"),
            Some("Free"),
            None,
        ] {
            assert!(!is_free_like(plan));
        }
    }

    // ---- robustness -------------------------------------------------------------------------

    const STATUSES: &[u16] = &[
        0,
        200,
        201,
        204,
        299,
        401,
        402,
        403,
        404,
        429,
        500,
        503,
        u16::MAX,
    ];

    #[test]
    fn tricky_bodies_never_panic() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let deep_obj = format!("{}{}", "{\"rate_limit\":".repeat(5_000), "}".repeat(5_000));
        let long = "é".repeat(100_000);
        let many = format!(
            "{{\"additional_rate_limits\":[{}]}}",
            vec![r#"{"limit_name":"x","rate_limit":{"primary_window":{"used_percent":1}}}"#; 500]
                .join(",")
        );
        let tricky: Vec<&str> = vec![
            "",
            " ",
            "\u{feff}",
            "\u{0}\u{1}\u{7f}",
            "null",
            "true",
            "-0",
            "1e999",
            "\"\\ud800\"",
            "[]",
            "{}",
            "{",
            "}",
            "{\"rate_limit\":",
            "<",
            "<title",
            "<title>",
            "<title>>",
            "<TITLE>x</title",
            "<title></title>",
            "deactivat",
            "é",
            r#"{"rate_limit":1}"#,
            r#"{"rate_limit":{"primary_window":1,"secondary_window":[]}}"#,
            r#"{"rate_limit":{"primary_window":{"used_percent":1e308,"limit_window_seconds":1e300,"reset_at":1e300,"reset_after_seconds":1e300}}}"#,
            r#"{"rate_limit":{"primary_window":{"used_percent":-1e308,"limit_window_seconds":-1,"reset_at":-1e300,"reset_after_seconds":-9223372036854775808}}}"#,
            r#"{"rate_limit":{"primary_window":{"reset_after_seconds":9223372036854775807}}}"#,
            r#"{"rate_limit":{"primary_window":{"reset_after_seconds":18446744073709551615}}}"#,
            r#"{"rate_limit":{"primary_window":{"reset_at":9223372036854775807}}}"#,
            r#"{"rate_limit":{"primary_window":{"reset_at":99999999999}}}"#,
            r#"{"rate_limit":{"primary_window":{"used_percent":"NaN","reset_at":"inf","limit_window_seconds":"-inf"}}}"#,
            r#"{"rate_limit":{"primary_window":{"used_percent":"%","limit_window_seconds":"9e99"}}}"#,
            r#"{"rate_limit":{"allowed":"maybe","limit_reached":2,"primary_window":{"limit_window_seconds":18000}}}"#,
            r#"{"credits":{"balance":{"x":1},"has_credits":[],"unlimited":"TRUE"}}"#,
            r#"{"additional_rate_limits":{"not":"an array"}}"#,
            r#"{"additional_rate_limits":[null,1,"x",[],{}]}"#,
            &deep,
            &deep_obj,
            &long,
            &many,
        ];
        let fixtures = ALL_UPSTREAM.iter().copied();
        for body in tricky.into_iter().chain(fixtures) {
            for &status in STATUSES {
                let outcome = classify_probe(status, body, probed_at());
                assert_message_is_bounded(&outcome);
            }
            let _ = usage_limit_resets_at(body, probed_at());
        }
    }

    #[test]
    fn every_truncation_of_every_fixture_classifies_without_panicking() {
        for body in ALL_UPSTREAM {
            for (cut, _) in body.char_indices() {
                let outcome = classify_probe(200, &body[..cut], probed_at());
                assert_message_is_bounded(&outcome);
            }
        }
    }

    /// Messages carry a short text plus at most 200 characters of the body.
    fn assert_message_is_bounded(outcome: &ProbeOutcome) {
        let message = match outcome {
            ProbeOutcome::Usage(_) | ProbeOutcome::Inconclusive(_) => return,
            ProbeOutcome::Invalid { message }
            | ProbeOutcome::Payment { message, .. }
            | ProbeOutcome::Blocked { message }
            | ProbeOutcome::RateLimited { message }
            | ProbeOutcome::HttpError { message, .. }
            | ProbeOutcome::Unparsable { message, .. } => message,
        };
        assert!(message.chars().count() <= 200 + 140, "{message}");
    }

    proptest! {
        #[test]
        fn arbitrary_strings_and_statuses_never_panic(status in any::<u16>(), body in any::<String>()) {
            let outcome = classify_probe(status, &body, probed_at());
            assert_message_is_bounded(&outcome);
        }

        #[test]
        fn json_like_noise_never_panics(body in r#"[\{\}\[\]":,0-9a-z_. \-e]{0,200}"#) {
            let outcome = classify_probe(200, &body, probed_at());
            assert_message_is_bounded(&outcome);
        }

        #[test]
        fn any_main_window_makes_a_usage_outcome(
            used in prop_oneof![any::<f64>().prop_map(|f| f.to_string()), (0u32..500).prop_map(|n| n.to_string())],
            seconds in prop_oneof![Just("18000"), Just("604800"), Just("2592000"), Just("\"86400\""), Just("null")],
            slot in prop_oneof![Just("primary_window"), Just("secondary_window")],
        ) {
            let body = format!(r#"{{"rate_limit":{{"{slot}":{{"used_percent":{used},"limit_window_seconds":{seconds}}}}}}}"#);
            match classify_probe(200, &body, probed_at()) {
                // Non-finite floats render as "NaN"/"inf": not JSON, so not a usage payload.
                ProbeOutcome::Unparsable { .. } => prop_assert!(!used.parse::<f64>().is_ok_and(f64::is_finite)),
                ProbeOutcome::Usage(report) => prop_assert_eq!(report.main_windows().count(), 1),
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
