//! Early warning end to end (docs/rules/alerts.md §4, docs/rules/alerts.md §1 `pool_low`, `daily_digest`):
//! real rounds against the simulated CPA whose accounts burn quota between rounds, the site
//! forecast read from snapshot_history, messages delivered to the SMTP server on 127.0.0.1
//! (tests/it/smtp.rs). Time moves only through the manual clock; delivery and the digest are
//! driven by their one-step functions (`deliver_due`, `on_tick`), never by waiting.

use chrono::{Duration, NaiveTime};
use quota_patrol::jobs::alerts::{deliver_due, on_tick};
use quota_patrol_sim::{SimAccount, SimUsage};
use serde_json::Value;

use crate::helpers::*;
use crate::smtp::SmtpServer;

const EMAILS: [&str; 3] = ["alice@example.com", "bob@example.com", "carol@example.com"];

/// Paid usage at `weekly` percent, the week resetting 5 days after t0 (the earliest reset).
fn usage(weekly: f64) -> SimUsage {
    SimUsage::paid(
        5.0,
        t0() + Duration::hours(5),
        weekly,
        t0() + Duration::days(5),
    )
}

fn burning_pool() -> Vec<SimAccount> {
    EMAILS
        .iter()
        .map(|e| SimAccount::codex(e, "plus", usage(20.0)))
        .collect()
}

async fn alert_events(t: &TestApp) -> Vec<String> {
    let h: Value = t.get("/api/alerts").await.json().await.unwrap();
    h["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

/// Every account at `weekly` percent, 20 minutes later, one forced round, one delivery pass.
async fn burn_to(t: &TestApp, weekly: f64) {
    for e in EMAILS {
        t.sim.set_usage(&t.name_of(e), usage(weekly));
    }
    t.clock.advance(Duration::minutes(20));
    t.inspect_forced().await;
    deliver_due(&t.patrol).await.unwrap();
}

#[tokio::test]
async fn a_burn_that_runs_the_pool_dry_days_before_its_reset_sends_exactly_one_pool_low_email() {
    let smtp = SmtpServer::start().await;
    let t = spawn_app_alerts(burning_pool(), email_alerts(&smtp.url())).await;
    t.inspect_forced().await;
    deliver_due(&t.patrol).await.unwrap();
    // 20 minutes of history: shorter than the forecast's minimum span, no burn known yet.
    burn_to(&t, 30.0).await;
    assert!(smtp.received().is_empty(), "no forecast yet, no warning");

    // 40 minutes at 30 %/h per account: 3 × (95 − 40) = 165 points left at ~90 points per
    // hour, dry in under 2 h, five days before the reset.
    burn_to(&t, 40.0).await;
    let got = smtp.received();
    assert_eq!(got.len(), 1, "one pool_low for the transition");
    let msg = got[0].parsed();
    let subject = msg.subject().unwrap().to_string();
    assert!(
        subject.starts_with("[quota-patrol] WARNING: Test is running low (runs dry in "),
        "{subject}"
    );
    let text = msg.body_text(0).unwrap();
    let html = msg.body_html(0).unwrap();
    // 90 points per hour from 05:40 CEST: 165 points last 1 h 50 min.
    let dry = "2026-05-21 07:30 CEST (in 1 h 50 min) at 90.0 % per hour; next reset 2026-05-26 05:00 CEST (in 4 d 23 h)";
    assert_eq!(
        subject,
        "[quota-patrol] WARNING: Test is running low (runs dry in 1 h 50 min)"
    );
    assert!(text.contains(&format!("Projected dry: {dry}")), "{text}");
    assert!(
        html.contains(&format!("Projected dry</th><td>{dry}</td>")),
        "{html}"
    );
    for body in [&text, &html] {
        assert!(!body.contains(MGMT_KEY) && !body.contains(ADMIN_TOKEN));
    }
    assert!(text.contains("before the earliest reset"), "{text}");
    assert!(
        text.contains("3 of 3 account(s) can serve requests"),
        "{text}"
    );

    // The burn goes on: the next rounds tell nothing new, and neither does a restart.
    burn_to(&t, 45.0).await;
    burn_to(&t, 50.0).await;
    assert_eq!(smtp.received().len(), 1);
    let t = t.restart().await;
    burn_to(&t, 55.0).await;
    assert_eq!(smtp.received().len(), 1, "the persisted state remembers");
    assert_eq!(alert_events(&t).await, vec!["pool_low"]);

    // The weeks reset (new windows, no burn known in them yet): the forecast projects no dry
    // time, so the warning clears, told once the flap guard held (10 min, two evaluations).
    for e in EMAILS {
        t.sim.set_usage(
            &t.name_of(e),
            SimUsage::paid(
                0.0,
                t0() + Duration::hours(8),
                1.0,
                t0() + Duration::days(8),
            ),
        );
    }
    for _ in 0..3 {
        t.clock.advance(Duration::minutes(6));
        t.inspect_forced().await;
        deliver_due(&t.patrol).await.unwrap();
    }
    let got = smtp.received();
    assert_eq!(got.len(), 2, "{:?}", alert_events(&t).await);
    assert_eq!(alert_events(&t).await, vec!["pool_low_cleared", "pool_low"]);
    assert_eq!(
        got[1].parsed().subject().unwrap(),
        "[quota-patrol] INFO: Test is no longer running low"
    );
}

#[tokio::test]
async fn the_daily_digest_goes_out_once_per_local_day_across_a_restart() {
    let smtp = SmtpServer::start().await;
    let mut alerts = email_alerts(&smtp.url());
    // t0 is 05:00 CEST; the digest is due at 05:30 Berlin time.
    alerts.daily_digest_at = NaiveTime::from_hms_opt(5, 30, 0);
    let accounts = vec![
        SimAccount::codex(EMAILS[0], "plus", usage(20.0)),
        SimAccount::codex(EMAILS[1], "plus", usage(100.0)),
    ];
    let t = spawn_app_alerts(accounts, alerts).await;
    t.inspect_forced().await; // disables bob (weekly 100 %)
    on_tick(t.patrol.clone()).await;
    assert!(smtp.received().is_empty(), "05:00: not yet");

    t.clock.advance(Duration::minutes(30));
    on_tick(t.patrol.clone()).await;
    let got = smtp.received();
    assert_eq!(got.len(), 1, "05:30: the digest");
    let msg = got[0].parsed();
    assert_eq!(
        msg.subject().unwrap(),
        "[quota-patrol] INFO: Daily digest of Test for 2026-05-21"
    );
    let text = msg.body_text(0).unwrap();
    assert!(
        text.contains("Of 2 account(s), 1 usable, 1 exhausted, 0 invalid."),
        "{text}"
    );
    assert!(text.contains("the patrol disabled 1, enabled 0"), "{text}");
    assert!(
        text.contains("CEST bob@example.com: disable (weekly 100% >= threshold 95%)"),
        "{text}"
    );

    t.clock.advance(Duration::hours(3));
    on_tick(t.patrol.clone()).await;
    let t = t.restart().await;
    t.clock.advance(Duration::hours(1));
    on_tick(t.patrol.clone()).await;
    assert_eq!(
        smtp.received().len(),
        1,
        "once per local day, restart or not"
    );

    // The next local day, at 05:30 CEST again.
    t.clock
        .set(t0() + Duration::days(1) + Duration::minutes(29));
    on_tick(t.patrol.clone()).await;
    assert_eq!(smtp.received().len(), 1);
    t.clock.advance(Duration::minutes(1));
    on_tick(t.patrol.clone()).await;
    let got = smtp.received();
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[1].parsed().subject().unwrap(),
        "[quota-patrol] INFO: Daily digest of Test for 2026-05-22"
    );
}
