//! Per-request cost of the selection engine (`core::selection::rank`, docs/rules/router.md §1 target:
//! ≤ 2 µs at p99 for 1,000 candidates): 1,000 candidates in four tiers, ~30 % excluded (10 %
//! exhausted with a known reset, 10 % invalid, 10 % cooling down), a warm caller-owned buffer,
//! the cursor advancing per call as a router's would. Criterion reports mean / median; before it
//! a plain loop times 100,000 single calls with `Instant` and prints p50 / p99 / max (criterion
//! reports no percentiles). `prepare_1000` times building the [`CandidateSet`] (once per pool
//! change, not per request). Run: `cargo bench --bench selection`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use quota_patrol::core::selection::{CandidateSet, EngineState, Ranking, rank};

#[path = "support/pool.rs"]
mod pool;
use pool::{CANDIDATES, now, pool};

const SAMPLES: usize = 100_000;

/// p50 / p99 / max of `SAMPLES` single calls, printed.
fn percentiles(candidates: &CandidateSet, state: &EngineState) {
    let mut out = Ranking::with_capacity(candidates.len());
    for cursor in 0..10_000 {
        rank(candidates, state, now(), cursor, &mut out);
    }
    let mut samples: Vec<Duration> = Vec::with_capacity(SAMPLES);
    for cursor in 0..SAMPLES {
        let t = Instant::now();
        rank(black_box(candidates), state, now(), cursor, &mut out);
        black_box(out.first());
        samples.push(t.elapsed());
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((SAMPLES as f64 * q) as usize).min(SAMPLES - 1)];
    println!(
        "rank {CANDIDATES} candidates ({} eligible, {} excluded), {SAMPLES} calls: p50 {:?}, p99 {:?}, max {:?}",
        out.order().len(),
        out.excluded_count(),
        at(0.50),
        at(0.99),
        samples[SAMPLES - 1]
    );
}

fn main() {
    let (raw, state) = pool();
    let candidates = CandidateSet::new(raw.clone());
    percentiles(&candidates, &state);
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("selection");
    group.throughput(Throughput::Elements(1));
    let mut out = Ranking::with_capacity(candidates.len());
    let mut cursor = 0usize;
    group.bench_function("rank_1000_mixed_tiers_30pct_excluded", |b| {
        b.iter(|| {
            cursor = cursor.wrapping_add(1);
            rank(black_box(&candidates), &state, now(), cursor, &mut out);
            black_box(out.first())
        })
    });
    // Preparing the set happens when the pool changes (a publish), not per request.
    group.bench_function("prepare_1000", |b| {
        b.iter(|| CandidateSet::new(black_box(raw.clone())))
    });
    group.finish();
    c.final_summary();
}
