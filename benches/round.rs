//! Benchmark (not a test): ten inspection rounds over 10,000 accounts on the simulated CPA with
//! no upstream delay, probeWorkers 32, no batch delay. Rounds 3, 6 and 9 reuse the probes of the
//! round before (cache); the others force a probe of every account. After each round it prints
//! wall time, probes per second and the daemon's memory: current RSS (`VmRSS`) and its
//! high-water mark (`VmHWM`), both from `/proc/self/status`, in MB. The simulated CPA runs in a
//! child process (this binary again, with `QP_BENCH_ROLE=sim`) so that its memory is not
//! counted. Run: `cargo bench --bench round`. `QP_BENCH_ACCOUNTS` changes the account count,
//! `QP_BENCH_ROUNDS` the number of rounds, `QP_BENCH_FEATURES=on` lists passive quota (half the
//! accounts with signals) and observes reset credits (`sim_child::features_on`).

#[path = "support/sim_child.rs"]
mod sim_child;
use std::sync::Arc;
use std::time::Instant;

use quota_patrol::clock::{Clock, SystemClock};
use quota_patrol::jobs::inspect::{RoundKind, RoundOptions, run_round};
use quota_patrol::jobs::{Patrol, PatrolOptions};
use quota_patrol::store::Store;

/// The daemon's allocator (src/main.rs), so that the memory measured is the daemon's.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// One `kB` field of `/proc/self/status` (`VmRSS`, `VmHWM`), in MB; NaN when unreadable.
fn status_mb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// jemalloc's counters now, MB: live heap (`stats.allocated`), pages of live extents
/// (`stats.active`), pages jemalloc holds resident (`stats.resident`, dirty pages not yet handed
/// back included) and address space kept unmapped for reuse (`stats.retained`).
fn jemalloc_mb() -> String {
    use tikv_jemalloc_ctl::{epoch, stats};
    if epoch::advance().is_err() {
        return "jemalloc stats unreadable".into();
    }
    let mb =
        |v: Result<usize, tikv_jemalloc_ctl::Error>| v.map_or(f64::NAN, |b| b as f64 / 1048576.0);
    format!(
        "jemalloc allocated {:.1}, active {:.1}, resident {:.1}, retained {:.1} MB",
        mb(stats::allocated::read()),
        mb(stats::active::read()),
        mb(stats::resident::read()),
        mb(stats::retained::read())
    )
}

/// Highest live heap (`stats.allocated`, bytes) seen since the last [`PeakSampler::take`],
/// sampled every 2 ms on a thread of its own: the transient peak of a round, which RSS after
/// the round does not show.
struct PeakSampler(Arc<std::sync::atomic::AtomicUsize>);

impl PeakSampler {
    fn start() -> Self {
        let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = peak.clone();
        std::thread::spawn(move || {
            loop {
                if tikv_jemalloc_ctl::epoch::advance().is_ok()
                    && let Ok(a) = tikv_jemalloc_ctl::stats::allocated::read()
                {
                    seen.fetch_max(a, std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        Self(peak)
    }

    /// The peak since the last call, MB; starts the next period.
    fn take(&self) -> f64 {
        self.0.swap(0, std::sync::atomic::Ordering::Relaxed) as f64 / 1048576.0
    }
}

/// Current resident set of the daemon, MB.
fn rss_mb() -> f64 {
    status_mb("VmRSS")
}

/// Peak resident set of the daemon since it started, MB.
fn peak_rss_mb() -> f64 {
    status_mb("VmHWM")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("QP_BENCH_ACCOUNTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let rounds: usize = std::env::var("QP_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    if sim_child::is_child() {
        return sim_child::serve(n).await;
    }
    let sim = sim_child::SimProcess::start().await?;
    let base_url = sim.base_url.clone();

    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("bench.db"))?;
    let patrol = Patrol::new(store, clock.clone(), PatrolOptions::default());
    sim.create_site(&patrol, "bench").await?;
    println!(
        "round benchmark: {n} accounts, probeWorkers 32, no batch delay, passive quota and reset \
         credits {}; simulated CPA in a child process at {base_url}; daemon RSS before the first \
         round {:.1} MB (peak {:.1} MB)",
        if sim_child::features_on() {
            "on"
        } else {
            "off"
        },
        rss_mb(),
        peak_rss_mb()
    );
    let sampler = PeakSampler::start();
    let mut rss_after = Vec::with_capacity(rounds);
    for i in 1..=rounds {
        let force = i % 3 != 0;
        let started = Instant::now();
        let opts = RoundOptions {
            kind: RoundKind::Manual,
            force,
            dry_run: false,
            only: None,
        };
        let r = run_round(&patrol, "bench", opts).await?;
        let secs = started.elapsed().as_secs_f64();
        rss_after.push(rss_mb());
        println!(
            "round {i} ({}): {:.2} s wall, {} probed, {} reused, {} failed, {:.0} probes/s, {} actions, daemon RSS {:.1} MB, peak RSS {:.1} MB",
            if force { "forced" } else { "cache" },
            secs,
            r.probed_count,
            r.reused_count,
            r.failed_count,
            r.probed_count as f64 / secs,
            r.action_outcomes.len(),
            rss_after.last().copied().unwrap_or(f64::NAN),
            peak_rss_mb()
        );
        println!(
            "  heap peak during the round {:.1} MB; after it: {}",
            sampler.take(),
            jemalloc_mb()
        );
    }
    let from_third = rss_after.get(2..).unwrap_or_default();
    let (lo, hi) = from_third
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    println!(
        "RSS after each round (MB): {}; from round 3 on: {lo:.1} .. {hi:.1} MB; peak {:.1} MB",
        rss_after
            .iter()
            .map(|v| format!("{v:.1}"))
            .collect::<Vec<_>>()
            .join(" "),
        peak_rss_mb()
    );
    drop(sim);
    Ok(())
}
