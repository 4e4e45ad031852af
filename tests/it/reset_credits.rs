//! Banked rate-limit reset credits end to end (docs/reset-credits.md, docs/rules/cpa.md §10):
//! real rounds against the simulated CPA whose upstream reports `rate_limit_reset_credits`.

use chrono::Duration;
use quota_patrol::core::settings::SettingsPatch;
use quota_patrol_sim::{SimAccount, SimResetCredit};
use serde_json::Value;

use crate::helpers::*;

/// A plus account holding `n` credits granted a day before t0, the week at `weekly` percent.
fn with_credits(email: &str, weekly: f64, n: usize) -> SimAccount {
    let mut a = plus(email, 10.0, weekly);
    a.usage.reset_credits = Some(
        (0..n)
            .map(|i| {
                SimResetCredit::granted(
                    &format!("RateLimitResetCredit_{email}_{i}"),
                    t0() - Duration::days(1 + i as i64),
                )
            })
            .collect(),
    );
    a
}

fn mode(m: &str) -> SettingsPatch {
    SettingsPatch {
        reset_credits_mode: Some(m.into()),
        ..fast_settings()
    }
}

fn by_name<'a>(rows: &'a Value, name: &str) -> &'a Value {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["accountName"] == name || r["name"] == name)
        .expect("account listed")
}

#[tokio::test]
async fn observe_shows_each_accounts_hint_and_the_sites_sum_and_unknown_stays_null() {
    let accounts = vec![
        with_credits("alice@example.com", 100.0, 2),
        with_credits("bob@example.com", 20.0, 1),
        plus("carol@example.com", 10.0, 30.0),
    ];
    let t = spawn_app_with(accounts, mode("observe")).await;
    t.inspect_forced().await;
    let quotas: Value = t.get("/api/quotas").await.json().await.unwrap();
    let alice = &by_name(&quotas, &t.name_of("alice@example.com"))["resetCredits"];
    assert_eq!(
        (alice["available"].as_u64(), alice["applicable"].as_u64()),
        (Some(2), Some(2))
    );
    let bob = &by_name(&quotas, &t.name_of("bob@example.com"))["resetCredits"];
    assert_eq!(
        (bob["available"].as_u64(), bob["applicable"].as_u64()),
        (Some(1), Some(0))
    );
    let carol = &by_name(&quotas, &t.name_of("carol@example.com"))["resetCredits"];
    assert!(
        carol.is_null(),
        "no hint in the body: unknown, not zero ({carol})"
    );
    let accounts: Value = t.get("/api/accounts").await.json().await.unwrap();
    let alice = &by_name(&accounts, &t.name_of("alice@example.com"))["resetCredits"];
    assert_eq!(alice["available"].as_u64(), Some(2));

    let status: Value = t.get("/api/inspection/status").await.json().await.unwrap();
    let site = &status["resetCredits"];
    assert_eq!(site["mode"], "observe");
    assert_eq!(site["available"].as_u64(), Some(3));
    assert_eq!(site["applicable"].as_u64(), Some(2));
    assert_eq!(site["accountsKnown"].as_u64(), Some(2));
    // Observe never spends a credit.
    assert!(t.bodies("POST", "/v0/management/api-call").iter().all(|b| {
        !b["url"]
            .as_str()
            .unwrap_or_default()
            .contains("rate-limit-reset-credits")
    }));
}

#[tokio::test]
async fn off_shows_nothing() {
    let t = spawn_app(vec![with_credits("alice@example.com", 100.0, 2)]).await;
    t.inspect_forced().await;
    let quotas: Value = t.get("/api/quotas").await.json().await.unwrap();
    assert!(by_name(&quotas, &t.name_of("alice@example.com"))["resetCredits"].is_null());
    let status: Value = t.get("/api/inspection/status").await.json().await.unwrap();
    assert!(status["resetCredits"].is_null());
}

// ---- redeem ---------------------------------------------------------------------------------

/// Redeem mode with a minimum of 2 usable accounts (the site runs dry below it).
/// `mode` with at least 2 accounts kept active: the dry pool (one usable of three) needs a
/// credit.
fn needing(m: &str) -> SettingsPatch {
    SettingsPatch {
        priority_min_active_count: Some(2),
        ..mode(m)
    }
}

fn redeem() -> SettingsPatch {
    needing("redeem")
}

/// Credits spent upstream for `email` (each idempotency key once) and consume calls received.
fn spent(t: &TestApp, email: &str) -> (usize, u32) {
    let a = t.sim.account(&t.name_of(email)).unwrap();
    (
        a.usage.credit_desk.spent(),
        a.usage.credit_desk.consume_calls,
    )
}

/// Two exhausted accounts with credits (alice's lapses sooner) and one usable account.
fn dry_pool() -> Vec<SimAccount> {
    let mut alice = with_credits("alice@example.com", 100.0, 1);
    alice.usage.reset_credits.as_mut().unwrap()[0].expires_at = t0() + Duration::days(2);
    vec![
        alice,
        with_credits("bob@example.com", 100.0, 2),
        plus("carol@example.com", 10.0, 30.0),
    ]
}

#[tokio::test]
async fn a_dry_site_redeems_exactly_one_credit_the_soonest_expiring_and_the_account_comes_back() {
    let t = spawn_app_with(dry_pool(), redeem()).await;
    let r = t.inspect_forced().await;
    let report = r.reset_credit.expect("a credit was considered");
    assert_eq!(report.account_name, t.name_of("alice@example.com"));
    // The stored run says it too.
    let last: Value = t
        .get("/api/inspection/last-run")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(last["runId"], r.run_id.as_str(), "{last}");
    assert_eq!(last["resetCredit"]["outcome"], "reset", "{last}");
    assert_eq!(report.outcome, "reset");
    assert!(report.redeem_request_id.is_some());
    assert_eq!(spent(&t, "alice@example.com"), (1, 1));
    assert_eq!(spent(&t, "bob@example.com"), (0, 0));
    // The re-probe read the reset: alice is back, the site is no longer dry.
    let quotas: Value = t.get("/api/quotas").await.json().await.unwrap();
    let alice = by_name(&quotas, &t.name_of("alice@example.com"));
    assert_eq!(alice["weeklyUsedPercent"].as_f64(), Some(0.0));
    let r = t.inspect_forced().await;
    assert!(
        r.reset_credit.is_none(),
        "enough usable accounts: {:?}",
        r.reset_credit
    );
    assert_eq!(spent(&t, "bob@example.com"), (0, 0));
    let logs = t.log_entries("account").await;
    let line = logs
        .iter()
        .find(|e| e["operationType"] == "resetCredit")
        .expect("logged");
    assert!(
        line["message"].as_str().unwrap().contains(": reset ("),
        "the outcome is in the line: {line}"
    );
}

#[tokio::test]
async fn a_delayed_reset_that_still_reads_100_percent_never_spends_a_second_credit() {
    let mut pool = dry_pool();
    pool[0].usage.credit_desk.delayed_reset_probes = 5;
    pool[0]
        .usage
        .reset_credits
        .as_mut()
        .unwrap()
        .push(SimResetCredit::granted(
            "RateLimitResetCredit_alice_extra",
            t0(),
        ));
    let t = spawn_app_with(pool, redeem()).await;
    assert_eq!(
        t.inspect_forced().await.reset_credit.unwrap().outcome,
        "reset"
    );
    // The usage still reads 100 % with an applicable credit: alice is not tried again in this
    // window (the site, still dry, may spend bob's credit: another account).
    let r = t.inspect_forced().await;
    assert_eq!(
        spent(&t, "alice@example.com"),
        (1, 1),
        "{:?}",
        r.reset_credit
    );
    let r = t.inspect_forced().await;
    assert_eq!(
        spent(&t, "alice@example.com"),
        (1, 1),
        "{:?}",
        r.reset_credit
    );
}

#[tokio::test]
async fn an_ambiguous_502_after_the_consume_took_effect_is_retried_with_the_same_id_across_a_restart()
 {
    let mut pool = dry_pool();
    pool[0].usage.credit_desk.ambiguous_after_effect = 1;
    let t = spawn_app_with(pool, redeem()).await;
    let first = t.inspect_forced().await.reset_credit.unwrap();
    assert_eq!(first.outcome, "ambiguous");
    assert_eq!(
        spent(&t, "alice@example.com"),
        (1, 1),
        "the consume took effect"
    );
    // A restart between the guard and the answer: the guard is in the database.
    let t = t.restart().await;
    let second = t.inspect_forced().await.reset_credit.unwrap();
    assert_eq!(second.account_name, first.account_name);
    assert!(second.retry);
    assert_eq!(
        second.redeem_request_id, first.redeem_request_id,
        "the same key"
    );
    assert_eq!(second.outcome, "already_redeemed");
    assert_eq!(
        spent(&t, "alice@example.com"),
        (1, 2),
        "exactly one credit spent"
    );
    assert_eq!(spent(&t, "bob@example.com"), (0, 0));
}

#[tokio::test]
async fn no_credit_and_nothing_to_reset_are_normal_outcomes_that_settle_the_window() {
    let mut pool = dry_pool();
    pool[0].usage.credit_desk.consume_status = Some((
        200,
        r#"{"code":"no_credit","credit":null,"windows_reset":0}"#.into(),
    ));
    let t = spawn_app_with(pool, redeem()).await;
    let r = t.inspect_forced().await.reset_credit.unwrap();
    assert_eq!(
        (r.account_name.as_str(), r.outcome.as_str()),
        (t.name_of("alice@example.com").as_str(), "no_credit")
    );
    // Alice's window is settled: the next dry round tries bob, never alice again.
    let r = t.inspect_forced().await.reset_credit.unwrap();
    assert_eq!(r.account_name, t.name_of("bob@example.com"));
    assert_eq!(r.outcome, "reset");
    assert_eq!(spent(&t, "alice@example.com"), (0, 1));
    assert_eq!(spent(&t, "bob@example.com"), (1, 1));
}

#[tokio::test]
async fn a_dry_run_reports_what_it_would_redeem_and_spends_nothing() {
    // A real round in observe stores what it saw (a dry run stores nothing), then redeem.
    let t2 = spawn_app_with(dry_pool(), needing("observe")).await;
    t2.inspect_forced().await;
    let put = t2
        .put(
            "/api/settings",
            serde_json::json!({"resetCreditsMode": "redeem"}),
        )
        .await;
    assert_eq!(put.status(), 200);
    let r = quota_patrol::jobs::inspect::run_round(
        &t2.patrol,
        SITE,
        quota_patrol::jobs::round::RoundOptions {
            kind: quota_patrol::jobs::round::RoundKind::Manual,
            force: true,
            dry_run: true,
            only: None,
        },
    )
    .await
    .unwrap();
    let report = r.reset_credit.expect("the dry run says what it would do");
    assert_eq!(report.outcome, "would_redeem");
    assert!(report.dry_run);
    assert_eq!(spent(&t2, "alice@example.com"), (0, 0));
    assert_eq!(spent(&t2, "bob@example.com"), (0, 0));
}

#[tokio::test]
async fn observe_never_redeems_even_when_the_site_is_dry() {
    let t = spawn_app_with(dry_pool(), needing("observe")).await;
    let r = t.inspect_forced().await;
    assert!(r.reset_credit.is_none());
    assert_eq!(spent(&t, "alice@example.com"), (0, 0));
}

#[tokio::test]
async fn redeeming_by_hand_uses_the_same_guard() {
    // Observe mode: the patrol never redeems, the operator may. Bob's reset shows late: the
    // probe after the redemption still reads 100 %, so only the guard stops a second one.
    let mut pool = dry_pool();
    pool[1].usage.credit_desk.delayed_reset_probes = 5;
    let t = spawn_app_with(pool, mode("observe")).await;
    t.inspect_forced().await;
    let bob = t.name_of("bob@example.com");
    let r = t
        .post(
            &format!("/api/accounts/{bob}/reset-credit"),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["outcome"], "reset");
    assert_eq!(spent(&t, "bob@example.com"), (1, 1));
    // Bob's window is settled: a second call is refused by the guard, nothing sent.
    let again = t
        .post(
            &format!("/api/accounts/{bob}/reset-credit"),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(again.status(), 400);
    let text = again.text().await.unwrap();
    assert!(text.contains("never spent twice"), "{text}");
    assert_eq!(spent(&t, "bob@example.com"), (1, 1));
    // Carol is not limited: refused.
    let carol = t.name_of("carol@example.com");
    let r = t
        .post(
            &format!("/api/accounts/{carol}/reset-credit"),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn a_redemption_raises_reset_credit_redeemed() {
    let smtp = crate::smtp::SmtpServer::start().await;
    let t = spawn_app_full(dry_pool(), redeem(), false, email_alerts(&smtp.url())).await;
    assert_eq!(
        t.inspect_forced().await.reset_credit.unwrap().outcome,
        "reset"
    );
    let h: Value = t.get("/api/alerts").await.json().await.unwrap();
    let events: Vec<&Value> = h["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "reset_credit_redeemed")
        .collect();
    assert_eq!(events.len(), 1, "{h}");
    assert_eq!(events[0]["level"], "info");
}

#[tokio::test]
async fn an_unanswered_attempt_whose_window_reset_is_closed_and_never_sent_again() {
    let mut pool = dry_pool();
    pool[0].usage.credit_desk.ambiguous_after_effect = 1;
    let t = spawn_app_with(pool, redeem()).await;
    assert_eq!(
        t.inspect_forced().await.reset_credit.unwrap().outcome,
        "ambiguous"
    );
    // Past alice's weekly reset (t0 + 3 d): the attempt is closed, not retried.
    t.clock.advance(Duration::days(4));
    t.inspect_forced().await;
    t.inspect_forced().await;
    assert_eq!(spent(&t, "alice@example.com"), (1, 1));
    let logs = t.log_entries("account").await;
    assert!(
        logs.iter().any(|e| e["operationType"] == "resetCredit"
            && e["message"].as_str().unwrap().contains("closed unanswered")),
        "{logs:?}"
    );
}

#[tokio::test]
async fn an_upstream_5xx_without_effect_is_retried_with_the_same_key_and_spends_exactly_once() {
    let mut pool = dry_pool();
    pool[0].usage.credit_desk.consume_status = Some((503, r#"{"detail":"busy"}"#.into()));
    let t = spawn_app_with(pool, redeem()).await;
    let first = t.inspect_forced().await.reset_credit.unwrap();
    assert_eq!(first.outcome, "ambiguous");
    assert_eq!(spent(&t, "alice@example.com"), (0, 1));
    t.sim.update_usage(&t.name_of("alice@example.com"), |u| {
        u.credit_desk.consume_status = None;
    });
    let second = t.inspect_forced().await.reset_credit.unwrap();
    assert_eq!(second.redeem_request_id, first.redeem_request_id);
    assert_eq!(second.outcome, "reset");
    assert_eq!(spent(&t, "alice@example.com"), (1, 2));
    assert_eq!(
        spent(&t, "bob@example.com"),
        (0, 0),
        "no other credit meanwhile"
    );
}
