//! The attempt loop of one client request (docs/rules/router.md §3 "In-route retries", §4 chains): legs in
//! order; per leg the lane's ranking; per account: call → classify → retry the same account
//! (transient only, within `max_retries` and the leg's first-byte budget), next account, or
//! back to the client (request errors); a leg that failed on transient errors waits
//! `leg_settle` before the next one; nothing eligible anywhere ⇒ the all-excluded answer
//! (`failure::no_account`). Records every failure and success through `outcome` (cooldowns,
//! affinity, throttle; when account-wide, the account's other lanes of its pool).
//! Must not: hold a lane lock across an `.await`, retry after the first byte (see `stream`).

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::time::Instant;

use super::Shared;
use super::answer;
use super::lanes::{Lane, Lanes};
use super::outcome::{finish_success, record_failure, set_tokens};
use super::reply::{HeaderView, Opened, Reply};
use super::upstream;
use crate::core::affinity::SessionKey;
use crate::core::failure::{FailureClass, Next, Scope, Verdict, classify, next_step, no_account};
use crate::core::router::{Api, UsageRecord};

/// One client request, parsed and keyed (http.rs builds it).
pub(crate) struct ClientRequest {
    pub api: Api,
    /// The model name the client asked for (a chain or a pool model).
    pub model: String,
    /// The body as received (passed through unchanged when the leg's model is the same; the
    /// router read only its head, `head::RequestHead`).
    pub body: Bytes,
    /// The client's request headers; `upstream::call` passes on only its allow-list
    /// (`upstream::forwarded`), on every attempt.
    pub headers: HeaderMap,
    pub key: Option<SessionKey>,
    /// SHA-256 hex of the session key, for the usage record's per-request row (`None` unless
    /// `[router] usage_request_rows`).
    pub key_hash: Option<String>,
    /// Arrival (wall clock for the record, monotonic for durations).
    pub at: DateTime<Utc>,
    pub started: Instant,
}

/// What the attempts of one request have done so far.
#[derive(Default)]
pub(crate) struct Run {
    /// Upstream requests made (retries and fail-overs included).
    pub attempts: u32,
    /// Time spent waiting on upstreams and in retry backoff (not router time).
    pub upstream: Duration,
    /// The last upstream error answer (for pass-through when something is still eligible).
    last: Option<(u16, HeaderMap, Bytes, String)>,
    /// The last lane and account index tried.
    tried: Option<(Arc<Lane>, usize)>,
}

/// How one leg ended without serving.
enum LegEnd {
    Answered(Response),
    Failed { transient: bool },
}

/// Serves one client request (see the module doc). Unknown model ⇒ 404 `model_not_found`
/// (with its usage record: no account, 0 attempts). Sends exactly one usage record.
pub(crate) async fn serve(shared: Arc<Shared>, req: ClientRequest) -> Response {
    let lanes = shared.lanes.load_full();
    let legs = lanes.legs(&req.model);
    if legs.is_empty() {
        shared.send_usage(usage(&req, &Run::default(), None, None, 404));
        return answer::error(
            404,
            "model_not_found",
            "invalid_request_error",
            &format!("the model {:?} is not served by this router", req.model),
            0,
        );
    }
    let mut run = Run::default();
    for (n, lane) in legs.iter().enumerate() {
        match run_leg(&shared, &lanes, lane, &req, &mut run).await {
            LegEnd::Answered(resp) => return resp,
            LegEnd::Failed { transient } => {
                let settle = shared.settings.leg_settle;
                if transient && n + 1 < legs.len() && !settle.is_zero() {
                    tokio::time::sleep(settle).await;
                    run.upstream += settle;
                }
            }
        }
    }
    unserved(&shared, legs, &req, run)
}

/// Tries the accounts of one leg in ranked order (docs/rules/router.md §3).
async fn run_leg(
    shared: &Arc<Shared>,
    lanes: &Lanes,
    lane: &Arc<Lane>,
    req: &ClientRequest,
    run: &mut Run,
) -> LegEnd {
    let plan = lane.plan(req.key, shared.clock.now());
    shared.hot().affinity(plan.choice).increment(1);
    tracing::debug!(pool = %lane.pool, model = %lane.model, choice = ?plan.choice, candidates = plan.order.len(), "ranked");
    if plan.order.is_empty() {
        return LegEnd::Failed { transient: false };
    }
    let body = if lane.model == req.model {
        req.body.clone()
    } else {
        with_model(&req.body, &lane.model)
    };
    let deadline = Instant::now() + shared.settings.first_byte_budget;
    let mut transient = false;
    for (n, &index) in plan.order.iter().enumerate() {
        if n > 0 && lane.cooling(index, shared.clock.now()) {
            // Cooled down since the ranking (a concurrent failure, the pool throttle).
            continue;
        }
        if n > 0 {
            shared
                .counters
                .failovers
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            shared.hot().failovers.increment(1);
        }
        let account = &lane.accounts[index];
        let url = match req.api {
            Api::ChatCompletions => &account.chat_url,
            Api::Responses => &account.responses_url,
            Api::ResponsesCompact => &account.compact_url,
        };
        run.tried = Some((lane.clone(), index));
        let mut retries = 0;
        loop {
            if Instant::now() >= deadline {
                return LegEnd::Failed { transient: true };
            }
            run.attempts += 1;
            shared
                .counters
                .attempts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            shared.hot().attempts.increment(1);
            let sent = Instant::now();
            let reply = upstream::call(
                &upstream::client_of_this_thread(),
                url,
                account.authorization.as_ref(),
                &req.headers,
                body.clone(),
                deadline,
            )
            .await;
            run.upstream += sent.elapsed();
            if reply.is_success() {
                return LegEnd::Answered(served(shared, lane, index, req, run, reply));
            }
            let now = shared.clock.now();
            let view = HeaderView(reply.headers());
            let verdict = reply
                .outcome(&view)
                .and_then(|o| classify(&o, now))
                .unwrap_or(TRANSIENT);
            if let Reply::Full {
                status,
                headers,
                body,
                ..
            } = &reply
            {
                run.last = Some((*status, headers.clone(), body.clone(), account.id.clone()));
            }
            let jitter = shared.random.fraction();
            match next_step(&verdict, retries, shared.settings.max_retries, jitter) {
                Next::RetrySameAfter(wait) if Instant::now() + wait < deadline => {
                    // The account gets its cooldown only when the request moves on: a retry
                    // that succeeds leaves a healthy account in rotation.
                    retries += 1;
                    tokio::time::sleep(wait).await;
                    run.upstream += wait;
                }
                Next::ReturnToClient => {
                    return LegEnd::Answered(pass_through(shared, lane, req, run));
                }
                Next::RetrySameAfter(_) | Next::NextAccount => {
                    transient |= verdict.class == FailureClass::Transient;
                    record_failure(shared, lanes, lane, index, req.key, &verdict, now);
                    break;
                }
            }
        }
    }
    LegEnd::Failed { transient }
}

/// A verdict for an outcome `classify` let through (e.g. an empty early frame): transient.
const TRANSIENT: Verdict = Verdict {
    class: FailureClass::Transient,
    scope: Scope::Account,
    reset_at: None,
    retry_after: None,
};

/// The body with `model` replaced (a chain leg naming another upstream model): parsed whole
/// here, the one place that needs it (the body was checked to be a JSON object on arrival).
fn with_model(body: &[u8], model: &str) -> Bytes {
    let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
        return Bytes::copy_from_slice(body);
    };
    if let Some(m) = v.get_mut("model") {
        *m = Value::String(model.to_string());
    }
    serde_json::to_vec(&v).map(Bytes::from).unwrap_or_default()
}

/// A 2xx answer: the JSON served whole, or the stream handed to the pass-through.
fn served(
    shared: &Arc<Shared>,
    lane: &Arc<Lane>,
    index: usize,
    req: &ClientRequest,
    run: &Run,
    reply: Reply,
) -> Response {
    {
        let mut st = lane.lock();
        st.obs.success(index);
        st.throttle.success(index);
    }
    shared
        .counters
        .served
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let added = req.started.elapsed().saturating_sub(run.upstream);
    shared.hot().added_latency.record(added.as_secs_f64());
    let account = lane.accounts[index].id.as_str();
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let (tokens, response_id) = super::stream::answer_facts(&body);
            let tokens = tokens.unwrap_or_default();
            let now = shared.clock.now();
            finish_success(
                shared,
                lane,
                index,
                req.key,
                tokens,
                response_id.as_deref(),
                now,
            );
            let mut record = usage(req, run, Some(lane), Some(account), status);
            record.ok = true;
            set_tokens(&mut record, tokens);
            record.ttfb_ms = Some(record.duration_ms);
            shared.send_usage(record);
            answer::upstream_answer(status, &headers, body, account, run.attempts)
        }
        Reply::Stream(opened) => stream_answer(shared, lane, index, req, run, opened),
        Reply::EarlyError { .. } | Reply::Transport => unreachable!("not a success"),
    }
}

/// The usage record of a request (not ok, no tokens yet).
pub(crate) fn usage(
    req: &ClientRequest,
    run: &Run,
    lane: Option<&Lane>,
    account: Option<&str>,
    status: u16,
) -> UsageRecord {
    let (pool, model, account) = match (lane, account) {
        (Some(l), Some(a)) => (
            Some(l.pool.clone()),
            Some(l.model.clone()),
            Some(a.to_string()),
        ),
        _ => match &run.tried {
            Some((l, i)) => (
                Some(l.pool.clone()),
                Some(l.model.clone()),
                Some(l.accounts[*i].id.clone()),
            ),
            None => (None, None, None),
        },
    };
    UsageRecord {
        at: req.at,
        api: req.api,
        requested_model: req.model.clone(),
        pool,
        model,
        account,
        session_key_hash: req.key_hash.clone(),
        ok: false,
        status,
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_tokens: 0,
        attempts: run.attempts,
        duration_ms: req.started.elapsed().as_millis() as u64,
        ttfb_ms: None,
    }
}

/// A request error (400, 404, 413, 422 from the upstream): its answer goes back to the client
/// as it came, from the one account asked (docs/rules/router.md §3).
fn pass_through(shared: &Shared, lane: &Lane, req: &ClientRequest, run: &Run) -> Response {
    let (status, headers, body, account) = run.last.clone().unwrap_or_default();
    shared.send_usage(usage(req, run, Some(lane), Some(&account), status));
    answer::upstream_answer(status, &headers, body, &account, run.attempts)
}

/// Nothing served: every account of every leg excluded ⇒ `failure::no_account` (router.md
/// §4); else (the first-byte budget ran out with accounts left) the last upstream error as it
/// came, or 504 `upstream_timeout` when there was none.
fn unserved(shared: &Shared, legs: &[Arc<Lane>], req: &ClientRequest, run: Run) -> Response {
    shared
        .counters
        .failed
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let now = shared.clock.now();
    let mut ends = Vec::new();
    let mut all_excluded = true;
    for lane in legs {
        match lane.exclusions(now) {
            Some(e) => ends.extend(e),
            None => all_excluded = false,
        }
    }
    if all_excluded {
        let answer = no_account(&ends, now);
        shared.send_usage(usage(req, &run, None, None, answer.status));
        return answer::no_account_answer(&answer, run.attempts);
    }
    match run.last.clone() {
        Some((status, headers, body, account)) => {
            shared.send_usage(usage(req, &run, None, None, status));
            answer::upstream_answer(status, &headers, body, &account, run.attempts)
        }
        None => {
            shared.send_usage(usage(req, &run, None, None, 504));
            answer::error(
                504,
                "upstream_timeout",
                "server_error",
                "no upstream answered within the first-byte budget",
                run.attempts,
            )
        }
    }
}

/// Hands an opened stream to the pass-through (`stream::Pump`) with the headers held until now.
fn stream_answer(
    shared: &Arc<Shared>,
    lane: &Arc<Lane>,
    index: usize,
    req: &ClientRequest,
    run: &Run,
    opened: Opened,
) -> Response {
    let account = lane.accounts[index].id.clone();
    let mut record = usage(req, run, Some(lane), Some(&account), opened.status);
    record.ttfb_ms = Some(req.started.elapsed().as_millis() as u64);
    let finish = super::stream::Finish::new(
        shared.clone(),
        lane.clone(),
        index,
        req.key,
        record,
        req.started,
    );
    let status = opened.status;
    let headers = opened.headers.clone();
    let body = super::stream::body(opened, req.api == Api::ChatCompletions, finish);
    answer::stream_answer(status, &headers, body, &account, run.attempts)
}
