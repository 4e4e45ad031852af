//! quota-patrol: patrols pools of Codex accounts behind CLIProxyAPI (CPA), acts on their quota,
//! and serves a management REST API. See README.md and ../shared/ARCHITECTURE.md for the map.

/// Time as a dependency (`Clock`, `SystemClock`, `ManualClock`).
pub mod clock;
/// Pure rules: parsing, decisions, freshness, selection.
pub mod core;
/// A simulated CPA with a fake Codex usage upstream, for the demo, tests and benchmarks.
pub mod sim;
