//! The router's HTTP surface as real Codex CLI and OpenAI SDK clients use it (README "Router",
//! "Headers", "Affinity"): Codex's remote compaction (`POST /v1/responses/compact`, Codex CLI
//! 0.171 codex-rs/codex-api/src/endpoint/compact.rs), over the same app, fake upstreams and
//! manual clock as `router`.

use std::time::Duration;

use quota_patrol::core::router::Api;
use quota_patrol::sim::openai::Step;
use serde_json::{Value, json};

use crate::router::{app, header, post, served_by, upstreams};

/// A Codex-shaped compaction body: the conversation's `instructions` and its history, the first
/// item being the conversation's first user message (what its `/v1/responses` turns start with).
fn compaction(first: &str) -> Value {
    json!({
        "model": "gpt-5",
        "instructions": "You are Codex.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": first}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "next"}]},
        ],
        "tools": [],
        "parallel_tool_calls": false,
    })
}

/// The first `/v1/responses` turn of the conversation [`compaction`] compacts.
fn first_turn(first: &str) -> Value {
    json!({
        "model": "gpt-5",
        "instructions": "You are Codex.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": first}]}],
        "stream": true,
    })
}

#[tokio::test]
async fn a_compaction_is_served_by_the_account_of_its_conversation() {
    let up = upstreams(3).await;
    let t = app(
        "",
        &[
            ("a", up[0].base_url(), 1, None),
            ("b", up[1].base_url(), 1, None),
            ("c", up[2].base_url(), 1, None),
        ],
        "",
    )
    .await;
    let r = post(&t, "/v1/responses", &first_turn("fix the parser")).await;
    assert_eq!(r.status(), 200);
    let home = served_by(&r).unwrap().to_string();
    r.text().await.unwrap();
    // Another conversation takes another (free) account: the compaction below is not served
    // by the first free account by chance.
    let r = post(&t, "/v1/responses", &first_turn("write the docs")).await;
    assert_ne!(served_by(&r).unwrap(), home);
    r.text().await.unwrap();
    let calls: Vec<u64> = up.iter().map(|u| u.calls()).collect();
    let r = post(&t, "/v1/responses/compact", &compaction("fix the parser")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        served_by(&r),
        Some(home.as_str()),
        "the conversation's account"
    );
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("1"));
    assert!(
        header(&r, "content-type")
            .unwrap()
            .starts_with("application/json")
    );
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "response.compaction", "{v}");
    assert_eq!(v["output"][0]["type"], "compaction", "{v}");
    let i = ["a", "b", "c"].iter().position(|a| *a == home).unwrap();
    assert_eq!(up[i].calls(), calls[i] + 1);
    let sent = up[i].last_request().unwrap();
    assert_eq!(
        sent,
        compaction("fix the parser"),
        "the body passed unchanged"
    );
}

#[tokio::test]
async fn a_failing_compaction_is_retried_failed_over_and_recorded_once() {
    let up = upstreams(2).await;
    let mut t = app(
        "max_retries = 1",
        &[
            ("a", up[0].base_url(), 1, None),
            ("b", up[1].base_url(), 2, None),
        ],
        "",
    )
    .await;
    let fail = Step::Status {
        status: 502,
        headers: vec![],
        body: "{\"error\":{\"message\":\"bad gateway\"}}".into(),
        content_type: "application/json".into(),
    };
    up[0].script([fail.clone(), fail]);
    let r = post(&t, "/v1/responses/compact", &compaction("x")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(served_by(&r), Some("b"));
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("3"));
    assert_eq!((up[0].calls(), up[1].calls()), (2, 1));
    assert_eq!(
        r.json::<Value>().await.unwrap()["object"],
        "response.compaction"
    );
    let mut rx = t.usage.take().unwrap();
    let rec = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.api, Api::ResponsesCompact);
    assert!(rec.ok);
    assert_eq!(
        (rec.account.as_deref(), rec.attempts, rec.status),
        (Some("b"), 3, 200)
    );
    assert_eq!((rec.prompt_tokens, rec.completion_tokens), (12, 7));
    assert!(rx.try_recv().is_err(), "one record, not one per attempt");
    // a cools down (transient): the next compaction goes straight to b.
    let r = post(&t, "/v1/responses/compact", &compaction("x")).await;
    assert_eq!(served_by(&r), Some("b"));
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("1"));
    assert_eq!(up[0].calls(), 2);
    // A quota answer excludes b too: nothing eligible, the all-excluded answer, then no
    // upstream is asked while both are out.
    up[1].script([Step::UsageLimitJson {
        resets_in_seconds: 600,
    }]);
    let r = post(&t, "/v1/responses/compact", &compaction("x")).await;
    assert!(matches!(r.status().as_u16(), 429 | 503), "{}", r.status());
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("1"));
    let r = post(&t, "/v1/responses/compact", &compaction("x")).await;
    assert!(matches!(r.status().as_u16(), 429 | 503), "{}", r.status());
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("0"));
    assert_eq!((up[0].calls(), up[1].calls()), (2, 3));
}
