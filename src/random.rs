//! Randomness as a dependency, like time (`crate::clock`): every random draw that affects a
//! decision — the pause between probe batches, the jitter of every backoff, the scheduler's
//! spread of regular rounds — comes from a [`Random`] held by `Patrol`, so tests and
//! simulations can fix it. This is the only module allowed to reach `rand`'s generators
//! (see `clippy.toml`).

use std::sync::Mutex;

use rand::{Rng, SeedableRng};

pub use quota_patrol_core::random::{FixedRandom, Random, SharedRandom};

/// The real source: the thread-local generator of `rand` (seeded from the OS).
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadRandom;

impl Random for ThreadRandom {
    #[allow(clippy::disallowed_methods)]
    fn fraction(&self) -> f64 {
        rand::rng().random::<f64>()
    }

    #[allow(clippy::disallowed_methods)]
    fn between(&self, lo: u64, hi: u64) -> u64 {
        rand::rng().random_range(lo..=hi.max(lo))
    }
}

/// A reproducible source: the same seed gives the same sequence of draws (simulations, benches).
#[derive(Debug)]
pub struct SeededRandom {
    rng: Mutex<rand::rngs::StdRng>,
}

impl SeededRandom {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)),
        }
    }
}

impl Random for SeededRandom {
    fn fraction(&self) -> f64 {
        self.rng.lock().expect("random lock").random::<f64>()
    }

    fn between(&self, lo: u64, hi: u64) -> u64 {
        self.rng
            .lock()
            .expect("random lock")
            .random_range(lo..=hi.max(lo))
    }
}

/// `N` bytes from a cryptographically secure generator (`rand`'s thread generator: ChaCha,
/// seeded and reseeded from the OS). For secrets only (router client keys, status-page session ids): unlike decision
/// draws they must never come from an injected, possibly fixed, [`Random`].
#[allow(clippy::disallowed_methods)]
pub fn secret_bytes<const N: usize>() -> [u8; N] {
    use rand::RngCore;
    let mut out = [0u8; N];
    rand::rng().fill_bytes(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_bytes_differ_between_draws() {
        let (a, b) = (secret_bytes::<32>(), secret_bytes::<32>());
        assert_ne!(a, b);
        assert_ne!(a, [0u8; 32]);
    }

    #[test]
    fn a_fixed_source_draws_the_same_point_of_every_range() {
        let r = FixedRandom::new(0.5);
        assert_eq!(r.fraction(), 0.5);
        assert_eq!(r.between(2000, 3000), 2500);
        assert_eq!(r.between(7, 3), 7, "an empty range gives its minimum");
        assert_eq!(FixedRandom::new(0.0).between(1, 3), 1);
        assert_eq!(FixedRandom::new(9.0).between(1, 3), 3, "clamped to 1.0");
    }

    #[test]
    fn a_fixed_source_gives_a_deterministic_backoff_sequence() {
        use crate::core::retry::PROBE_RETRY;
        let seq = |r: &dyn Random| -> Vec<i64> {
            (1..=6)
                .map(|n| PROBE_RETRY.delay(n, r.fraction()).num_milliseconds())
                .collect()
        };
        let half = FixedRandom::new(0.5);
        assert_eq!(seq(&half), vec![475, 950, 1900, 3800, 7600, 9500]);
        assert_eq!(seq(&half), seq(&FixedRandom::new(0.5)));
        assert_eq!(
            seq(&FixedRandom::new(0.0)),
            vec![500, 1000, 2000, 4000, 8000, 10000]
        );
        assert_eq!(seq(&SeededRandom::new(7)), seq(&SeededRandom::new(7)));
    }

    #[test]
    fn a_seed_gives_the_same_draws_and_ranges_hold() {
        let (a, b) = (SeededRandom::new(42), SeededRandom::new(42));
        let draws = |r: &SeededRandom| -> Vec<u64> { (0..20).map(|_| r.between(1, 3)).collect() };
        let first = draws(&a);
        assert_eq!(first, draws(&b));
        assert!(first.iter().all(|n| (1..=3).contains(n)));
        assert!(
            first.contains(&1) && first.contains(&3),
            "both ends are drawn: {first:?}"
        );
        let f = a.fraction();
        assert!((0.0..1.0).contains(&f));
        assert_eq!(ThreadRandom.between(5, 5), 5);
    }
}
