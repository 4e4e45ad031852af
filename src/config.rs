//! Configuration: the TOML file (`config/quota-patrol.example.toml` documents every key) parsed
//! into `Raw*` serde types, then validated into [`Config`] with every problem reported at once.
//! Secrets come from environment variables and are redacted in every `Debug` output.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use secrecy::SecretString;
use serde::Deserialize;

use crate::core::settings::{PatrolSettings, SettingsPatch};
use crate::core::site::{DEFAULT_USAGE_URL, DEFAULT_USER_AGENT, Site, normalize_site_id};

/// Default listener of the management API (api.md "Conventions").
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8390";
/// Default environment variable holding the admin token.
pub const DEFAULT_ADMIN_TOKEN_ENV: &str = "QUOTA_PATROL_ADMIN_TOKEN";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    database: RawDatabase,
    #[serde(default)]
    logging: RawLogging,
    #[serde(default)]
    scheduler: RawScheduler,
    #[serde(default)]
    dev: RawDev,
    #[serde(default)]
    sites: Vec<RawSite>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    admin_token_env: Option<String>,
    metrics_public: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    path: Option<PathBuf>,
    log_retention_days: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLogging {
    format: Option<String>,
    level: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScheduler {
    tick_seconds: Option<u64>,
    warmup: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDev {
    allow_short_intervals: Option<bool>,
    interval_unit_seconds: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSite {
    id: Option<String>,
    name: Option<String>,
    enabled: Option<bool>,
    cpa_base_url: Option<String>,
    management_key_env: Option<String>,
    usage_url: Option<String>,
    user_agent: Option<String>,
    #[serde(default)]
    settings: Option<RawSettings>,
}

/// `[sites.settings]`: the API's settings plus whatever else was written (typos), reported.
#[derive(Debug, Default, Deserialize)]
struct RawSettings {
    #[serde(flatten)]
    patch: SettingsPatch,
    #[serde(flatten)]
    unknown: std::collections::BTreeMap<String, toml::Value>,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Admin token for `/api/*` (from the environment variable named in the config).
    pub admin_token: Option<SecretString>,
    pub admin_token_env: String,
    pub metrics_public: bool,
    pub database_path: PathBuf,
    pub log_retention_days: i64,
    pub log_format: LogFormat,
    /// `tracing` filter directive, e.g. `info` or `quota_patrol=debug`.
    pub log_level: String,
    /// Scheduler tick in seconds (how often due work is looked for).
    pub tick_seconds: u64,
    pub warmup: bool,
    pub allow_short_intervals: bool,
    /// Length of one "minute" of poll intervals, in seconds (dev switch; 60 in production).
    pub interval_unit_seconds: i64,
    /// Sites to create at start when the database lacks them (the database wins afterwards).
    pub sites: Vec<Site>,
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} cannot be read as a quota-patrol config: {message}")]
    Syntax { path: String, message: String },
    #[error("{path} has {} problem(s):\n  - {}", .problems.len(), .problems.join("\n  - "))]
    Invalid { path: String, problems: Vec<String> },
}

impl Config {
    /// Reads and validates a config file; `env` looks up environment variables.
    pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string(), env)
    }

    /// Parses and validates config text; `origin` names it in errors.
    pub fn parse(
        text: &str,
        origin: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: origin.into(),
            message: e.to_string(),
        })?;
        let mut problems = Vec::new();
        let listen_text = raw.server.listen.unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen = listen_text.parse::<SocketAddr>().unwrap_or_else(|_| {
            problems.push(format!(
                "server.listen {listen_text:?} is not an address like 127.0.0.1:8390"
            ));
            SocketAddr::from(([127, 0, 0, 1], 8390))
        });
        let admin_token_env = raw
            .server
            .admin_token_env
            .unwrap_or_else(|| DEFAULT_ADMIN_TOKEN_ENV.into());
        let admin_token = env(&admin_token_env)
            .filter(|t| !t.trim().is_empty())
            .map(SecretString::from);
        let log_format = match raw.logging.format.as_deref().unwrap_or("pretty") {
            "pretty" => LogFormat::Pretty,
            "json" => LogFormat::Json,
            other => {
                problems.push(format!(
                    "logging.format must be pretty or json (got {other:?})"
                ));
                LogFormat::Pretty
            }
        };
        let tick_seconds = raw.scheduler.tick_seconds.unwrap_or(5);
        if !(1..=60).contains(&tick_seconds) {
            problems.push("scheduler.tick_seconds must be between 1 and 60".into());
        }
        let interval_unit_seconds = raw.dev.interval_unit_seconds.unwrap_or(60);
        if !(1..=60).contains(&interval_unit_seconds) {
            problems.push("dev.interval_unit_seconds must be between 1 and 60".into());
        }
        let log_retention_days = raw.database.log_retention_days.unwrap_or(30);
        if log_retention_days < 1 {
            problems.push("database.log_retention_days must be >= 1".into());
        }
        let allow_short = raw.dev.allow_short_intervals.unwrap_or(false);
        let mut sites = Vec::new();
        for (i, rs) in raw.sites.into_iter().enumerate() {
            let label = format!("sites[{i}]");
            let name = rs.name.clone().or(rs.id.clone()).unwrap_or_default();
            if name.trim().is_empty() {
                problems.push(format!("{label}: id or name is required"));
            }
            let base = rs.cpa_base_url.clone().unwrap_or_default();
            if reqwest::Url::parse(&base)
                .map(|u| !matches!(u.scheme(), "http" | "https"))
                .unwrap_or(true)
            {
                problems.push(format!(
                    "{label}: cpa_base_url must be an absolute http(s) URL (got {base:?})"
                ));
            }
            let key_env = rs.management_key_env.clone().unwrap_or_default();
            if key_env.is_empty() {
                problems.push(format!("{label}: management_key_env is required (the key itself never goes in the file)"));
            } else if env(&key_env).is_none_or(|k| k.is_empty()) {
                problems.push(format!(
                    "{label}: environment variable {key_env} (management key) is not set"
                ));
            }
            let raw_settings = rs.settings.unwrap_or_default();
            problems.extend(
                raw_settings
                    .unknown
                    .keys()
                    .map(|k| format!("{label}.settings: unknown setting {k:?}")),
            );
            let settings = match raw_settings
                .patch
                .apply(&PatrolSettings::default(), allow_short)
            {
                Ok(s) => s,
                Err(ps) => {
                    problems.extend(ps.into_iter().map(|p| format!("{label}.settings: {p}")));
                    PatrolSettings::default()
                }
            };
            sites.push(Site {
                site_id: normalize_site_id(rs.id.as_deref().unwrap_or(&name)),
                site_name: name.trim().to_string(),
                site_enabled: rs.enabled.unwrap_or(true),
                cpa_base_url: base.trim_end_matches('/').to_string(),
                management_key: None,
                management_key_env: Some(key_env),
                provider: "codex".into(),
                usage_url: rs.usage_url.unwrap_or_else(|| DEFAULT_USAGE_URL.into()),
                user_agent: rs.user_agent.unwrap_or_else(|| DEFAULT_USER_AGENT.into()),
                settings,
            });
        }
        let mut ids: Vec<&str> = sites.iter().map(|s| s.site_id.as_str()).collect();
        ids.sort_unstable();
        for w in ids.windows(2).filter(|w| w[0] == w[1]) {
            problems.push(format!("two sites have the id {:?}", w[0]));
        }
        if !problems.is_empty() {
            return Err(ConfigError::Invalid {
                path: origin.into(),
                problems,
            });
        }
        Ok(Config {
            listen,
            admin_token,
            admin_token_env,
            metrics_public: raw.server.metrics_public.unwrap_or(false),
            database_path: raw
                .database
                .path
                .unwrap_or_else(|| PathBuf::from("quota-patrol.db")),
            log_retention_days,
            log_format,
            log_level: raw.logging.level.unwrap_or_else(|| "info".into()),
            tick_seconds,
            warmup: raw.scheduler.warmup.unwrap_or(true),
            allow_short_intervals: allow_short,
            interval_unit_seconds,
            sites,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_example_config_parses() {
        let text = include_str!("../config/quota-patrol.example.toml");
        let env = env_with(&[
            ("CPA_MANAGEMENT_KEY", "k"),
            ("QUOTA_PATROL_ADMIN_TOKEN", "t"),
        ]);
        let cfg = Config::parse(text, "example", &env).unwrap();
        assert_eq!(cfg.sites.len(), 1);
        assert!(cfg.admin_token.is_some());
    }

    #[test]
    fn every_problem_is_reported_together() {
        let text = r#"
            [server]
            listen = "nowhere"
            [logging]
            format = "xml"
            [[sites]]
            name = "a"
            cpa_base_url = "ftp://x"
            management_key_env = "MISSING_KEY"
            [sites.settings]
            usedPercentThreshold = 0
        "#;
        let err = Config::parse(text, "t.toml", &|_| None).unwrap_err();
        let ConfigError::Invalid { problems, .. } = err else {
            panic!("{err}")
        };
        assert_eq!(problems.len(), 5, "{problems:#?}");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err =
            Config::parse("[server]\nlisten_addr = \"x\"\n", "t.toml", &|_| None).unwrap_err();
        assert!(matches!(err, ConfigError::Syntax { .. }), "{err}");
    }

    #[test]
    fn secrets_never_print() {
        let text = "[[sites]]\nname = \"a\"\ncpa_base_url = \"http://127.0.0.1:8317\"\nmanagement_key_env = \"K\"\n";
        let env = env_with(&[
            ("K", "mk-VERY-SECRET"),
            ("QUOTA_PATROL_ADMIN_TOKEN", "tok-VERY-SECRET"),
        ]);
        let cfg = Config::parse(text, "t", &env).unwrap();
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("VERY-SECRET"), "{dbg}");
    }
}
