//! The router's own answers and the shape of the upstream ones it hands back (docs/rules/router.md §5):
//! upstream answers with `x-quota-patrol-account` + `x-quota-patrol-attempts` and only the
//! headers a client may see; the router's own answers (401, 400, 404, 405, 413, 429/503
//! all-excluded, 504) in the OpenAI error shape `{"error": {"message", "type", "code"}}` with
//! `x-quota-patrol-attempts` only. A leaf: it builds responses and calls nothing of the router.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::json;

use crate::core::failure::NoAccount;

/// The upstream account that served (docs/rules/router.md §5).
pub const ACCOUNT_HEADER: &str = "x-quota-patrol-account";
/// Upstream requests made for this client request (retries and fail-overs included).
pub const ATTEMPTS_HEADER: &str = "x-quota-patrol-attempts";

/// A router-made answer in the OpenAI error shape, with `x-quota-patrol-attempts`.
pub(crate) fn error(status: u16, code: &str, kind: &str, message: &str, attempts: u32) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "code": code}});
    let mut resp = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
        axum::Json(body),
    )
        .into_response();
    set(&mut resp, ATTEMPTS_HEADER, &attempts.to_string());
    resp
}

/// The all-excluded answer (docs/rules/router.md §4): status, body, `Retry-After` when known.
pub(crate) fn no_account_answer(answer: &NoAccount, attempts: u32) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let mut resp = (status, axum::Json(answer.body())).into_response();
    if let Some(s) = answer.retry_after_seconds {
        set(&mut resp, "retry-after", &s.to_string());
    }
    set(&mut resp, ATTEMPTS_HEADER, &attempts.to_string());
    resp
}

/// An upstream's complete answer, its content type kept.
pub(crate) fn upstream_answer(
    status: u16,
    headers: &HeaderMap,
    body: Bytes,
    account: &str,
    attempts: u32,
) -> Response {
    let mut resp = Response::new(axum::body::Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    copy_passed(headers, resp.headers_mut());
    set(&mut resp, ACCOUNT_HEADER, account);
    set(&mut resp, ATTEMPTS_HEADER, &attempts.to_string());
    resp
}

/// An opened stream: headers held until now, then the pass-through body.
pub(crate) fn stream_answer(
    status: u16,
    headers: &HeaderMap,
    body: axum::body::Body,
    account: &str,
    attempts: u32,
) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    copy_passed(headers, resp.headers_mut());
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    set(&mut resp, ACCOUNT_HEADER, account);
    set(&mut resp, ATTEMPTS_HEADER, &attempts.to_string());
    resp
}

/// Upstream headers a client may see: content type, `retry-after`, and the upstream's
/// rate-limit and request-id headers (`x-ratelimit-*`, `x-codex-*`, `x-request-id`).
fn copy_passed(from: &HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        let n = name.as_str();
        if n == "content-type"
            || n == "retry-after"
            || n == "x-request-id"
            || n.starts_with("x-ratelimit-")
            || n.starts_with("x-codex-")
        {
            to.append(name.clone(), value.clone());
        }
    }
}

fn set(resp: &mut Response, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(HeaderName::from_static(name), v);
    }
}
