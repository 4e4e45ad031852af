//! Benchmark (not a test): one inspection round over 10,000 accounts on the simulated CPA with
//! no upstream delay, probeWorkers 32, no batch delay. Prints wall time, probes per second and
//! the process's peak RSS (VmHWM; the simulated CPA runs in the same process, so the figure is
//! an upper bound for the daemon alone). Run: `cargo bench --bench round`.
//! `QP_BENCH_ACCOUNTS` changes the account count.

use std::sync::Arc;
use std::time::Instant;

use quota_patrol::clock::{Clock, SystemClock};
use quota_patrol::core::settings::SettingsPatch;
use quota_patrol::jobs::inspect::{RoundKind, RoundOptions, run_round};
use quota_patrol::jobs::sites::{SiteInput, create_site};
use quota_patrol::jobs::{Patrol, PatrolOptions};
use quota_patrol::sim::{SimConfig, SimCpa, generated_accounts};
use quota_patrol::store::Store;

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("QP_BENCH_ACCOUNTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let sim = SimCpa::start(
        SimConfig {
            accounts: generated_accounts(n, clock.now()),
            ban_after_failures: None,
            ..Default::default()
        },
        clock.clone(),
    )?;
    sim.set_record_requests(false);
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("bench.db"))?;
    let patrol = Patrol::new(store, clock.clone(), PatrolOptions::default());
    let settings = SettingsPatch {
        probe_workers: Some(32),
        action_workers: Some(32),
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
            management_key: sim.management_key(),
            usage_url: Some(format!("{}/backend-api/wham/usage", sim.base_url())),
            settings,
            ..Default::default()
        },
    )
    .await?;
    println!(
        "round benchmark: {n} accounts, probeWorkers 32, no batch delay, simulated CPA on loopback"
    );
    for (i, force) in [(1, true), (2, true), (3, false)] {
        let started = Instant::now();
        let r = run_round(
            &patrol,
            "bench",
            RoundOptions {
                kind: RoundKind::Manual,
                force,
                dry_run: false,
                only: None,
            },
        )
        .await?;
        let secs = started.elapsed().as_secs_f64();
        println!(
            "round {i} ({}): {:.2} s wall, {} probed, {} reused, {} failed, {:.0} probes/s, {} actions, peak RSS {:.1} MB",
            if force { "forced" } else { "cache" },
            secs,
            r.probed_count,
            r.reused_count,
            r.failed_count,
            r.probed_count as f64 / secs,
            r.action_outcomes.len(),
            peak_rss_mb()
        );
    }
    Ok(())
}
