//! Per-request cost of the router's ranking with affinity (`core::affinity::LaneAffinity::rank`,
//! docs/rules/router.md §1 / §6 target: ≤ 2 µs at p99 for 1,000 candidates with 10,000 live
//! bindings): 1,000 candidates in four tiers, ~30 % excluded (10 % exhausted with a known reset,
//! 10 % invalid, 10 % cooling down), a lane holding 10,000 live bindings, a warm caller-owned
//! buffer; three request kinds: (a) a bound key, (b) a fresh key (bound at once, evicting the
//! least recently used binding), (c) no key (the sticky block). Before criterion, a plain loop
//! times 100,000 single calls of each kind with `Instant` and prints p50 / p99 / max (criterion
//! reports no percentiles). Run: `cargo bench --bench router_rank`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use quota_patrol::core::affinity::{
    AffinityConfig, KeyInput, LaneAffinity, SessionKey, session_key,
};
use quota_patrol::core::router::Api;
use quota_patrol::core::selection::{CandidateSet, EngineState, Ranking};

#[path = "support/pool.rs"]
mod pool;
use pool::{CANDIDATES, now, pool};

const BINDINGS: usize = 10_000;
const SAMPLES: usize = 100_000;

/// The shared benchmark pool, prepared.
fn prepared_pool() -> (CandidateSet, EngineState) {
    let (candidates, state) = pool();
    (CandidateSet::new(candidates), state)
}

/// The key of session `i` (an explicit session header).
fn key(i: usize) -> SessionKey {
    let id = format!("session-{i}");
    session_key(&KeyInput {
        header: Some(&id),
        body: &serde_json::Value::Null,
        api: Api::ChatCompletions,
        previous_response: None,
    })
    .expect("a header is a key")
}

/// A lane holding `BINDINGS` live bindings, and their keys.
fn lane(set: &CandidateSet, state: &EngineState) -> (LaneAffinity, Vec<SessionKey>) {
    let mut lane = LaneAffinity::new(AffinityConfig::default(), set.len());
    let mut out = Ranking::with_capacity(set.len());
    let keys: Vec<SessionKey> = (0..BINDINGS).map(key).collect();
    for &k in &keys {
        lane.rank(set, state, Some(k), now(), &mut out);
        let first = out.first().expect("eligible candidates");
        lane.record_success(Some(k), first, true, now());
    }
    assert_eq!(lane.bindings(now()), BINDINGS);
    (lane, keys)
}

/// p50 / p99 / max of `SAMPLES` single calls of `call(i)`, printed under `label`.
fn percentiles(label: &str, mut call: impl FnMut(usize)) {
    for i in 0..10_000 {
        call(i);
    }
    let mut samples: Vec<Duration> = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let t = Instant::now();
        call(i);
        samples.push(t.elapsed());
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((SAMPLES as f64 * q) as usize).min(SAMPLES - 1)];
    println!(
        "{label}: {CANDIDATES} candidates, {BINDINGS} live bindings, {SAMPLES} calls: p50 {:?}, p99 {:?}, max {:?}",
        at(0.50),
        at(0.99),
        samples[SAMPLES - 1]
    );
}

fn main() {
    let (set, state) = prepared_pool();
    let (mut lane, keys) = lane(&set, &state);
    let mut out = Ranking::with_capacity(set.len());
    // Fresh keys are made before timing (hashing a header is the adapter's, not the ranking's).
    let fresh: Vec<SessionKey> = (BINDINGS..BINDINGS + SAMPLES + 10_000).map(key).collect();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as usize
    };
    percentiles("bound key", |_| {
        let k = keys[next() % keys.len()];
        black_box(lane.rank(black_box(&set), &state, Some(k), now(), &mut out));
        black_box(out.first());
    });
    // Fresh keys evict the oldest bindings; the bound keys of the next runs are re-made.
    let mut f = 0usize;
    percentiles("fresh key", |_| {
        let k = fresh[f % fresh.len()];
        f += 1;
        black_box(lane.rank(black_box(&set), &state, Some(k), now(), &mut out));
        black_box(out.first());
    });
    assert_eq!(lane.bindings(now()), BINDINGS);
    percentiles("no key", |_| {
        black_box(lane.rank(black_box(&set), &state, None, now(), &mut out));
        if let Some(first) = out.first() {
            lane.record_success(None, first, true, now());
        }
    });

    let (mut lane, keys) = self::lane(&set, &state);
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("router_rank");
    group.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    group.bench_function("bound_key_1000_candidates_10000_bindings", |b| {
        b.iter(|| {
            i = i.wrapping_add(7919);
            let k = keys[i % keys.len()];
            black_box(lane.rank(black_box(&set), &state, Some(k), now(), &mut out))
        })
    });
    let mut f = 0usize;
    group.bench_function("fresh_key_1000_candidates_10000_bindings", |b| {
        b.iter(|| {
            f += 1;
            let k = fresh[f % fresh.len()];
            black_box(lane.rank(black_box(&set), &state, Some(k), now(), &mut out))
        })
    });
    group.bench_function("no_key_1000_candidates", |b| {
        b.iter(|| black_box(lane.rank(black_box(&set), &state, None, now(), &mut out)))
    });
    group.finish();
    c.final_summary();
}
