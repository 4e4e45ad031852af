//! A fake OpenAI-compatible upstream on 127.0.0.1 for the router's tests, the demo and the load
//! benchmark: `POST /v1/chat/completions` and `POST /v1/responses` (JSON, or SSE when the body
//! says `"stream": true`; the Responses stream is the full event sequence Codex CLI 0.171 and the
//! OpenAI SDKs read), Codex's compactions (`POST /v1/responses/compact`, and remote compaction v2:
//! a `/v1/responses` request whose input holds a `compaction_trigger` item) and `GET /v1/models`,
//! plus a queue of scripted faults (quota 429s, error frames, broken, stalled and slow streams;
//! docs/rules/router.md §3, §5) and counters tests assert on (calls per route, cancelled streams, the last
//! body, headers and `Authorization`).
//!
//! It owns no routing logic. The fast path ([`Step::Ok`]) renders pre-serialised templates (only
//! the model, the ids, `created`, the text and sequence numbers are filled in per request) and
//! logs nothing.
//! It reads time only through the injected [`Clock`](quota_patrol_core::clock::Clock) (`resets_at`,
//! `created`); the std clock is used for nothing but the scripted delays (tokio timers).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use quota_patrol_core::clock::{SharedClock, SystemClock};

/// Prompt tokens every answer reports (`usage.prompt_tokens` / `usage.input_tokens`).
pub const PROMPT_TOKENS: u64 = 12;
/// Completion tokens every answer reports (`usage.completion_tokens` / `usage.output_tokens`).
pub const COMPLETION_TOKENS: u64 = 7;
/// The assistant text of every successful answer (the streamed deltas concatenate to it).
pub const ANSWER_TEXT: &str = "Hello from the fake upstream.";
/// Largest request body accepted (the router forwards up to 8 MiB, docs/rules/router.md §5).
const BODY_LIMIT: usize = 16 * 1024 * 1024;

/// One scripted answer of the fake upstream (contract.md (E)). Steps are consumed one per
/// inference request, in order; when the queue is empty every request gets [`Step::Ok`].
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// 200 JSON (`chat.completion` / `response`), or SSE when the request says `stream: true`:
    /// chat chunks (role, 3 content deltas, a final chunk with usage) then `data: [DONE]`;
    /// Responses events `response.created`, `response.in_progress`,
    /// `response.output_item.added` (an assistant `message`), `response.content_part.added`,
    /// 2 × `response.output_text.delta`, `response.output_text.done`,
    /// `response.content_part.done`, `response.output_item.done`, `response.completed` (the
    /// message in `response.output`, usage), no `[DONE]`. A compaction is answered with one
    /// `compaction` item instead of the message (see [`FakeUpstream::compaction_triggers`]).
    Ok,
    /// A fixed answer: `status`, extra `headers` (e.g. `retry-after`, `x-codex-*`), `body` with
    /// `content_type`.
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
        content_type: String,
    },
    /// 429 with Codex's quota body: `{"error":{"type":"usage_limit_reached","message",
    /// "plan_type":"plus","resets_at":<unix s>,"resets_in_seconds":N}}` (docs/rules/router.md §3 quota).
    UsageLimitJson { resets_in_seconds: i64 },
    /// 200 SSE whose first (and only) event is that usage-limit error, before any content
    /// (docs/rules/router.md §3 "error event before any content"). Data: `{"type":"error","error":{..}}`;
    /// on `/v1/responses` under `event: error`.
    UsageLimitFrame { resets_in_seconds: i64 },
    /// An informational `codex.rate_limits` event (windows below 100 %), then the normal stream.
    /// A non-streaming request gets the normal JSON.
    RateLimitInfoThenContent,
    /// Streaming: the role frame and one content chunk, then the connection drops (no clean end,
    /// no `[DONE]`). Non-streaming: the first half of the JSON, then the drop.
    BreakAfterFirstChunk,
    /// 200 headers at once, then nothing until `first_byte_after` has passed, then the normal
    /// body. `Duration::MAX` stalls until the client goes away or the upstream stops.
    Stall { first_byte_after: Duration },
    /// Streaming: the role frame and the first content chunk at once, then one more content
    /// chunk every `gap` (`chunks` content chunks in all, at least 1), the end right after the
    /// last. Non-streaming: the JSON in `chunks` pieces, one every `gap`.
    SlowStream { chunks: usize, gap: Duration },
}

/// A running fake upstream (one listener = one upstream account; start several for several
/// accounts). Dropping it stops the server.
pub struct FakeUpstream {
    shared: Arc<Shared>,
    addr: SocketAddr,
    task: Option<JoinHandle<()>>,
}

/// The inference routes of the fake upstream (`GET /v1/models` is not one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/responses` (compaction-v2 requests included).
    Responses,
    /// `POST /v1/responses/compact` (remote compaction v1; Codex CLI 0.171 no longer calls it).
    ResponsesCompact,
}

impl Route {
    fn index(self) -> usize {
        self as usize
    }
}

struct Shared {
    script: Mutex<VecDeque<Step>>,
    calls: AtomicU64,
    /// Per [`Route`], in its declaration order.
    route_calls: [AtomicU64; 3],
    compaction_triggers: AtomicU64,
    cancelled: watch::Sender<u64>,
    last: Mutex<Last>,
    templates: ArcSwap<Templates>,
    models: ArcSwap<Bytes>,
    clock: SharedClock,
    /// Cancelled by `stop`/drop: ends every delayed stream (not counted as cancelled).
    stop: CancellationToken,
}

#[derive(Default)]
struct Last {
    body: Option<Bytes>,
    authorization: Option<String>,
    headers: HeaderMap,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FakeUpstream {
    /// Binds 127.0.0.1:0 and serves on the current Tokio runtime; returns once the socket is
    /// bound (requests may be sent at once). Errors: the bind fails.
    pub async fn start() -> std::io::Result<FakeUpstream> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Like [`FakeUpstream::start`] on `addr` (e.g. a fixed port for the demo).
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<FakeUpstream> {
        Self::start_with_clock(addr, Arc::new(SystemClock)).await
    }

    /// Like [`FakeUpstream::start_on`], reading "now" (for `resets_at`, `created`) from `clock`.
    pub async fn start_with_clock(
        addr: SocketAddr,
        clock: SharedClock,
    ) -> std::io::Result<FakeUpstream> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script: Mutex::new(VecDeque::new()),
            calls: AtomicU64::new(0),
            route_calls: Default::default(),
            compaction_triggers: AtomicU64::new(0),
            cancelled: watch::Sender::new(0),
            last: Mutex::new(Last::default()),
            templates: ArcSwap::from_pointee(Templates::build(0)),
            models: ArcSwap::from_pointee(models_body(&["gpt-5", "gpt-5-codex"])),
            clock,
            stop: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/responses", post(responses))
            .route("/v1/responses/compact", post(responses_compact))
            .route("/v1/models", get(list_models))
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            .with_state(shared.clone());
        let shutdown = shared.stop.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await;
        });
        Ok(FakeUpstream {
            shared,
            addr,
            task: Some(task),
        })
    }

    /// The API root an upstream account points at: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The bound socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues answers, one per inference request, after any already queued; then back to Ok.
    pub fn script(&self, steps: impl IntoIterator<Item = Step>) {
        lock(&self.shared.script).extend(steps);
    }

    /// Inference requests received (every [`Route`]; `/v1/models` not counted).
    pub fn calls(&self) -> u64 {
        self.shared.calls.load(Ordering::SeqCst)
    }

    /// Inference requests received on `route`.
    pub fn calls_on(&self, route: Route) -> u64 {
        self.shared.route_calls[route.index()].load(Ordering::SeqCst)
    }

    /// `POST /v1/responses` requests whose `input` held a `{"type": "compaction_trigger"}` item:
    /// Codex's remote compaction v2 (Codex CLI 0.171 codex-rs/core/src/compact_remote_v2.rs; it
    /// sends it for providers it takes for OpenAI or Azure, e.g. `name = "OpenAI"`). They are
    /// answered with one `compaction` output item (`id` = `encrypted_content` =
    /// `cmp_simNNNNNNNN`) instead of the message, and counted in `calls_on(Route::Responses)`.
    pub fn compaction_triggers(&self) -> u64 {
        self.shared.compaction_triggers.load(Ordering::SeqCst)
    }

    /// Streamed bodies (the delayed steps: `Stall`, `SlowStream`, `BreakAfterFirstChunk`) whose
    /// client went away before their end. A scripted break or [`FakeUpstream::stop`] does not
    /// count. `Ok` answers are sent whole and never count.
    pub fn cancelled(&self) -> u64 {
        *self.shared.cancelled.borrow()
    }

    /// Waits until [`FakeUpstream::cancelled`] reaches `n` (wrap it in a timeout in tests).
    pub async fn wait_cancelled(&self, n: u64) {
        let mut rx = self.shared.cancelled.subscribe();
        let _ = rx.wait_for(|c| *c >= n).await;
    }

    /// The last inference request body as JSON (`None` before any, or when it was not JSON).
    pub fn last_request(&self) -> Option<Value> {
        let body = lock(&self.shared.last).body.clone()?;
        serde_json::from_slice(&body).ok()
    }

    /// The `Authorization` header of the last inference request, as received.
    pub fn last_authorization(&self) -> Option<String> {
        lock(&self.shared.last).authorization.clone()
    }

    /// The request headers of the last inference request, as received (empty before any).
    pub fn last_headers(&self) -> HeaderMap {
        lock(&self.shared.last).headers.clone()
    }

    /// The `cached_tokens` reported in usage from now on (`prompt_tokens_details.cached_tokens`,
    /// `input_tokens_details.cached_tokens`); 0 at start (docs/rules/router.md §2.3 cache samples).
    pub fn set_cached_tokens(&self, n: u64) {
        self.shared.templates.store(Arc::new(Templates::build(n)));
    }

    /// The model ids `GET /v1/models` lists (default `gpt-5`, `gpt-5-codex`). Requests for other
    /// models are answered all the same.
    pub fn set_models(&self, models: &[&str]) {
        self.shared.models.store(Arc::new(models_body(models)));
    }

    /// Stops the server: pending delayed streams end at once, connections get two seconds to
    /// close. The port is closed when this returns.
    pub async fn stop(mut self) {
        self.shared.stop.cancel();
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(2), &mut task)
                .await
                .is_err()
        {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.shared.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn models_body(models: &[&str]) -> Bytes {
    let data: Vec<Value> = models
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "fake-upstream"}))
        .collect();
    Bytes::from(json!({"object": "list", "data": data}).to_string())
}

async fn list_models(State(shared): State<Arc<Shared>>) -> Response {
    full(
        StatusCode::OK,
        "application/json",
        Body::from(shared.models.load().as_ref().clone()),
    )
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(&shared, Route::ChatCompletions, &headers, body)
}

async fn responses(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(&shared, Route::Responses, &headers, body)
}

async fn responses_compact(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(&shared, Route::ResponsesCompact, &headers, body)
}

/// The shape of an answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Responses,
    /// Remote compaction v2: a Responses answer whose output is one `compaction` item.
    Compaction,
    /// Remote compaction v1 (`/v1/responses/compact`): JSON `{"object":"response.compaction",
    /// "output":[<compaction item>],"usage"}`, never a stream.
    CompactV1,
}

/// The input item Codex appends to ask for a compaction (remote compaction v2). Found as a JSON
/// string token: inside a string value its quotes would be escaped, so text cannot match.
const COMPACTION_TRIGGER: &[u8] = b"\"compaction_trigger\"";

/// The only fields read from a request body (a borrowing parse: no allocation for the rest).
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(default)]
    stream: Option<bool>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
}

/// Serial of the response ids (`chatcmpl-sim…`, `resp_sim…`), process-wide: ids are unique
/// across every fake upstream of a process, as a real upstream's are (the router links
/// Responses ids to sessions, so two upstreams answering the same id would cross them).
static NEXT_RESPONSE_ID: AtomicU64 = AtomicU64::new(0);

/// Answers one inference request: records it, takes the next scripted step, renders it.
fn answer(shared: &Arc<Shared>, route: Route, headers: &HeaderMap, body: Bytes) -> Response {
    let authorization = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let step = lock(&shared.script).pop_front().unwrap_or(Step::Ok);
    let probe = serde_json::from_slice::<Probe>(&body).ok();
    {
        let mut last = lock(&shared.last);
        last.body = Some(body.clone());
        last.authorization = authorization;
        last.headers = headers.clone();
    }
    shared.calls.fetch_add(1, Ordering::SeqCst);
    shared.route_calls[route.index()].fetch_add(1, Ordering::SeqCst);
    let Some(probe) = probe else {
        return invalid_json();
    };
    let api = match route {
        Route::ChatCompletions => Api::Chat,
        Route::ResponsesCompact => Api::CompactV1,
        Route::Responses if memchr::memmem::find(&body, COMPACTION_TRIGGER).is_some() => {
            shared.compaction_triggers.fetch_add(1, Ordering::SeqCst);
            Api::Compaction
        }
        Route::Responses => Api::Responses,
    };
    let now = shared.clock.now();
    let serial = NEXT_RESPONSE_ID.fetch_add(1, Ordering::Relaxed) + 1;
    let (id, item_id) = match api {
        Api::Chat => (format!("chatcmpl-sim{serial:08}"), String::new()),
        Api::Responses => (
            format!("resp_sim{serial:08}"),
            format!("msg_sim{serial:08}"),
        ),
        Api::Compaction | Api::CompactV1 => (
            format!("resp_sim{serial:08}"),
            format!("cmp_sim{serial:08}"),
        ),
    };
    let request = Request {
        api,
        stream: probe.stream.unwrap_or(false) && api != Api::CompactV1,
        ctx: Ctx {
            model: probe.model.as_deref().unwrap_or("gpt-sim"),
            id: &id,
            item_id: &item_id,
            text: Cow::Borrowed(ANSWER_TEXT),
            created: now.timestamp(),
            seq: 0,
        },
        now,
    };
    respond(shared, step, request)
}

struct Request<'a> {
    api: Api,
    stream: bool,
    ctx: Ctx<'a>,
    now: DateTime<Utc>,
}

fn respond(shared: &Arc<Shared>, step: Step, mut req: Request) -> Response {
    let templates = shared.templates.load();
    let shapes = templates.for_api(req.api);
    let ok_type = if req.stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let ok_body = |ctx: &mut Ctx| {
        let template = if req.stream {
            &shapes.sse
        } else {
            &shapes.json
        };
        Bytes::from(template.render(ctx))
    };
    match step {
        Step::Ok => full(StatusCode::OK, ok_type, Body::from(ok_body(&mut req.ctx))),
        Step::Status {
            status,
            headers,
            body,
            content_type,
        } => status_answer(status, &headers, body, &content_type),
        Step::UsageLimitJson { resets_in_seconds } => full(
            StatusCode::TOO_MANY_REQUESTS,
            "application/json",
            Body::from(usage_limit(req.now, resets_in_seconds).to_string()),
        ),
        Step::UsageLimitFrame { resets_in_seconds } => {
            let mut error = usage_limit(req.now, resets_in_seconds);
            error["type"] = json!("error");
            let frame = sse_event(req.api, "error", &error);
            full(StatusCode::OK, "text/event-stream", Body::from(frame))
        }
        Step::RateLimitInfoThenContent if req.stream => {
            let mut body = sse_event(req.api, "codex.rate_limits", &rate_limits(req.now));
            body.extend_from_slice(&ok_body(&mut req.ctx));
            full(StatusCode::OK, ok_type, Body::from(body))
        }
        Step::RateLimitInfoThenContent => {
            full(StatusCode::OK, ok_type, Body::from(ok_body(&mut req.ctx)))
        }
        Step::BreakAfterFirstChunk => {
            let first = if req.stream {
                Template::concat(&[&shapes.head, &shapes.delta]).render(&mut req.ctx)
            } else {
                let json = shapes.json.render(&mut req.ctx);
                json[..json.len() / 2].to_vec()
            };
            let plan = Plan::new(vec![(Duration::ZERO, Bytes::from(first))], End::Break);
            streamed(shared, ok_type, plan)
        }
        Step::Stall { first_byte_after } => {
            let body = ok_body(&mut req.ctx);
            streamed(
                shared,
                ok_type,
                Plan::new(vec![(first_byte_after, body)], End::Clean),
            )
        }
        Step::SlowStream { chunks, gap } => {
            let plan = slow_plan(shapes, &mut req, chunks.max(1), gap);
            streamed(shared, ok_type, plan)
        }
    }
}

fn slow_plan(shapes: &Shapes, req: &mut Request, chunks: usize, gap: Duration) -> Plan {
    let mut pieces = Vec::with_capacity(chunks);
    if req.stream {
        // The closing events repeat the whole text: the `chunks` deltas of "tok ".
        req.ctx.text = Cow::Owned(SLOW_DELTA.repeat(chunks));
        let mut first = shapes.head.render(&mut req.ctx);
        first.extend(shapes.delta.render(&mut req.ctx));
        pieces.push((Duration::ZERO, Bytes::from(first)));
        for i in 1..chunks {
            let mut piece = shapes.delta.render(&mut req.ctx);
            if i + 1 == chunks {
                piece.extend(shapes.tail.render(&mut req.ctx));
            }
            pieces.push((gap, Bytes::from(piece)));
        }
        if chunks == 1 {
            pieces.push((
                Duration::ZERO,
                Bytes::from(shapes.tail.render(&mut req.ctx)),
            ));
        }
    } else {
        let json = Bytes::from(shapes.json.render(&mut req.ctx));
        let size = json.len().div_ceil(chunks);
        for (i, start) in (0..json.len()).step_by(size.max(1)).enumerate() {
            let delay = if i == 0 { Duration::ZERO } else { gap };
            pieces.push((delay, json.slice(start..(start + size).min(json.len()))));
        }
    }
    Plan::new(pieces, End::Clean)
}

/// Codex's quota answer (docs/rules/router.md §3: `usage_limit_reached` with `resets_at` /
/// `resets_in_seconds`).
fn usage_limit(now: DateTime<Utc>, resets_in_seconds: i64) -> Value {
    json!({"error": {
        "type": "usage_limit_reached",
        "message": "The usage limit has been reached",
        "plan_type": "plus",
        "resets_at": now.timestamp() + resets_in_seconds,
        "resets_in_seconds": resets_in_seconds,
    }})
}

/// An informational Codex rate-limit event (both windows below 100 %).
fn rate_limits(now: DateTime<Utc>) -> Value {
    let t = now.timestamp();
    json!({
        "type": "codex.rate_limits",
        "plan_type": "plus",
        "rate_limits": {
            "allowed": true,
            "limit_reached": false,
            "primary": {"used_percent": 42.0, "window_minutes": 300, "reset_at": t + 3_600},
            "secondary": {"used_percent": 17.0, "window_minutes": 10_080, "reset_at": t + 86_400},
        },
    })
}

/// One SSE event: `data: <json>` on chat completions, `event: <name>` + `data:` on Responses.
fn sse_event(api: Api, name: &str, data: &Value) -> Vec<u8> {
    match api {
        Api::Chat => format!("data: {data}\n\n").into_bytes(),
        Api::Responses | Api::Compaction | Api::CompactV1 => {
            format!("event: {name}\ndata: {data}\n\n").into_bytes()
        }
    }
}

fn invalid_json() -> Response {
    let body = json!({"error": {
        "message": "We could not parse the JSON body of your request.",
        "type": "invalid_request_error",
        "param": null,
        "code": null,
    }});
    full(
        StatusCode::BAD_REQUEST,
        "application/json",
        Body::from(body.to_string()),
    )
}

fn status_answer(
    status: u16,
    headers: &[(String, String)],
    body: String,
    content_type: &str,
) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = full(status, content_type, Body::from(body));
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

fn full(status: StatusCode, content_type: &str, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let value = HeaderValue::try_from(content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    response.headers_mut().insert(CONTENT_TYPE, value);
    if content_type == "text/event-stream" {
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    response
}

// ---------------------------------------------------------------------------------------------
// Delayed streams and the cancelled counter.

#[derive(Clone, Copy)]
enum End {
    /// The body ends normally (chunked terminator sent).
    Clean,
    /// The body errors: hyper drops the connection without the terminator.
    Break,
}

/// A streamed body: pieces, each sent after its delay, then the end.
struct Plan {
    pieces: VecDeque<(Duration, Bytes)>,
    end: End,
}

impl Plan {
    fn new(pieces: Vec<(Duration, Bytes)>, end: End) -> Self {
        Self {
            pieces: pieces.into(),
            end,
        }
    }
}

/// Counts the stream as cancelled when dropped before its end.
struct StreamGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.cancelled.send_modify(|c| *c += 1);
        }
    }
}

fn streamed(shared: &Arc<Shared>, content_type: &str, plan: Plan) -> Response {
    let guard = StreamGuard {
        shared: shared.clone(),
        finished: false,
    };
    let stop = shared.stop.clone();
    let stream = futures_util::stream::unfold(Some((plan, guard)), move |state| {
        let stop = stop.clone();
        async move {
            let (mut plan, mut guard) = state?;
            let Some((delay, bytes)) = plan.pieces.pop_front() else {
                guard.finished = true;
                return match plan.end {
                    End::Clean => None,
                    End::Break => {
                        // One `Pending` first: hyper flushes what it buffered before it sees the
                        // error (an error drops the connection with its unsent buffer).
                        tokio::task::yield_now().await;
                        Some((Err(std::io::Error::other("scripted break")), None))
                    }
                };
            };
            if !delay.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop.cancelled() => {
                        guard.finished = true;
                        return Some((Err(std::io::Error::other("fake upstream stopped")), None));
                    }
                }
            }
            Some((Ok(bytes), Some((plan, guard))))
        }
    });
    full(StatusCode::OK, content_type, Body::from_stream(stream))
}

// ---------------------------------------------------------------------------------------------
// Pre-serialised answers.

const MODEL: &str = "\"@@MODEL@@\"";
const ID: &str = "\"@@ID@@\"";
const ITEM: &str = "\"@@ITEM@@\"";
const TEXT: &str = "\"@@TEXT@@\"";
const CREATED: &str = "\"@@CREATED@@\"";
const SEQ: &str = "\"@@SEQ@@\"";
/// The text of each delta of the scripted slow and broken streams.
const SLOW_DELTA: &str = "tok ";

/// Per-request values filled into a template.
struct Ctx<'a> {
    model: &'a str,
    /// The response id (`chatcmpl-sim…`, `resp_sim…`).
    id: &'a str,
    /// The output item's id (`msg_sim…`, `cmp_sim…`); empty on chat completions.
    item_id: &'a str,
    /// The whole output text (the deltas concatenated), repeated by the closing events.
    text: Cow<'a, str>,
    created: i64,
    /// The next Responses `sequence_number`.
    seq: u64,
}

#[derive(Debug, Clone)]
enum Part {
    Lit(Bytes),
    Model,
    Id,
    Item,
    Text,
    Created,
    Seq,
}

/// Serialised bytes with holes for the per-request values.
#[derive(Debug, Clone, Default)]
struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Splits `text` at the placeholders (`"@@MODEL@@"` etc., quotes included).
    fn parse(text: &str) -> Template {
        let mut parts = Vec::new();
        let mut rest = text;
        loop {
            let next = [
                (MODEL, Part::Model),
                (ID, Part::Id),
                (ITEM, Part::Item),
                (TEXT, Part::Text),
                (CREATED, Part::Created),
                (SEQ, Part::Seq),
            ]
            .into_iter()
            .filter_map(|(p, part)| rest.find(p).map(|at| (at, p.len(), part)))
            .min_by_key(|(at, _, _)| *at);
            let Some((at, len, part)) = next else {
                if !rest.is_empty() {
                    parts.push(Part::Lit(Bytes::copy_from_slice(rest.as_bytes())));
                }
                return Template { parts };
            };
            if at > 0 {
                parts.push(Part::Lit(Bytes::copy_from_slice(&rest.as_bytes()[..at])));
            }
            parts.push(part);
            rest = &rest[at + len..];
        }
    }

    fn concat(items: &[&Template]) -> Template {
        Template {
            parts: items.iter().flat_map(|t| t.parts.iter().cloned()).collect(),
        }
    }

    fn render(&self, ctx: &mut Ctx) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024);
        let quoted = |out: &mut Vec<u8>, id: &str| {
            out.push(b'"');
            out.extend_from_slice(id.as_bytes());
            out.push(b'"');
        };
        for part in &self.parts {
            match part {
                Part::Lit(bytes) => out.extend_from_slice(bytes),
                Part::Model => {
                    let _ = serde_json::to_writer(&mut out, ctx.model);
                }
                Part::Id => quoted(&mut out, ctx.id),
                Part::Item => quoted(&mut out, ctx.item_id),
                Part::Text => {
                    let _ = serde_json::to_writer(&mut out, ctx.text.as_ref());
                }
                Part::Created => out.extend_from_slice(ctx.created.to_string().as_bytes()),
                Part::Seq => {
                    out.extend_from_slice(ctx.seq.to_string().as_bytes());
                    ctx.seq += 1;
                }
            }
        }
        out
    }
}

/// The answers of one API: the whole JSON, the whole stream, and its pieces for slow streams.
struct Shapes {
    json: Template,
    sse: Template,
    /// The opening events (chat role chunk / Responses `response.created` up to the opened
    /// output item and content part).
    head: Template,
    /// One content event (text [`SLOW_DELTA`]; empty for a compaction, which has no deltas).
    delta: Template,
    /// The closing events (chat final chunk with usage + `[DONE]` / the Responses `*.done`
    /// events and `response.completed`).
    tail: Template,
}

struct Templates {
    chat: Shapes,
    responses: Shapes,
    compaction: Shapes,
    compact_v1: Shapes,
}

impl Templates {
    fn build(cached_tokens: u64) -> Templates {
        let usage = responses_usage(cached_tokens);
        let compaction = compaction_shapes(&usage);
        let compact_v1 = Shapes {
            json: compact_v1_json(&usage),
            ..compaction_shapes(&usage)
        };
        Templates {
            chat: chat_shapes(cached_tokens),
            responses: responses_shapes(&usage),
            compaction,
            compact_v1,
        }
    }

    fn for_api(&self, api: Api) -> &Shapes {
        match api {
            Api::Chat => &self.chat,
            Api::Responses => &self.responses,
            Api::Compaction => &self.compaction,
            Api::CompactV1 => &self.compact_v1,
        }
    }
}

fn chat_shapes(cached_tokens: u64) -> Shapes {
    let usage = json!({
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    });
    let chunk = |delta: Value, finish: Value, usage: Option<&Value>| {
        let mut frame = json!({
            "id": "@@ID@@", "object": "chat.completion.chunk", "created": "@@CREATED@@",
            "model": "@@MODEL@@",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        if let Some(usage) = usage {
            frame["usage"] = usage.clone();
        }
        Template::parse(&format!("data: {frame}\n\n"))
    };
    let json = json!({
        "id": "@@ID@@", "object": "chat.completion", "created": "@@CREATED@@", "model": "@@MODEL@@",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": ANSWER_TEXT},
            "finish_reason": "stop",
        }],
        "usage": usage,
    });
    let head = chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
        None,
    );
    let content = |text: &str| chunk(json!({"content": text}), Value::Null, None);
    let mut tail = chunk(json!({}), json!("stop"), Some(&usage));
    tail.parts
        .push(Part::Lit(Bytes::from_static(b"data: [DONE]\n\n")));
    let (a, b, c) = (
        content("Hello"),
        content(" from"),
        content(" the fake upstream."),
    );
    Shapes {
        json: Template::parse(&json.to_string()),
        sse: Template::concat(&[&head, &a, &b, &c, &tail]),
        head,
        delta: content(SLOW_DELTA),
        tail,
    }
}

/// The Responses `usage` every answer reports.
fn responses_usage(cached_tokens: u64) -> Value {
    json!({
        "input_tokens": PROMPT_TOKENS,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": COMPLETION_TOKENS,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
    })
}

/// A Responses `response` object (the JSON answer, and inside `response.created` /
/// `response.in_progress` / `response.completed`).
fn response_object(status: &str, output: Value, usage: Value) -> Value {
    json!({
        "id": "@@ID@@", "object": "response", "created_at": "@@CREATED@@", "status": status,
        "model": "@@MODEL@@", "output": output, "usage": usage,
        "error": null, "incomplete_details": null, "parallel_tool_calls": true,
        "tool_choice": "auto", "tools": [],
    })
}

/// One Responses SSE event `name` with `data` (its `type` and `sequence_number` added).
fn responses_event(name: &str, mut data: Value) -> Template {
    data["type"] = json!(name);
    data["sequence_number"] = json!("@@SEQ@@");
    Template::parse(&format!("event: {name}\ndata: {data}\n\n"))
}

/// The Responses stream's opening events: `response.created` and `response.in_progress`.
fn responses_opening() -> Template {
    let open = response_object("in_progress", json!([]), Value::Null);
    Template::concat(&[
        &responses_event("response.created", json!({ "response": open })),
        &responses_event("response.in_progress", json!({ "response": open })),
    ])
}

/// The shapes of the OpenAI Responses stream (the lifecycle the OpenAI SDKs' stream helpers and
/// Codex CLI 0.171's `codex-rs/codex-api/src/sse/responses.rs` expect: an output item is added
/// before its deltas, which name it by `item_id`, `output_index` 0 and `content_index` 0).
fn responses_shapes(usage: &Value) -> Shapes {
    let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
    let message = |status: &str, content: Value| {
        json!({"type": "message", "id": "@@ITEM@@", "status": status, "role": "assistant",
               "content": content})
    };
    let at = |mut extra: Value| {
        extra["item_id"] = json!("@@ITEM@@");
        extra["output_index"] = json!(0);
        extra["content_index"] = json!(0);
        extra
    };
    let delta = |text: &str| {
        responses_event(
            "response.output_text.delta",
            at(json!({"delta": text, "logprobs": []})),
        )
    };
    let done = message("completed", json!([part("@@TEXT@@")]));
    let head = Template::concat(&[
        &responses_opening(),
        &responses_event(
            "response.output_item.added",
            json!({"output_index": 0, "item": message("in_progress", json!([]))}),
        ),
        &responses_event(
            "response.content_part.added",
            at(json!({ "part": part("") })),
        ),
    ]);
    let completed = response_object("completed", json!([done]), usage.clone());
    let tail = Template::concat(&[
        &responses_event(
            "response.output_text.done",
            at(json!({"text": "@@TEXT@@", "logprobs": []})),
        ),
        &responses_event(
            "response.content_part.done",
            at(json!({ "part": part("@@TEXT@@") })),
        ),
        &responses_event(
            "response.output_item.done",
            json!({"output_index": 0, "item": done}),
        ),
        &responses_event("response.completed", json!({ "response": completed })),
    ]);
    let (a, b) = (delta("Hello from"), delta(" the fake upstream."));
    Shapes {
        json: Template::parse(&completed.to_string()),
        sse: Template::concat(&[&head, &a, &b, &tail]),
        head,
        delta: delta(SLOW_DELTA),
        tail,
    }
}

/// Codex's compaction output item (`ResponseItem::Compaction`, Codex CLI 0.171
/// codex-rs/protocol/src/models.rs): opaque `encrypted_content` the client sends back as the
/// compacted history; here it is the item id.
fn compaction_item() -> Value {
    json!({"type": "compaction", "id": "@@ITEM@@", "encrypted_content": "@@ITEM@@"})
}

/// Remote compaction v2: a Responses answer whose only output is one compaction item (Codex
/// reads it from `response.output_item.done` and needs `response.completed`).
fn compaction_shapes(usage: &Value) -> Shapes {
    let item = compaction_item();
    let head = Template::concat(&[
        &responses_opening(),
        &responses_event(
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        ),
    ]);
    let completed = response_object("completed", json!([item]), usage.clone());
    let tail = Template::concat(&[
        &responses_event(
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        ),
        &responses_event("response.completed", json!({ "response": completed })),
    ]);
    Shapes {
        json: Template::parse(&completed.to_string()),
        sse: Template::concat(&[&head, &tail]),
        head,
        delta: Template::default(),
        tail,
    }
}

/// Remote compaction v1's answer (`POST /v1/responses/compact`, Codex before compaction v2,
/// codex-rs/codex-api/src/endpoint/compact.rs reads `output`): the compacted history.
fn compact_v1_json(usage: &Value) -> Template {
    let body = json!({
        "id": "@@ID@@", "object": "response.compaction", "created_at": "@@CREATED@@",
        "model": "@@MODEL@@", "output": [compaction_item()], "usage": usage,
    });
    Template::parse(&body.to_string())
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
