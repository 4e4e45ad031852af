//! The request router end to end (docs/rules/router.md §3–§5): the real app with a `[router]` on port
//! 0, fake OpenAI upstreams (`sim::openai::FakeUpstream`) on 127.0.0.1 as its accounts, the
//! simulated CPA behind the patrol link, and the manual clock.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::Duration as ChronoDuration;
use quota_patrol::clock::ManualClock;
use quota_patrol::config::{Config, RouterConfig};
use quota_patrol::core::router::key_hash;
use quota_patrol_sim::openai::{FakeUpstream, Step};
use serde_json::{Value, json};

use crate::helpers::{TestApp, free, spawn_app_router, spawn_app_router_writing_usage, t0};

pub(crate) const CLIENT_KEY: &str = "sk-router-client-SECRET";
pub(crate) const UPSTREAM_KEY: &str = "sk-upstream-SECRET";

/// A `[router]` over `accounts` = (id, base URL, tier, site) in one pool `p` serving
/// `gpt-5` and `gpt-5-mini`, plus `extra` TOML (chains, more pools).
fn router_config(
    settings: &str,
    accounts: &[(&str, String, u32, Option<&str>)],
    extra: &str,
) -> RouterConfig {
    let mut text = format!(
        "[router]\nlisten = \"127.0.0.1:0\"\nleg_settle_ms = 10\n{settings}\n[[router.pools]]\nid = \"p\"\nmodels = [\"gpt-5\", \"gpt-5-mini\"]\n"
    );
    for (id, base, tier, site) in accounts {
        text.push_str(&format!(
            "[[router.accounts]]\npool = \"p\"\nid = \"{id}\"\nbase_url = \"{base}\"\napi_key_env = \"UPSTREAM_KEY\"\ntier = {tier}\n"
        ));
        if let Some(s) = site {
            text.push_str(&format!("site = \"{s}\"\n"));
        }
    }
    text.push_str(extra);
    let env = |k: &str| (k == "UPSTREAM_KEY").then(|| UPSTREAM_KEY.to_string());
    Config::parse(&text, "router.toml", &env)
        .unwrap_or_else(|e| panic!("{e}"))
        .router
        .expect("router section")
}

pub(crate) async fn app(
    settings: &str,
    accounts: &[(&str, String, u32, Option<&str>)],
    extra: &str,
) -> TestApp {
    let t = spawn_app_router(vec![], router_config(settings, accounts, extra)).await;
    t.router_handle
        .as_ref()
        .unwrap()
        .set_keys(HashSet::from([key_hash(CLIENT_KEY)]));
    t
}

/// Two upstream accounts, `a` (tier 1) then `b` (tier 2), behind a router with
/// `max_retries = 1`; `a` answers its next two requests with a 502 JSON error, so a request
/// is retried once on `a` and then fails over to `b`.
pub(crate) async fn retried_then_failed_over() -> (Vec<FakeUpstream>, TestApp) {
    let up = upstreams(2).await;
    let t = app(
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
    (up, t)
}

/// `n` fake upstreams whose clock (for `resets_at`) stands at the test clock's start.
pub(crate) async fn upstreams(n: usize) -> Vec<FakeUpstream> {
    let mut out = Vec::new();
    for _ in 0..n {
        let clock = Arc::new(ManualClock::new(t0()));
        let addr = "127.0.0.1:0".parse().unwrap();
        out.push(FakeUpstream::start_with_clock(addr, clock).await.unwrap());
    }
    out
}

fn chat(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

pub(crate) async fn post(t: &TestApp, path: &str, body: &Value) -> reqwest::Response {
    t.http
        .post(format!("{}{path}", t.router.as_ref().unwrap()))
        .bearer_auth(CLIENT_KEY)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The account that served `r` (`x-quota-patrol-account`).
pub(crate) fn served_by(r: &reqwest::Response) -> Option<&str> {
    header(r, "x-quota-patrol-account")
}

pub(crate) fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn key_auth_invalid_json_and_oversize_bodies_get_the_openai_error_shape() {
    let up = upstreams(1).await;
    let t = app("", &[("a", up[0].base_url(), 1, None)], "").await;
    let url = format!("{}/v1/chat/completions", t.router.as_ref().unwrap());
    for auth in [None, Some("sk-wrong")] {
        let mut req = t.http.post(&url).json(&chat("gpt-5", false));
        if let Some(k) = auth {
            req = req.bearer_auth(k);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("0"));
        assert!(served_by(&r).is_none());
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_api_key");
        assert!(!v.to_string().contains("SECRET"));
    }
    // The key is checked before the method and on every served path.
    let base = t.router.as_ref().unwrap();
    for r in [
        t.http.get(&url).send().await.unwrap(),
        t.http
            .get(format!("{base}/v1/models"))
            .send()
            .await
            .unwrap(),
        t.http
            .get(format!("{base}/v1/models/gpt-5"))
            .send()
            .await
            .unwrap(),
    ] {
        assert_eq!(r.status(), 401, "{}", r.url());
    }
    let r = t
        .http
        .post(&url)
        .bearer_auth(CLIENT_KEY)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_request");
    let big = format!(
        "{{\"model\":\"gpt-5\",\"pad\":\"{}\"}}",
        "x".repeat(8 * 1024 * 1024 + 1)
    );
    let r = t
        .http
        .post(&url)
        .bearer_auth(CLIENT_KEY)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "request_too_large");
    assert_eq!(up[0].calls(), 0, "nothing reached the upstream");
    // A valid key passes and the upstream gets the account's key, not the client's.
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        up[0].last_authorization().as_deref(),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
}

#[tokio::test]
async fn a_5xx_is_retried_on_the_same_account_then_failed_over() {
    let (up, t) = retried_then_failed_over().await;
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(served_by(&r), Some("b"));
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("3"));
    assert_eq!((up[0].calls(), up[1].calls()), (2, 1));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], 12);
    // a cools down (transient): the next request goes straight to b.
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(served_by(&r), Some("b"));
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("1"));
    assert_eq!(up[0].calls(), 2);
}

#[tokio::test]
async fn a_request_error_goes_back_to_the_client_from_the_one_account_asked() {
    let up = upstreams(2).await;
    let t = two_tier_app(&up).await;
    up[0].script([Step::Status {
        status: 400,
        headers: vec![],
        body: "{\"error\":{\"message\":\"bad field\",\"code\":\"invalid_value\"}}".into(),
        content_type: "application/json".into(),
    }]);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 400);
    assert_eq!(served_by(&r), Some("a"));
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("1"));
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_value"
    );
    assert_eq!(up[1].calls(), 0);
}

#[tokio::test]
async fn chat_and_responses_streams_pass_through_with_done_only_on_chat() {
    let up = upstreams(1).await;
    let t = app("", &[("a", up[0].base_url(), 1, None)], "").await;
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", true)).await;
    assert_eq!(r.status(), 200);
    assert!(
        header(&r, "content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert_eq!(served_by(&r), Some("a"));
    let text = r.text().await.unwrap();
    assert_eq!(text.matches("data: [DONE]").count(), 1, "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"));
    assert!(text.contains("Hello"), "{text}");
    let body = json!({"model": "gpt-5", "stream": true, "input": "hi"});
    let r = post(&t, "/v1/responses", &body).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("response.completed"), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
}

#[tokio::test]
async fn nothing_is_retried_after_the_first_streamed_byte() {
    let up = upstreams(2).await;
    let t = two_tier_app(&up).await;
    up[0].script([Step::BreakAfterFirstChunk]);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(served_by(&r), Some("a"));
    let text = match r.text().await {
        Ok(t) => t,
        Err(e) => panic!("the router ends the broken stream cleanly with an error frame: {e}"),
    };
    assert!(text.contains("upstream_stream_broken"), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    assert_eq!((up[0].calls(), up[1].calls()), (1, 0));
}

#[tokio::test]
async fn a_client_disconnect_cancels_the_upstream_stream() {
    let up = upstreams(1).await;
    let t = app("", &[("a", up[0].base_url(), 1, None)], "").await;
    up[0].script([Step::SlowStream {
        chunks: 100,
        gap: Duration::from_millis(50),
    }]);
    let mut r = post(&t, "/v1/chat/completions", &chat("gpt-5", true)).await;
    assert_eq!(r.status(), 200);
    let first = r.chunk().await.unwrap().expect("a first chunk");
    assert!(!first.is_empty());
    drop(r);
    tokio::time::timeout(Duration::from_secs(5), up[0].wait_cancelled(1))
        .await
        .expect("the upstream stream is cancelled");
}

#[tokio::test]
async fn a_chain_falls_through_to_its_next_leg_with_that_legs_model() {
    let up = upstreams(2).await;
    let extra = format!(
        "[[router.pools]]\nid = \"backup\"\nmodels = [\"gpt-5-mini\"]\n[[router.accounts]]\npool = \"backup\"\nid = \"b\"\nbase_url = \"{}\"\n[[router.chains]]\nname = \"auto\"\nlegs = [{{ pool = \"p\", model = \"gpt-5\" }}, {{ pool = \"backup\", model = \"gpt-5-mini\" }}]\n",
        up[1].base_url()
    );
    let t = app(
        "max_retries = 0",
        &[("a", up[0].base_url(), 1, None)],
        &extra,
    )
    .await;
    up[0].script([Step::Status {
        status: 503,
        headers: vec![],
        body: "{}".into(),
        content_type: "application/json".into(),
    }]);
    let r = post(&t, "/v1/chat/completions", &chat("auto", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(served_by(&r), Some("b"));
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("2"));
    assert_eq!(up[0].last_request().unwrap()["model"], "gpt-5");
    assert_eq!(up[1].last_request().unwrap()["model"], "gpt-5-mini");
    let models: Value = t
        .http
        .get(format!("{}/v1/models", t.router.as_ref().unwrap()))
        .bearer_auth(CLIENT_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["auto", "gpt-5", "gpt-5-mini"]);
}

#[tokio::test]
async fn an_early_error_frame_fails_over_before_the_client_sees_a_byte() {
    let up = upstreams(2).await;
    let t = two_tier_app(&up).await;
    up[0].script([Step::UsageLimitFrame {
        resets_in_seconds: 3600,
    }]);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(served_by(&r), Some("b"));
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("2"));
    let text = r.text().await.unwrap();
    assert!(!text.contains("usage_limit_reached"), "{text}");
    // a stays excluded (quota) until the frame's reset: the next request goes to b directly.
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(served_by(&r), Some("b"));
    assert_eq!(up[0].calls(), 1);
    let p = t
        .router_handle
        .as_ref()
        .unwrap()
        .preview("gpt-5", None)
        .unwrap();
    let ex = &p.legs[0].excluded[0];
    assert_eq!(ex.account, "a");
    assert_eq!(ex.until, Some(t0() + ChronoDuration::seconds(3600)));
    assert_eq!(serde_json::to_value(ex.cooldown).unwrap(), json!("quota"));
}

#[tokio::test]
async fn codex_usage_limits_on_every_account_answer_429_all_accounts_exhausted_with_the_reset() {
    let up = upstreams(2).await;
    let t = app(
        "",
        &[
            ("a", up[0].base_url(), 1, None),
            ("b", up[1].base_url(), 1, None),
        ],
        "",
    )
    .await;
    up[0].script([Step::UsageLimitJson {
        resets_in_seconds: 7200,
    }]);
    up[1].script([Step::UsageLimitJson {
        resets_in_seconds: 3600,
    }]);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("2"));
    assert_eq!(header(&r, "retry-after"), Some("3600"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "all_accounts_exhausted");
    assert_eq!(v["error"]["type"], "usage_limit_reached");
    assert_eq!(
        v["error"]["resets_at"],
        (t0() + ChronoDuration::hours(1)).timestamp()
    );
    assert_eq!(v["error"]["resets_in_seconds"], 3600);
    // Account-wide: the accounts' other model is excluded too, without asking them.
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5-mini", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("0"));
    assert_eq!((up[0].calls(), up[1].calls()), (1, 1));
    // After the earliest reset, b serves again.
    t.clock.advance(ChronoDuration::seconds(3601));
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(served_by(&r), Some("b"));
}

#[tokio::test]
async fn a_model_scoped_quota_leaves_the_accounts_other_models_usable() {
    let up = upstreams(1).await;
    let t = app("", &[("a", up[0].base_url(), 1, None)], "").await;
    let reset = t0() + ChronoDuration::hours(2);
    let h = |n: &str, v: String| (n.to_string(), v);
    up[0].script([Step::Status {
        status: 429,
        headers: vec![
            h("x-codex-primary-used-percent", "10".into()),
            h("x-codex-secondary-used-percent", "20".into()),
            h("x-codex-gpt-5-primary-used-percent", "100".into()),
            h(
                "x-codex-gpt-5-primary-reset-at",
                reset.timestamp().to_string(),
            ),
        ],
        body: "{\"error\":{\"type\":\"usage_limit_reached\",\"message\":\"model limit\"}}".into(),
        content_type: "application/json".into(),
    }]);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 429);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "all_accounts_exhausted");
    assert_eq!(v["error"]["resets_at"], reset.timestamp());
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5-mini", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(served_by(&r), Some("a"));
    assert_eq!(up[0].calls(), 2);
}

#[tokio::test]
async fn the_patrol_link_excludes_an_exhausted_site_with_the_codex_429_and_lifts_after_its_reset() {
    let up = upstreams(1).await;
    let mut cfg = router_config("", &[("cpa", up[0].base_url(), 1, Some("test"))], "");
    cfg.settings.listen = "127.0.0.1:0".parse().unwrap();
    let t = spawn_app_router(vec![free("a@example.com", 100.0)], cfg).await;
    t.router_handle
        .as_ref()
        .unwrap()
        .set_keys(HashSet::from([key_hash(CLIENT_KEY)]));
    t.inspect().await;
    let reset = t0() + ChronoDuration::days(4);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 429);
    assert!(served_by(&r).is_none());
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("0"));
    let wait = (reset - t0()).num_seconds();
    assert_eq!(header(&r, "retry-after"), Some(wait.to_string().as_str()));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "all_accounts_exhausted");
    assert_eq!(v["error"]["type"], "usage_limit_reached");
    assert_eq!(v["error"]["resets_at"], reset.timestamp());
    assert_eq!(v["error"]["resets_in_seconds"], wait);
    assert_eq!(up[0].calls(), 0, "an exhausted site is never asked");
    // After the reset the patrol sees the account usable again; the router follows.
    t.clock.set(reset + ChronoDuration::minutes(1));
    let name = t.name_of("a@example.com");
    t.sim.set_usage(
        &name,
        quota_patrol_sim::SimUsage::weekly_only(3.0, reset + ChronoDuration::days(7)),
    );
    t.inspect_forced().await;
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(served_by(&r), Some("cpa"));
}

#[tokio::test]
async fn preview_and_status_say_who_serves_next_and_why_not_the_others() {
    let up = upstreams(2).await;
    let t = two_tier_app(&up).await;
    up[0].script([Step::Status {
        status: 429,
        headers: vec![("retry-after".into(), "7".into())],
        body: "{\"error\":{\"message\":\"slow down\"}}".into(),
        content_type: "application/json".into(),
    }]);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(served_by(&r), Some("b"));
    let h = t.router_handle.as_ref().unwrap();
    let p = h.preview("gpt-5", None).unwrap();
    assert_eq!(p.legs[0].ranking, ["b"]);
    let ex = &p.legs[0].excluded[0];
    assert_eq!((ex.account.as_str(), ex.reason), ("a", "coolingDown"));
    assert_eq!(ex.until, Some(t0() + ChronoDuration::seconds(7)));
    assert!(h.preview("nope", None).is_err());
    let s = serde_json::to_value(h.status()).unwrap();
    assert_eq!(s["requests"]["total"], 1);
    assert_eq!(
        s["pools"][0]["accounts"][0]["cooldown"]["kind"],
        "rateLimit"
    );
    assert!(!s.to_string().contains("SECRET"));
}

#[tokio::test]
async fn one_usage_record_per_client_request_with_the_stream_usage() {
    let up = upstreams(2).await;
    let mut t = app(
        "max_retries = 0",
        &[
            ("a", up[0].base_url(), 1, None),
            ("b", up[1].base_url(), 2, None),
        ],
        "",
    )
    .await;
    up[0].script([Step::Status {
        status: 500,
        headers: vec![],
        body: "{}".into(),
        content_type: "application/json".into(),
    }]);
    up[1].set_cached_tokens(5);
    let body = json!({"model": "gpt-5", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&t, "/v1/chat/completions", &body).await;
    r.text().await.unwrap();
    let mut rx = t.usage.take().unwrap();
    let rec = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(rec.ok);
    assert_eq!(rec.attempts, 2);
    assert_eq!(rec.account.as_deref(), Some("b"));
    assert_eq!(
        (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens),
        (12, 7, 5)
    );
    assert!(rx.try_recv().is_err(), "one record, not one per attempt");
}

/// The stored usage rows (`router_usage`, oldest first): account, attempts, ok, status.
async fn stored_usage(t: &TestApp) -> Vec<(Option<String>, i64, bool, i64)> {
    t.patrol
        .store
        .run(|c| {
            let mut st =
                c.prepare("SELECT account_id, attempts, ok, status FROM router_usage ORDER BY id")?;
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
        .unwrap()
}

/// Two requests through a fail-over: a (500) then b serves the first, b the second (a cools
/// down). Returns the app after a graceful restart, so the writer's last store has happened.
async fn two_requests_then_restart(settings: &str) -> TestApp {
    let up = upstreams(2).await;
    let cfg = router_config(
        settings,
        &[
            ("a", up[0].base_url(), 1, None),
            ("b", up[1].base_url(), 2, None),
        ],
        "",
    );
    let t = spawn_app_router_writing_usage(vec![], cfg).await;
    assert!(t.usage.is_none(), "the app's writer has the records");
    t.router_handle
        .as_ref()
        .unwrap()
        .set_keys(HashSet::from([key_hash(CLIENT_KEY)]));
    up[0].script([Step::Status {
        status: 500,
        headers: vec![],
        body: "{}".into(),
        content_type: "application/json".into(),
    }]);
    up[1].set_cached_tokens(5);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("2"));
    r.text().await.unwrap();
    // a cools down (transient, 30 s): b serves at once.
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("1"));
    r.text().await.unwrap();
    t.restart().await
}

/// The daily aggregate of the two requests of [`two_requests_then_restart`], read back through
/// `GET /api/router/usage`.
async fn assert_the_day_of_two_requests(t: &TestApp) {
    let days: Value = t
        .get("/api/router/usage?days=1")
        .await
        .json()
        .await
        .unwrap();
    let days = days.as_array().expect("a list");
    assert_eq!(days.len(), 1, "{days:?}");
    let d = &days[0];
    assert_eq!(d["day"], t0().date_naive().to_string());
    assert_eq!(
        (d["pool"].as_str(), d["account"].as_str()),
        (Some("p"), Some("b"))
    );
    assert_eq!(d["requests"], 2);
    assert_eq!(d["ok"], 2);
    assert_eq!(d["attempts"], 3);
    assert_eq!(d["cachedTokens"], 10);
}

/// docs/rules/router.md §5 and docs/decisions.md §20: usage is summed per minute in memory and
/// stored off the request path; the graceful stop stores the rest (no sleep), and the
/// restarted app reads the minute and daily aggregates back, exact. No per-request row is
/// stored by default.
#[tokio::test]
async fn usage_is_stored_per_minute_and_day_exactly_and_read_back_after_a_restart() {
    let t = two_requests_then_restart("max_retries = 0").await;
    assert_eq!(
        stored_usage(&t).await,
        vec![],
        "no per-request rows by default"
    );
    assert_the_day_of_two_requests(&t).await;
    let minutes: Value = t
        .get("/api/router/usage/minutes?minutes=5")
        .await
        .json()
        .await
        .unwrap();
    let minutes = minutes.as_array().expect("a list");
    assert_eq!(minutes.len(), 1, "one minute, one key: {minutes:?}");
    let m = &minutes[0];
    assert_eq!(m["api"], "chatCompletions");
    assert_eq!(m["requestedModel"], "gpt-5");
    assert_eq!(
        (
            m["pool"].as_str(),
            m["model"].as_str(),
            m["account"].as_str()
        ),
        (Some("p"), Some("gpt-5"), Some("b"))
    );
    assert_eq!(
        (m["status"].as_u64(), m["ok"].as_bool()),
        (Some(200), Some(true))
    );
    assert_eq!(m["requests"], 2);
    assert_eq!(m["attempts"], 3);
    assert_eq!(m["cachedTokens"], 10);
    let bad = t.get("/api/router/usage/minutes?minutes=0").await;
    assert_eq!(bad.status(), 400);
}

/// docs/rules/router.md §5: with `usage_request_rows = true` there is also one row per client
/// request (not per attempt).
#[tokio::test]
async fn with_request_rows_on_one_row_per_client_request_is_stored_too() {
    let t = two_requests_then_restart("max_retries = 0\nusage_request_rows = true").await;
    assert_eq!(
        stored_usage(&t).await,
        vec![
            (Some("b".into()), 2, true, 200),
            (Some("b".into()), 1, true, 200),
        ],
        "one row per client request, the fail-over's two attempts in one"
    );
    let hashed: i64 = t
        .patrol
        .store
        .run(|c| {
            Ok(c.query_row(
                "SELECT count(*) FROM router_usage WHERE length(session_key_hash) = 64",
                [],
                |r| r.get(0),
            )?)
        })
        .await
        .unwrap();
    assert_eq!(hashed, 2, "each row carries its session key's SHA-256");
    assert_the_day_of_two_requests(&t).await;
}

#[tokio::test]
async fn a_key_created_through_the_admin_api_opens_the_router_and_its_status_is_the_routers() {
    let up = upstreams(1).await;
    let t = spawn_app_router(
        vec![],
        router_config("", &[("a", up[0].base_url(), 1, None)], ""),
    )
    .await;
    let url = format!("{}/v1/chat/completions", t.router.as_ref().unwrap());
    let r = t
        .http
        .post(&url)
        .json(&chat("gpt-5", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "no key exists yet");
    let created: Value = t
        .post("/api/router/keys", json!({"name": "ci"}))
        .await
        .json()
        .await
        .unwrap();
    let key = created["key"].as_str().unwrap();
    let r = t
        .http
        .post(&url)
        .bearer_auth(key)
        .json(&chat("gpt-5", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(served_by(&r), Some("a"));
    let status: Value = t.get("/api/router/status").await.json().await.unwrap();
    assert_eq!(status["requests"]["served"], 1, "{status}");
    assert_eq!(status["pools"][0]["accounts"][0]["id"], "a");
    assert!(!status.to_string().contains("SECRET"));
    let id = created["id"].as_str().unwrap();
    assert_eq!(
        t.delete(&format!("/api/router/keys/{id}")).await.status(),
        204
    );
    let r = t
        .http
        .post(&url)
        .bearer_auth(key)
        .json(&chat("gpt-5", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "a revoked key is refused at once");
}

/// The app with account `a` (tier 1) on `up[0]` and `b` (tier 2) on `up[1]`, default router
/// settings: the set-up of the affinity tests.
async fn two_tier_app(up: &[FakeUpstream]) -> TestApp {
    app(
        "",
        &[
            ("a", up[0].base_url(), 1, None),
            ("b", up[1].base_url(), 2, None),
        ],
        "",
    )
    .await
}
async fn post_session(t: &TestApp, session: &str) -> reqwest::Response {
    t.http
        .post(format!(
            "{}/v1/chat/completions",
            t.router.as_ref().unwrap()
        ))
        .bearer_auth(CLIENT_KEY)
        .header("x-session-id", session)
        .json(&chat("gpt-5", false))
        .send()
        .await
        .unwrap()
}

fn rate_limited(seconds: u32) -> Step {
    Step::Status {
        status: 429,
        headers: vec![("retry-after".into(), seconds.to_string())],
        body: "{\"error\":{\"message\":\"slow down\"}}".into(),
        content_type: "application/json".into(),
    }
}

#[tokio::test]
async fn a_session_keeps_its_account_when_a_higher_tier_account_recovers() {
    let up = upstreams(2).await;
    let t = two_tier_app(&up).await;
    // a is out for 10 minutes (a long exclusion): session s is served by b, and its next
    // request, ranked while a is still out, settles on b.
    up[0].script([rate_limited(600)]);
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("b"));
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("b"));
    t.clock.advance(ChronoDuration::seconds(601));
    // a recovered: s stays on its warm account, a new session takes the free tier-1 account.
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("b"));
    let r = post_session(&t, "new").await;
    assert_eq!(served_by(&r), Some("a"));
}

#[tokio::test]
async fn a_short_429_burst_serves_elsewhere_but_keeps_the_binding() {
    let up = upstreams(2).await;
    let t = two_tier_app(&up).await;
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("a"));
    up[0].script([rate_limited(5)]);
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("b"));
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("b"), "a still cools down");
    t.clock.advance(ChronoDuration::seconds(6));
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("a"), "back on its warm account");
}

/// docs/rules/router.md §2.2: a quota exclusion re-binds even when its reset is within 60 s (only
/// rate_limit / transient cooldowns are brief).
#[tokio::test]
async fn a_quota_429_resetting_within_a_minute_rebinds_the_session() {
    let up = upstreams(2).await;
    let t = two_tier_app(&up).await;
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("a"));
    up[0].script([Step::UsageLimitJson {
        resets_in_seconds: 30,
    }]);
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("b"));
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("b"));
    t.clock.advance(ChronoDuration::seconds(31));
    let r = post_session(&t, "s").await;
    assert_eq!(
        served_by(&r),
        Some("b"),
        "re-bound on the quota, not kept as a brief exclusion"
    );
}

/// docs/rules/router.md §3: every account of a pool answering a plain 429 within 2 s is an IP-level
/// throttle: the pool cools down as a whole (5 s without Retry-After), its other models too,
/// while each account's own backoff is only 2 s.
#[tokio::test]
async fn a_pool_throttle_seen_on_one_model_cools_the_pools_other_models_too() {
    let up = upstreams(2).await;
    let t = app(
        "",
        &[
            ("a", up[0].base_url(), 1, None),
            ("b", up[1].base_url(), 1, None),
        ],
        "",
    )
    .await;
    let plain_429 = || Step::Status {
        status: 429,
        headers: vec![],
        body: "{\"error\":{\"message\":\"slow down\"}}".into(),
        content_type: "application/json".into(),
    };
    up[0].script([plain_429()]);
    up[1].script([plain_429()]);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("2"));
    let calls = up[0].calls() + up[1].calls();
    // The accounts' own 2 s backoff is over; the 5 s pool cooldown is not, on either model.
    t.clock.advance(ChronoDuration::seconds(3));
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5-mini", false)).await;
    assert_eq!(r.status(), 429, "the pool cools down as a whole");
    assert_eq!(header(&r, "retry-after"), Some("2"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "no_healthy_account");
    assert_eq!(up[0].calls() + up[1].calls(), calls, "no upstream asked");
    t.clock.advance(ChronoDuration::seconds(2));
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5-mini", false)).await;
    assert_eq!(r.status(), 200, "the pool cooldown is over");
}

#[tokio::test]
async fn a_long_exclusion_rebinds_the_session_for_good() {
    let up = upstreams(2).await;
    let t = app(
        "",
        &[
            ("a", up[0].base_url(), 1, None),
            ("b", up[1].base_url(), 1, None),
        ],
        "",
    )
    .await;
    let first = post_session(&t, "s").await;
    let home = header(&first, "x-quota-patrol-account")
        .unwrap()
        .to_string();
    let (home_up, other) = if home == "a" {
        (&up[0], "b")
    } else {
        (&up[1], "a")
    };
    home_up.script([Step::UsageLimitJson {
        resets_in_seconds: 3600,
    }]);
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some(other));
    t.clock.advance(ChronoDuration::seconds(3601));
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some(other), "re-bound, stays");
}

/// Three tier-1 accounts `a`, `b`, `c` on `up[0..3]`, default router settings.
async fn three_flat_app(up: &[FakeUpstream]) -> TestApp {
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

/// docs/router.md "Brief exclusions and re-binding": a bound account failing during a request with
/// a long exclusion (here a 429 with `Retry-After: 65`, a rate limit longer than 60 s) hands the
/// conversation to the account that served the request, for good: the next request goes there while
/// `a` still cools down (it used to be spread to the third account `c`) and after `a`'s cooldown
/// ended.
#[tokio::test]
async fn a_long_429_during_a_request_moves_the_session_to_the_account_that_served_it() {
    let up = upstreams(3).await;
    let t = three_flat_app(&up).await;
    assert_eq!(served_by(&post_session(&t, "s").await), Some("a"));
    up[0].script([rate_limited(65)]);
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("b"), "failed over");
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("2"));
    t.clock.advance(ChronoDuration::seconds(2));
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("b"), "while a cools down");
    t.clock.advance(ChronoDuration::seconds(64));
    let r = post_session(&t, "s").await;
    assert_eq!(served_by(&r), Some("b"), "after a's cooldown ended");
    assert_eq!(up[0].calls(), 2, "a not asked again");
    assert_eq!(up[2].calls(), 0, "c never asked");
}

/// The same with the next request only after the failed account's exclusion ended (it used to
/// return to `a`, losing the cache a second time): a 429 of 65 s, and a 401 (session_dead,
/// 30 min).
#[tokio::test]
async fn after_a_long_exclusion_ends_the_session_stays_on_the_account_that_served_it() {
    let unauthorized = Step::Status {
        status: 401,
        headers: vec![],
        body: "{\"error\":{\"message\":\"invalid session\"}}".into(),
        content_type: "application/json".into(),
    };
    for (step, out_for) in [
        (rate_limited(65), ChronoDuration::seconds(66)),
        (unauthorized, ChronoDuration::minutes(31)),
    ] {
        let up = upstreams(3).await;
        let t = three_flat_app(&up).await;
        assert_eq!(served_by(&post_session(&t, "s").await), Some("a"));
        up[0].script([step]);
        assert_eq!(served_by(&post_session(&t, "s").await), Some("b"));
        t.clock.advance(out_for);
        let r = post_session(&t, "s").await;
        assert_eq!(served_by(&r), Some("b"), "not back to a after {out_for}");
        assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("1"));
    }
}

#[tokio::test]
async fn concurrent_fresh_sessions_get_distinct_accounts() {
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
    let (r1, r2, r3) = tokio::join!(
        post_session(&t, "s1"),
        post_session(&t, "s2"),
        post_session(&t, "s3")
    );
    let served: HashSet<String> = [r1, r2, r3]
        .iter()
        .map(|r| header(r, "x-quota-patrol-account").unwrap().to_string())
        .collect();
    assert_eq!(served.len(), 3, "{served:?}");
}

#[tokio::test]
async fn a_responses_continuation_follows_the_account_of_the_response_it_continues() {
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
    let first = json!({"model": "gpt-5", "instructions": "be brief", "input": "first"});
    let r = post(&t, "/v1/responses", &first).await;
    assert_eq!(r.status(), 200);
    let home = served_by(&r).unwrap().to_string();
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .expect("a response id")
        .to_string();
    // The same body unlinked is a new conversation and goes to a free account; linked, a
    // continuation follows its parent whatever its own fingerprint.
    let unlinked = json!({"model": "gpt-5", "instructions": "changed", "input": "third"});
    let r = post(&t, "/v1/responses", &unlinked).await;
    assert_ne!(served_by(&r).unwrap(), home);
    let next = json!({"model": "gpt-5", "instructions": "changed", "input": "third", "previous_response_id": id});
    let r = post(&t, "/v1/responses", &next).await;
    assert_eq!(served_by(&r).unwrap(), home);
}

/// docs/rules/router.md §7: the router's metrics (names in docs/router.md "Metrics") are on the API
/// listener's `/metrics` after one routed request; the affinity choice is counted. The recorder is
/// process-global (other tests add to it), so names are asserted, not counts.
#[tokio::test]
async fn the_router_metrics_are_listed_on_the_api_metrics_endpoint() {
    let up = upstreams(1).await;
    let t = app("", &[("a", up[0].base_url(), 1, None)], "").await;
    let r = post_session(&t, "metrics").await;
    assert_eq!(r.status(), 200);
    r.text().await.unwrap();
    let text = t.get("/metrics").await.text().await.unwrap();
    for name in [
        "quota_patrol_router_requests_total{status=\"200\"}",
        "quota_patrol_router_attempts_total",
        "quota_patrol_router_failovers_total",
        "quota_patrol_router_exclusions_total{reason=\"quota\"}",
        "quota_patrol_router_exclusions_total{reason=\"pool_throttle\"}",
        "quota_patrol_router_cache_hits_total",
        "quota_patrol_router_cache_samples_total",
        "quota_patrol_router_added_latency_seconds_bucket",
        "quota_patrol_router_late_failures_total",
        "quota_patrol_router_cancelled_streams_total",
        "quota_patrol_router_pool_throttles_total",
        "quota_patrol_router_usage_dropped_total",
        "quota_patrol_router_affinity_total{choice=\"fresh\"}",
        "quota_patrol_router_affinity_total{choice=\"kept_brief_exclusion\"}",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
    // Registered at zero, counted when a ranking makes the choice (≥: other tests add).
    let fresh: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("quota_patrol_router_affinity_total{choice=\"fresh\"} "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a fresh count");
    assert!(fresh >= 1.0, "the fresh session was counted: {fresh}");
    assert!(!text.contains("SECRET"));
}

/// docs/rules/router.md §5 "one usage record per client request": the router's own answers to
/// authenticated requests (400, 413, unknown model, all excluded) are recorded too — no
/// account, 0 attempts; a 401 is not (an unauthenticated flood must not become writes).
#[tokio::test]
async fn router_made_answers_to_authenticated_requests_get_one_usage_record_each() {
    let up = upstreams(1).await;
    let mut t = app("", &[("a", up[0].base_url(), 1, None)], "").await;
    let mut rx = t.usage.take().unwrap();
    let url = format!("{}/v1/chat/completions", t.router.as_ref().unwrap());
    let send = |auth: Option<&'static str>, body: String| {
        let mut req = t
            .http
            .post(&url)
            .header("content-type", "application/json")
            .body(body);
        if let Some(k) = auth {
            req = req.bearer_auth(k);
        }
        req.send()
    };
    let chat_body = chat("gpt-5", false).to_string();
    assert_eq!(send(None, chat_body.clone()).await.unwrap().status(), 401);
    assert_eq!(
        send(Some("sk-wrong"), chat_body).await.unwrap().status(),
        401
    );
    let big = format!(
        "{{\"model\":\"gpt-5\",\"pad\":\"{}\"}}",
        "x".repeat(8 << 20)
    );
    let answers = [
        (Some(CLIENT_KEY), "{not json".to_string(), 400),
        (Some(CLIENT_KEY), big, 413),
        (
            Some(CLIENT_KEY),
            chat("no-such-model", false).to_string(),
            404,
        ),
    ];
    for (auth, body, status) in answers {
        assert_eq!(send(auth, body).await.unwrap().status(), status);
    }
    up[0].script([Step::UsageLimitJson {
        resets_in_seconds: 600,
    }]);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 429);
    let r = post(&t, "/v1/chat/completions", &chat("gpt-5", false)).await;
    assert_eq!(r.status(), 429, "every account excluded before trying");
    assert_eq!(header(&r, "x-quota-patrol-attempts"), Some("0"));
    // Records are sent before the answer goes out: all are in the channel now.
    let mut got = Vec::new();
    while let Ok(rec) = rx.try_recv() {
        got.push((
            rec.status,
            rec.requested_model,
            rec.account,
            rec.attempts,
            rec.ok,
        ));
    }
    assert_eq!(
        got,
        vec![
            (400, String::new(), None, 0, false),
            (413, String::new(), None, 0, false),
            (404, "no-such-model".into(), None, 0, false),
            (429, "gpt-5".into(), Some("a".into()), 1, false),
            (429, "gpt-5".into(), None, 0, false),
        ],
        "one record per authenticated client request, none for the 401s"
    );
}
