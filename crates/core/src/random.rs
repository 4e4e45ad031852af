//! Randomness as a dependency, like time (`crate::clock`): every random draw that affects a
//! decision (the pause between probe batches, the jitter of every backoff, the scheduler's spread
//! of regular rounds) comes from a [`Random`] the caller holds, so tests and simulations can fix
//! it. The generators that draw from `rand` live in the daemon (`quota_patrol::random`); this
//! crate only names the trait and the fixed source tests use.

use std::sync::Arc;

/// Source of uniform random draws.
pub trait Random: Send + Sync + std::fmt::Debug + 'static {
    /// A fraction drawn uniformly from `0.0..1.0` (the `jitter` of `core::retry::Backoff`).
    fn fraction(&self) -> f64;

    /// An integer drawn uniformly from `lo..=hi`; `lo` when `hi < lo`.
    fn between(&self, lo: u64, hi: u64) -> u64;
}

/// Shared handle to a random source.
pub type SharedRandom = Arc<dyn Random>;

/// A source that always draws the same point: `fraction()` is the given value (clamped to
/// `0.0..=1.0`) and `between(lo, hi)` the point at that share of the range, rounded. With
/// `0.0` every backoff is its full nominal delay and every range gives its minimum (tests).
#[derive(Debug, Clone, Copy)]
pub struct FixedRandom(f64);

impl FixedRandom {
    /// A source fixed at `fraction` (clamped to `0.0..=1.0`).
    pub fn new(fraction: f64) -> Self {
        Self(fraction.clamp(0.0, 1.0))
    }
}

impl Random for FixedRandom {
    fn fraction(&self) -> f64 {
        self.0
    }

    fn between(&self, lo: u64, hi: u64) -> u64 {
        let span = hi.saturating_sub(lo) as f64;
        lo + (span * self.0).round() as u64
    }
}
