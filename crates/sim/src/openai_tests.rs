//! Tests of the fake OpenAI upstream over real sockets on 127.0.0.1.

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeZone;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

use super::*;
use quota_patrol_core::clock::ManualClock;

const WAIT: Duration = Duration::from_secs(10);

async fn post(up: &FakeUpstream, path: &str, body: Value) -> reqwest::Response {
    Client::new()
        .post(format!("{}{path}", up.base_url()))
        .bearer_auth("sk-test-upstream")
        .json(&body)
        .send()
        .await
        .expect("request")
}

/// SSE events of a body: (event name if any, data).
fn sse(body: &str) -> Vec<(Option<String>, String)> {
    assert!(
        body.ends_with("\n\n"),
        "a stream ends with a blank line: {body:?}"
    );
    body.trim_end_matches("\n\n")
        .split("\n\n")
        .map(|frame| {
            let mut name = None;
            let mut data = None;
            for line in frame.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = Some(v.to_string());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(v.to_string());
                } else {
                    panic!("unexpected line {line:?}");
                }
            }
            (name, data.expect("every event has data"))
        })
        .collect()
}

fn data(event: &(Option<String>, String)) -> Value {
    serde_json::from_str(&event.1).expect("data is JSON")
}

#[tokio::test]
async fn chat_json_ok_reports_usage_and_records_the_request() {
    let up = FakeUpstream::start().await.unwrap();
    up.set_cached_tokens(5);
    let resp = post(
        &up,
        "/chat/completions",
        json!({"model": "gpt-5", "messages": []}),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-5");
    assert_eq!(body["choices"][0]["message"]["content"], ANSWER_TEXT);
    assert_eq!(body["usage"]["prompt_tokens"], PROMPT_TOKENS);
    assert_eq!(body["usage"]["completion_tokens"], COMPLETION_TOKENS);
    assert_eq!(
        body["usage"]["total_tokens"],
        PROMPT_TOKENS + COMPLETION_TOKENS
    );
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 5);
    assert_eq!(up.calls(), 1);
    assert_eq!(up.last_request().unwrap()["model"], "gpt-5");
    assert_eq!(up.last_authorization().unwrap(), "Bearer sk-test-upstream");
    assert_eq!(up.cancelled(), 0);
}

#[tokio::test]
async fn responses_json_ok_has_output_and_usage_with_distinct_ids() {
    let up = FakeUpstream::start().await.unwrap();
    let body = json!({"model": "gpt-5-codex", "input": "hi"});
    let first: Value = post(&up, "/responses", body.clone())
        .await
        .json()
        .await
        .unwrap();
    let second: Value = post(&up, "/responses", body).await.json().await.unwrap();
    assert_eq!(first["object"], "response");
    assert_eq!(first["status"], "completed");
    assert_eq!(first["model"], "gpt-5-codex");
    assert_eq!(first["output"][0]["content"][0]["text"], ANSWER_TEXT);
    assert_eq!(first["usage"]["input_tokens"], PROMPT_TOKENS);
    assert_eq!(first["usage"]["output_tokens"], COMPLETION_TOKENS);
    assert_eq!(first["usage"]["input_tokens_details"]["cached_tokens"], 0);
    assert_ne!(first["id"], second["id"], "response ids link sessions");
    assert_eq!(up.calls(), 2);
}

#[tokio::test]
async fn chat_sse_ok_is_role_three_deltas_usage_then_done() {
    let up = FakeUpstream::start().await.unwrap();
    let resp = post(
        &up,
        "/chat/completions",
        json!({"model": "m\"x", "stream": true, "messages": []}),
    )
    .await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = sse(&resp.text().await.unwrap());
    assert_eq!(events.len(), 6);
    assert!(events.iter().all(|(name, _)| name.is_none()));
    assert_eq!(events[5].1, "[DONE]");
    let frames: Vec<Value> = events[..5].iter().map(data).collect();
    assert!(
        frames
            .iter()
            .all(|f| f["object"] == "chat.completion.chunk")
    );
    assert!(frames.iter().all(|f| f["model"] == "m\"x"), "model escaped");
    assert_eq!(frames[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = frames[1..4]
        .iter()
        .map(|f| f["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, ANSWER_TEXT);
    assert_eq!(frames[4]["choices"][0]["finish_reason"], "stop");
    assert_eq!(frames[4]["usage"]["completion_tokens"], COMPLETION_TOKENS);
}

/// The Responses event names of a stream, in order.
fn names(events: &[(Option<String>, String)]) -> Vec<String> {
    events.iter().map(|(n, _)| n.clone().unwrap()).collect()
}

/// Every event's `type` is its SSE name and the `sequence_number`s count from 0.
fn assert_typed_and_numbered(events: &[(Option<String>, String)]) {
    for (i, event) in events.iter().enumerate() {
        let frame = data(event);
        assert_eq!(frame["type"].as_str(), event.0.as_deref(), "{frame}");
        assert_eq!(frame["sequence_number"], i, "{frame}");
    }
}

/// The lifecycle Codex CLI 0.171 needs (its turn loop drops a text delta without an open output
/// item: "OutputTextDelta without active item") and the OpenAI SDKs' stream helpers accumulate.
#[tokio::test]
async fn responses_sse_ok_is_the_full_message_lifecycle_with_consistent_ids() {
    let up = FakeUpstream::start().await.unwrap();
    up.set_cached_tokens(3);
    let body = json!({"model": "gpt-5", "stream": true, "input": "hi"});
    let events = sse(&post(&up, "/responses", body).await.text().await.unwrap());
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_typed_and_numbered(&events);
    let f: Vec<Value> = events.iter().map(data).collect();
    let response_id = f[0]["response"]["id"].as_str().unwrap();
    assert!(response_id.starts_with("resp_sim"), "{response_id}");
    for i in [1, 9] {
        assert_eq!(f[i]["response"]["id"], response_id);
    }
    assert_eq!(f[0]["response"]["status"], "in_progress");
    let added = &f[2]["item"];
    let item_id = added["id"].as_str().unwrap();
    assert!(item_id.starts_with("msg_sim"), "{item_id}");
    assert_eq!(added["type"], "message");
    assert_eq!(added["status"], "in_progress");
    assert_eq!(added["content"], json!([]));
    for frame in &f[3..8] {
        assert_eq!(frame["item_id"], item_id, "{frame}");
        assert_eq!(frame["output_index"], 0);
        assert_eq!(frame["content_index"], 0);
    }
    assert_eq!(f[2]["output_index"], 0);
    assert_eq!(
        f[3]["part"],
        json!({"type": "output_text", "text": "", "annotations": []})
    );
    let text: String = f[4..6]
        .iter()
        .map(|d| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, ANSWER_TEXT);
    assert_eq!(f[6]["text"], ANSWER_TEXT);
    assert_eq!(f[7]["part"]["text"], ANSWER_TEXT);
    let done = &f[8]["item"];
    assert_eq!(done["id"], item_id);
    assert_eq!(done["status"], "completed");
    assert_eq!(done["role"], "assistant");
    assert_eq!(done["content"][0]["text"], ANSWER_TEXT);
    let completed = &f[9]["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(
        completed["output"],
        json!([done]),
        "the output holds the message"
    );
    assert_eq!(
        completed["usage"]["input_tokens_details"]["cached_tokens"],
        3
    );
    assert_eq!(up.calls_on(Route::Responses), 1);
    assert_eq!(up.compaction_triggers(), 0);
}

#[tokio::test]
async fn responses_json_is_the_completed_response_of_the_stream() {
    let up = FakeUpstream::start().await.unwrap();
    let body = json!({"model": "gpt-5", "input": "hi"});
    let json: Value = post(&up, "/responses", body).await.json().await.unwrap();
    let message = &json["output"][0];
    assert_eq!(json["output"].as_array().unwrap().len(), 1);
    assert!(message["id"].as_str().unwrap().starts_with("msg_sim"));
    assert_eq!(message["type"], "message");
    assert_eq!(message["status"], "completed");
    assert_eq!(
        message["content"],
        json!([{"type": "output_text", "text": ANSWER_TEXT, "annotations": []}])
    );
    let id = json["id"].as_str().unwrap();
    assert_eq!(
        &message["id"].as_str().unwrap()[4..],
        &id[5..],
        "ids of one serial"
    );
}

#[tokio::test]
async fn a_slow_responses_stream_closes_with_the_text_of_its_deltas() {
    let up = FakeUpstream::start().await.unwrap();
    up.script([Step::SlowStream {
        chunks: 3,
        gap: Duration::from_millis(1),
    }]);
    let body = json!({"model": "gpt-5", "stream": true, "input": "hi"});
    let events = sse(&post(&up, "/responses", body).await.text().await.unwrap());
    assert_typed_and_numbered(&events);
    let f: Vec<Value> = events.iter().map(data).collect();
    let deltas: String = f
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "tok tok tok ");
    let done = f.iter().find(|e| e["type"] == "response.output_text.done");
    assert_eq!(done.unwrap()["text"], deltas);
    let completed = f.last().unwrap();
    assert_eq!(
        completed["response"]["output"][0]["content"][0]["text"],
        deltas
    );
}

/// Codex's input for remote compaction v2: the history, then the trigger item.
fn compaction_input(stream: bool) -> Value {
    json!({"model": "gpt-5-codex", "stream": stream, "input": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "mention \"compaction_trigger\" in text"}]},
        {"type": "compaction_trigger"},
    ]})
}

#[tokio::test]
async fn a_compaction_trigger_is_answered_with_one_compaction_item() {
    let up = FakeUpstream::start().await.unwrap();
    let events = sse(&post(&up, "/responses", compaction_input(true))
        .await
        .text()
        .await
        .unwrap());
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_typed_and_numbered(&events);
    let f: Vec<Value> = events.iter().map(data).collect();
    let item = &f[3]["item"];
    let id = item["id"].as_str().unwrap();
    assert!(id.starts_with("cmp_sim"), "{id}");
    assert_eq!(
        item,
        &json!({"type": "compaction", "id": id, "encrypted_content": id})
    );
    assert_eq!(&f[2]["item"], item);
    assert_eq!(f[4]["response"]["output"], json!([item]));
    assert_eq!(
        f[4]["response"]["usage"]["output_tokens"],
        COMPLETION_TOKENS
    );

    let json: Value = post(&up, "/responses", compaction_input(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(json["object"], "response");
    assert_eq!(json["output"][0]["type"], "compaction");
    // Text that merely mentions the trigger is no trigger.
    let text = json!({"model": "gpt-5", "input": "say \"compaction_trigger\""});
    let plain: Value = post(&up, "/responses", text).await.json().await.unwrap();
    assert_eq!(plain["output"][0]["type"], "message");
    assert_eq!(up.compaction_triggers(), 2);
    assert_eq!(up.calls_on(Route::Responses), 3);
    assert_eq!(up.calls_on(Route::ResponsesCompact), 0);
}

#[tokio::test]
async fn responses_compact_answers_the_compacted_history_and_takes_scripted_steps() {
    let up = FakeUpstream::start().await.unwrap();
    up.script([Step::UsageLimitJson {
        resets_in_seconds: 60,
    }]);
    let body = json!({"model": "gpt-5-codex", "instructions": "be brief", "stream": true,
                      "input": [{"type": "message", "role": "user", "content": "hi"}]});
    let limited = post(&up, "/responses/compact", body.clone()).await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    let resp = post(&up, "/responses/compact", body.clone()).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()["content-type"],
        "application/json",
        "never a stream"
    );
    let json: Value = resp.json().await.unwrap();
    assert_eq!(json["object"], "response.compaction");
    assert_eq!(json["model"], "gpt-5-codex");
    let item = &json["output"][0];
    assert_eq!(json["output"].as_array().unwrap().len(), 1);
    assert_eq!(item["type"], "compaction");
    assert_eq!(item["encrypted_content"], item["id"]);
    assert_eq!(json["usage"]["input_tokens"], PROMPT_TOKENS);
    assert_eq!(up.calls(), 2);
    assert_eq!(up.calls_on(Route::ResponsesCompact), 2);
    assert_eq!(up.calls_on(Route::Responses), 0);
    assert_eq!(up.last_request().unwrap(), body);
}

#[tokio::test]
async fn scripted_steps_are_consumed_once_each_then_ok() {
    let start = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let up = FakeUpstream::start_with_clock(SocketAddr::from(([127, 0, 0, 1], 0)), clock)
        .await
        .unwrap();
    up.script([
        Step::Status {
            status: 503,
            headers: vec![("retry-after".into(), "3".into())],
            body: "<html>down</html>".into(),
            content_type: "text/html".into(),
        },
        Step::UsageLimitJson {
            resets_in_seconds: 60,
        },
    ]);
    let req = json!({"model": "gpt-5", "messages": []});
    let first = post(&up, "/chat/completions", req.clone()).await;
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(first.headers()["retry-after"], "3");
    assert_eq!(first.headers()["content-type"], "text/html");
    assert_eq!(first.text().await.unwrap(), "<html>down</html>");
    let second = post(&up, "/chat/completions", req.clone()).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    let error: Value = second.json().await.unwrap();
    assert_eq!(error["error"]["type"], "usage_limit_reached");
    assert_eq!(error["error"]["resets_in_seconds"], 60);
    assert_eq!(error["error"]["resets_at"], start.timestamp() + 60);
    let third = post(&up, "/chat/completions", req).await;
    assert_eq!(third.status(), StatusCode::OK);
    assert_eq!(up.calls(), 3);
}

#[tokio::test]
async fn usage_limit_frame_and_rate_limit_info_streams() {
    let up = FakeUpstream::start().await.unwrap();
    up.script([
        Step::UsageLimitFrame {
            resets_in_seconds: 90,
        },
        Step::RateLimitInfoThenContent,
    ]);
    let req = json!({"model": "gpt-5", "stream": true, "input": "hi"});
    let resp = post(&up, "/responses", req.clone()).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let events = sse(&resp.text().await.unwrap());
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0.as_deref(), Some("error"));
    let frame = data(&events[0]);
    assert_eq!(frame["error"]["type"], "usage_limit_reached");
    assert_eq!(frame["error"]["resets_in_seconds"], 90);

    let events = sse(&post(&up, "/responses", req).await.text().await.unwrap());
    assert_eq!(
        events.len(),
        11,
        "the rate-limit event, then the normal stream"
    );
    assert_eq!(events[0].0.as_deref(), Some("codex.rate_limits"));
    assert_eq!(data(&events[0])["type"], "codex.rate_limits");
    assert_eq!(events[10].0.as_deref(), Some("response.completed"));
}

#[tokio::test]
async fn break_after_first_chunk_drops_the_connection_without_counting_a_cancel() {
    let up = FakeUpstream::start().await.unwrap();
    up.script([Step::BreakAfterFirstChunk]);
    let req = json!({"model": "gpt-5", "stream": true, "messages": []});
    let mut resp = post(&up, "/chat/completions", req).await;
    let mut received = Vec::new();
    let error = loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => received.extend_from_slice(&chunk),
            Ok(None) => panic!("the stream must not end cleanly"),
            Err(e) => break e,
        }
    };
    assert!(
        error.is_body() || error.is_decode() || error.is_request(),
        "{error:?}"
    );
    let text = String::from_utf8(received).unwrap();
    assert!(text.contains("\"content\":\"tok \""), "{text}");
    assert!(!text.contains("[DONE]"));
    assert_eq!(up.cancelled(), 0);
}

#[tokio::test]
async fn cancelled_counts_exactly_the_streams_the_client_left() {
    let up = FakeUpstream::start().await.unwrap();
    let req = json!({"model": "gpt-5", "stream": true, "messages": []});
    // A slow stream read to its end is not cancelled.
    up.script([Step::SlowStream {
        chunks: 3,
        gap: Duration::from_millis(1),
    }]);
    let events = sse(&post(&up, "/chat/completions", req.clone())
        .await
        .text()
        .await
        .unwrap());
    assert_eq!(events.len(), 6, "role, 3 chunks, usage, [DONE]");
    assert_eq!(up.cancelled(), 0);

    // Left during a long gap: the upstream notices without writing.
    up.script([Step::SlowStream {
        chunks: 3,
        gap: Duration::from_secs(3600),
    }]);
    let mut resp = post(&up, "/chat/completions", req.clone()).await;
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("tok "));
    drop(resp);
    tokio::time::timeout(WAIT, up.wait_cancelled(1))
        .await
        .expect("cancel seen");

    // A stall: headers come at once, the body never; leaving counts too.
    up.script([Step::Stall {
        first_byte_after: Duration::MAX,
    }]);
    let resp = tokio::time::timeout(WAIT, post(&up, "/chat/completions", req))
        .await
        .expect("headers before the first byte");
    assert_eq!(resp.status(), StatusCode::OK);
    drop(resp);
    tokio::time::timeout(WAIT, up.wait_cancelled(2))
        .await
        .expect("cancel seen");
    assert_eq!(up.cancelled(), 2);
    up.stop().await;
}

#[tokio::test]
async fn stop_ends_stalled_streams_without_counting_them() {
    let up = FakeUpstream::start().await.unwrap();
    up.script([Step::Stall {
        first_byte_after: Duration::MAX,
    }]);
    let req = json!({"model": "gpt-5", "messages": []});
    let mut resp = post(&up, "/chat/completions", req).await;
    let url = up.base_url();
    let shared = up.shared.clone();
    tokio::time::timeout(WAIT, up.stop())
        .await
        .expect("stop is prompt");
    assert!(resp.chunk().await.is_err(), "the stalled body breaks");
    assert_eq!(*shared.cancelled.borrow(), 0);
    let refused = Client::new().get(format!("{url}/models")).send().await;
    assert!(refused.is_err(), "port closed");
}

#[tokio::test]
async fn slow_non_streaming_json_arrives_whole_and_models_list() {
    let up = FakeUpstream::start().await.unwrap();
    up.script([Step::SlowStream {
        chunks: 4,
        gap: Duration::from_millis(1),
    }]);
    let body: Value = post(
        &up,
        "/chat/completions",
        json!({"model": "a", "messages": []}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(body["object"], "chat.completion");
    up.set_models(&["x"]);
    let models: Value = Client::new()
        .get(format!("{}/models", up.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        models,
        json!({"object": "list", "data": [{"id": "x", "object": "model", "created": 0, "owned_by": "fake-upstream"}]})
    );
    assert_eq!(up.calls(), 1, "models is not an inference call");
    let bad = Client::new()
        .post(format!("{}/responses", up.base_url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

/// Response ids are unique across fake upstreams (the router links Responses ids to sessions).
#[tokio::test]
async fn response_ids_are_unique_across_upstreams() {
    let (one, two) = (
        FakeUpstream::start().await.unwrap(),
        FakeUpstream::start().await.unwrap(),
    );
    let mut ids = std::collections::HashSet::new();
    for up in [&one, &two, &one, &two] {
        for path in ["/responses", "/chat/completions"] {
            let body: Value = post(up, path, json!({"model": "gpt-5", "input": "hi"}))
                .await
                .json()
                .await
                .unwrap();
            let id = body["id"].as_str().expect("an id").to_string();
            assert!(ids.insert(id.clone()), "{id} answered twice");
        }
    }
    assert_eq!(ids.len(), 8);
}
