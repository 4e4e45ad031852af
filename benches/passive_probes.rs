//! Figure (not a timing): real probes per account per day with and without passive quota
//! evidence (docs/rules/patrol.md §4.7). A simulated pool of Plus accounts on the in-process
//! simulated CPA and a manual clock: a round every 10 minutes for 24 simulated hours, half of
//! the accounts serving client traffic before every round (their listing counters grow, and
//! when the CPA lists passive quota, its signals are observed at that moment). "Before": a CPA
//! without the `quota` field (today's behaviour: every round probes a busy account). "After":
//! the same CPA listing `quota` signals, default `passiveMaxAgeMinutes` 30. Deterministic:
//! the numbers do not depend on machine load. Run: `cargo bench --bench passive_probes`;
//! `QP_BENCH_ACCOUNTS` changes the pool size (default 20).

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};
use quota_patrol::clock::ManualClock;
use quota_patrol::core::settings::SettingsPatch;
use quota_patrol::jobs::inspect::{RoundKind, RoundOptions, run_round};
use quota_patrol::jobs::sites::{SiteInput, create_site};
use quota_patrol::jobs::{Patrol, PatrolOptions};
use quota_patrol::store::Store;
use quota_patrol_sim::{SimAccount, SimConfig, SimCpa, SimUsage};

const KEY: &str = "bench-management-key";
const ROUNDS_PER_DAY: i64 = 24 * 6;

/// Probes per account per day over one simulated day: (busy accounts, idle accounts).
async fn one_day(n: usize, passive: bool) -> anyhow::Result<(f64, f64)> {
    let t0 = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
    let clock = ManualClock::new(t0);
    let accounts: Vec<SimAccount> = (0..n)
        .map(|i| {
            SimAccount::codex(
                &format!("user{i:03}@example.com"),
                "plus",
                SimUsage::paid(5.0, t0 + Duration::hours(3), 10.0, t0 + Duration::days(3)),
            )
        })
        .collect();
    let names: Vec<String> = accounts.iter().map(|a| a.name.clone()).collect();
    let sim = SimCpa::start(
        SimConfig {
            management_key: Some(KEY.into()),
            accounts,
            ban_after_failures: None,
            version: "v7.2.140".into(),
            passive_quota: passive,
            ..Default::default()
        },
        Arc::new(clock.clone()),
    )?;
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("bench.db"))?;
    let patrol = Patrol::new(store, Arc::new(clock.clone()), PatrolOptions::default());
    let settings = SettingsPatch {
        probe_workers: Some(8),
        probe_batch_delay_min_ms: Some(0),
        probe_batch_delay_max_ms: Some(0),
        retry_count: Some(0),
        ..Default::default()
    };
    create_site(
        &patrol,
        SiteInput {
            site_id: Some("bench".into()),
            site_name: Some("bench".into()),
            cpa_base_url: Some(sim.base_url()),
            management_key: Some(KEY.into()),
            usage_url: Some(format!("{}/backend-api/wham/usage", sim.base_url())),
            settings,
            ..Default::default()
        },
    )
    .await?;
    let busy = |name: &str| {
        names
            .iter()
            .position(|n| n == name)
            .is_some_and(|i| i % 2 == 0)
    };
    let mut probes: HashMap<String, u32> = HashMap::new();
    for _ in 0..ROUNDS_PER_DAY {
        for name in names.iter().filter(|n| busy(n)) {
            sim.add_traffic(name, 2);
        }
        let r = run_round(&patrol, "bench", RoundOptions::new(RoundKind::Manual)).await?;
        for d in r.decisions.iter().filter(|d| !d.from_cache && d.evaluated) {
            *probes.entry(d.account_name.clone()).or_default() += 1;
        }
        clock.advance(Duration::minutes(10));
    }
    let per_account = |want_busy: bool| {
        let group: Vec<&String> = names.iter().filter(|n| busy(n) == want_busy).collect();
        let total: u32 = group
            .iter()
            .map(|n| probes.get(*n).copied().unwrap_or(0))
            .sum();
        f64::from(total) / group.len().max(1) as f64
    };
    Ok((per_account(true), per_account(false)))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("QP_BENCH_ACCOUNTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let (busy_before, idle_before) = one_day(n, false).await?;
    let (busy_after, idle_after) = one_day(n, true).await?;
    println!(
        "passive_probes: {n} Plus accounts, half serving traffic before every round, a round every \
         10 min for 24 simulated hours"
    );
    println!("probes per account per day | serving traffic | idle");
    println!("before (no passive quota)  | {busy_before:>15.1} | {idle_before:.1}");
    println!("after (passive, 30 min)    | {busy_after:>15.1} | {idle_after:.1}");
    Ok(())
}
