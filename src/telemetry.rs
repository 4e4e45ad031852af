//! Tracing subscriber set-up (pretty for people, JSON for collectors). Logs go to stderr so
//! that stdout carries only a command's result (`inspect --json`); colours only on a terminal.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt};

use crate::config::LogFormat;

/// Installs the global subscriber once; later calls are ignored (tests, embedded use).
/// `RUST_LOG` overrides `level`. The scheduler library's own chatter is kept at `warn`.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{level},tokio_cron_scheduler=warn")));
    let builder = fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Pretty => builder.compact().try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
