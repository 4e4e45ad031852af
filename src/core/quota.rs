//! Codex usage payload (`wham/usage`, fetched through CPA `api-call`) -> [`ProbeOutcome`].
//! Owns window classification by duration, plan normalisation, tolerant number/time reading and
//! the classification of failed probes. Pure: no I/O, time is passed in.
//! Rules: spec/patrol.md §3, spec/cpa.md §4.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a rate-limit window measures, judged by `limit_window_seconds` (patrol.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Credits {
    pub has_credits: Option<bool>,
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
    pub credits: Option<Credits>,
    /// Main group said `limit_reached == true` or `allowed == false`.
    pub main_limit_reached: bool,
}

impl UsageReport {
    /// Windows of the main group only.
    pub fn main_windows(&self) -> impl Iterator<Item = &QuotaWindow> {
        self.windows.iter().filter(|w| w.group == MAIN_GROUP)
    }
}

/// Result of one probe, classified (patrol.md §3 "Status").
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
    /// Whether a retry may help (429 and 5xx; patrol.md §1 `retryCount`).
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

/// Classifies an upstream answer (status + body as returned inside CPA's `api-call` envelope).
///
/// `probed_at` anchors `reset_after_seconds`. Never panics, whatever the body.
pub fn classify_probe(status: u16, body: &str, probed_at: DateTime<Utc>) -> ProbeOutcome {
    let _ = (status, body, probed_at);
    todo!("quota parser")
}

/// Normalises a `plan_type` string: trims, lowercases, maps `prolite`/`pro_lite`/`pro-lite` to
/// `prolite`, `education` to `edu`; unknown values are kept (lowercased).
pub fn normalize_plan(raw: &str) -> String {
    let _ = raw;
    todo!("quota parser")
}

/// Free-like plans are judged on the weekly (or monthly) window only: `free`, `free_workspace`,
/// `go`, `guest` (patrol.md §3).
pub fn is_free_like(plan: Option<&str>) -> bool {
    matches!(plan, Some("free" | "free_workspace" | "go" | "guest"))
}
