//! The status page over HTTP (docs/rules/api.md §7): sign-in with the admin token, the session cookie and
//! its flags, pages behind it, what they show of the simulated CPA, and no secret in any page.

use chrono::Duration;
use quota_patrol::config::{AlertsConfig, EmailTransport};
use quota_patrol_sim::UpstreamBehaviour;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use secrecy::SecretString;

use crate::helpers::*;

const SMTP_PASSWORD: &str = "smtp-PASS-secret";

/// A client that shows redirects instead of following them and keeps no cookies of its own.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn sign_in_with(t: &TestApp, token: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut req = client()
        .post(t.url("/signin"))
        .form(&[("token", token), ("next", "/sites/test")]);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// Signs in with the admin token; returns the `Cookie` header value of the session.
pub(crate) async fn sign_in(t: &TestApp) -> String {
    let r = sign_in_with(t, ADMIN_TOKEN, &[]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    set.split(';').next().unwrap().to_string()
}

async fn page(t: &TestApp, path: &str, cookie: &str) -> reqwest::Response {
    client()
        .get(t.url(path))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap()
}

pub(crate) async fn page_text(t: &TestApp, path: &str, cookie: &str) -> String {
    let r = page(t, path, cookie).await;
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(r.headers()["cache-control"], "no-store");
    r.text().await.unwrap()
}

/// The `<tr>` of `name` in the accounts table (up to its `</tr>`).
pub(crate) fn row_of<'a>(html: &'a str, name: &str) -> &'a str {
    let start = html
        .find(&format!("<tr data-account=\"{name}\""))
        .unwrap_or_else(|| panic!("no row for {name}"));
    let end = start + html[start..].find("</tr>").unwrap();
    &html[start..end]
}

fn revoked(email: &str) -> quota_patrol_sim::SimAccount {
    with_behaviour(
        plus(email, 1.0, 1.0),
        UpstreamBehaviour::Status {
            status: 401,
            content_type: "application/json".into(),
            body: r#"{"error":{"message":"token revoked"}}"#.into(),
        },
    )
}

#[tokio::test]
async fn signing_in_with_a_wrong_or_empty_token_is_refused_and_opens_no_session() {
    let t = spawn_app(vec![plus("a@example.com", 10.0, 40.0)]).await;
    for wrong in ["", "wrong", &ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1]] {
        let r = sign_in_with(&t, wrong, &[]).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{wrong:?}");
        assert!(r.headers().get(SET_COOKIE).is_none());
        let body = r.text().await.unwrap();
        assert!(body.contains("role=\"alert\""), "the form says why");
        assert!(body.contains("name=\"token\""), "and is shown again");
    }
    // The bearer token of the API is not a session either.
    let r = client()
        .get(t.url("/"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn pages_need_the_session_cookie_and_send_the_reader_to_the_sign_in_form() {
    let t = spawn_app(vec![plus("a@example.com", 10.0, 40.0)]).await;
    for (path, next) in [("/", "%2F"), ("/sites/test", "%2Fsites%2Ftest")] {
        for cookie in ["", "qp_session=forged0000"] {
            let r = page(&t, path, cookie).await;
            assert_eq!(r.status(), StatusCode::SEE_OTHER, "{path} {cookie:?}");
            assert_eq!(r.headers()[LOCATION], format!("/signin?next={next}"));
        }
    }
    let form = client()
        .get(t.url("/signin?next=/sites/test"))
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), StatusCode::OK);
    let html = form.text().await.unwrap();
    assert!(
        html.contains(r#"name="next" value="&#x2f;sites&#x2f;test""#),
        "escaped by minijinja"
    );
    // After signing in the form sends the reader where they were going.
    let r = sign_in_with(&t, ADMIN_TOKEN, &[]).await;
    assert_eq!(r.headers()[LOCATION], "/sites/test");
}

#[tokio::test]
async fn the_session_cookie_is_http_only_strict_expiring_and_secure_behind_tls() {
    let t = spawn_app(vec![plus("a@example.com", 10.0, 40.0)]).await;
    let r = sign_in_with(&t, ADMIN_TOKEN, &[]).await;
    let plain = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    for flag in [
        "qp_session=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=604800",
    ] {
        assert!(plain.contains(flag), "{flag} missing");
    }
    assert!(
        !plain.contains("Secure"),
        "plain HTTP: a Secure cookie would never come back"
    );
    let r = sign_in_with(&t, ADMIN_TOKEN, &[("x-forwarded-proto", "https")]).await;
    let tls = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    assert!(tls.contains("; Secure"), "{tls}");
    // The cookie is random per sign-in and holds nothing of the token.
    assert_ne!(plain.split(';').next(), tls.split(';').next());
    assert!(!plain.contains(ADMIN_TOKEN) && !tls.contains(ADMIN_TOKEN));
}

#[tokio::test]
async fn signing_out_ends_the_session_and_a_restart_keeps_one() {
    let t = spawn_app(vec![plus("a@example.com", 10.0, 40.0)]).await;
    let kept = sign_in(&t).await;
    let ended = sign_in(&t).await;
    let t = t.restart().await;
    assert_eq!(
        page(&t, "/", &kept).await.status(),
        StatusCode::OK,
        "restart keeps it"
    );
    let r = client()
        .post(t.url("/signout"))
        .header(COOKIE, &ended)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/signin");
    assert!(
        r.headers()[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    // The old cookie no longer opens a page, even if the browser kept it.
    assert_eq!(page(&t, "/", &ended).await.status(), StatusCode::SEE_OTHER);
    assert_eq!(page(&t, "/", &kept).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn the_pages_show_the_accounts_reasons_and_resets_of_the_simulated_cpa() {
    let mut alerts = AlertsConfig {
        timezone: chrono_tz::Europe::Berlin,
        ..AlertsConfig::default()
    };
    alerts.enabled = false;
    let t = spawn_app_alerts(
        vec![
            plus("fresh@example.com", 12.0, 40.5),
            plus("spent@example.com", 30.0, 97.0),
            revoked("revoked@example.com"),
        ],
        alerts,
    )
    .await;
    t.inspect().await;
    t.clock.advance(Duration::minutes(10));
    t.inspect().await;
    let cookie = sign_in(&t).await;

    let overview = page_text(&t, "/", &cookie).await;
    let card_at = overview
        .find(r#"<article class="site-card" data-site="test">"#)
        .unwrap();
    let card = &overview[card_at..];
    assert!(card.contains(r#"<dd data-count="usable">1</dd>"#), "{card}");
    assert!(card.contains(r#"<dd data-count="exhausted">1</dd>"#));
    assert!(card.contains(r#"<dd data-count="invalid">1</dd>"#));
    assert!(card.contains(r#"href="&#x2f;sites&#x2f;test""#));
    assert!(card.contains("badge state-reachable"));
    // The earliest reset is the spent account's weekly reset (t0 + 3 d), in Berlin time.
    assert!(card.contains("2026-05-24 05:00 CEST"), "{card}");
    assert!(card.contains("in 2 d 23 h"), "relative to the page's time");
    assert!(card.contains("completed"), "last round and its outcome");

    let site = page_text(&t, "/sites/test", &cookie).await;
    assert_eq!(site.matches("<tr data-account=").count(), 3);
    let fresh = row_of(&site, &t.name_of("fresh@example.com"));
    assert!(fresh.contains(r#"data-availability="usable""#));
    assert!(fresh.contains(r#"data-percent="40.5""#) && fresh.contains("width:40.5%"));
    assert!(fresh.contains(r#"data-percent="12.0""#), "5-hour bar");
    let spent = row_of(&site, &t.name_of("spent@example.com"));
    assert!(spent.contains(r#"data-availability="exhausted""#));
    assert!(
        spent.contains("QuotaExhausted <span class=\"muted\">(patrol)</span>"),
        "{spent}"
    );
    assert!(spent.contains("meter over"), "at or above the threshold");
    assert!(spent.contains("≥ 95"), "said in words, not colour only");
    assert!(spent.contains("until <time"), "when it is usable again");
    let revoked = row_of(&site, &t.name_of("revoked@example.com"));
    assert!(
        revoked.contains(r#"data-availability="invalid""#),
        "{revoked}"
    );
    // Rounds, log and the chart of the stored samples (one per round).
    assert!(site.contains(r#"<table id="rounds">"#));
    assert!(site.contains(r#"<table id="log">"#));
    assert!(
        site.contains("2 samples, one per round"),
        "chart from the stored history"
    );
    assert!(site.contains("<polyline points=\""));
}

#[tokio::test]
async fn an_unknown_site_is_a_not_found_page() {
    let t = spawn_app(vec![plus("a@example.com", 10.0, 40.0)]).await;
    let cookie = sign_in(&t).await;
    let r = page(&t, "/sites/nope", &cookie).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.text().await.unwrap().contains("No such site"));
}

#[tokio::test]
async fn no_secret_appears_in_any_page() {
    let mut alerts = email_alerts("smtp://127.0.0.1:9");
    if let Some(e) = alerts.email.as_mut() {
        e.transport = EmailTransport::Smtp {
            url: "smtp://127.0.0.1:9".into(),
            password: Some(SecretString::from(SMTP_PASSWORD)),
        };
    }
    let t = spawn_app_alerts(
        vec![plus("a@example.com", 10.0, 40.0), revoked("r@example.com")],
        alerts,
    )
    .await;
    t.inspect().await;
    let cookie = sign_in(&t).await;
    let form = client().get(t.url("/signin")).send().await.unwrap();
    let refused = sign_in_with(&t, "not-it", &[]).await;
    let pages = [
        form.text().await.unwrap(),
        refused.text().await.unwrap(),
        page_text(&t, "/", &cookie).await,
        page_text(&t, "/sites/test", &cookie).await,
        page(&t, "/sites/nope", &cookie).await.text().await.unwrap(),
    ];
    for (i, html) in pages.iter().enumerate() {
        for secret in [ADMIN_TOKEN, MGMT_KEY, SMTP_PASSWORD] {
            assert!(!html.contains(secret), "page {i} shows a secret");
        }
    }
}

#[tokio::test]
async fn the_site_page_shows_the_routers_accounts_with_availability_and_until() {
    let text = "[router]\nlisten = \"127.0.0.1:0\"\n[[router.pools]]\nid = \"p\"\nmodels = [\"gpt-5\"]\n\
        [[router.accounts]]\npool = \"p\"\nid = \"linked\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
        api_key_env = \"UPSTREAM_KEY\"\ntier = 1\nsite = \"test\"\n";
    let env = |k: &str| (k == "UPSTREAM_KEY").then(|| "sk-upstream-SECRET".to_string());
    let router = quota_patrol::config::Config::parse(text, "router.toml", &env)
        .unwrap()
        .router
        .unwrap();
    let t = spawn_app_router(vec![free("a@example.com", 100.0)], router).await;
    t.inspect().await;
    let cookie = sign_in(&t).await;
    let site = page_text(&t, "/sites/test", &cookie).await;
    let at = site
        .find(r#"<tr data-router-account="p/linked">"#)
        .unwrap_or_else(|| {
            panic!(
                "no router row in {}",
                &site[site.find("<h2>Router").unwrap_or(0)..][..600]
            )
        });
    let row = &site[at..at + site[at..].find("</tr>").unwrap()];
    assert!(row.contains("avail-exhausted"), "{row}");
    // Usable again at the free account's weekly reset (t0 + 4 d), the router's `until`.
    assert!(row.contains("2026-05-25 03:00 UTC"), "{row}");
    assert!(!site.contains("sk-upstream-SECRET"));
}

#[tokio::test]
async fn the_card_shows_the_forecasts_dry_time_and_rows_mark_the_active_set() {
    // Weekly 10 % and 20 %, +5 points an hour each (as tests/it/forecast.rs): the site runs
    // dry before the free accounts' weekly reset.
    let settings = quota_patrol::core::settings::SettingsPatch {
        priority_routing_enabled: Some(true),
        priority_min_active_count: Some(1),
        ..fast_settings()
    };
    let t = spawn_app_with(vec![free("a@x.com", 10.0), free("b@x.com", 20.0)], settings).await;
    t.inspect_forced().await;
    for _ in 0..2 {
        t.clock.advance(Duration::hours(1));
        for email in ["a@x.com", "b@x.com"] {
            t.sim.update_usage(&t.name_of(email), |u| {
                if let Some(w) = u.weekly.as_mut() {
                    w.used_percent += 5.0;
                }
            });
        }
        t.inspect_forced().await;
    }
    let cookie = sign_in(&t).await;
    let site = page_text(&t, "/sites/test", &cookie).await;
    let f: serde_json::Value = t
        .get("/api/sites/test/forecast")
        .await
        .json()
        .await
        .unwrap();
    let dry: chrono::DateTime<chrono::Utc> = f["projectedDryAt"].as_str().unwrap().parse().unwrap();
    assert!(dry > t0() + Duration::hours(2), "{f}");
    let shown = format!(
        "Runs dry</dt><dd><time datetime=\"{}\"",
        dry.format("%Y-%m-%dT%H:%M:%SZ")
    );
    assert!(site.contains(&shown), "dry time {dry} not on the page");
    assert!(site.contains("before the earliest reset"));
    // Routing with one active account: exactly one row carries the mark.
    let rows: Vec<&str> = ["a@x.com", "b@x.com"]
        .iter()
        .map(|e| row_of(&site, &t.name_of(e)))
        .collect();
    let active = rows
        .iter()
        .filter(|r| r.contains(r#"<span class="mark">active</span>"#))
        .count();
    assert_eq!(active, 1, "{rows:?}");
    assert!(site.contains("at least 1 accounts kept active"));
}

#[tokio::test]
async fn the_site_page_shows_banked_reset_credits_when_the_mode_is_on() {
    // docs/reset-credits.md "What is shown".
    let mut alice = plus("alice@example.com", 10.0, 100.0);
    alice.usage.reset_credits = Some(vec![quota_patrol_sim::SimResetCredit::granted(
        "RateLimitResetCredit_a",
        t0(),
    )]);
    let settings = quota_patrol::core::settings::SettingsPatch {
        reset_credits_mode: Some("observe".into()),
        ..fast_settings()
    };
    let t = spawn_app_with(vec![alice, plus("bob@example.com", 1.0, 1.0)], settings).await;
    t.inspect_forced().await;
    let cookie = sign_in(&t).await;
    let site = page_text(&t, "/sites/test", &cookie).await;
    assert!(
        site.contains("reset credits (observe): 1 banked on 1 accounts, 1 usable now"),
        "{site}"
    );
    assert!(row_of(&site, &t.name_of("alice@example.com")).contains("credits 1 (1 now)"));
    assert!(!row_of(&site, &t.name_of("bob@example.com")).contains("credits"));
}
