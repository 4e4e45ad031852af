//! The pure core: quota parsing, decisions, freshness, selection. Nothing here performs I/O,
//! reads the clock or spawns tasks; time and randomness come in as arguments.
//! `tests/it/architecture.rs` checks that no adapter crate is imported here.

pub mod access;
pub mod account;
pub mod affinity;
pub mod alerting;
pub mod availability;
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
pub mod policy;
pub mod pool;
pub mod priority;
pub mod probe;
pub mod quota;
pub mod report;
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
pub mod when;
pub mod writes;
