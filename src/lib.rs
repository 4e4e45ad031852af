//! quota-patrol: patrols pools of Codex accounts behind CLIProxyAPI (CPA), acts on their quota,
//! and serves a management REST API. See README.md and docs/ (docs/rules/ for the rules) for the map.

/// Alert delivery: e-mail (lettre) and webhook channels, message templates (minijinja).
pub mod alerts;
/// Management REST API (axum + utoipa): one file per resource, one error mapping.
pub mod api;
/// Builds and runs the application (store, API listener, scheduler).
pub mod app;
/// Time as a dependency (`Clock`, `SystemClock`, `ManualClock`), from the core crate.
pub use quota_patrol_core::clock;
/// TOML configuration, validated with every problem reported at once.
pub mod config;
/// Pure rules: parsing, decisions, freshness, selection (the `quota-patrol-core` crate).
pub use quota_patrol_core as core;
/// CPA management API client (reqwest).
pub mod cpa;
/// The `demo` command: simulated CPA + daemon (feature `demo`, on by default).
#[cfg(feature = "demo")]
pub mod demo;
/// Golden-file comparison for tests (`fixtures/`, `UPDATE_GOLDEN=1` rewrites).
#[cfg(test)]
pub(crate) mod golden;
/// `quota-patrol init`: a commented starter configuration for one CPA.
pub mod init;
/// Use cases composed from the adapters.
pub mod jobs;
/// Randomness as a dependency (`Random`, `ThreadRandom`, `SeededRandom`, `FixedRandom`).
pub mod random;
/// The OpenAI-compatible request router's HTTP adapter (docs/rules/router.md §3–§5).
pub mod router;
/// When jobs run (tokio-cron-scheduler).
pub mod scheduler;
/// SQLite persistence (rusqlite + migrations).
pub mod store;
/// Terminal tables of rounds.
pub mod table;
/// Tracing subscriber set-up.
pub mod telemetry;
/// The read-only status page (minijinja HTML, sign-in session) on the API listener.
pub mod web;
