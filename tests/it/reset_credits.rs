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
