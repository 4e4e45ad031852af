//! Tests of `core::failure`: the router.md §3 table row by row, reset / Retry-After parsing,
//! model scope, streaming frame kinds, next steps, cooldowns, the throttle detector and the
//! all-excluded answer (§4).

use super::*;
use chrono::TimeZone;
use proptest::prelude::*;

/// The probe instant the upstream fixtures are written around: 2026-05-26T12:00:00Z.
const NOW_UNIX: i64 = 1_779_796_800;

fn now() -> DateTime<Utc> {
    Utc.timestamp_opt(NOW_UNIX, 0).unwrap()
}

fn at(unix: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(unix, 0).unwrap()
}

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("../../../fixtures/upstream/", $name))
    };
}

const USAGE_LIMIT: &str = fixture!("responses__429-usage-limit-reached.json");
const USAGE_LIMIT_MS: &str = fixture!("responses__429-usage-limit-reached-ms.json");
const USAGE_NOT_INCLUDED: &str = fixture!("responses__429-usage-not-included.json");
const INSUFFICIENT_QUOTA: &str = fixture!("chat-completions__429-insufficient-quota.json");
const RATE_LIMIT: &str = fixture!("chat-completions__429-rate-limit-exceeded.json");
const INSUFFICIENT_BALANCE: &str = fixture!("chat-completions__402-insufficient-balance.json");
const INSUFFICIENT_CREDITS: &str = fixture!("chat-completions__400-insufficient-credits.json");
const INVALID_KEY: &str = fixture!("chat-completions__401-invalid-api-key.json");
const MODEL_NOT_FOUND: &str = fixture!("chat-completions__404-model-not-found.json");
const CLOUDFLARE: &str = fixture!("wham-usage__403-cloudflare.html");
const FORBIDDEN_JSON: &str = fixture!("wham-usage__403-json.json");
const SSE_USAGE_LIMIT: &str = fixture!("responses__sse-usage-limit-frame.txt");
const SSE_FAILED: &str = fixture!("responses__sse-response-failed-rate-limit.txt");
const SSE_RATE_LIMITS: &str = fixture!("responses__sse-rate-limits-then-content.txt");
const SSE_CHAT: &str = fixture!("chat-completions__sse-content.txt");

/// Classifies a status answer with these headers.
fn status_with(status: u16, headers: &[(&str, &str)], body: &str, html: bool) -> Option<Verdict> {
    let headers = HeaderList(headers);
    classify(
        &Outcome::Status {
            status,
            headers: &headers,
            body: body.as_bytes(),
            html,
        },
        now(),
    )
}

fn class_of(status: u16, body: &str, html: bool) -> Option<FailureClass> {
    status_with(status, &[], body, html).map(|v| v.class)
}

/// The `data:` payloads of an SSE fixture, in order.
fn frames(sse: &str) -> Vec<&str> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect()
}

// --- the router.md §3 table -----------------------------------------------------------------

#[test]
fn a_2xx_is_no_failure() {
    assert_eq!(status_with(200, &[], "{}", false), None);
    assert_eq!(status_with(204, &[], "", false), None);
}

#[test]
fn a_codex_usage_limit_429_is_quota_until_its_stated_reset() {
    let v = status_with(429, &[], USAGE_LIMIT, false).unwrap();
    assert_eq!(v.class, FailureClass::Quota);
    assert_eq!(v.scope, Scope::Account);
    assert_eq!(v.reset_at, Some(at(1_779_810_000)));
    let v = status_with(429, &[], USAGE_LIMIT_MS, false).unwrap();
    assert_eq!(
        (v.class, v.reset_at),
        (FailureClass::Quota, Some(at(1_779_810_000))),
        "resets_at in milliseconds"
    );
}

#[test]
fn quota_codes_and_phrases_are_quota_on_any_4xx() {
    for (status, body) in [
        (429, USAGE_NOT_INCLUDED),
        (429, INSUFFICIENT_QUOTA),
        (402, INSUFFICIENT_BALANCE),
        (400, INSUFFICIENT_CREDITS),
        (
            403,
            r#"{"error":{"message":"Insufficient balance, please top up"}}"#,
        ),
        (429, "insufficient quota"),
    ] {
        let v = status_with(status, &[], body, false).unwrap();
        assert_eq!(v.class, FailureClass::Quota, "{status} {body}");
        assert_eq!(v.reset_at, None, "no reset stated: {body}");
    }
}

#[test]
fn a_402_is_quota_whatever_its_body() {
    assert_eq!(class_of(402, "", false), Some(FailureClass::Quota));
    assert_eq!(
        class_of(402, "Payment Required", false),
        Some(FailureClass::Quota)
    );
}

#[test]
fn a_plain_429_is_a_rate_limit_with_its_retry_after() {
    let v = status_with(429, &[("Retry-After", "7")], RATE_LIMIT, false).unwrap();
    assert_eq!(v.class, FailureClass::RateLimit);
    assert_eq!(v.retry_after, Some(Duration::seconds(7)));
    assert_eq!(v.reset_at, None);
    let v = status_with(429, &[], "Too Many Requests", false).unwrap();
    assert_eq!((v.class, v.retry_after), (FailureClass::RateLimit, None));
}

#[test]
fn a_401_and_a_json_403_are_session_dead() {
    assert_eq!(
        class_of(401, INVALID_KEY, false),
        Some(FailureClass::SessionDead)
    );
    assert_eq!(class_of(401, "", false), Some(FailureClass::SessionDead));
    assert_eq!(
        class_of(403, FORBIDDEN_JSON, false),
        Some(FailureClass::SessionDead)
    );
}

#[test]
fn an_html_403_408_5xx_and_transport_are_transient() {
    assert_eq!(
        class_of(403, CLOUDFLARE, true),
        Some(FailureClass::Transient)
    );
    assert_eq!(
        class_of(403, CLOUDFLARE, false),
        Some(FailureClass::Transient),
        "an HTML page sent without its content-type is still an edge block"
    );
    for status in [408, 500, 502, 503, 504, 529] {
        assert_eq!(
            class_of(status, "upstream error", false),
            Some(FailureClass::Transient),
            "{status}"
        );
    }
    let v = classify(&Outcome::Transport, now()).unwrap();
    assert_eq!(v, Verdict::of(FailureClass::Transient));
    let v = status_with(503, &[("retry-after", "3")], "", false).unwrap();
    assert_eq!(v.retry_after, Some(Duration::seconds(3)));
}

#[test]
fn request_errors_are_the_clients() {
    for (status, body) in [
        (
            400,
            r#"{"error":{"message":"Unrecognized request argument","type":"invalid_request_error"}}"#,
        ),
        (404, MODEL_NOT_FOUND),
        (413, "Request Entity Too Large"),
        (422, r#"{"detail":"invalid"}"#),
    ] {
        assert_eq!(
            class_of(status, body, false),
            Some(FailureClass::RequestError),
            "{status}"
        );
    }
}

// --- early error frames -----------------------------------------------------------------------

fn frame_verdict(headers: &[(&str, &str)], frame: &str) -> Verdict {
    let headers = HeaderList(headers);
    classify(
        &Outcome::EarlyErrorFrame {
            headers: &headers,
            frame: frame.as_bytes(),
        },
        now(),
    )
    .unwrap()
}

#[test]
fn a_usage_limit_frame_before_content_is_quota_with_its_reset() {
    let data = frames(SSE_USAGE_LIMIT)[0];
    assert_eq!(frame_kind(data.as_bytes()), FrameKind::Error);
    let v = frame_verdict(&[], data);
    assert_eq!(v.class, FailureClass::Quota);
    assert_eq!(v.reset_at, Some(at(1_779_810_000)));
    let v = frame_verdict(&[], &format!("data: {data}"));
    assert_eq!(
        v.class,
        FailureClass::Quota,
        "a leading `data:` is accepted"
    );
}

#[test]
fn early_error_frames_are_classified_by_their_codes() {
    let failed = frames(SSE_FAILED)[0];
    assert_eq!(frame_kind(failed.as_bytes()), FrameKind::Error);
    assert_eq!(frame_verdict(&[], failed).class, FailureClass::RateLimit);
    for (frame, class) in [
        (
            r#"{"type":"error","error":{"type":"server_error","message":"oops"}}"#,
            FailureClass::Transient,
        ),
        (
            r#"{"type":"error","error":{"code":"context_length_exceeded"}}"#,
            FailureClass::RequestError,
        ),
        (
            r#"{"error":{"code":"invalid_api_key","message":"bad key"}}"#,
            FailureClass::SessionDead,
        ),
        (
            r#"{"type":"response.failed","response":{"error":{"code":"insufficient_quota"}}}"#,
            FailureClass::Quota,
        ),
        ("not json", FailureClass::Transient),
    ] {
        assert_eq!(frame_verdict(&[], frame).class, class, "{frame}");
    }
}

// --- model scope ------------------------------------------------------------------------------

#[test]
fn a_model_limit_at_100_with_main_windows_below_is_model_scoped() {
    let reset = (NOW_UNIX + 3600).to_string();
    let headers = [
        ("x-codex-primary-used-percent", "35"),
        ("x-codex-secondary-used-percent", "60.5"),
        ("x-codex-bengalfox-primary-used-percent", "100"),
        ("x-codex-bengalfox-primary-reset-at", reset.as_str()),
        ("x-codex-bengalfox-secondary-used-percent", "12"),
    ];
    let v = status_with(
        429,
        &headers,
        r#"{"error":{"type":"usage_limit_reached"}}"#,
        false,
    );
    let v = v.unwrap();
    assert_eq!(v.class, FailureClass::Quota);
    assert_eq!(v.scope, Scope::Model);
    assert_eq!(
        v.reset_at,
        Some(at(NOW_UNIX + 3600)),
        "the model window's reset"
    );
}

#[test]
fn the_body_reset_wins_over_the_header_reset() {
    let reset = (NOW_UNIX + 3600).to_string();
    let headers = [
        ("x-codex-primary-used-percent", "10"),
        ("x-codex-gpt-5-codex-secondary-used-percent", "100"),
        ("x-codex-gpt-5-codex-secondary-reset-at", reset.as_str()),
    ];
    let v = status_with(429, &headers, USAGE_LIMIT, false).unwrap();
    assert_eq!(
        (v.scope, v.reset_at),
        (Scope::Model, Some(at(1_779_810_000)))
    );
}

#[test]
fn main_windows_at_100_or_no_headers_make_it_account_wide() {
    let reset = (NOW_UNIX + 7200).to_string();
    let headers = [
        ("x-codex-primary-used-percent", "100"),
        ("x-codex-primary-reset-after-seconds", "600"),
        ("x-codex-secondary-used-percent", "100"),
        ("x-codex-secondary-reset-at", reset.as_str()),
        ("x-codex-bengalfox-primary-used-percent", "100"),
    ];
    assert_eq!(
        codex_scope(&HeaderList(&headers), now()),
        (Scope::Account, Some(at(NOW_UNIX + 7200))),
        "both main windows at 100: usable again only after the later reset"
    );
    assert_eq!(codex_scope(&NoHeaders, now()), (Scope::Account, None));
    let only_model = [("x-codex-bengalfox-primary-used-percent", "100")];
    assert_eq!(
        codex_scope(&HeaderList(&only_model), now()).0,
        Scope::Account,
        "no main window says the account is fine"
    );
    let below = [
        ("x-codex-primary-used-percent", "50"),
        ("x-codex-bengalfox-primary-used-percent", "99.9"),
    ];
    assert_eq!(
        codex_scope(&HeaderList(&below), now()),
        (Scope::Account, None)
    );
    let v = status_with(
        429,
        &headers,
        r#"{"error":{"type":"usage_limit_reached"}}"#,
        false,
    );
    assert_eq!(
        v.unwrap().reset_at,
        Some(at(NOW_UNIX + 7200)),
        "no reset in the body: the headers'"
    );
}

// --- reset parsing --------------------------------------------------------------------------

fn reset(body: &str) -> Option<DateTime<Utc>> {
    parse_reset(&serde_json::from_str(body).unwrap(), now())
}

#[test]
fn resets_at_wins_over_resets_in_seconds_when_they_disagree() {
    let body = format!(
        r#"{{"error":{{"resets_at":{},"resets_in_seconds":60}}}}"#,
        NOW_UNIX + 5000
    );
    assert_eq!(reset(&body), Some(at(NOW_UNIX + 5000)));
    assert_eq!(
        reset(r#"{"error":{"resets_in_seconds":90}}"#),
        Some(now() + Duration::seconds(90))
    );
    assert_eq!(
        reset(&format!(r#"{{"resetsAt":"{}"}}"#, NOW_UNIX + 10)),
        Some(at(NOW_UNIX + 10)),
        "top level, camelCase, numeric string"
    );
    assert_eq!(
        reset(r#"{"error":{"resets_at":"2026-05-26T13:00:00Z"}}"#),
        Some(at(NOW_UNIX + 3600)),
        "RFC 3339"
    );
}

#[test]
fn resets_at_above_1e11_is_milliseconds() {
    let ms = (NOW_UNIX + 120) * 1000;
    assert_eq!(
        reset(&format!(r#"{{"error":{{"resets_at":{ms}}}}}"#)),
        Some(at(NOW_UNIX + 120))
    );
}

#[test]
fn past_resets_are_ignored_and_far_ones_capped_at_31_days() {
    let past = format!(r#"{{"error":{{"resets_at":{}}}}}"#, NOW_UNIX - 10);
    assert_eq!(reset(&past), None);
    let past_then_in = format!(
        r#"{{"error":{{"resets_at":{},"resets_in_seconds":30}}}}"#,
        NOW_UNIX - 10
    );
    assert_eq!(
        reset(&past_then_in),
        Some(now() + Duration::seconds(30)),
        "an unusable resets_at does not hide resets_in_seconds"
    );
    assert_eq!(reset(r#"{"error":{"resets_in_seconds":-5}}"#), None);
    let far = format!(r#"{{"error":{{"resets_at":{}}}}}"#, NOW_UNIX + 90 * 86_400);
    assert_eq!(reset(&far), Some(now() + Duration::days(31)));
    assert_eq!(
        reset(r#"{"error":{"resets_in_seconds":1e300}}"#),
        Some(now() + Duration::days(31))
    );
    assert_eq!(reset(r#"{"error":{"message":"no hint"}}"#), None);
    assert_eq!(reset("[1,2]"), None);
}

proptest! {
    #[test]
    fn a_parsed_reset_is_after_now_and_within_31_days(
        at_s in proptest::option::of(-10_000_000_000_000i64..10_000_000_000_000),
        in_s in proptest::option::of(-1_000_000_000i64..1_000_000_000),
    ) {
        let mut error = serde_json::Map::new();
        if let Some(a) = at_s { error.insert("resets_at".into(), a.into()); }
        if let Some(i) = in_s { error.insert("resets_in_seconds".into(), i.into()); }
        let body = serde_json::json!({ "error": error });
        if let Some(t) = parse_reset(&body, now()) {
            prop_assert!(t > now() && t <= now() + Duration::days(31));
        }
    }
}

// --- Retry-After ------------------------------------------------------------------------------

#[test]
fn retry_after_takes_seconds_and_http_dates() {
    let p = |s| parse_retry_after(s, now());
    assert_eq!(p("120"), Some(Duration::seconds(120)));
    assert_eq!(p(" 0 "), Some(Duration::zero()));
    assert_eq!(p("1.5"), Some(Duration::milliseconds(1500)));
    assert_eq!(
        p("Tue, 26 May 2026 12:00:30 GMT"),
        Some(Duration::seconds(30)),
        "IMF-fixdate"
    );
    assert_eq!(
        p("Tuesday, 26-May-26 12:01:00 GMT"),
        Some(Duration::seconds(60)),
        "RFC 850"
    );
    assert_eq!(
        p("Tue May 26 12:00:05 2026"),
        Some(Duration::seconds(5)),
        "asctime"
    );
    assert_eq!(
        p("Tue, 26 May 2026 11:00:00 GMT"),
        Some(Duration::zero()),
        "a past date: retry now"
    );
}

#[test]
fn retry_after_garbage_and_negatives_are_none_and_huge_is_capped() {
    let p = |s| parse_retry_after(s, now());
    for garbage in [
        "",
        "soon",
        "-5",
        "-0.5",
        "NaN",
        "inf",
        "12s",
        "0x10",
        "Tue, 99 Foo",
    ] {
        assert_eq!(p(garbage), None, "{garbage:?}");
    }
    assert_eq!(p("99999999999999999999999"), Some(Duration::days(31)));
    assert_eq!(p("4000000000"), Some(Duration::days(31)));
    assert_eq!(p("Fri, 01 Jan 2100 00:00:00 GMT"), Some(Duration::days(31)));
}

proptest! {
    #[test]
    fn retry_after_never_panics_and_stays_within_bounds(s in "\\PC{0,40}") {
        if let Some(d) = parse_retry_after(&s, now()) {
            prop_assert!(d >= Duration::zero() && d <= Duration::days(31));
        }
    }

    #[test]
    fn integer_retry_after_is_those_seconds(n in 0u64..2_678_400) {
        prop_assert_eq!(
            parse_retry_after(&n.to_string(), now()),
            Some(Duration::seconds(n as i64))
        );
    }
}

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

// --- next step ------------------------------------------------------------------------------

fn verdict(class: FailureClass, retry_after: Option<Duration>) -> Verdict {
    Verdict {
        retry_after,
        ..Verdict::of(class)
    }
}

#[test]
fn transient_failures_are_retried_on_the_same_account_then_moved_on() {
    let t = verdict(FailureClass::Transient, None);
    let ms = |n: u64| Next::RetrySameAfter(std::time::Duration::from_millis(n));
    assert_eq!(next_step(&t, 0, 2, 0.0), ms(500));
    assert_eq!(next_step(&t, 1, 2, 0.0), ms(1000));
    assert_eq!(next_step(&t, 2, 2, 0.0), Next::NextAccount);
    assert_eq!(next_step(&t, 0, 0, 0.0), Next::NextAccount, "max_retries 0");
    assert_eq!(
        next_step(&t, 0, 2, 1.0),
        ms(450),
        "jitter takes up to 10 % off"
    );
    assert_eq!(next_step(&t, 10, 20, 0.0), ms(10_000), "capped at 10 s");
}

#[test]
fn a_transient_retry_after_below_the_cap_is_honoured_above_it_moves_on() {
    let below = verdict(FailureClass::Transient, Some(Duration::milliseconds(700)));
    assert_eq!(
        next_step(&below, 1, 2, 1.0),
        Next::RetrySameAfter(std::time::Duration::from_millis(700)),
        "exactly the Retry-After, no jitter"
    );
    let above = verdict(FailureClass::Transient, Some(Duration::seconds(120)));
    assert_eq!(next_step(&above, 0, 2, 0.0), Next::NextAccount);
    let at_cap = verdict(FailureClass::Transient, Some(Duration::seconds(10)));
    assert_eq!(next_step(&at_cap, 0, 2, 0.0), Next::NextAccount);
}

#[test]
fn other_classes_never_retry_on_the_same_account() {
    for class in [
        FailureClass::Quota,
        FailureClass::RateLimit,
        FailureClass::SessionDead,
    ] {
        let v = verdict(class, Some(Duration::seconds(1)));
        assert_eq!(next_step(&v, 0, 2, 0.0), Next::NextAccount, "{class:?}");
    }
    let v = verdict(FailureClass::RequestError, None);
    assert_eq!(next_step(&v, 0, 2, 0.0), Next::ReturnToClient);
}

proptest! {
    #[test]
    fn in_route_and_rate_limit_backoffs_are_capped_and_non_decreasing(
        n in 0u32..10_000,
        jitter in 0.0f64..=1.0,
    ) {
        for (b, cap) in [(IN_ROUTE_RETRY, Duration::seconds(10)), (RATE_LIMIT_BACKOFF, Duration::minutes(5))] {
            let d = b.delay(n, jitter);
            prop_assert!(d > Duration::zero() && d <= cap);
            prop_assert!(b.delay(n + 1, jitter) >= d);
        }
    }
}

// --- observations -------------------------------------------------------------------------

fn observe(
    obs: &mut Observations,
    state: &mut EngineState,
    index: usize,
    v: Verdict,
) -> Option<DateTime<Utc>> {
    obs.observe(index, &v, now(), 0.0, state)
}

#[test]
fn each_class_cools_down_for_its_table_duration() {
    let mut obs = Observations::new(5);
    let mut state = EngineState::default();
    let quota = Verdict {
        reset_at: Some(now() + Duration::hours(3)),
        ..Verdict::of(FailureClass::Quota)
    };
    assert_eq!(
        observe(&mut obs, &mut state, 0, quota),
        Some(now() + Duration::hours(3))
    );
    assert_eq!(
        observe(&mut obs, &mut state, 1, Verdict::of(FailureClass::Quota)),
        Some(now() + Duration::minutes(10)),
        "quota without a known reset"
    );
    assert_eq!(
        observe(
            &mut obs,
            &mut state,
            2,
            Verdict::of(FailureClass::SessionDead)
        ),
        Some(now() + Duration::minutes(30))
    );
    assert_eq!(
        observe(
            &mut obs,
            &mut state,
            3,
            Verdict::of(FailureClass::Transient)
        ),
        Some(now() + Duration::seconds(30))
    );
    assert_eq!(
        observe(
            &mut obs,
            &mut state,
            4,
            Verdict::of(FailureClass::RequestError)
        ),
        None
    );
    for (i, end) in [
        (0, Some(now() + Duration::hours(3))),
        (1, Some(now() + Duration::minutes(10))),
        (2, Some(now() + Duration::minutes(30))),
        (3, Some(now() + Duration::seconds(30))),
        (4, None),
    ] {
        assert_eq!(
            state.cooldowns.until(i, now()),
            end,
            "engine cooldown of {i}"
        );
    }
    assert_eq!(obs.kind(0, now()), Some(CooldownKind::Quota));
    assert_eq!(obs.kind(2, now()), Some(CooldownKind::SessionDead));
    assert_eq!(obs.kind(4, now()), None);
    assert_eq!(obs.kind(3, now() + Duration::seconds(30)), None, "ended");
}

#[test]
fn rate_limits_back_off_by_level_and_a_success_resets_it() {
    let mut obs = Observations::new(1);
    let mut state = EngineState::default();
    let plain = Verdict::of(FailureClass::RateLimit);
    let waits: Vec<i64> = (0..10)
        .map(|_| (observe(&mut obs, &mut state, 0, plain).unwrap() - now()).num_seconds())
        .collect();
    assert_eq!(waits, vec![2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
    obs.success(0);
    let mut fresh = Observations::new(1);
    let mut fresh_state = EngineState::default();
    assert_eq!(
        observe(&mut obs, &mut EngineState::default(), 0, plain),
        observe(&mut fresh, &mut fresh_state, 0, plain),
        "after a success the backoff starts again at 2 s"
    );
    let given = verdict(FailureClass::RateLimit, Some(Duration::seconds(42)));
    let mut obs = Observations::new(1);
    assert_eq!(
        observe(&mut obs, &mut state, 0, given),
        Some(now() + Duration::seconds(42)),
        "Retry-After wins over the backoff"
    );
}

#[test]
fn a_shorter_later_cooldown_never_shortens_a_running_one() {
    let mut obs = Observations::new(1);
    let mut state = EngineState::default();
    let quota = Verdict {
        reset_at: Some(now() + Duration::hours(5)),
        ..Verdict::of(FailureClass::Quota)
    };
    observe(&mut obs, &mut state, 0, quota);
    let short = verdict(FailureClass::RateLimit, Some(Duration::seconds(2)));
    assert_eq!(
        observe(&mut obs, &mut state, 0, short),
        Some(now() + Duration::seconds(2)),
        "the rate limit's own end is returned"
    );
    assert_eq!(
        state.cooldowns.until(0, now()),
        Some(now() + Duration::hours(5))
    );
    assert_eq!(obs.kind(0, now()), Some(CooldownKind::Quota));
    obs.cool(
        0,
        CooldownKind::PoolThrottle,
        now() + Duration::seconds(5),
        &mut state,
    );
    assert_eq!(
        state.cooldowns.until(0, now()),
        Some(now() + Duration::hours(5))
    );
    obs.clear_quota(0, &mut state);
    assert_eq!(
        state.cooldowns.until(0, now()),
        Some(now() + Duration::seconds(5)),
        "a patrol snapshot clears the quota; the throttle stays"
    );
    assert_eq!(obs.kind(0, now()), Some(CooldownKind::PoolThrottle));
    assert_eq!(
        obs.kind(0, now() + Duration::seconds(3)),
        Some(CooldownKind::PoolThrottle)
    );
}

#[test]
fn clearing_the_only_quota_clears_the_engine_cooldown() {
    let mut obs = Observations::new(2);
    let mut state = EngineState::default();
    observe(&mut obs, &mut state, 1, Verdict::of(FailureClass::Quota));
    obs.clear_quota(1, &mut state);
    assert_eq!(state.cooldowns.until(1, now()), None);
    assert!(state.cooldowns.is_empty());
    assert_eq!(obs.kind(1, now()), None);
    obs.clear_quota(7, &mut state); // unknown index: nothing happens
}

proptest! {
    #[test]
    fn the_effective_end_is_the_latest_of_every_cooldown_seen(
        steps in proptest::collection::vec((0usize..5, 0i64..100_000), 1..20),
    ) {
        let mut obs = Observations::new(1);
        let mut state = EngineState::default();
        let mut latest = now();
        for (k, secs) in steps {
            let until = now() + Duration::seconds(secs);
            obs.cool(0, CooldownKind::ALL[k], until, &mut state);
            latest = latest.max(until);
            prop_assert_eq!(state.cooldowns.until(0, now()), (latest > now()).then_some(latest));
        }
    }
}

// --- throttle detector ------------------------------------------------------------------------

#[test]
fn every_account_429_within_2s_cools_the_pool_at_most_10s() {
    let mut d = ThrottleDetector::new(3);
    let t = now();
    assert_eq!(d.rate_limited(0, Some(Duration::seconds(3)), t), None);
    assert_eq!(
        d.rate_limited(1, None, t + Duration::milliseconds(900)),
        None
    );
    assert_eq!(
        d.rate_limited(
            2,
            Some(Duration::seconds(4)),
            t + Duration::milliseconds(1900)
        ),
        Some(Duration::seconds(4)),
        "the largest Retry-After"
    );
    assert_eq!(
        d.rate_limited(0, None, t + Duration::seconds(2)),
        None,
        "firing starts a new round"
    );
    let mut d = ThrottleDetector::new(2);
    d.rate_limited(0, None, t);
    assert_eq!(
        d.rate_limited(1, None, t),
        Some(Duration::seconds(5)),
        "default 5 s"
    );
    let mut d = ThrottleDetector::new(2);
    d.rate_limited(0, Some(Duration::minutes(10)), t);
    assert_eq!(
        d.rate_limited(1, None, t),
        Some(Duration::seconds(10)),
        "at most 10 s"
    );
}

#[test]
fn rate_limits_spread_over_more_than_2s_or_a_success_are_no_throttle() {
    let t = now();
    let mut d = ThrottleDetector::new(2);
    d.rate_limited(0, None, t);
    assert_eq!(
        d.rate_limited(1, None, t + Duration::milliseconds(2001)),
        None
    );
    let mut d = ThrottleDetector::new(2);
    d.rate_limited(0, None, t);
    d.success(0);
    assert_eq!(d.rate_limited(1, None, t), None);
    let mut single = ThrottleDetector::new(1);
    assert_eq!(
        single.rate_limited(0, None, t),
        None,
        "one account is no pool throttle"
    );
    assert_eq!(d.rate_limited(9, None, t), None, "unknown index ignored");
}

// --- the all-excluded answer ------------------------------------------------------------------

fn quota(secs: Option<i64>) -> ExcludedEnd {
    ExcludedEnd {
        quota: true,
        until: secs.map(|s| now() + Duration::seconds(s)),
    }
}

fn other(secs: Option<i64>) -> ExcludedEnd {
    ExcludedEnd {
        quota: false,
        until: secs.map(|s| now() + Duration::seconds(s)),
    }
}

#[test]
fn an_all_quota_pool_answers_429_all_accounts_exhausted_with_the_earliest_reset() {
    let a = no_account(&[quota(Some(5 * 3600)), quota(Some(3 * 3600))], now());
    assert_eq!(a.status, 429);
    assert_eq!(
        (a.code, a.kind),
        ("all_accounts_exhausted", "usage_limit_reached")
    );
    assert_eq!(a.retry_after_seconds, Some(3 * 3600));
    assert_eq!(a.resets_at, Some(NOW_UNIX + 3 * 3600));
    assert_eq!(a.resets_in_seconds, Some(3 * 3600));
    assert!(
        !a.message.to_lowercase().contains("cooling"),
        "{}",
        a.message
    );
    assert_eq!(
        a.body(),
        serde_json::json!({"error": {
            "message": a.message,
            "type": "usage_limit_reached",
            "code": "all_accounts_exhausted",
            "resets_at": NOW_UNIX + 3 * 3600,
            "resets_in_seconds": 3 * 3600,
        }})
    );
}

#[test]
fn a_quota_pool_with_disabled_accounts_is_still_exhausted_not_unhealthy() {
    let a = no_account(&[quota(Some(7200)), other(None), quota(None)], now());
    assert_eq!((a.status, a.code), (429, "all_accounts_exhausted"));
    assert_eq!(a.resets_at, Some(NOW_UNIX + 7200));
    let unknown = no_account(&[quota(None), quota(None)], now());
    assert_eq!(
        (unknown.status, unknown.code),
        (429, "all_accounts_exhausted")
    );
    assert_eq!(
        (unknown.retry_after_seconds, unknown.resets_at),
        (None, None),
        "no reset invented"
    );
    assert!(unknown.body()["error"].get("resets_at").is_none());
}

#[test]
fn a_mixed_pool_answers_429_no_healthy_account_with_the_earliest_end() {
    let a = no_account(
        &[quota(Some(4 * 3600)), other(Some(30)), other(None)],
        now(),
    );
    assert_eq!(a.status, 429);
    assert_eq!(
        (a.code, a.kind),
        ("no_healthy_account", "rate_limit_exceeded")
    );
    assert_eq!(a.retry_after_seconds, Some(30));
    assert_eq!((a.resets_at, a.resets_in_seconds), (None, None));
    let body = a.body();
    assert_eq!(body["error"]["code"], "no_healthy_account");
    assert!(body["error"].get("resets_at").is_none());
    let ms = ExcludedEnd {
        quota: false,
        until: Some(now() + Duration::milliseconds(1200)),
    };
    assert_eq!(
        no_account(&[ms], now()).retry_after_seconds,
        Some(2),
        "rounded up"
    );
}

#[test]
fn no_known_end_answers_503() {
    for exclusions in [
        vec![],
        vec![other(None), other(None)],
        vec![other(Some(-5))],
    ] {
        let a = no_account(&exclusions, now());
        assert_eq!(
            (a.status, a.code),
            (503, "no_healthy_account"),
            "{exclusions:?}"
        );
        assert_eq!(a.retry_after_seconds, None);
        assert_eq!(a.body()["error"]["type"], "server_error");
    }
}
