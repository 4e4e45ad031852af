//! Tests of `classify`: the docs/rules/router.md §3 table row by row, early error frames, model scope.

use chrono::Duration;

use super::*;
use crate::failure::testkit::*;
use crate::failure::*;

// --- the docs/rules/router.md §3 table -----------------------------------------------------------------

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
