//! Tests of streaming frame kinds.

use super::*;
use crate::failure::testkit::*;

// --- frame kinds ------------------------------------------------------------------------------

#[test]
fn responses_frames_are_told_apart() {
    let kinds: Vec<FrameKind> = frames(SSE_RATE_LIMITS)
        .into_iter()
        .map(|f| frame_kind(f.as_bytes()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            FrameKind::RateLimitInfo,
            FrameKind::Other,
            FrameKind::Content,
            FrameKind::Content
        ]
    );
    for (frame, kind) in [
        (r#"{"type":"response.in_progress"}"#, FrameKind::Other),
        (
            r#"{"type":"response.output_item.added","item":{}}"#,
            FrameKind::Content,
        ),
        (
            r#"{"type":"response.reasoning_summary_text.delta"}"#,
            FrameKind::Content,
        ),
        (
            r#"{"type":"response.function_call_arguments.delta"}"#,
            FrameKind::Content,
        ),
        (r#"{"type":"error","message":"x"}"#, FrameKind::Error),
        (r#"{"type":"response.failed"}"#, FrameKind::Error),
        (
            r#"{"type":"rate_limits.updated"}"#,
            FrameKind::RateLimitInfo,
        ),
    ] {
        assert_eq!(frame_kind(frame.as_bytes()), kind, "{frame}");
    }
}

#[test]
fn chat_chunks_are_content_only_with_something_in_the_delta() {
    let kinds: Vec<FrameKind> = frames(SSE_CHAT)
        .into_iter()
        .map(|f| frame_kind(f.as_bytes()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            FrameKind::Other, // role with empty content
            FrameKind::Content,
            FrameKind::Other, // finish_reason only
            FrameKind::Other, // [DONE]
        ]
    );
    for (frame, kind) in [
        (
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}"#,
            FrameKind::Content,
        ),
        (
            r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#,
            FrameKind::Content,
        ),
        (
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            FrameKind::Other,
        ),
        (
            r#"{"choices":[],"usage":{"prompt_tokens":3}}"#,
            FrameKind::Other,
        ),
        (r#"{"error":{"message":"boom"}}"#, FrameKind::Error),
        (
            r#"{"error":null,"choices":[{"delta":{"content":"a"}}]}"#,
            FrameKind::Content,
        ),
        (
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}",
            FrameKind::Content,
        ),
    ] {
        assert_eq!(frame_kind(frame.as_bytes()), kind, "{frame}");
    }
}
