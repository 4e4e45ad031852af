//! quota-patrol: patrols pools of Codex accounts behind CLIProxyAPI (CPA), acts on their quota,
//! and serves a management REST API. See README.md and ../shared/ARCHITECTURE.md for the map.

/// Management REST API (axum + utoipa): one file per resource, one error mapping.
pub mod api;
/// Time as a dependency (`Clock`, `SystemClock`, `ManualClock`).
pub mod clock;
/// Pure rules: parsing, decisions, freshness, selection.
pub mod core;
/// CPA management API client (reqwest).
pub mod cpa;
/// Use cases composed from the adapters.
pub mod jobs;
/// SQLite persistence (rusqlite + migrations).
pub mod store;
