//! The router listener's HTTP surface (docs/rules/router.md §5): routes, client-key auth (hashes only;
//! `open` mode skips it), the 8 MiB body limit, request parsing and session keys, and the
//! router's answers to what it cannot route (401, 400, 404, 405, 413, built by `answer`) and to
//! `GET /v1/models[/{model}]`. The top of the router: it hands parsed requests to `attempt`.
//! Must not: log or echo a key or a request body.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::Shared;
use super::answer::error;
use super::attempt::{self, ClientRequest};
use super::head::{RequestHead, SESSION_HEADERS};
use crate::core::affinity::{KeyInput, session_key};
use crate::core::router::{Api, RouterSpec, key_hash, key_hash_in};

/// The axum app of the router listener. A known path asked with another method answers 405
/// with `Allow` (axum fills it in from the route's methods), any other path 404, both in the
/// OpenAI error shape with `x-quota-patrol-attempts: 0` (what an SDK parses; docs/router.md
/// "Response headers").
pub(crate) fn app(shared: Arc<Shared>) -> axum::Router {
    let limit = shared.settings.body_limit_bytes;
    axum::Router::new()
        .route("/v1/chat/completions", post(chat).fallback(wrong_method))
        .route("/v1/responses", post(responses).fallback(wrong_method))
        .route(
            "/v1/responses/compact",
            post(compact).fallback(wrong_method),
        )
        .route("/v1/models", get(models).fallback(wrong_method))
        .route("/v1/models/{*model}", get(model).fallback(wrong_method))
        .layer(DefaultBodyLimit::max(limit))
        .fallback(|| async {
            error(
                404,
                "not_found",
                "invalid_request_error",
                "no such route: the router serves POST /v1/chat/completions, POST /v1/responses, \
                 POST /v1/responses/compact, GET /v1/models and GET /v1/models/{model}",
                0,
            )
        })
        .with_state(shared)
}

/// A known path with a method it does not serve: 405 (the route adds `Allow`); 401 first
/// without a known key.
async fn wrong_method(_: Authorized) -> Response {
    error(
        405,
        "method_not_allowed",
        "invalid_request_error",
        "this method is not served on this path (see the Allow header)",
        0,
    )
}

/// Client auth (docs/rules/router.md §5): `Authorization: Bearer <router key>` whose SHA-256 is
/// in the key set; `open` mode lets every request through. An extractor, not a middleware: it
/// runs before the body is read (axum runs head extractors first), without the boxed service a
/// middleware layer costs per request (docs/benchmarks.md, router_external profile). Rejection:
/// 401 `invalid_api_key` in the OpenAI shape, counted in
/// `quota_patrol_router_requests_total{status="401"}`.
struct Authorized;

impl FromRequestParts<Arc<Shared>> for Authorized {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        shared: &Arc<Shared>,
    ) -> Result<Self, Self::Rejection> {
        if shared.settings.open {
            return Ok(Authorized);
        }
        let known = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|k| known_key(&shared.keys.load(), k.trim()));
        if known {
            return Ok(Authorized);
        }
        metrics::counter!("quota_patrol_router_requests_total", "status" => "401").increment(1);
        Err(error(
            401,
            "invalid_api_key",
            "invalid_request_error",
            "a valid router key is required: Authorization: Bearer <key>",
            0,
        ))
    }
}

/// Whether `key`'s SHA-256 (`core::router::key_hash`) is in `hashes`, hashed on the stack.
fn known_key(hashes: &std::collections::HashSet<String>, key: &str) -> bool {
    hashes.contains(key_hash_in(key, &mut [0; 64]))
}

async fn chat(
    _: Authorized,
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(shared, Api::ChatCompletions, headers, body).await
}

async fn responses(
    _: Authorized,
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(shared, Api::Responses, headers, body).await
}

/// `POST /v1/responses/compact` (the Codex CLI's remote compaction v1,
/// codex-rs/codex-api/src/endpoint/compact.rs; Codex CLI 0.171 compacts through
/// `/v1/responses` with a `compaction_trigger` input item instead): served like
/// `/v1/responses` — the same session key, attempt loop and usage record — to
/// `{base}/responses/compact`.
async fn compact(
    _: Authorized,
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(shared, Api::ResponsesCompact, headers, body).await
}

/// Parses one request (413 / 400 on a bad body), derives its session key and serves it.
async fn handle(
    shared: Arc<Shared>,
    api: Api,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let at = shared.clock.now();
    shared.counters.requests.fetch_add(1, Ordering::Relaxed);
    let resp = match parse(&shared, api, headers, body, started, at) {
        Ok(req) => attempt::serve(shared.clone(), req).await,
        Err(resp) => {
            shared.send_usage(unrouted(api, at, started, resp.status().as_u16()));
            *resp
        }
    };
    if resp.status() == StatusCode::OK {
        shared.hot().requests_ok.increment(1);
    } else {
        metrics::counter!("quota_patrol_router_requests_total", "status" => resp.status().as_str().to_string())
            .increment(1);
    }
    resp
}

/// The request, or the router's answer to a body it cannot route.
fn parse(
    shared: &Shared,
    api: Api,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    started: Instant,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<ClientRequest, Box<Response>> {
    let body = body.map_err(|r| {
        Box::new(if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            let limit = shared.settings.body_limit_bytes;
            error(
                413,
                "request_too_large",
                "invalid_request_error",
                &format!("the request body is larger than {limit} bytes"),
                0,
            )
        } else {
            invalid("the request body cannot be read")
        })
    })?;
    let head = RequestHead::parse(&body)
        .map_err(|_| Box::new(invalid("the request body is not valid JSON")))?;
    let model = head
        .model()
        .ok_or_else(|| Box::new(invalid("the request body has no \"model\" string")))?
        .to_string();
    let header = SESSION_HEADERS
        .iter()
        .find_map(|h| headers.get(*h)?.to_str().ok());
    let previous_response = match api {
        Api::Responses | Api::ResponsesCompact => head
            .previous_response_id()
            .and_then(|id| shared.links.lock().expect("links lock").get(id)),
        Api::ChatCompletions => None,
    };
    let key_body = head.key_body();
    let key = session_key(&KeyInput {
        header,
        body: &key_body,
        api,
        previous_response,
    });
    Ok(ClientRequest {
        api,
        model,
        body,
        headers,
        key,
        // Only the per-request rows store the session key's hash: without them, no SHA-256
        // on the request path.
        key_hash: key
            .filter(|_| shared.settings.usage_request_rows)
            .map(|k| key_hash(&format!("{:016x}", k.hash))),
        at,
        started,
    })
}

/// The usage record of an authenticated request the router answered itself before routing
/// (400 unreadable / invalid JSON / no model, 413): no model known, no account, 0 attempts
/// (docs/rules/router.md §5 "one record per client request"). 401s get none: an unauthenticated flood
/// must not turn into database writes.
fn unrouted(
    api: Api,
    at: chrono::DateTime<chrono::Utc>,
    started: Instant,
    status: u16,
) -> crate::core::router::UsageRecord {
    crate::core::router::UsageRecord {
        at,
        api,
        requested_model: String::new(),
        pool: None,
        model: None,
        account: None,
        session_key_hash: None,
        ok: false,
        status,
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_tokens: 0,
        attempts: 0,
        duration_ms: started.elapsed().as_millis() as u64,
        ttfb_ms: None,
    }
}

fn invalid(message: &str) -> Response {
    error(400, "invalid_request", "invalid_request_error", message, 0)
}

/// The model names the router serves: chain names, then pool models, each once.
fn served_models(spec: &RouterSpec) -> Vec<&str> {
    let mut ids: Vec<&str> = spec.chains.iter().map(|c| c.name.as_str()).collect();
    for p in &spec.pools {
        for m in &p.models {
            if !ids.contains(&m.as_str()) {
                ids.push(m);
            }
        }
    }
    ids
}

/// The OpenAI model object of a served name (`created` 0: the router does not know it).
fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 0, "owned_by": "quota-patrol"})
}

/// `GET /v1/models`: chain names, then pool models (docs/rules/router.md §5), as OpenAI model objects.
async fn models(_: Authorized, State(shared): State<Arc<Shared>>) -> Response {
    let spec = shared.lanes.load().spec.clone();
    let data: Vec<Value> = served_models(&spec).into_iter().map(model_object).collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `GET /v1/models/{model}` (the SDKs' `models.retrieve`): the model object of a chain or pool
/// model name; any other name 404 `model_not_found`, as OpenAI answers.
async fn model(
    _: Authorized,
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
) -> Response {
    let spec = shared.lanes.load().spec.clone();
    if served_models(&spec).contains(&id.as_str()) {
        axum::Json(model_object(&id)).into_response()
    } else {
        error(
            404,
            "model_not_found",
            "invalid_request_error",
            &format!("the model {id:?} is not served by this router"),
            0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_known_by_the_same_hash_the_key_set_holds() {
        let hashes = std::collections::HashSet::from([key_hash("sk-router-1")]);
        assert!(known_key(&hashes, "sk-router-1"));
        assert!(!known_key(&hashes, "sk-router-2"));
        assert!(!known_key(&hashes, ""));
    }
}
