//! Throughput of `core::quota::classify_probe` (one payload = one element) over representative
//! upstream bodies: paid and free usage payloads, a payload with every group, a Cloudflare 403
//! page and a garbage 2xx body. Fixtures are shared with the unit tests (fixtures/upstream).

use std::hint::black_box;

use chrono::DateTime;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use quota_patrol::core::quota::classify_probe;

/// (name, upstream status, body)
const CASES: &[(&str, u16, &str)] = &[
    (
        "plus",
        200,
        include_str!("../fixtures/upstream/wham-usage__plus.json"),
    ),
    (
        "free_weekly",
        200,
        include_str!("../fixtures/upstream/wham-usage__free-weekly-primary.json"),
    ),
    (
        "all_groups",
        200,
        include_str!("../fixtures/upstream/wham-usage__code-review-and-additional.json"),
    ),
    (
        "camel_case",
        200,
        include_str!("../fixtures/upstream/wham-usage__camel-case.json"),
    ),
    (
        "cloudflare_403",
        403,
        include_str!("../fixtures/upstream/wham-usage__403-cloudflare.html"),
    ),
    (
        "garbage_200",
        200,
        include_str!("../fixtures/upstream/wham-usage__garbage.txt"),
    ),
];

fn classify(c: &mut Criterion) {
    // The probe time the fixtures are written around (2026-05-26T12:00:00Z); never the wall clock.
    let probed_at = DateTime::from_timestamp(1_779_796_800, 0).expect("constant in range");
    let mut group = c.benchmark_group("classify_probe");
    group.throughput(Throughput::Elements(1));
    for &(name, status, body) in CASES {
        group.bench_function(name, |b| {
            b.iter(|| classify_probe(black_box(status), black_box(body), black_box(probed_at)))
        });
    }
    group.finish();
}

criterion_group!(benches, classify);
criterion_main!(benches);
