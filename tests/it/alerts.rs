//! Alerts end to end (docs/rules/alerts.md): real rounds against the simulated CPA, messages
//! delivered to a real SMTP server on 127.0.0.1 (tests/it/smtp.rs) and a webhook receiver, parsed
//! and checked. Time moves only through the manual clock; delivery is driven by its one-step
//! function `deliver_due`, never by waiting.

use chrono::Duration;
use hmac::{Hmac, Mac};
use quota_patrol::config::{AlertsConfig, WebhookConfig};
use quota_patrol::jobs::alerts::{deliver_due, on_tick};
use quota_patrol_sim::{SimAccount, SimUsage, UpstreamBehaviour};
use serde_json::Value;
use sha2::Sha256;

use crate::helpers::*;
use crate::smtp::SmtpServer;
use crate::webhook::HookServer;

const ALICE: &str = "alice@example.com";
const BOB: &str = "bob@example.com";

/// Two accounts that are both exhausted at t0: alice's five-hour window (back at
/// t0 + 3 h 12 min = 06:12 UTC = 08:12 CEST), bob's week (back in 2 days).
fn exhausted_pool() -> Vec<SimAccount> {
    vec![
        SimAccount::codex(
            ALICE,
            "plus",
            SimUsage::paid(
                100.0,
                t0() + Duration::minutes(192),
                40.0,
                t0() + Duration::days(3),
            ),
        ),
        SimAccount::codex(
            BOB,
            "free",
            SimUsage::weekly_only(100.0, t0() + Duration::days(2)),
        ),
    ]
}

fn healthy_usage() -> SimUsage {
    SimUsage::paid(
        5.0,
        t0() + Duration::hours(5),
        10.0,
        t0() + Duration::days(3),
    )
}

async fn deliver(t: &TestApp) {
    deliver_due(&t.patrol).await.expect("delivery pass runs");
}

async fn history(t: &TestApp) -> Value {
    let r = t.get("/api/alerts").await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn events(h: &Value) -> Vec<&str> {
    h["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn exhaustion_sends_exactly_one_email_with_both_bodies_and_the_reset_in_the_configured_zone()
{
    let smtp = SmtpServer::start().await;
    let t = spawn_app_alerts(exhausted_pool(), email_alerts(&smtp.url())).await;
    t.inspect_forced().await;
    deliver(&t).await;

    let got = smtp.received();
    assert_eq!(got.len(), 1, "one message for the transition");
    let m = &got[0];
    assert_eq!(m.mail_from, "patrol@example.com");
    assert_eq!(m.rcpt_to, vec!["ops@example.com", "oncall@example.com"]);
    let msg = m.parsed();
    assert_eq!(
        msg.subject().unwrap(),
        "[quota-patrol] CRITICAL: All accounts of Test are exhausted (first reset in 3 h 12 min)"
    );
    let to: Vec<&str> = msg
        .to()
        .unwrap()
        .iter()
        .filter_map(|a| a.address())
        .collect();
    assert_eq!(to, vec!["ops@example.com", "oncall@example.com"]);
    let text = msg.body_text(0).unwrap();
    let html = msg.body_html(0).unwrap();
    for body in [&text, &html] {
        assert!(
            body.contains("2026-05-21 08:12 CEST (in 3 h 12 min)"),
            "earliest reset in Europe/Berlin: {body}"
        );
        assert!(body.contains("2026-05-21 05:00 CEST"), "event time: {body}");
        assert!(body.contains(ALICE) && body.contains(BOB), "{body}");
        assert!(!body.contains(MGMT_KEY) && !body.contains(ADMIN_TOKEN));
    }
    assert!(
        text.contains("- alice@example.com [plus] exhausted: weekly 40 %, 5-hour 100 %"),
        "{text}"
    );
    assert!(
        html.contains("<tr><td>bob@example.com</td><td>free</td><td>exhausted</td><td>100 %</td>"),
        "{html}"
    );
    let raw = String::from_utf8_lossy(&m.data);
    assert!(raw.contains("multipart/alternative"), "{raw}");

    // Later rounds while still exhausted tell nothing new.
    t.clock.advance(Duration::minutes(40));
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(smtp.received().len(), 1);

    let h = history(&t).await;
    assert_eq!(events(&h), vec!["all_exhausted"]);
    let msg = &h["events"][0]["messages"][0];
    assert_eq!(msg["channel"], "email");
    assert_eq!(msg["status"], "delivered");
    assert!(
        msg["deliveries"][0]["detail"]
            .as_str()
            .unwrap()
            .starts_with("250"),
        "{msg}"
    );
    assert!(
        raw.contains(h["events"][0]["eventId"].as_str().unwrap()),
        "the Message-ID carries the transition id"
    );
}

#[tokio::test]
async fn recovery_sends_exactly_one_email_once_the_flap_guard_is_satisfied() {
    let smtp = SmtpServer::start().await;
    let t = spawn_app_alerts(exhausted_pool(), email_alerts(&smtp.url())).await;
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(smtp.received().len(), 1);

    // alice's window resets: the next round sees one usable account (and re-enables it).
    t.sim.set_usage(&t.name_of(ALICE), healthy_usage());
    t.clock.advance(Duration::minutes(1));
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(smtp.received().len(), 1, "first good evaluation: not yet");
    t.clock.advance(Duration::minutes(5));
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(
        smtp.received().len(),
        1,
        "two evaluations but only 5 of 10 minutes"
    );
    t.clock.advance(Duration::minutes(6));
    t.inspect_forced().await;
    deliver(&t).await;
    let got = smtp.received();
    assert_eq!(got.len(), 2, "recovered after 11 minutes and 3 evaluations");
    let msg = got[1].parsed();
    assert_eq!(
        msg.subject().unwrap(),
        "[quota-patrol] INFO: Test has usable accounts again"
    );
    let text = msg.body_text(0).unwrap();
    assert!(
        text.contains("1 of 2 account(s) can serve requests again"),
        "{text}"
    );
    assert!(
        text.contains("exhausted since 2026-05-21 05:00 CEST (12 min ago)"),
        "{text}"
    );

    t.clock.advance(Duration::minutes(30));
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(smtp.received().len(), 2, "exactly one recovered");
}

#[tokio::test]
async fn a_flap_inside_the_confirm_span_sends_nothing() {
    let smtp = SmtpServer::start().await;
    let t = spawn_app_alerts(exhausted_pool(), email_alerts(&smtp.url())).await;
    let alice = t.name_of(ALICE);
    t.inspect_forced().await;
    t.sim.set_usage(&alice, healthy_usage());
    t.clock.advance(Duration::minutes(3));
    t.inspect_forced().await;
    t.sim.set_usage(
        &alice,
        SimUsage::paid(
            100.0,
            t0() + Duration::hours(5),
            40.0,
            t0() + Duration::days(3),
        ),
    );
    t.clock.advance(Duration::minutes(3));
    t.inspect_forced().await;
    t.clock.advance(Duration::minutes(30));
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(
        events(&history(&t).await),
        vec!["all_exhausted"],
        "exhausted → usable → exhausted within 10 minutes is one story"
    );
    assert_eq!(smtp.received().len(), 1);
}

#[tokio::test]
async fn a_restart_while_exhausted_sends_nothing() {
    let smtp = SmtpServer::start().await;
    let t = spawn_app_alerts(exhausted_pool(), email_alerts(&smtp.url())).await;
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(smtp.received().len(), 1);

    let t = t.restart().await;
    t.clock.advance(Duration::hours(2));
    t.inspect_forced().await;
    deliver(&t).await;
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(smtp.received().len(), 1, "the persisted state remembers");
    assert_eq!(events(&history(&t).await), vec!["all_exhausted"]);
}

#[tokio::test]
async fn smtp_down_during_the_transition_delivers_exactly_once_after_it_is_back() {
    let smtp = SmtpServer::start().await;
    smtp.set_down(true);
    let t = spawn_app_alerts(exhausted_pool(), email_alerts(&smtp.url())).await;
    t.inspect_forced().await;
    deliver(&t).await;
    deliver(&t).await;
    assert!(smtp.refused() >= 1, "an attempt was made while down");
    assert!(smtp.received().is_empty());
    let h = history(&t).await;
    let msg = &h["events"][0]["messages"][0];
    assert_eq!(msg["status"], "pending", "{msg}");
    assert_eq!(
        msg["attempts"], 1,
        "one attempt until the back-off passed: {msg}"
    );
    assert!(msg["lastError"].as_str().unwrap().contains("421"), "{msg}");

    smtp.set_down(false);
    deliver(&t).await;
    assert!(
        smtp.received().is_empty(),
        "the retry waits for its back-off"
    );
    t.clock.advance(Duration::seconds(61));
    deliver(&t).await;
    assert_eq!(smtp.received().len(), 1);
    t.clock.advance(Duration::hours(3));
    deliver(&t).await;
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(smtp.received().len(), 1, "exactly once");

    let h = history(&t).await;
    let msg = &h["events"][0]["messages"][0];
    assert_eq!(msg["status"], "delivered");
    let attempts: Vec<bool> = msg["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["success"].as_bool().unwrap())
        .collect();
    assert_eq!(attempts, vec![false, true]);
}

#[tokio::test]
async fn a_message_undelivered_for_24_hours_expires_after_backing_off_to_an_hour() {
    let smtp = SmtpServer::start().await;
    smtp.set_down(true);
    let t = spawn_app_alerts(exhausted_pool(), email_alerts(&smtp.url())).await;
    t.inspect_forced().await;
    let mut waits = Vec::new();
    for _ in 0..40 {
        deliver(&t).await;
        let h = history(&t).await;
        let msg = &h["events"][0]["messages"][0];
        if msg["status"] != "pending" {
            break;
        }
        let next = chrono::DateTime::parse_from_rfc3339(msg["nextAttemptAt"].as_str().unwrap())
            .unwrap()
            .with_timezone(&chrono::Utc);
        waits.push((next - t.patrol.now()).num_minutes());
        t.clock.set(next);
    }
    assert_eq!(&waits[..8], &[1, 2, 4, 8, 16, 32, 60, 60]);
    assert!(waits.iter().all(|w| *w <= 60));
    let h = history(&t).await;
    let msg = &h["events"][0]["messages"][0];
    assert_eq!(msg["status"], "expired", "{msg}");
    assert_eq!(msg["attempts"].as_u64().unwrap() as usize, waits.len() + 1);
    assert!(t.patrol.now() < t0() + Duration::hours(24));
    smtp.set_down(false);
    t.clock.advance(Duration::hours(2));
    deliver(&t).await;
    assert!(
        smtp.received().is_empty(),
        "an expired message is never sent"
    );
}

#[tokio::test]
async fn the_webhook_carries_the_event_and_a_signature_that_verifies() {
    let smtp = SmtpServer::start().await;
    let hook = HookServer::start().await;
    let secret = "hook-SECRET-value";
    let t = spawn_app_alerts(
        exhausted_pool(),
        AlertsConfig {
            webhook: Some(WebhookConfig {
                url: hook.url(),
                secret: Some(secret.to_string().into()),
                timeout_seconds: 2,
            }),
            ..email_alerts(&smtp.url())
        },
    )
    .await;
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(smtp.received().len(), 1, "both channels");
    let hits = hook.hits();
    assert_eq!(hits.len(), 1);
    let hit = &hits[0];

    let sig = hit.header("x-quota-patrol-signature").expect("signed");
    let hex_sig = sig.strip_prefix("sha256=").expect("sha256=<hex>");
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(&hit.body);
    mac.verify_slice(&hex::decode(hex_sig).unwrap())
        .expect("the signature verifies with the shared secret");
    let mut wrong = Hmac::<Sha256>::new_from_slice(b"another secret").unwrap();
    wrong.update(&hit.body);
    assert!(wrong.verify_slice(&hex::decode(hex_sig).unwrap()).is_err());

    let body = hit.json();
    assert_eq!(body["event"], "all_exhausted");
    assert_eq!(body["siteId"], SITE);
    assert_eq!(body["level"], "critical");
    assert_eq!(body["at"], "2026-05-21T03:00:00Z");
    assert_eq!(body["earliestResetAt"], "2026-05-21T06:12:00Z");
    assert_eq!(body["accounts"].as_array().unwrap().len(), 2);
    assert_eq!(body["accounts"][0]["displayName"], ALICE);
    assert!(!String::from_utf8_lossy(&hit.body).contains(secret));
    let h = history(&t).await;
    assert_eq!(
        hit.header("x-quota-patrol-delivery").as_deref(),
        h["events"][0]["eventId"].as_str(),
        "the transition id is the idempotency key"
    );
    assert_eq!(
        hit.header("content-type").as_deref(),
        Some("application/json")
    );
}

#[tokio::test]
async fn a_webhook_answering_5xx_is_retried_and_4xx_is_not() {
    let hook = HookServer::start().await;
    hook.answer(503);
    let t = spawn_app_alerts(
        exhausted_pool(),
        AlertsConfig {
            email: None,
            webhook: Some(WebhookConfig {
                url: hook.url(),
                secret: None,
                timeout_seconds: 2,
            }),
            ..email_alerts("smtp://127.0.0.1:9")
        },
    )
    .await;
    t.inspect_forced().await;
    deliver(&t).await;
    assert!(hook.hits()[0].header("x-quota-patrol-signature").is_none());
    hook.answer(404);
    t.clock.advance(Duration::minutes(1));
    deliver(&t).await;
    t.clock.advance(Duration::hours(2));
    deliver(&t).await;
    assert_eq!(hook.hits().len(), 2, "503 retried once, 404 not retried");
    let h = history(&t).await;
    let msg = &h["events"][0]["messages"][0];
    assert_eq!(msg["status"], "failed");
    assert_eq!(msg["lastError"], "HTTP 404");
}

#[tokio::test]
async fn invalid_accounts_are_told_once_listing_them() {
    let smtp = SmtpServer::start().await;
    let revoked = with_behaviour(
        plus("revoked@example.com", 1.0, 1.0),
        UpstreamBehaviour::Status {
            status: 401,
            content_type: "application/json".into(),
            body: r#"{"error":{"message":"token revoked"}}"#.into(),
        },
    );
    let t = spawn_app_alerts(
        vec![plus("ok@example.com", 5.0, 10.0), revoked],
        email_alerts(&smtp.url()),
    )
    .await;
    t.inspect().await;
    deliver(&t).await;
    assert!(smtp.received().is_empty(), "one 401 is not confirmed yet");
    t.clock.advance(Duration::minutes(10));
    let r = t.inspect().await;
    assert_eq!(t.decision(&r, "revoked@example.com").rule, 1);
    deliver(&t).await;
    let got = smtp.received();
    assert_eq!(got.len(), 1);
    let msg = got[0].parsed();
    assert_eq!(
        msg.subject().unwrap(),
        "[quota-patrol] WARNING: 1 invalid account(s) taken out of Test"
    );
    assert!(msg.body_text(0).unwrap().contains("revoked@example.com"));
    t.clock.advance(Duration::minutes(10));
    t.inspect().await;
    deliver(&t).await;
    assert_eq!(smtp.received().len(), 1);
}

#[tokio::test]
async fn an_unreachable_cpa_is_told_after_the_grace_and_its_return_after_the_flap_guard() {
    let smtp = SmtpServer::start().await;
    let t = spawn_app_alerts(
        vec![plus("ok@example.com", 5.0, 10.0)],
        email_alerts(&smtp.url()),
    )
    .await;
    t.inspect().await;
    t.sim.set_down(true);
    t.clock.advance(Duration::minutes(5));
    let failed = t.inspect().await;
    assert!(failed.error.is_some());
    on_tick(t.patrol.clone()).await;
    t.clock.advance(Duration::minutes(9));
    on_tick(t.patrol.clone()).await;
    deliver(&t).await;
    assert!(smtp.received().is_empty(), "14 minutes without contact");
    t.clock.advance(Duration::minutes(1));
    on_tick(t.patrol.clone()).await;
    on_tick(t.patrol.clone()).await;
    deliver(&t).await;
    let got = smtp.received();
    assert_eq!(got.len(), 1);
    let msg = got[0].parsed();
    assert_eq!(
        msg.subject().unwrap(),
        "[quota-patrol] CRITICAL: The CPA of Test is unreachable"
    );
    assert!(
        msg.body_text(0)
            .unwrap()
            .contains("The last successful contact was at 2026-05-21 05:00 CEST (15 min ago)"),
        "{}",
        msg.body_text(0).unwrap()
    );

    t.sim.set_down(false);
    t.clock.advance(Duration::minutes(1));
    t.inspect().await;
    on_tick(t.patrol.clone()).await;
    deliver(&t).await;
    assert_eq!(
        smtp.received().len(),
        1,
        "reachable again, not yet confirmed"
    );
    t.clock.advance(Duration::minutes(10));
    on_tick(t.patrol.clone()).await;
    deliver(&t).await;
    let got = smtp.received();
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[1].parsed().subject().unwrap(),
        "[quota-patrol] INFO: The CPA of Test is reachable again"
    );
    assert_eq!(
        events(&history(&t).await),
        vec!["site_reachable", "site_unreachable"]
    );
}

#[tokio::test]
async fn nothing_is_evaluated_while_alerts_are_disabled_or_on_a_dry_run() {
    let smtp = SmtpServer::start().await;
    let off = spawn_app_alerts(
        exhausted_pool(),
        AlertsConfig {
            enabled: false,
            ..email_alerts(&smtp.url())
        },
    )
    .await;
    off.inspect_forced().await;
    deliver(&off).await;
    let h = history(&off).await;
    assert_eq!(h["enabled"], false);
    assert_eq!(h["channels"], serde_json::json!(["email"]));
    assert!(events(&h).is_empty());

    let on = spawn_app_alerts(exhausted_pool(), email_alerts(&smtp.url())).await;
    let r = on
        .post("/api/inspection/run?dryRun=true", Value::Null)
        .await;
    assert_eq!(r.status(), 200);
    deliver(&on).await;
    assert!(events(&history(&on).await).is_empty());
    assert!(smtp.received().is_empty());
}

#[tokio::test]
async fn with_priority_routing_standby_accounts_count_as_capacity_and_only_an_empty_list_alerts() {
    let smtp = SmtpServer::start().await;
    let t = spawn_app_alerts(
        vec![
            plus("a1@example.com", 10.0, 10.0),
            plus("a2@example.com", 10.0, 10.0),
        ],
        email_alerts(&smtp.url()),
    )
    .await;
    let r = t
        .put(
            "/api/settings/priority-routing",
            serde_json::json!({"priorityRoutingEnabled": true, "priorityMinActiveCount": 1}),
        )
        .await;
    assert_eq!(r.status(), 200);
    t.inspect().await;
    let (a1, a2) = (t.name_of("a1@example.com"), t.name_of("a2@example.com"));
    assert!(t.sim.account(&a2).unwrap().disabled, "a2 waits as standby");
    // a1 runs out: a2 (standby, usable) is capacity, not exhaustion.
    t.sim
        .update_usage(&a1, |u| u.weekly.as_mut().unwrap().used_percent = 100.0);
    t.inspect_forced().await;
    deliver(&t).await;
    assert!(!events(&history(&t).await).contains(&"all_exhausted"));
    assert!(
        !t.sim.account(&a2).unwrap().disabled,
        "routing brought a2 in"
    );
    // Both out: one all_exhausted message.
    t.sim
        .update_usage(&a2, |u| u.weekly.as_mut().unwrap().used_percent = 100.0);
    t.inspect_forced().await;
    deliver(&t).await;
    assert_eq!(
        events(&history(&t).await)
            .iter()
            .filter(|e| **e == "all_exhausted")
            .count(),
        1
    );
    assert_eq!(smtp.received().len(), 1);
}
