//! HTTP side of the simulated CPA: one axum fallback that records every request, applies the
//! outage knob, the availability gate, the key check with its ban, and dispatches the management
//! routes (listing, status/fields patches, delete, api-call, usage queue, small config setters).
//! Bodies are parsed by hand so that every error text is CPA's, never axum's.
//! Rules: docs/rules/cpa.md §1.1–1.3, §2.1–2.4, §3, §5.2, §6.1, §7.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration as StdDuration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};
use subtle::ConstantTimeEq;

use super::state::{
    AccountRecord, BAN_MINUTES, BUCKET_SECONDS, BUCKETS, Shared, SimState, bucket_id, go_time,
    shanghai,
};
use super::upstream::{self, Outbound, Reply};
use super::{RecordedRequest, SimMode};
use quota_patrol_core::codex_json;

/// Largest request body read (the listing of 10,000 accounts is an answer, not a request).
const BODY_LIMIT: usize = 16 * 1024 * 1024;
/// CPA's own timeout for the outbound call of `api-call` (docs/rules/cpa.md §3).
const API_CALL_TIMEOUT: StdDuration = StdDuration::from_secs(60);
/// Management base path (docs/rules/cpa.md §1.1).
const BASE: &str = "/v0/management";

/// The router of the simulated CPA: everything goes through [`dispatch`].
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(dispatch).with_state(shared)
}

/// A management route the simulated version knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    ListAuthFiles,
    PatchStatus,
    PatchFields,
    DeleteAuthFiles,
    ApiCall,
    UsageQueue,
    GetUsageStatistics,
    SetUsageStatistics,
    GetStrategy,
    SetStrategy,
    ResetQuota,
}

impl Route {
    fn find(method: &Method, path: &str, shared: &Shared) -> Option<Route> {
        let set = *method == Method::PUT || *method == Method::PATCH;
        let route = match (path, method.as_str()) {
            ("/auth-files", "GET") => Route::ListAuthFiles,
            ("/auth-files", "DELETE") => Route::DeleteAuthFiles,
            ("/auth-files/status", "PATCH") => Route::PatchStatus,
            ("/auth-files/fields", "PATCH") => Route::PatchFields,
            ("/api-call", "POST") => Route::ApiCall,
            ("/usage-queue", "GET") => Route::UsageQueue,
            ("/usage-statistics-enabled", "GET") => Route::GetUsageStatistics,
            ("/usage-statistics-enabled", _) if set => Route::SetUsageStatistics,
            ("/routing/strategy", "GET") => Route::GetStrategy,
            ("/routing/strategy", _) if set => Route::SetStrategy,
            ("/reset-quota", "POST") if shared.config.features.v7_2_22 => Route::ResetQuota,
            _ => return None,
        };
        Some(route)
    }
}

/// Entry point for every request (see the module docs for the order of checks).
async fn dispatch(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, BODY_LIMIT)
        .await
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let mode;
    {
        let mut state = shared.lock();
        state.record_request(RecordedRequest {
            method: parts.method.to_string(),
            path: path.clone(),
            query: query.clone(),
            body: String::from_utf8_lossy(&body).into_owned(),
        });
        if state.knobs.down {
            return down_response();
        }
        mode = state.knobs.mode;
    }
    let rest = match path.strip_prefix(BASE) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ if mode == SimMode::ClusterNode && path.starts_with("/v8/management") => {
            return raw_response(404, None, Vec::new());
        }
        _ => return outside_management(&parts.method, &path),
    };
    if shared.config.management_key.is_none() || mode == SimMode::ClusterNode {
        return raw_response(404, None, Vec::new());
    }
    if mode == SimMode::V0Dropped {
        return with_version_headers(&shared, raw_response(404, None, Vec::new()));
    }
    let route = Route::find(&parts.method, rest, &shared);
    if route.is_none() && !shared.config.features.keyed_unknown_paths {
        return gin_not_found();
    }
    let response = match authenticate(&shared, peer.ip(), &parts.headers) {
        Err((status, message)) => error(status, &message),
        Ok(()) => match route {
            None => raw_response(404, None, Vec::new()),
            Some(route) => handle(route, &shared, &query, &body).await,
        },
    };
    with_version_headers(&shared, response)
}

/// `response` with CPA's `X-CPA-VERSION`, `X-CPA-COMMIT` and `X-CPA-BUILD-DATE`.
fn with_version_headers(shared: &Shared, mut response: Response) -> Response {
    let headers = response.headers_mut();
    let config = &shared.config;
    for (name, value) in [
        ("X-CPA-VERSION", &config.version),
        ("X-CPA-COMMIT", &config.commit),
        ("X-CPA-BUILD-DATE", &config.build_date),
    ] {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    }
    response
}

async fn handle(route: Route, shared: &Shared, query: &str, body: &[u8]) -> Response {
    let now = shared.clock.now();
    match route {
        Route::ListAuthFiles => list_auth_files(shared, query, now),
        Route::PatchStatus => patch_status(shared, body, now),
        Route::PatchFields if shared.config.features.generic_fields => {
            patch_fields_generic(shared, body, now)
        }
        Route::PatchFields => patch_fields_typed(shared, body, now),
        Route::DeleteAuthFiles => delete_auth_files(shared, query, body, now),
        Route::ApiCall => api_call(shared, body, now).await,
        Route::UsageQueue => usage_queue(shared, query, now),
        Route::GetUsageStatistics => {
            let enabled = shared.lock().usage_statistics_enabled;
            json_response(200, &json!({"usage-statistics-enabled": enabled}))
        }
        Route::SetUsageStatistics => match parse_object(body).and_then(|o| opt_bool(&o, "value")) {
            Ok(Some(value)) => {
                shared.lock().usage_statistics_enabled = value;
                json_response(200, &json!({"status": "ok"}))
            }
            _ => error(400, "invalid body"),
        },
        Route::GetStrategy => {
            let strategy = shared.lock().routing_strategy.clone();
            json_response(200, &json!({"strategy": strategy}))
        }
        Route::SetStrategy => set_strategy(shared, body),
        Route::ResetQuota => reset_quota(shared, body),
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

/// Go's `json.Marshal` escapes `<`, `>`, `&`, U+2028 and U+2029; these characters only occur
/// inside JSON strings, so a textual replacement is exact.
fn gin_escape(text: String) -> String {
    if !text.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

fn raw_response(status: u16, content_type: Option<&str>, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(value) = content_type.and_then(|c| HeaderValue::from_str(c).ok()) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

/// A gin `c.JSON` answer.
fn json_response(status: u16, value: &impl Serialize) -> Response {
    let text = serde_json::to_string(value).unwrap_or_else(|_| "null".to_string());
    raw_response(
        status,
        Some("application/json; charset=utf-8"),
        gin_escape(text).into_bytes(),
    )
}

/// CPA's error shape: `{"error": "<text>"}` (docs/rules/cpa.md §1.3).
fn error(status: u16, message: &str) -> Response {
    json_response(status, &json!({"error": message}))
}

/// gin's NoRoute answer (v7.1.19: unknown path or wrong method).
fn gin_not_found() -> Response {
    raw_response(404, Some("text/plain"), b"404 page not found".to_vec())
}

/// What a reverse proxy in front of a dead CPA answers.
fn down_response() -> Response {
    let body = "<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n\
                <center><h1>503 Service Temporarily Unavailable</h1></center>\r\n<hr><center>nginx</center>\r\n\
                </body>\r\n</html>\r\n";
    raw_response(503, Some("text/html"), body.as_bytes().to_vec())
}

/// Paths outside the management API: CPA's root banner or gin's 404.
fn outside_management(method: &Method, path: &str) -> Response {
    if *method == Method::GET && path == "/" {
        return json_response(
            200,
            &json!({
                "message": "CLI Proxy API Server",
                "endpoints": ["POST /v1/chat/completions", "POST /v1/completions", "GET /v1/models"],
            }),
        );
    }
    gin_not_found()
}

// ---------------------------------------------------------------------------------------------
// Authentication (docs/rules/cpa.md §1.2)

/// The key a client sent: `Authorization` (`Bearer <key>` with the scheme in any case, or the
/// whole value), else `X-Management-Key`.
fn provided_key(headers: &HeaderMap) -> String {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    let mut provided = authorization;
    if let Some((scheme, rest)) = authorization.split_once(' ')
        && scheme.eq_ignore_ascii_case("bearer")
    {
        provided = rest.trim();
    }
    if provided.is_empty() {
        provided = headers
            .get("x-management-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim();
    }
    provided.to_string()
}

/// Go's `time.Duration.String()` for whole seconds, e.g. `29m12s`, `1h0m0s`, `45s`.
/// CPA forgets the failures of a client idle this long (`handler.go`).
const IDLE_FORGET_HOURS: i64 = 2;

fn go_duration(seconds: i64) -> String {
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// The key check with CPA's brute-force guard: a banned IP is refused even with the right key;
/// each missing or wrong key counts; the configured number of failures bans for 30 minutes; a
/// success clears the count, and so do 2 h without a failure (CPA purges idle entries hourly;
/// the simulation forgets at exactly 2 h).
fn authenticate(shared: &Shared, ip: IpAddr, headers: &HeaderMap) -> Result<(), (u16, String)> {
    let now = shared.clock.now();
    let provided = provided_key(headers);
    let expected = shared.config.management_key.as_deref().unwrap_or_default();
    let mut state = shared.lock();
    let idle = state.failures.get(&ip).is_some_and(|a| {
        a.blocked_until.is_none_or(|u| u <= now)
            && a.last_at
                .is_some_and(|t| now - t >= Duration::hours(IDLE_FORGET_HOURS))
    });
    if idle {
        state.failures.remove(&ip);
    }
    if let Some(attempts) = state.failures.get_mut(&ip)
        && let Some(until) = attempts.blocked_until
    {
        if now < until {
            attempts.last_at = Some(now);
            state.key_checks.banned_answers += 1;
            let remaining = ((until - now).num_milliseconds() + 500) / 1000;
            let message = format!(
                "IP banned due to too many failed attempts. Try again in {}",
                go_duration(remaining)
            );
            return Err((403, message));
        }
        attempts.blocked_until = None;
        attempts.count = 0;
    }
    let matches =
        !provided.is_empty() && bool::from(provided.as_bytes().ct_eq(expected.as_bytes()));
    if matches {
        state.failures.remove(&ip);
        return Ok(());
    }
    state.key_checks.refused += 1;
    if let Some(limit) = shared.config.ban_after_failures {
        let attempts = state.failures.entry(ip).or_default();
        attempts.count += 1;
        attempts.last_at = Some(now);
        if attempts.count >= limit {
            attempts.blocked_until = Some(now + Duration::minutes(BAN_MINUTES));
            attempts.count = 0;
            state.key_checks.bans += 1;
        }
    }
    drop(state);
    let message = if provided.is_empty() {
        "missing management key"
    } else {
        "invalid management key"
    };
    Err((401, message.to_string()))
}

// ---------------------------------------------------------------------------------------------
// Body and query helpers (Go binding semantics: wrong JSON types fail the whole body)

/// Decodes a JSON object; `null` counts as an empty object (Go decodes it into a zero struct).
fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ()> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        _ => Err(()),
    }
}

fn opt_string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, ()> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(()),
    }
}

fn opt_bool(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, ()> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(()),
    }
}

/// A JSON integer that fits Go's `int` (floats and strings fail, like `encoding/json`).
fn opt_int(obj: &Map<String, Value>, key: &str) -> Result<Option<i64>, ()> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or(()),
        Some(_) => Err(()),
    }
}

fn opt_string_map(
    obj: &Map<String, Value>,
    key: &str,
) -> Result<Option<Vec<(String, String)>>, ()> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())).ok_or(()))
            .collect::<Result<Vec<_>, ()>>()
            .map(Some),
        Some(_) => Err(()),
    }
}

/// Decoded query pairs (repeated keys kept in order).
fn query_pairs(query: &str) -> Vec<(String, String)> {
    if query.is_empty() {
        return Vec::new();
    }
    url::Url::parse(&format!("http://sim.invalid/?{query}"))
        .map(|url| {
            url.query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn first_query(pairs: &[(String, String)], key: &str) -> Option<String> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// The failure configured with `SimHandle::set_fail_patch` for `name`, as CPA would report a
/// failed save.
fn injected_failure(state: &SimState, name: &str, what: &str) -> Option<Response> {
    let status = *state.knobs.fail_patch.get(name)?;
    let message = match status {
        404 => "auth file not found".to_string(),
        _ => format!("{what}: simulated failure"),
    };
    Some(error(status, &message))
}

// ---------------------------------------------------------------------------------------------
// GET /auth-files (docs/rules/cpa.md §2.1)

#[derive(Serialize)]
struct BucketWire<'a> {
    time: &'a str,
    success: u64,
    failed: u64,
}

#[derive(Serialize)]
struct IdTokenWire<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    chatgpt_account_id: Option<&'a str>,
    #[serde(skip_serializing_if = "str::is_empty")]
    plan_type: &'a str,
}

#[derive(Serialize)]
struct EntryWire<'a> {
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_index: Option<AuthIndexWire<'a>>,
    name: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    provider: &'a str,
    label: &'a str,
    status: &'a str,
    status_message: &'a str,
    disabled: bool,
    unavailable: bool,
    runtime_only: bool,
    source: &'static str,
    path: &'a str,
    size: u64,
    modtime: String,
    success: u64,
    failed: u64,
    recent_requests: Vec<BucketWire<'a>>,
    #[serde(skip_serializing_if = "str::is_empty")]
    email: &'a str,
    account_type: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    account: &'a str,
    created_at: String,
    updated_at: String,
    last_refresh: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_retry_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id_token: Option<IdTokenWire<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a str>,
    /// Passive quota of CPA after v7.2.140 (docs/rules/cpa.md §9), when the knob is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    quota: Option<Value>,
}

/// `auth_index` as CPA's hex string, or as the number of the same 64-bit value
/// ([`SimHandle::set_auth_index_as_number`](crate::SimHandle::set_auth_index_as_number)).
#[derive(Serialize)]
#[serde(untagged)]
enum AuthIndexWire<'a> {
    Hex(&'a str),
    Number(u64),
}

impl<'a> AuthIndexWire<'a> {
    fn new(hex: &'a str, numeric: bool) -> Self {
        match u64::from_str_radix(hex, 16) {
            Ok(n) if numeric => Self::Number(n),
            _ => Self::Hex(hex),
        }
    }
}

#[derive(Serialize)]
struct FilesWire<'a> {
    files: Vec<EntryWire<'a>>,
}

/// `"HH:MM-HH:MM"` labels of the 20 buckets ending with the current one, in +08:00.
fn bucket_labels(now: DateTime<Utc>) -> (i64, Vec<String>) {
    let current = bucket_id(now);
    let first = current - BUCKETS as i64 + 1;
    let labels = (first..=current)
        .map(|id| {
            let start = DateTime::<Utc>::from_timestamp(id * BUCKET_SECONDS, 0)
                .unwrap_or(now)
                .with_timezone(&shanghai());
            let end = start + Duration::seconds(BUCKET_SECONDS);
            format!("{}-{}", start.format("%H:%M"), end.format("%H:%M"))
        })
        .collect();
    (first, labels)
}

fn entry<'a>(
    record: &'a AccountRecord,
    first_bucket: i64,
    labels: &'a [String],
    numeric_index: bool,
    passive: bool,
) -> EntryWire<'a> {
    let spec = &record.spec;
    let recent_requests = labels
        .iter()
        .enumerate()
        .map(|(i, label)| {
            let (success, failed) = record.bucket(first_bucket + i as i64);
            BucketWire {
                time: label,
                success,
                failed,
            }
        })
        .collect();
    let label = if spec.email.is_empty() {
        spec.provider.as_str()
    } else {
        spec.email.as_str()
    };
    let id_token = (spec.provider == "codex").then(|| IdTokenWire {
        chatgpt_account_id: spec.chatgpt_account_id.as_deref().filter(|s| !s.is_empty()),
        plan_type: &spec.plan,
    });
    EntryWire {
        id: &spec.name,
        auth_index: record
            .auth_index
            .as_deref()
            .map(|i| AuthIndexWire::new(i, numeric_index)),
        name: &spec.name,
        kind: &spec.provider,
        provider: &spec.provider,
        label,
        status: &record.status,
        status_message: &record.status_message,
        disabled: spec.disabled,
        unavailable: record.unavailable,
        runtime_only: false,
        source: "file",
        path: &record.path,
        size: record.size,
        modtime: go_time(record.updated_at),
        success: spec.success,
        failed: spec.failed,
        recent_requests,
        email: &spec.email,
        account_type: "oauth",
        account: &spec.email,
        created_at: go_time(record.created_at),
        updated_at: go_time(record.updated_at),
        last_refresh: record.last_refresh.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        next_retry_after: record.next_retry_after.map(go_time),
        id_token,
        priority: (spec.priority != 0).then_some(spec.priority),
        note: spec.note.as_deref().filter(|n| !n.is_empty()),
        quota: (passive && spec.provider == "codex").then(|| record.passive_quota()),
    }
}

/// Listing sorted by lower-cased name; deleted records hidden; `?name=` / `?auth_index=` exact
/// filters only from v7.2.94 (v7.1.19 ignores the query). Serialised once, under the lock.
fn list_auth_files(shared: &Shared, query: &str, now: DateTime<Utc>) -> Response {
    let ignore = shared.lock().knobs.ignore_list_filters;
    let (name_filter, index_filter) = if shared.config.features.list_filters && !ignore {
        let pairs = query_pairs(query);
        let get = |key| {
            first_query(&pairs, key)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        (get("name"), get("auth_index"))
    } else {
        (None, None)
    };
    let (first_bucket, labels) = bucket_labels(now);
    let state = shared.lock();
    if let Some(garbage) = &state.knobs.listing_garbage {
        return raw_response(
            200,
            Some("text/html; charset=utf-8"),
            garbage.clone().into_bytes(),
        );
    }
    let files = state
        .ordered()
        .filter(|r| !r.deleted)
        .filter(|r| name_filter.as_deref().is_none_or(|n| n == r.spec.name))
        .filter(|r| {
            index_filter
                .as_deref()
                .is_none_or(|i| Some(i) == r.auth_index.as_deref())
        })
        .map(|r| {
            entry(
                r,
                first_bucket,
                &labels,
                state.knobs.numeric_auth_index,
                state.knobs.passive_quota,
            )
        })
        .collect();
    let text = serde_json::to_string(&FilesWire { files })
        .unwrap_or_else(|_| r#"{"files":[]}"#.to_string());
    drop(state);
    raw_response(
        200,
        Some("application/json; charset=utf-8"),
        gin_escape(text).into_bytes(),
    )
}

// ---------------------------------------------------------------------------------------------
// PATCH /auth-files/status (docs/rules/cpa.md §2.2)

fn patch_status(shared: &Shared, body: &[u8], now: DateTime<Utc>) -> Response {
    let with_index = shared.config.features.v7_2_22;
    let parsed = parse_object(body).and_then(|obj| {
        let name = opt_string(&obj, "name")?.unwrap_or_default();
        let index = if with_index {
            opt_string(&obj, "auth_index")?.unwrap_or_default()
        } else {
            String::new()
        };
        Ok((name, index, opt_bool(&obj, "disabled")?))
    });
    let Ok((name, index, disabled)) = parsed else {
        return error(400, "invalid request body");
    };
    let (name, index) = (name.trim(), index.trim());
    if name.is_empty() {
        return error(400, "name is required");
    }
    let Some(disabled) = disabled else {
        return error(400, "disabled is required");
    };
    let mut state = shared.lock();
    let found = if index.is_empty() {
        state.live_mut(name).is_some()
    } else {
        state
            .by_auth_index_mut(index)
            .is_some_and(|r| r.spec.name == name)
    };
    if !found {
        return error(404, "auth file not found");
    }
    if let Some(failure) = injected_failure(&state, name, "failed to update auth") {
        return failure;
    }
    if state.knobs.revert_next.remove(name) {
        return json_response(200, &json!({"status": "ok", "disabled": disabled}));
    }
    if let Some(record) = state.live_mut(name) {
        record.apply_disabled(disabled, now);
    }
    json_response(200, &json!({"status": "ok", "disabled": disabled}))
}

// ---------------------------------------------------------------------------------------------
// PATCH /auth-files/fields (docs/rules/cpa.md §2.3)

/// Typed fields of v7.1.19.
struct TypedFields {
    name: String,
    prefix: Option<String>,
    proxy_url: Option<String>,
    headers: Option<Vec<(String, String)>>,
    priority: Option<i64>,
    note: Option<String>,
}

fn merge_headers(record: &mut AccountRecord, patch: &[(String, String)]) {
    for (key, value) in patch {
        let key = key.trim();
        if key.is_empty() {
            continue;
        }
        let value = value.trim();
        if value.is_empty() {
            record.headers.remove(key);
        } else {
            record.headers.insert(key.to_string(), value.to_string());
        }
    }
}

fn trimmed_or_none(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_string())
}

/// v7.1.19: keys `name`, `prefix`, `proxy_url`, `headers`, `priority` (JSON integer), `note`;
/// others ignored; 0 clears the priority, an empty note clears the note.
fn patch_fields_typed(shared: &Shared, body: &[u8], now: DateTime<Utc>) -> Response {
    let parsed = parse_object(body).and_then(|obj| {
        Ok(TypedFields {
            name: opt_string(&obj, "name")?.unwrap_or_default(),
            prefix: opt_string(&obj, "prefix")?,
            proxy_url: opt_string(&obj, "proxy_url")?,
            headers: opt_string_map(&obj, "headers")?,
            priority: opt_int(&obj, "priority")?,
            note: opt_string(&obj, "note")?,
        })
    });
    let Ok(fields) = parsed else {
        return error(400, "invalid request body");
    };
    let name = fields.name.trim();
    if name.is_empty() {
        return error(400, "name is required");
    }
    let mut state = shared.lock();
    if state.live_mut(name).is_none() {
        return error(404, "auth file not found");
    }
    let nothing = fields.prefix.is_none()
        && fields.proxy_url.is_none()
        && fields.headers.is_none()
        && fields.priority.is_none()
        && fields.note.is_none();
    if nothing {
        return error(400, "no fields to update");
    }
    if let Some(failure) = injected_failure(&state, name, "failed to update auth") {
        return failure;
    }
    if state.knobs.revert_next.remove(name) {
        return json_response(200, &json!({"status": "ok"}));
    }
    let Some(record) = state.live_mut(name) else {
        return error(404, "auth file not found");
    };
    if let Some(prefix) = &fields.prefix {
        record.prefix = trimmed_or_none(prefix);
    }
    if let Some(proxy_url) = &fields.proxy_url {
        record.proxy_url = trimmed_or_none(proxy_url);
    }
    if let Some(headers) = &fields.headers {
        merge_headers(record, headers);
    }
    if let Some(priority) = fields.priority {
        record.spec.priority = priority;
    }
    if let Some(note) = &fields.note {
        record.spec.note = trimmed_or_none(note);
    }
    record.updated_at = now;
    json_response(200, &json!({"status": "ok"}))
}

/// CPA's lenient integer reading of metadata (`authFileIntValue`): numbers (floats truncated)
/// and integer strings (a decimal string is not read); anything else is "no priority".
fn lenient_int(value: &Value) -> Option<i64> {
    match value {
        Value::String(s) => s.trim().parse().ok(),
        _ => codex_json::truncated_integer(value),
    }
}

fn lenient_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "1" | "t" | "true" => Some(true),
            "0" | "f" | "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// v7.1.22+: every key but `name` is written into the metadata; `priority` number or numeric
/// string (0, `null` or junk clear it), `weight` must be a number, `disabled` toggles,
/// `headers` / `headers.<Name>` merge headers.
fn patch_fields_generic(shared: &Shared, body: &[u8], now: DateTime<Utc>) -> Response {
    let mut obj = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => map,
        Ok(Value::Null) => Map::new(),
        _ => return error(400, "invalid request body"),
    };
    let name = match obj.remove("name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.trim().to_string(),
        _ => return error(400, "name is required"),
    };
    if let Some(retry) = obj.get("request_retry")
        && !(retry.is_null() || retry.as_i64().is_some())
    {
        return error(400, "request_retry must be an integer or null");
    }
    let mut state = shared.lock();
    if state.live_mut(&name).is_none() {
        return error(404, "auth file not found");
    }
    for (key, value) in &obj {
        if key.trim().is_empty() {
            return error(400, "field name is required");
        }
        if key.trim() == "weight" && !(value.is_null() || value.is_number()) {
            return error(400, "weight must be an integer");
        }
    }
    if obj.is_empty() {
        return error(400, "no fields to update");
    }
    if let Some(failure) = injected_failure(&state, &name, "failed to update auth") {
        return failure;
    }
    if state.knobs.revert_next.remove(&name) {
        return json_response(200, &json!({"status": "ok"}));
    }
    let Some(record) = state.live_mut(&name) else {
        return error(404, "auth file not found");
    };
    for (key, value) in obj {
        let key = key.trim().to_string();
        match key.as_str() {
            "priority" => record.spec.priority = lenient_int(&value).unwrap_or(0),
            "note" => record.spec.note = value.as_str().and_then(trimmed_or_none),
            "prefix" => record.prefix = value.as_str().and_then(trimmed_or_none),
            "proxy_url" => record.proxy_url = value.as_str().and_then(trimmed_or_none),
            "disabled" => {
                if let Some(disabled) = lenient_bool(&value) {
                    record.apply_disabled(disabled, now);
                }
            }
            "headers" => {
                if let Value::Object(map) = &value {
                    let pairs: Vec<(String, String)> = map
                        .iter()
                        .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                        .collect();
                    merge_headers(record, &pairs);
                }
            }
            _ => {
                if let Some(header_name) = key.strip_prefix("headers.") {
                    if let Some(v) = value.as_str() {
                        merge_headers(record, &[(header_name.to_string(), v.to_string())]);
                    }
                } else {
                    record.metadata.insert(key, value);
                }
            }
        }
    }
    record.updated_at = now;
    json_response(200, &json!({"status": "ok"}))
}

// ---------------------------------------------------------------------------------------------
// DELETE /auth-files (docs/rules/cpa.md §2.4)

fn unsafe_name(name: &str) -> bool {
    name.is_empty() || name.contains('/') || name.contains('\\') || name == "." || name == ".."
}

/// Names from repeated `?name=`, else from a JSON body `{"name","names"}` or a bare array;
/// trimmed, empty ones dropped, duplicates removed.
fn names_to_delete(query: &[(String, String)], body: &[u8]) -> Result<Vec<String>, &'static str> {
    let mut raw: Vec<String> = query
        .iter()
        .filter(|(k, _)| k == "name")
        .map(|(_, v)| v.clone())
        .collect();
    if raw.iter().all(|n| n.trim().is_empty()) {
        raw.clear();
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        if !text.is_empty() {
            match serde_json::from_str::<Value>(text) {
                Ok(Value::Array(items)) => {
                    for item in items {
                        match item {
                            Value::String(s) => raw.push(s),
                            Value::Null => raw.push(String::new()),
                            _ => return Err("invalid request body"),
                        }
                    }
                }
                Ok(Value::Object(obj)) => {
                    let name = opt_string(&obj, "name").map_err(|_| "invalid request body")?;
                    raw.extend(name);
                    match obj.get("names") {
                        None | Some(Value::Null) => {}
                        Some(Value::Array(items)) => {
                            for item in items {
                                match item {
                                    Value::String(s) => raw.push(s.clone()),
                                    Value::Null => {}
                                    _ => return Err("invalid request body"),
                                }
                            }
                        }
                        Some(_) => return Err("invalid request body"),
                    }
                }
                Ok(Value::Null) => {}
                _ => return Err("invalid request body"),
            }
        }
    }
    let mut seen = HashSet::new();
    Ok(raw
        .into_iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty() && seen.insert(n.clone()))
        .collect())
}

fn delete_one(
    state: &mut SimState,
    name: &str,
    now: DateTime<Utc>,
) -> Result<String, (u16, String)> {
    if unsafe_name(name) {
        return Err((400, "invalid name".to_string()));
    }
    if state.live_mut(name).is_none() {
        return Err((404, "auth file not found".to_string()));
    }
    if let Some(&status) = state.knobs.fail_patch.get(name) {
        let message = if status == 404 {
            "auth file not found".to_string()
        } else {
            "failed to remove file: simulated failure".to_string()
        };
        return Err((status, message));
    }
    state.mark_deleted(name, now);
    Ok(name.to_string())
}

fn delete_auth_files(shared: &Shared, query: &str, body: &[u8], now: DateTime<Utc>) -> Response {
    let pairs = query_pairs(query);
    let mut state = shared.lock();
    if matches!(
        first_query(&pairs, "all").as_deref(),
        Some("true" | "1" | "*")
    ) {
        let names: Vec<String> = state
            .ordered()
            .filter(|r| !r.deleted)
            .map(|r| r.spec.name.clone())
            .collect();
        let deleted = names
            .iter()
            .filter(|n| delete_one(&mut state, n, now).is_ok())
            .count();
        return json_response(200, &json!({"status": "ok", "deleted": deleted}));
    }
    let names = match names_to_delete(&pairs, body) {
        Ok(names) => names,
        Err(message) => return error(400, message),
    };
    match names.as_slice() {
        [] => error(400, "invalid name"),
        [single] => match delete_one(&mut state, single, now) {
            Ok(_) => json_response(200, &json!({"status": "ok"})),
            Err((status, message)) => error(status, &message),
        },
        many => {
            let mut files = Vec::new();
            let mut failed = Vec::new();
            for name in many {
                match delete_one(&mut state, name, now) {
                    Ok(deleted) => files.push(deleted),
                    Err((_, message)) => failed.push(json!({"name": name, "error": message})),
                }
            }
            if failed.is_empty() {
                json_response(
                    200,
                    &json!({"status": "ok", "deleted": files.len(), "files": files}),
                )
            } else {
                json_response(
                    207,
                    &json!({"status": "partial", "deleted": files.len(), "files": files, "failed": failed}),
                )
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// POST /api-call (docs/rules/cpa.md §3)

struct ApiCallRequest {
    auth_index: String,
    method: String,
    url: String,
    header: Vec<(String, String)>,
    data: String,
}

fn parse_api_call(body: &[u8]) -> Result<ApiCallRequest, ()> {
    let obj = parse_object(body)?;
    let index = ["auth_index", "authIndex", "AuthIndex"]
        .iter()
        .map(|key| opt_string(&obj, key))
        .collect::<Result<Vec<_>, ()>>()?
        .into_iter()
        .flatten()
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    let data = opt_string(&obj, "data")?.unwrap_or_default();
    Ok(ApiCallRequest {
        auth_index: index,
        method: opt_string(&obj, "method")?.unwrap_or_default(),
        url: opt_string(&obj, "url")?.unwrap_or_default(),
        header: opt_string_map(&obj, "header")?.unwrap_or_default(),
        data,
    })
}

async fn api_call(shared: &Shared, body: &[u8], now: DateTime<Utc>) -> Response {
    let Ok(request) = parse_api_call(body) else {
        return error(400, "invalid body");
    };
    let method = request.method.trim().to_uppercase();
    if method.is_empty() {
        return error(400, "missing method");
    }
    let url = request.url.trim();
    if url.is_empty() {
        return error(400, "missing url");
    }
    let Some(url) = url::Url::parse(url)
        .ok()
        .filter(|u| u.host_str().is_some_and(|h| !h.is_empty()))
    else {
        return error(400, "invalid url");
    };
    shared.api_calls.fetch_add(1, Ordering::SeqCst);
    let reply = {
        let mut state = shared.lock();
        if let Some(left) = state.knobs.die_after {
            if left <= 1 {
                state.knobs.die_after = None;
                state.knobs.down = true;
            } else {
                state.knobs.die_after = Some(left - 1);
            }
        }
        if let Some((left, mode)) = state.knobs.mode_after {
            state.knobs.mode_after = (left > 1).then_some((left - 1, mode));
            if left <= 1 {
                state.knobs.mode = mode;
            }
        }
        let mut account = if request.auth_index.is_empty() {
            None
        } else {
            state.by_auth_index_mut(&request.auth_index)
        };
        let headers: Vec<(String, String)> = match account.as_deref() {
            Some(record) => request
                .header
                .iter()
                .map(|(k, v)| (k.clone(), v.replace("$TOKEN$", &record.token)))
                .collect(),
            None => request.header,
        };
        let outbound = Outbound {
            method: &method,
            path: url.path(),
            headers: &headers,
            body: &request.data,
        };
        upstream::respond(account.take().map(AccountRecord::upstream), &outbound, now)
    };
    match reply {
        Reply::Answer(answer) => json_response(
            200,
            &json!({"status_code": answer.status, "header": answer.headers, "body": answer.body}),
        ),
        Reply::TransportFailure => error(502, "request failed"),
        Reply::Hang => {
            tokio::select! {
                _ = tokio::time::sleep(API_CALL_TIMEOUT) => {}
                _ = shared.cancel.cancelled() => {}
                _ = shared.release.cancelled() => {}
            }
            error(502, "request failed")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Usage queue, small setters, reset-quota (docs/rules/cpa.md §5.2, §6.1, §2.5)

fn usage_queue(shared: &Shared, query: &str, now: DateTime<Utc>) -> Response {
    let pairs = query_pairs(query);
    let count = match first_query(&pairs, "count")
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
    {
        None => 1,
        Some(raw) => match raw.parse::<i64>() {
            Ok(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
            _ => return error(400, "count must be a positive integer"),
        },
    };
    let records = shared.lock().pop_usage(count, now);
    json_response(200, &Value::Array(records))
}

fn set_strategy(shared: &Shared, body: &[u8]) -> Response {
    let Ok(Some(value)) = parse_object(body).and_then(|o| opt_string(&o, "value")) else {
        return error(400, "invalid body");
    };
    let strategy = match value.trim().to_ascii_lowercase().as_str() {
        "rr" | "roundrobin" | "round-robin" => "round-robin",
        "ff" | "fillfirst" | "fill-first" => "fill-first",
        _ => return error(400, "invalid strategy"),
    };
    shared.lock().routing_strategy = strategy.to_string();
    json_response(200, &json!({"status": "ok"}))
}

fn reset_quota(shared: &Shared, body: &[u8]) -> Response {
    let Ok(index) = parse_object(body).and_then(|o| opt_string(&o, "auth_index")) else {
        return error(400, "invalid body");
    };
    let index = index.unwrap_or_default().trim().to_string();
    if index.is_empty() {
        return error(400, "auth_index is required");
    }
    match shared.lock().reset_quota(&index) {
        Some(models) => json_response(
            200,
            &json!({"status": "ok", "auth_index": index, "models": models}),
        ),
        None => error(404, "auth not found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_print_like_go() {
        assert_eq!(go_duration(1800), "30m0s");
        assert_eq!(go_duration(1752), "29m12s");
        assert_eq!(go_duration(45), "45s");
        assert_eq!(go_duration(3600), "1h0m0s");
    }

    #[test]
    fn gin_escape_rewrites_html_characters_inside_strings() {
        assert_eq!(
            gin_escape(r#"{"b":"<a&b>"}"#.to_string()),
            r#"{"b":"\u003ca\u0026b\u003e"}"#
        );
    }

    #[test]
    fn keys_come_from_bearer_bare_authorization_or_x_management_key() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("bEaReR k1"));
        assert_eq!(provided_key(&h), "k1");
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("k2"));
        assert_eq!(provided_key(&h), "k2");
        let mut h = HeaderMap::new();
        h.insert("x-management-key", HeaderValue::from_static("k3"));
        assert_eq!(provided_key(&h), "k3");
    }
}
