//! The router's HTTP surface as real Codex CLI and OpenAI SDK clients use it (docs/router.md
//! "Headers and streaming", "Affinity: keeping a conversation on one account"): Codex's remote
//! compaction (`POST /v1/responses/compact`, Codex CLI 0.171
//! codex-rs/codex-api/src/endpoint/compact.rs), over the same app, fake upstreams and manual clock
//! as `router`.

use std::time::Duration;

use quota_patrol::core::router::Api;
use quota_patrol_sim::openai::Step;
use serde_json::{Value, json};

use crate::helpers::TestApp;
use crate::router::{
    CLIENT_KEY, UPSTREAM_KEY, app, header, post, retried_then_failed_over, served_by, upstreams,
};

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
    let t = three_accounts(&up).await;
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
    let (up, mut t) = retried_then_failed_over().await;
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

async fn get(t: &TestApp, path: &str) -> reqwest::Response {
    t.http
        .get(format!("{}{path}", t.router.as_ref().unwrap()))
        .bearer_auth(CLIENT_KEY)
        .send()
        .await
        .unwrap()
}

/// The router's own error answer: `status`, `x-quota-patrol-attempts: 0`, no account, the
/// OpenAI error shape with `code`. Returns the `Allow` header.
async fn router_error(r: reqwest::Response, status: u16, code: &str) -> Option<String> {
    assert_eq!(r.status(), status);
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("0"));
    assert!(served_by(&r).is_none());
    let allow = header(&r, "allow").map(str::to_string);
    let v: Value = r.json().await.expect("a JSON body");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    allow
}

#[tokio::test]
async fn models_retrieve_answers_a_served_name_and_404_model_not_found_otherwise() {
    let up = upstreams(1).await;
    let chain =
        "[[router.chains]]\nname = \"codex-auto\"\nlegs = [{ pool = \"p\", model = \"gpt-5\" }]\n";
    let t = app("", &[("a", up[0].base_url(), 1, None)], chain).await;
    for id in ["codex-auto", "gpt-5", "gpt-5-mini"] {
        let r = get(&t, &format!("/v1/models/{id}")).await;
        assert_eq!(r.status(), 200, "{id}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v,
            json!({"id": id, "object": "model", "created": 0, "owned_by": "quota-patrol"})
        );
    }
    router_error(get(&t, "/v1/models/gpt-4o").await, 404, "model_not_found").await;
    router_error(
        get(&t, "/v1/models/org/gpt-5").await,
        404,
        "model_not_found",
    )
    .await;
    assert_eq!(up[0].calls(), 0, "answered by the router");
}

#[tokio::test]
async fn unknown_paths_and_wrong_methods_get_the_openai_error_shape() {
    let up = upstreams(1).await;
    let t = app("", &[("a", up[0].base_url(), 1, None)], "").await;
    for path in [
        "/v1/responses",
        "/v1/chat/completions",
        "/v1/responses/compact",
    ] {
        let allow = router_error(get(&t, path).await, 405, "method_not_allowed").await;
        assert_eq!(allow.as_deref(), Some("POST"), "{path}");
    }
    for path in ["/v1/models", "/v1/models/gpt-5"] {
        let r = post(&t, path, &json!({})).await;
        let allow = router_error(r, 405, "method_not_allowed").await.unwrap();
        assert!(allow.contains("GET"), "{path}: {allow}");
    }
    for path in [
        "/v1/embeddings",
        "/v1/responses/resp_1",
        "/v2/responses",
        "/",
    ] {
        router_error(get(&t, path).await, 404, "not_found").await;
        router_error(post(&t, path, &json!({})).await, 404, "not_found").await;
    }
    assert_eq!(up[0].calls(), 0);
}

/// POSTs `body` to `path` with the extra `headers`.
async fn post_with(
    t: &TestApp,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> reqwest::Response {
    let mut req = t
        .http
        .post(format!("{}{path}", t.router.as_ref().unwrap()))
        .bearer_auth(CLIENT_KEY)
        .json(body);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.send().await.unwrap()
}

/// Three accounts of one tier: fresh sessions spread over them, so one account for several
/// requests is the session key's doing.
async fn three_accounts(up: &[quota_patrol_sim::openai::FakeUpstream]) -> TestApp {
    app(
        "",
        &[
            ("a", up[0].base_url(), 1, None),
            ("b", up[1].base_url(), 1, None),
            ("c", up[2].base_url(), 1, None),
        ],
        "",
    )
    .await
}

#[tokio::test]
async fn codex_session_id_and_thread_id_headers_keep_a_conversation_on_one_account() {
    let up = upstreams(3).await;
    let t = three_accounts(&up).await;
    // Each body alone is a different fresh session (its own fingerprint, no
    // prompt_cache_key): only the header ties them together.
    let mut served = Vec::new();
    for turn in ["one", "two", "three"] {
        let r = post_with(
            &t,
            "/v1/responses",
            &[("session-id", "codex-session-1")],
            &first_turn(turn),
        )
        .await;
        assert_eq!(r.status(), 200);
        served.push(served_by(&r).unwrap().to_string());
        r.text().await.unwrap();
    }
    let r = post_with(
        &t,
        "/v1/responses/compact",
        &[("session-id", "codex-session-1")],
        &compaction("four"),
    )
    .await;
    served.push(served_by(&r).unwrap().to_string());
    assert!(served.iter().all(|s| *s == served[0]), "{served:?}");
    // thread-id alone keys a conversation too; with session-id present, session-id wins.
    let mut by_thread = Vec::new();
    for (turn, headers) in [
        ("five", &[("thread-id", "thread-9")][..]),
        ("six", &[("thread-id", "thread-9")][..]),
        (
            "seven",
            &[("session-id", "s-2"), ("thread-id", "thread-x")][..],
        ),
        (
            "eight",
            &[("session-id", "s-2"), ("thread-id", "thread-y")][..],
        ),
    ] {
        let r = post_with(&t, "/v1/responses", headers, &first_turn(turn)).await;
        by_thread.push(served_by(&r).unwrap().to_string());
        r.text().await.unwrap();
    }
    assert_eq!(by_thread[0], by_thread[1], "{by_thread:?}");
    assert_eq!(by_thread[2], by_thread[3], "{by_thread:?}");
}

/// What Codex CLI 0.171 and the OpenAI SDKs send that the upstream is to get (docs/router.md
/// "Client headers passed to the upstream").
const FORWARDED: [(&str, &str); 13] = [
    (
        "user-agent",
        "codex_cli_rs/0.171.0 (Debian 13; x86_64) xterm",
    ),
    ("originator", "codex_cli_rs"),
    ("version", "0.171.0"),
    ("x-codex-beta-features", "remote_compaction_v2"),
    ("x-codex-turn-metadata", "{\"turn_id\":\"turn-1\"}"),
    ("x-client-request-id", "thread-7"),
    ("session_id", "sess-7"),
    ("session-id", "sess-7"),
    ("thread-id", "thread-7"),
    ("accept", "text/event-stream"),
    ("openai-beta", "responses=experimental"),
    ("x-stainless-lang", "python"),
    ("x-stainless-retry-count", "0"),
];

/// What must stay behind: credentials, hop-by-hop and proxy headers, the client's org.
const HELD_BACK: [(&str, &str); 10] = [
    ("cookie", "sid=SECRET"),
    ("proxy-authorization", "Basic SECRET"),
    ("keep-alive", "timeout=5"),
    ("te", "trailers"),
    ("trailer", "x-checksum"),
    ("x-forwarded-for", "10.1.2.3"),
    ("forwarded", "for=10.1.2.3"),
    ("accept-encoding", "gzip"),
    ("openai-organization", "org-client"),
    ("x-codex-hop", "declared hop-by-hop below"),
];

#[tokio::test]
async fn client_headers_on_the_allow_list_reach_the_upstream_on_every_attempt() {
    let (up, t) = retried_then_failed_over().await;
    let mut headers: Vec<(&str, &str)> = FORWARDED.iter().chain(&HELD_BACK).copied().collect();
    headers.push(("connection", "keep-alive, x-codex-hop"));
    let body = first_turn("headers");
    let r = post_with(&t, "/v1/responses", &headers, &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("3"));
    r.text().await.unwrap();
    // a got the second attempt (its retry), b the fail-over: both with the same headers.
    for u in &up {
        let got = u.last_headers();
        for (name, value) in FORWARDED {
            assert_eq!(
                got.get(name).and_then(|v| v.to_str().ok()),
                Some(value),
                "{name} passed on to {}",
                u.base_url()
            );
        }
        for (name, _) in HELD_BACK {
            assert!(got.get(name).is_none(), "{name} held back");
        }
        let one = |name: &str| {
            let all: Vec<&str> = got
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect();
            assert_eq!(all.len(), 1, "{name}: {all:?}");
            all[0].to_string()
        };
        assert_eq!(one("authorization"), format!("Bearer {UPSTREAM_KEY}"));
        assert_eq!(one("content-type"), "application/json");
        assert_eq!(
            one("host"),
            u.local_addr().to_string(),
            "the upstream's host"
        );
        let sent = serde_json::to_vec(&u.last_request().unwrap()).unwrap();
        assert_eq!(one("content-length"), sent.len().to_string());
        let all = format!("{got:?}");
        assert!(!all.contains("sid=SECRET") && !all.contains("Basic SECRET"));
    }
}
