//! The pool both ranking benchmarks (`selection`, `router_rank`) rank: 1,000 candidates in four
//! tiers, ~30 % excluded (10 % exhausted with a known reset, 10 % invalid, 10 % cooling down),
//! spread by a fixed pseudo-random sequence; and the fixed instant they rank at. Included with
//! `#[path = "support/pool.rs"] mod pool;`.

use chrono::{DateTime, TimeDelta, Utc};
use quota_patrol::core::availability::Availability;
use quota_patrol::core::selection::{Admin, Candidate, EngineState};

/// Candidates of the benchmark pool.
pub const CANDIDATES: usize = 1_000;

/// A fixed instant: the bench never reads the wall clock for its rules.
pub fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_779_796_800, 0).expect("constant in range")
}

/// The pool and the engine state: tiers ascending (as a pool config or a priority list is
/// kept), exclusions spread by a fixed pseudo-random sequence so branches are not periodic.
pub fn pool() -> (Vec<Candidate>, EngineState) {
    let mut state = EngineState::default();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let candidates = (0..CANDIDATES)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let availability = match x % 10 {
                0 => Availability::Exhausted {
                    until: Some(now() + TimeDelta::minutes((x % 600) as i64 + 1)),
                },
                1 => Availability::Invalid,
                2 => {
                    state.cooldowns.set(i, now() + TimeDelta::seconds(30));
                    Availability::Usable
                }
                _ => Availability::Usable,
            };
            Candidate {
                tier: (i * 4 / CANDIDATES) as u32,
                weight: None,
                admin: Admin::Enabled,
                availability,
                hold: None,
            }
        })
        .collect();
    (candidates, state)
}
