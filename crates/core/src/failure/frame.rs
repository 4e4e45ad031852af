//! The kind of a streaming event (docs/rules/router.md §3 "an error event that arrives before any
//! content").

use serde_json::Value;

/// A streaming event's JSON `data:` (Chat or Responses): content, an error before content,
/// informational rate-limit, or other (role/created frames).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    Content,
    Error,
    RateLimitInfo,
    Other,
}

/// The kind of one streaming event's `data:` payload (docs/rules/router.md §3 "an error event that arrives
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

/// A frame's JSON without an optional leading `data:`.
pub(super) fn strip_data(frame: &[u8]) -> &[u8] {
    let trimmed = frame.trim_ascii_start();
    trimmed.strip_prefix(b"data:").unwrap_or(trimmed)
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
