//! The API's one error type and its one mapping to HTTP (docs/rules/api.md §1): every handler
//! returns `Result<_, ApiError>`, use-case errors arrive as `JobError`, malformed JSON / query
//! strings arrive as axum rejections. Bodies are `{"error", "code"}`; internals (database errors)
//! are logged with the request id and never echoed; secrets never appear in either.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::jobs::JobError;

tokio::task_local! {
    /// The `x-request-id` of the request being served (set by `scope_request_id` in mod.rs).
    pub(super) static REQUEST_ID: String;
}

/// The request id of the current request, if one is in scope.
pub(super) fn current_request_id() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Error body of every failed API call.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// Human-readable message (English).
    pub error: String,
    /// Machine code: `invalid`, `bad_request`, `unauthorized`, `unknown_site`, `not_found`,
    /// `busy`, `conflict`, `no_management_key`, `cpa_error`, `metrics_disabled`, `invalid_spec`,
    /// `router_disabled`, `internal`.
    pub code: String,
    /// Every validation problem (400 `invalid`, 422 `invalid_spec`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problems: Option<Vec<String>>,
    /// HTTP status CPA answered with (502 `cpa_error` only, when CPA answered at all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpa_status: Option<u16>,
    /// Request id to find the log line of a 500.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// Everything an API call can fail with; [`IntoResponse`] is the only place statuses are chosen.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 401: missing or wrong `Authorization: Bearer` token.
    #[error("missing or invalid admin token")]
    Unauthorized,
    /// 400: the request could not be read (malformed JSON, bad query value).
    #[error("{0}")]
    BadRequest(String),
    /// 400: the request was read but breaks rules; every problem listed.
    #[error("invalid input: {}", .0.join("; "))]
    Invalid(Vec<String>),
    /// 404: `?siteId=` (or path) names no site.
    #[error("unknown site {0}")]
    UnknownSite(String),
    /// 404: anything else that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// 409: the site is busy with another round.
    #[error("site {0} is busy with another round")]
    Busy(String),
    /// 409: the request conflicts with the stored state.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// 502: CPA failed or refused; `status` is CPA's HTTP status when it answered.
    #[error("{message}")]
    Cpa {
        status: Option<u16>,
        message: String,
    },
    /// 502 `management_key_refused`: CPA refused the management key, now or earlier (then the
    /// call was not made: CPA bans an IP after 5 refused keys). `status` is CPA's (401/403).
    #[error("{message}")]
    KeyRefused { status: u16, message: String },
    /// 404: `/metrics` without a Prometheus handle.
    #[error("metrics are not enabled")]
    MetricsDisabled,
    /// 503: the process is stopping (SIGTERM/SIGINT) and starts no new round.
    #[error("{0}")]
    Unavailable(String),
    /// 422 `invalid_spec`: the router spec a change would give has problems; every one listed.
    #[error("invalid router spec: {}", .0.join("; "))]
    InvalidSpec(Vec<String>),
    /// 422 `invalid_policy`: an account policy (`PUT /api/accounts/{name}/policy`) breaks
    /// rules (threshold outside 1..=100, unknown `fiveHourRule`); every problem listed.
    #[error("invalid account policy: {}", .0.join("; "))]
    InvalidPolicy(Vec<String>),
    /// 503 `router_disabled`: no `[router]` in the config.
    #[error("the router is not enabled (no [router] section in the config file)")]
    RouterDisabled,
    /// 500: logged with the request id, not echoed.
    #[error("internal error")]
    Internal(String),
}

impl From<JobError> for ApiError {
    fn from(e: JobError) -> Self {
        match e {
            JobError::UnknownSite(s) => ApiError::UnknownSite(s),
            JobError::Busy(s) => ApiError::Busy(s),
            JobError::NotFound(m) => ApiError::NotFound(m),
            JobError::Invalid(p) => ApiError::Invalid(p),
            // A refused key reads the same on every endpoint, whether CPA refused it just now
            // or the stored refusal kept the call from being made.
            JobError::Cpa(c @ crate::cpa::CpaError::Auth { status, .. }) => ApiError::KeyRefused {
                status,
                message: c.to_string(),
            },
            JobError::Cpa(c) => ApiError::Cpa {
                status: c.status(),
                message: c.to_string(),
            },
            e @ JobError::KeyRefused { status, .. } => ApiError::KeyRefused {
                status,
                message: e.to_string(),
            },
            e @ JobError::NoKey(_) => ApiError::Conflict {
                code: "no_management_key",
                message: e.to_string(),
            },
            JobError::Store(e) => ApiError::Internal(e.to_string()),
            e @ JobError::ShuttingDown => ApiError::Unavailable(e.to_string()),
            JobError::Conflict(message) => ApiError::Conflict {
                code: "conflict",
                message,
            },
            JobError::InvalidSpec(p) => ApiError::InvalidSpec(p),
            JobError::RouterDisabled => ApiError::RouterDisabled,
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        ApiError::BadRequest(r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::BadRequest(r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::BadRequest(r.body_text())
    }
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::BadRequest(_) | ApiError::Invalid(_) => StatusCode::BAD_REQUEST,
            ApiError::UnknownSite(_) | ApiError::NotFound(_) | ApiError::MetricsDisabled => {
                StatusCode::NOT_FOUND
            }
            ApiError::Busy(_) | ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Cpa { .. } | ApiError::KeyRefused { .. } => StatusCode::BAD_GATEWAY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) | ApiError::RouterDisabled => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::InvalidSpec(_) | ApiError::InvalidPolicy(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
        }
    }

    fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "unauthorized",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Invalid(_) => "invalid",
            ApiError::UnknownSite(_) => "unknown_site",
            ApiError::NotFound(_) => "not_found",
            ApiError::Busy(_) => "busy",
            ApiError::Conflict { code, .. } => code,
            ApiError::Cpa { .. } => "cpa_error",
            ApiError::KeyRefused { .. } => "management_key_refused",
            ApiError::MetricsDisabled => "metrics_disabled",
            ApiError::Internal(_) => "internal",
            ApiError::Unavailable(_) => "shutting_down",
            ApiError::InvalidSpec(_) => "invalid_spec",
            ApiError::InvalidPolicy(_) => "invalid_policy",
            ApiError::RouterDisabled => "router_disabled",
        }
    }

    /// The body this error answers with (internal details left out).
    pub fn body(&self) -> ErrorBody {
        let mut body = ErrorBody {
            error: self.to_string(),
            code: self.code().to_string(),
            problems: None,
            cpa_status: None,
            request_id: None,
        };
        match self {
            ApiError::Invalid(p) | ApiError::InvalidSpec(p) | ApiError::InvalidPolicy(p) => {
                body.problems = Some(p.clone())
            }
            ApiError::Cpa { status, .. } => body.cpa_status = *status,
            ApiError::KeyRefused { status, .. } => body.cpa_status = Some(*status),
            ApiError::Internal(_) => {
                let id = current_request_id().unwrap_or_else(|| "-".into());
                body.error = format!("internal error (request id {id})");
                body.request_id = Some(id);
            }
            _ => {}
        }
        body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        match &self {
            ApiError::Internal(detail) => {
                tracing::error!(request_id = body.request_id.as_deref().unwrap_or("-"), error = %detail, "internal error")
            }
            ApiError::Cpa { .. } => tracing::warn!(error = %body.error, "CPA call failed"),
            _ => {}
        }
        (self.status(), axum::Json(body)).into_response()
    }
}

/// `Json` whose rejections become [`ApiError::BadRequest`] (400 with serde's message) instead of
/// axum's plain-text 400/415/422.
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// `Query` whose rejections become [`ApiError::BadRequest`].
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// `Path` whose rejections become [`ApiError::BadRequest`].
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);
