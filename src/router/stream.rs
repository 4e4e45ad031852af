//! Streaming (docs/rules/router.md §3 "before the first byte", §5 "Streaming"): opening an upstream SSE
//! stream far enough to classify it (an error frame before content fails over; an
//! informational rate-limit frame followed by content does not), then passing its bytes
//! through unchanged as they arrive, watching the events for usage and the response id.
//! A chat stream that ended cleanly without `data: [DONE]` after data gets one; a stream that
//! breaks after the first byte ends with an error frame (never `[DONE]`). Dropping the body
//! (the client went away) drops the upstream response, which cancels the upstream request.
//! Must not: buffer a whole stream, retry after the first byte.

use axum::http::HeaderMap;
use bytes::{Bytes, BytesMut};
use serde_json::Value;
use tokio::time::{Instant, timeout_at};

use std::sync::Arc;

use super::Shared;
use super::lanes::Lane;
use super::outcome::{self, Tokens};
use super::reply::{Opened, Reply, UpstreamBody};
use crate::core::affinity::SessionKey;
use crate::core::failure::{FailureClass, FrameKind, Scope, Verdict, frame_kind};
use crate::core::router::UsageRecord;

/// Reads `body` (of a 2xx answer with `status` and `headers`) until its first decisive event before `deadline`: content (or `[DONE]`, or the
/// end of the stream) ⇒ [`Reply::Stream`]; an error event ⇒ [`Reply::EarlyError`]; a broken
/// connection or the deadline ⇒ [`Reply::Transport`]. Role, created and informational
/// rate-limit events are read past (docs/rules/router.md §3).
pub(crate) async fn open(
    status: u16,
    headers: HeaderMap,
    mut body: UpstreamBody,
    deadline: Instant,
) -> Reply {
    let mut buf = BytesMut::new();
    let mut scan = 0usize;
    loop {
        let chunk = match timeout_at(deadline, body.chunk()).await {
            Ok(Ok(c)) => c,
            _ => return Reply::Transport,
        };
        let Some(chunk) = chunk else {
            return Reply::Stream(Opened {
                status,
                headers,
                prefix: buf.freeze(),
                rest: None,
            });
        };
        buf.extend_from_slice(&chunk);
        let mut decided = false;
        while let Some((event, next)) = next_event(&buf, scan) {
            scan = next;
            let Some(data) = event_data(event) else {
                continue;
            };
            if data.as_ref() == b"[DONE]" {
                decided = true;
                break;
            }
            match frame_kind(&data) {
                FrameKind::Content => {
                    decided = true;
                    break;
                }
                FrameKind::Error => {
                    return Reply::EarlyError {
                        headers,
                        frame: Bytes::copy_from_slice(&data),
                    };
                }
                FrameKind::RateLimitInfo | FrameKind::Other => {}
            }
        }
        if decided {
            return Reply::Stream(Opened {
                status,
                headers,
                prefix: buf.freeze(),
                rest: Some(body),
            });
        }
    }
}

/// The complete event starting at `from` (without its blank-line separator) and where the next
/// starts; `None` when no complete event follows. Accepts `\n\n` and `\r\n\r\n`.
pub(crate) fn next_event(buf: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(from..)?;
    let mut i = 0;
    while i + 1 < rest.len() {
        if rest[i] == b'\n' {
            if rest[i + 1] == b'\n' {
                return Some((&rest[..i], from + i + 2));
            }
            if rest[i + 1] == b'\r' && rest.get(i + 2) == Some(&b'\n') {
                return Some((&rest[..i], from + i + 3));
            }
        }
        i += 1;
    }
    None
}

/// The `data:` of an event (its `data:` lines joined by `\n`); `None` when it has none.
pub(crate) fn event_data(event: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    let mut lines = event
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter_map(|l| l.strip_prefix(b"data:"))
        .map(|l| l.strip_prefix(b" ").unwrap_or(l));
    let first = lines.next()?;
    match lines.next() {
        None => Some(std::borrow::Cow::Borrowed(first)),
        Some(second) => {
            let mut out = first.to_vec();
            for l in std::iter::once(second).chain(lines) {
                out.push(b'\n');
                out.extend_from_slice(l);
            }
            Some(std::borrow::Cow::Owned(out))
        }
    }
}

/// The usage of a JSON answer or event: `usage` (Chat, Responses JSON) or `response.usage`
/// (Responses events); cached from `prompt_tokens_details.cached_tokens`,
/// `input_tokens_details.cached_tokens`, `cached_tokens` or `cache_read_input_tokens`.
pub(crate) fn tokens_of(v: &Value) -> Option<Tokens> {
    usage_tokens(
        v.get("usage")
            .or_else(|| v.get("response").and_then(|r| r.get("usage")))?,
    )
}

/// The tokens of one `usage` object (see [`tokens_of`]); `None` when it is not an object.
fn usage_tokens(u: &Value) -> Option<Tokens> {
    let u = u.as_object()?;
    // `get` chains, not `Value::pointer`: a pointer allocates for each of its segments, and this
    // runs once per answer (the c=64 profile in docs/benchmarks.md).
    let n = |key: &str| u.get(key).and_then(Value::as_u64);
    let nested = |outer: &str, key: &str| u.get(outer)?.get(key)?.as_u64();
    Some(Tokens {
        prompt: n("prompt_tokens")
            .or_else(|| n("input_tokens"))
            .unwrap_or(0),
        completion: n("completion_tokens")
            .or_else(|| n("output_tokens"))
            .unwrap_or(0),
        cached: nested("prompt_tokens_details", "cached_tokens")
            .or_else(|| nested("input_tokens_details", "cached_tokens"))
            .or_else(|| n("cached_tokens"))
            .or_else(|| n("cache_read_input_tokens"))
            .unwrap_or(0),
    })
}

/// A Responses API response id in a JSON answer (`{"object":"response","id"}`) or event
/// (`response.id`).
pub(crate) fn response_id(v: &Value) -> Option<&str> {
    v.get("response")
        .and_then(|r| r.get("id"))
        .and_then(Value::as_str)
        .or_else(|| {
            (v.get("object").and_then(Value::as_str) == Some("response"))
                .then(|| v.get("id").and_then(Value::as_str))
                .flatten()
        })
}

/// What a complete JSON answer says for the router: its usage and its Responses id (the same
/// reading as [`tokens_of`] and [`response_id`] over the whole parsed body).
#[derive(Debug, Default, serde::Deserialize)]
struct AnswerFields {
    #[serde(default, deserialize_with = "present")]
    usage: Option<Value>,
    /// `response.usage` / `response.id` (the Responses event shape).
    #[serde(default, deserialize_with = "present")]
    response: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    object: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
}

/// A present field, `null` included (as the whole `Value` keeps it: a `"usage": null` is not
/// replaced by `response.usage`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    <Value as serde::Deserialize>::deserialize(d).map(Some)
}

/// The tokens and the Responses id of a complete JSON answer, read without building the
/// whole body as a `Value` (only `usage`, `response`, `object`, `id` are kept; the rest is
/// skipped): the full-body `Value` parse was ~5 % of the router's CPU (docs/benchmarks.md,
/// router_external profiles). Not JSON / not an object ⇒ no tokens, no id (as [`tokens_of`]
/// on a failed parse). A body the fields do not read (a duplicate key) gets the whole-`Value`
/// reading, which keeps the last of duplicate keys.
pub(crate) fn answer_facts(body: &[u8]) -> (Option<Tokens>, Option<String>) {
    // An array would fill the struct by position; only an object has named fields.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return (None, None);
    }
    let Ok(a) = serde_json::from_slice::<AnswerFields>(body) else {
        return match serde_json::from_slice::<Value>(body) {
            Ok(v) => (tokens_of(&v), response_id(&v).map(str::to_string)),
            Err(_) => (None, None),
        };
    };
    let nested = |field: &str| a.response.as_ref().and_then(|r| r.get(field));
    let tokens = a.usage.as_ref().or(nested("usage")).and_then(usage_tokens);
    let id = nested("id")
        .and_then(Value::as_str)
        .or_else(|| {
            (a.object.as_ref().and_then(Value::as_str) == Some("response"))
                .then(|| a.id.as_ref().and_then(Value::as_str))
                .flatten()
        })
        .map(str::to_string);
    (tokens, id)
}

/// Watches the passed-through bytes event by event (carrying an incomplete event over).
#[derive(Debug, Default)]
pub(crate) struct Watch {
    carry: Vec<u8>,
    pub saw_done: bool,
    pub tokens: Option<Tokens>,
    pub response_id: Option<String>,
}

impl Watch {
    /// Feeds the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.carry.extend_from_slice(bytes);
        let mut at = 0;
        while let Some((event, next)) = next_event(&self.carry, at) {
            at = next;
            let Some(data) = event_data(event) else {
                continue;
            };
            if data.as_ref() == b"[DONE]" {
                self.saw_done = true;
                continue;
            }
            let interesting = contains(&data, b"\"usage\"") || contains(&data, b"response.created");
            if interesting && let Ok(v) = serde_json::from_slice::<Value>(&data) {
                if let Some(t) = tokens_of(&v) {
                    self.tokens = Some(t);
                }
                if let Some(id) = response_id(&v) {
                    self.response_id = Some(id.to_string());
                }
            }
        }
        self.carry.drain(..at);
    }

    /// An incomplete event is pending (a broken stream's error frame must start on its own).
    pub fn mid_event(&self) -> bool {
        !self.carry.is_empty()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// How a passed-through stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The body was dropped before the upstream ended: the client went away.
    Cancelled,
    /// The upstream ended cleanly.
    Clean,
    /// The upstream broke after the first byte (late failure).
    Broken,
}

/// Finishes a streamed request when its body is dropped — at its end or when the client went
/// away: records the outcome on the lane (a clean end is a success with its cache sample, a
/// break a late failure with a transient cooldown, a cancel nothing), links the Responses id,
/// sends the one usage record.
pub(crate) struct Finish {
    shared: Arc<Shared>,
    lane: Arc<Lane>,
    index: usize,
    key: Option<SessionKey>,
    record: Option<UsageRecord>,
    started: Instant,
    end: End,
    watch: Watch,
}

impl Finish {
    /// A finisher for the stream served by `lane`'s account `index`; `record` is the request's
    /// usage record so far (status, attempts, time to first byte).
    pub fn new(
        shared: Arc<Shared>,
        lane: Arc<Lane>,
        index: usize,
        key: Option<SessionKey>,
        record: UsageRecord,
        started: Instant,
    ) -> Self {
        Self {
            shared,
            lane,
            index,
            key,
            record: Some(record),
            started,
            end: End::Cancelled,
            watch: Watch::default(),
        }
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        let Some(mut record) = self.record.take() else {
            return;
        };
        let now = self.shared.clock.now();
        let tokens = self.watch.tokens.unwrap_or_default();
        match self.end {
            End::Clean => {
                record.ok = true;
                outcome::finish_success(
                    &self.shared,
                    &self.lane,
                    self.index,
                    self.key,
                    tokens,
                    self.watch.response_id.as_deref(),
                    now,
                );
            }
            End::Broken => {
                metrics::counter!("quota_patrol_router_late_failures_total").increment(1);
                let lanes = self.shared.lanes.load();
                let verdict = Verdict {
                    class: FailureClass::Transient,
                    scope: Scope::Account,
                    reset_at: None,
                    retry_after: None,
                };
                outcome::record_failure(
                    &self.shared,
                    &lanes,
                    &self.lane,
                    self.index,
                    self.key,
                    &verdict,
                    now,
                );
            }
            End::Cancelled => {
                metrics::counter!("quota_patrol_router_cancelled_streams_total").increment(1);
            }
        }
        outcome::set_tokens(&mut record, tokens);
        record.duration_ms = self.started.elapsed().as_millis() as u64;
        self.shared.send_usage(record);
    }
}

/// The pass-through's state: the prefix read while opening, then the upstream's chunks.
struct Pump {
    prefix: Option<Bytes>,
    rest: Option<UpstreamBody>,
    chat: bool,
    sent: bool,
    closing: bool,
    finish: Finish,
}

/// `data: [DONE]` of a chat stream that ended cleanly without it.
const DONE: &[u8] = b"data: [DONE]\n\n";

/// The error frame a client gets when the stream breaks after the first byte.
fn broken_frame(chat: bool, mid_event: bool) -> Bytes {
    let sep = if mid_event { "\n\n" } else { "" };
    let msg = "the upstream stream broke after the first byte; it is not retried";
    let frame = if chat {
        serde_json::json!({"error": {"message": msg, "type": "server_error", "code": "upstream_stream_broken"}})
    } else {
        serde_json::json!({"type": "error", "code": "upstream_stream_broken", "message": msg})
    };
    let event = if chat { "" } else { "event: error\n" };
    Bytes::from(format!("{sep}{event}data: {frame}\n\n"))
}

impl Pump {
    /// The upstream ended cleanly: `[DONE]` if a chat stream sent data without it, then the end.
    fn end_clean(mut self) -> Option<(Result<Bytes, std::io::Error>, Pump)> {
        if self.closing {
            return None;
        }
        self.closing = true;
        self.finish.end = End::Clean;
        let w = &self.finish.watch;
        if self.chat && self.sent && !w.saw_done && !w.mid_event() {
            return Some((Ok(Bytes::from_static(DONE)), self));
        }
        None
    }

    async fn step(mut self) -> Option<(Result<Bytes, std::io::Error>, Pump)> {
        if let Some(prefix) = self.prefix.take().filter(|b| !b.is_empty()) {
            self.finish.watch.feed(&prefix);
            self.sent = true;
            return Some((Ok(prefix), self));
        }
        let Some(resp) = self.rest.as_mut() else {
            return self.end_clean();
        };
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                self.finish.watch.feed(&chunk);
                self.sent = true;
                Some((Ok(chunk), self))
            }
            Ok(None) => {
                self.rest = None;
                self.end_clean()
            }
            Err(_) => {
                self.rest = None;
                self.closing = true;
                self.finish.end = End::Broken;
                let frame = broken_frame(self.chat, self.finish.watch.mid_event());
                Some((Ok(frame), self))
            }
        }
    }
}

/// The client body of an opened stream: its bytes unchanged as they arrive (see the module
/// doc for `[DONE]`, the error frame and cancellation); `finish` runs when it is dropped.
pub(crate) fn body(opened: Opened, chat: bool, finish: Finish) -> axum::body::Body {
    let pump = Pump {
        prefix: Some(opened.prefix),
        rest: opened.rest,
        chat,
        sent: false,
        closing: false,
        finish,
    };
    axum::body::Body::from_stream(futures_util::stream::unfold(pump, Pump::step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_on_blank_lines_and_data_lines_join() {
        let buf = b"event: x\ndata: {\"a\":1}\n\ndata: one\r\ndata: two\r\n\r\ndata: partial";
        let (e1, n1) = next_event(buf, 0).unwrap();
        assert_eq!(event_data(e1).unwrap().as_ref(), b"{\"a\":1}");
        let (e2, n2) = next_event(buf, n1).unwrap();
        assert_eq!(event_data(e2).unwrap().as_ref(), b"one\ntwo");
        assert!(next_event(buf, n2).is_none());
    }

    #[test]
    fn the_watch_reads_usage_done_and_the_response_id_across_chunk_boundaries() {
        let mut w = Watch::default();
        w.feed(b"data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\"}}\n\ndata: {\"usage\":{\"prompt_tokens\":10,");
        assert!(w.mid_event());
        w.feed(b"\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n");
        assert_eq!(
            w.tokens,
            Some(Tokens {
                prompt: 10,
                completion: 3,
                cached: 8
            })
        );
        assert_eq!(w.response_id.as_deref(), Some("resp_1"));
        assert!(w.saw_done && !w.mid_event());
    }

    #[test]
    fn answer_facts_read_what_the_whole_value_reads() {
        let bodies: [&[u8]; 17] = [
            br#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"message":{"content":"hi \"x\""}}],"usage":{"prompt_tokens":12,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":8}}}"#,
            br#"{"object":"response","id":"resp_9","output":[],"usage":{"input_tokens":5,"output_tokens":2,"input_tokens_details":{"cached_tokens":4}}}"#,
            br#"{"type":"response.completed","response":{"id":"resp_2","usage":{"input_tokens":3}}}"#,
            br#"{"object":"chat.completion","usage":"none"}"#,
            b"not json",
            br#"{"usage":null,"response":{"usage":{"input_tokens":3}}}"#,
            br#"{"usage":[1,2,3]}"#,
            br#"{"usage":{"prompt_tokens":1.5,"completion_tokens":-2,"cached_tokens":"4","cache_read_input_tokens":6}}"#,
            br#"{"usage":{"prompt_tokens":18446744073709551616,"prompt_tokens_details":null,"input_tokens_details":{"cached_tokens":9}}}"#,
            br#"{"usage":{"prompt_tokens_details":[5],"cached_tokens":2}}"#,
            br#"{"object":"respons\u0065","id":"resp_\u0031"}"#,
            br#"{"object":"response","id":7,"response":null}"#,
            br#"[{"usage":{"prompt_tokens":1}}]"#,
            br#"{"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#,
            br#"{"object":"response","response":{"id":"a","id":"b"}}"#,
            br#"{"usage":{"prompt_tokens_details":{"cached_tokens":3,"cached_tokens":4}}}"#,
            br#"{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}"#,
        ];
        for body in bodies {
            let v = serde_json::from_slice::<Value>(body).ok();
            let whole = (
                v.as_ref().and_then(tokens_of),
                v.as_ref().and_then(response_id).map(str::to_string),
            );
            assert_eq!(
                answer_facts(body),
                whole,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(answer_facts(bodies[1]).1.as_deref(), Some("resp_9"));
        assert_eq!(answer_facts(bodies[0]).0.map(|t| t.cached), Some(8));
    }

    #[test]
    fn responses_usage_names_are_read() {
        let v: Value = serde_json::json!({"object":"response","id":"r","usage":{"input_tokens":5,"output_tokens":2,"input_tokens_details":{"cached_tokens":4}}});
        assert_eq!(
            tokens_of(&v),
            Some(Tokens {
                prompt: 5,
                completion: 2,
                cached: 4
            })
        );
        assert_eq!(response_id(&v), Some("r"));
    }
}
