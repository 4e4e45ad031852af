//! Tracing subscriber set-up (pretty for people, JSON for collectors).

use tracing_subscriber::{EnvFilter, fmt};

use crate::config::LogFormat;

/// Installs the global subscriber once; later calls are ignored (tests, embedded use).
/// `RUST_LOG` overrides `level`.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = fmt().with_env_filter(filter).with_target(false);
    let _ = match format {
        LogFormat::Pretty => builder.compact().try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
