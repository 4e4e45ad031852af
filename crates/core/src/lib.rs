//! The pure core of quota-patrol: quota parsing, decisions, freshness, selection, the router's
//! ranking and failure rules. Nothing here performs I/O or spawns tasks; time comes in through a
//! [`clock::Clock`] (only [`clock::SystemClock`] reads the wall clock) and randomness through a
//! [`random::Random`] or a jitter argument. Cargo keeps it so: this crate depends only on small
//! pure crates (its `Cargo.toml`), and `tests/it/architecture.rs` in the daemon checks that list.
//!
//! The daemon re-exports this crate as `quota_patrol::core` (and `clock` as `quota_patrol::clock`).

pub mod access;
pub mod account;
pub mod affinity;
pub mod alerting;
pub mod availability;
pub mod clock;
pub mod codex_json;
pub mod cpa_pause;
pub mod digest;
pub mod failure;
pub mod forecast;
pub mod freshness;
pub mod inspect;
pub mod key_refusal;
pub mod listing;
pub mod oplog;
pub mod passive;
pub mod policy;
pub mod pool;
pub mod priority;
pub mod probe;
pub mod quota;
pub mod random;
pub mod report;
pub mod reset_credits;
pub mod retry;
pub mod round;
pub mod router;
pub mod schedule;
pub mod selection;
pub mod settings;
pub mod site;
#[cfg(test)]
pub(crate) mod testkit;
pub mod thresholds;
pub mod usage;
pub mod when;
pub mod writes;
