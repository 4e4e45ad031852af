//! Configuration: the TOML file (`config/quota-patrol.example.toml` documents every key) parsed
//! into `Raw*` serde types, then validated into [`Config`] with every problem reported at once.
//! Secrets come from environment variables and are redacted in every `Debug` output.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use secrecy::SecretString;
use serde::Deserialize;

use crate::core::affinity::AffinityConfig;
use crate::core::router::{ChainSpec, PoolSpec, RouterSpec, SpecSource, UpstreamAccount};
use crate::core::settings::{PatrolSettings, SettingsPatch};
use crate::core::site::{DEFAULT_USAGE_URL, DEFAULT_USER_AGENT, Site, normalize_site_id};

/// Default listener of the management API (docs/rules/api.md §1).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8390";
/// Default of `[server] shutdown_deadline_seconds` (docs/rules/patrol.md §11: a stop waits this long for running
/// rounds; systemd's and Docker's own stop timeouts are 90 s and 10 s, Kubernetes' 30 s).
pub const DEFAULT_SHUTDOWN_DEADLINE_SECONDS: u64 = 20;
/// Default of `[server] session_hours`: how long a status-page sign-in lasts (docs/rules/api.md §7).
pub const DEFAULT_SESSION_HOURS: u32 = 168;
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
    alerts: RawAlerts,
    #[serde(default)]
    metrics: RawMetrics,
    #[serde(default)]
    sites: Vec<RawSite>,
    router: Option<RawRouter>,
}

/// `[router]` (docs/rules/router.md §4–§5; contract TOML in docs/router.md "Configuration").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouter {
    listen: Option<String>,
    open: Option<bool>,
    max_retries: Option<u32>,
    first_byte_budget_seconds: Option<u64>,
    leg_settle_ms: Option<u64>,
    binding_idle_minutes: Option<i64>,
    bindings_per_lane: Option<usize>,
    threads: Option<usize>,
    usage_request_rows: Option<bool>,
    #[serde(default)]
    pools: Vec<RawRouterPool>,
    #[serde(default)]
    accounts: Vec<RawRouterAccount>,
    #[serde(default)]
    chains: Vec<RawRouterChain>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouterPool {
    id: String,
    #[serde(default)]
    models: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouterAccount {
    pool: String,
    id: String,
    base_url: String,
    api_key_env: Option<String>,
    tier: Option<u32>,
    weight: Option<u32>,
    #[serde(default)]
    models: Vec<String>,
    site: Option<String>,
    enabled: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouterChain {
    name: String,
    legs: Vec<crate::core::router::Leg>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    admin_token_env: Option<String>,
    metrics_public: Option<bool>,
    shutdown_deadline_seconds: Option<u64>,
    session_hours: Option<u32>,
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

/// `[metrics]` (docs/operations.md "Pool and forecast").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    per_account: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDev {
    allow_short_intervals: Option<bool>,
    interval_unit_seconds: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlerts {
    enabled: Option<bool>,
    timezone: Option<String>,
    recovery_confirm_minutes: Option<i64>,
    min_interval_minutes: Option<i64>,
    repeat_hours: Option<i64>,
    unreachable_after_minutes: Option<i64>,
    daily_digest_at: Option<String>,
    email: Option<RawEmail>,
    webhook: Option<RawWebhook>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmail {
    smtp_url: Option<String>,
    from: Option<String>,
    #[serde(default)]
    to: Vec<String>,
    password_env: Option<String>,
    timeout_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    url: Option<String>,
    secret_env: Option<String>,
    timeout_seconds: Option<u64>,
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
    /// `[metrics] per_account` (default false): per-account used-percent gauges
    /// (`quota_patrol_account_used_percent`), one series per account and main window.
    pub metrics_per_account: bool,
    /// `[server] shutdown_deadline_seconds` (1..=300, default 20): how long a stop (SIGTERM,
    /// SIGINT) waits for running rounds and an alert delivery before it proceeds anyway.
    pub shutdown_deadline_seconds: u64,
    /// `[server] session_hours` (1..=720, default 168): lifetime of a status-page sign-in
    /// session (its cookie's `Max-Age` and the stored session's expiry).
    pub session_hours: u32,
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
    /// `[alerts]`: e-mail and webhook alerts (docs/rules/alerts.md).
    pub alerts: AlertsConfig,
    /// `[router]`: the request router (docs/rules/router.md); `None` = no router listener.
    pub router: Option<RouterConfig>,
}

// ---- [router] (docs/rules/router.md §4–§5) ---------------------------------------------------------

/// `[router]` settings (parsed by [`parse_router`]; defaults in [`RouterSettings::default`]). The router reads them
/// (`crate::router::RouterSettings` re-exports this type).
#[derive(Debug, Clone)]
pub struct RouterSettings {
    /// The router's own listener (default `127.0.0.1:8320`).
    pub listen: SocketAddr,
    /// No client key needed; only allowed on a loopback `listen` (`parse_router` refuses others).
    pub open: bool,
    /// In-route retries of a transient failure on one account (docs/rules/router.md §3; default 2).
    pub max_retries: u32,
    /// Time to the first upstream byte, shared by the attempts of one leg (default 60 s).
    pub first_byte_budget: std::time::Duration,
    /// Wait after a leg that failed on transient errors before the next leg (default 2 s).
    pub leg_settle: std::time::Duration,
    /// Bindings, block and demotion settings of every lane (docs/rules/router.md §2).
    pub affinity: AffinityConfig,
    /// Largest request body accepted, bytes (docs/rules/router.md §5: 8 MiB; 413 beyond).
    pub body_limit_bytes: usize,
    /// Listener threads, 1..=[`MAX_ROUTER_THREADS`]: each a one-thread Tokio runtime with its
    /// own `SO_REUSEPORT` socket on `listen` and its own upstream connection pool (default: the
    /// available cores; docs/decisions.md §19).
    pub threads: usize,
    /// Also store one `router_usage` row per client request (with its session key hash), beside
    /// the per-minute and daily aggregates that are always stored (default `false`;
    /// docs/decisions.md §20).
    pub usage_request_rows: bool,
}

/// Most router listener threads `[router] threads` accepts.
pub const MAX_ROUTER_THREADS: usize = 64;

/// The default of `[router] threads`: the cores this process may run on (1 when unknown).
pub fn default_router_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(MAX_ROUTER_THREADS)
}

impl Default for RouterSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8320)),
            open: false,
            max_retries: 2,
            first_byte_budget: std::time::Duration::from_secs(60),
            leg_settle: std::time::Duration::from_millis(2000),
            affinity: AffinityConfig::default(),
            body_limit_bytes: 8 * 1024 * 1024,
            threads: default_router_threads(),
            usage_request_rows: false,
        }
    }
}

/// Validated `[router]` section: the listener's settings and the config file's part of the
/// spec (every entry has source `Config`; the admin API adds its own at run time).
#[derive(Debug, Clone)]
pub struct RouterConfig {
    pub settings: RouterSettings,
    pub spec: RouterSpec,
}

fn parse_router(
    raw: RawRouter,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> RouterConfig {
    let d = RouterSettings::default();
    let listen_text = raw.listen.unwrap_or_else(|| d.listen.to_string());
    let listen = listen_text.parse::<SocketAddr>().unwrap_or_else(|_| {
        problems.push(format!(
            "router.listen {listen_text:?} is not an address like 127.0.0.1:8320"
        ));
        d.listen
    });
    let open = raw.open.unwrap_or(false);
    if open && !listen.ip().is_loopback() {
        problems.push(format!(
            "router.open = true is only allowed on a loopback listen address (got {listen}): anyone reaching it could spend the accounts"
        ));
    }
    let max_retries = raw.max_retries.unwrap_or(d.max_retries);
    if max_retries > 10 {
        problems.push(format!(
            "router.max_retries must be 0..=10 (got {max_retries})"
        ));
    }
    let budget = raw
        .first_byte_budget_seconds
        .unwrap_or(d.first_byte_budget.as_secs());
    if !(1..=600).contains(&budget) {
        problems.push(format!(
            "router.first_byte_budget_seconds must be between 1 and 600 (got {budget})"
        ));
    }
    let settle = raw.leg_settle_ms.unwrap_or(d.leg_settle.as_millis() as u64);
    if settle > 60_000 {
        problems.push(format!(
            "router.leg_settle_ms must be at most 60000 (got {settle})"
        ));
    }
    let mut affinity = d.affinity;
    if let Some(m) = raw.binding_idle_minutes {
        if !(1..=1440).contains(&m) {
            problems.push(format!(
                "router.binding_idle_minutes must be between 1 and 1440 (got {m})"
            ));
        }
        affinity.idle_ttl = chrono::Duration::minutes(m);
    }
    if let Some(n) = raw.bindings_per_lane {
        if !(1..=1_000_000).contains(&n) {
            problems.push(format!(
                "router.bindings_per_lane must be between 1 and 1000000 (got {n})"
            ));
        }
        affinity.capacity = n;
    }
    let threads = raw.threads.unwrap_or(d.threads);
    if !(1..=MAX_ROUTER_THREADS).contains(&threads) {
        problems.push(format!(
            "router.threads must be between 1 and {MAX_ROUTER_THREADS} (got {threads})"
        ));
    }
    let settings = RouterSettings {
        listen,
        open,
        max_retries,
        first_byte_budget: std::time::Duration::from_secs(budget),
        leg_settle: std::time::Duration::from_millis(settle),
        affinity,
        body_limit_bytes: d.body_limit_bytes,
        threads,
        usage_request_rows: raw.usage_request_rows.unwrap_or(d.usage_request_rows),
    };
    let spec = router_spec(raw.pools, raw.accounts, raw.chains, env, problems);
    RouterConfig { settings, spec }
}

/// The config file's [`RouterSpec`]; keys resolved from their environment variables (a named
/// but unset variable is a problem; no `api_key_env` = no `Authorization` upstream).
fn router_spec(
    pools: Vec<RawRouterPool>,
    accounts: Vec<RawRouterAccount>,
    chains: Vec<RawRouterChain>,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> RouterSpec {
    let config = SpecSource::Config;
    let accounts = accounts
        .into_iter()
        .map(|a| {
            let key = format!(
                "router account {:?} of pool {:?}: api_key_env",
                a.id, a.pool
            );
            let api_key = secret_from_env(problems, &key, a.api_key_env.as_deref(), env);
            UpstreamAccount {
                id: a.id,
                pool: a.pool,
                base_url: a.base_url.trim_end_matches('/').to_string(),
                api_key,
                api_key_env: a.api_key_env.filter(|v| !v.trim().is_empty()),
                tier: a.tier.unwrap_or(1),
                weight: a.weight,
                models: a.models,
                site: a.site.map(|s| normalize_site_id(&s)),
                enabled: a.enabled.unwrap_or(true),
                source: config,
            }
        })
        .collect();
    let spec = RouterSpec {
        pools: pools
            .into_iter()
            .map(|p| PoolSpec {
                id: p.id,
                models: p.models,
                source: config,
            })
            .collect(),
        accounts,
        chains: chains
            .into_iter()
            .map(|c| ChainSpec {
                name: c.name,
                legs: c.legs,
                source: config,
            })
            .collect(),
    };
    problems.extend(spec.problems());
    spec
}

// ---- [alerts] (docs/rules/alerts.md) -------------------------------------------------------

/// Validated `[alerts]` section. Absent section ⇒ disabled, no channel.
#[derive(Debug, Clone)]
pub struct AlertsConfig {
    /// Derive events and queue messages; off ⇒ nothing is evaluated or sent.
    pub enabled: bool,
    /// Zone of the times in messages (IANA name; UTC by default).
    pub timezone: chrono_tz::Tz,
    /// Flap guard: a recovery must hold this long (and two evaluations) before `recovered`.
    pub recovery_confirm_minutes: i64,
    /// At most one raising message per (site, event family) this often.
    pub min_interval_minutes: i64,
    /// Reminder while a site stays exhausted or unreachable; 0 = never.
    pub repeat_hours: i64,
    /// The CPA management API failed for this long ⇒ `site_unreachable`.
    pub unreachable_after_minutes: i64,
    /// `daily_digest_at = "HH:MM"`: local time (in `timezone`) of the once-a-day digest of
    /// every site (docs/rules/alerts.md §4); `None` = no digest.
    pub daily_digest_at: Option<chrono::NaiveTime>,
    pub email: Option<EmailConfig>,
    pub webhook: Option<WebhookConfig>,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            timezone: chrono_tz::UTC,
            recovery_confirm_minutes: 10,
            min_interval_minutes: 30,
            repeat_hours: 0,
            unreachable_after_minutes: 15,
            daily_digest_at: None,
            email: None,
            webhook: None,
        }
    }
}

impl AlertsConfig {
    /// Whether any delivery channel is configured.
    pub fn has_channel(&self) -> bool {
        self.email.is_some() || self.webhook.is_some()
    }
}

/// Where e-mail goes.
#[derive(Debug, Clone)]
pub enum EmailTransport {
    /// An SMTP server: `smtp://host:port`, `smtps://user@host`, `smtp://host:587?tls=required`
    /// (STARTTLS); the password comes from `password_env`, never from the URL.
    Smtp {
        url: String,
        password: Option<SecretString>,
    },
    /// Writes each message as an `.eml` file into this folder (the demo's local sink; not
    /// reachable from the config file).
    Directory(PathBuf),
}

/// Validated `[alerts.email]`.
#[derive(Debug, Clone)]
pub struct EmailConfig {
    pub transport: EmailTransport,
    pub from: lettre::message::Mailbox,
    pub to: Vec<lettre::message::Mailbox>,
    pub timeout_seconds: u64,
}

/// Validated `[alerts.webhook]`.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// http(s) URL the JSON is POSTed to (never logged: it may carry a token).
    pub url: String,
    /// Shared secret of the `X-Quota-Patrol-Signature` HMAC; `None` ⇒ unsigned.
    pub secret: Option<SecretString>,
    pub timeout_seconds: u64,
}

fn minutes_in(
    problems: &mut Vec<String>,
    key: &str,
    value: Option<i64>,
    default: i64,
    range: std::ops::RangeInclusive<i64>,
) -> i64 {
    let v = value.unwrap_or(default);
    if !range.contains(&v) {
        problems.push(format!(
            "alerts.{key} must be between {} and {} (got {v})",
            range.start(),
            range.end()
        ));
    }
    v
}

fn timeout_in(problems: &mut Vec<String>, key: &str, value: Option<u64>) -> u64 {
    let v = value.unwrap_or(10);
    if !(1..=300).contains(&v) {
        problems.push(format!("{key} must be between 1 and 300 seconds (got {v})"));
    }
    v
}

/// A secret from the environment variable named by `key` (`None` when no variable is named).
fn secret_from_env(
    problems: &mut Vec<String>,
    key: &str,
    var: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<SecretString> {
    let var = var.map(str::trim).filter(|v| !v.is_empty())?;
    match env(var).filter(|v| !v.is_empty()) {
        Some(v) => Some(SecretString::from(v)),
        None => {
            problems.push(format!("{key}: environment variable {var} is not set"));
            None
        }
    }
}

fn parse_email(
    raw: RawEmail,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<EmailConfig> {
    let mut ok = true;
    let url = raw.smtp_url.unwrap_or_default().trim().to_string();
    let mut user = None;
    match reqwest::Url::parse(&url) {
        Err(_) => {
            problems.push(format!(
                "alerts.email.smtp_url must be a URL like smtp://host:25, smtps://user@host or smtp://host:587?tls=required (got {url:?})"
            ));
            ok = false;
        }
        Ok(u) => {
            if !matches!(u.scheme(), "smtp" | "smtps") || u.host_str().is_none_or(str::is_empty) {
                problems.push(format!(
                    "alerts.email.smtp_url must start with smtp:// or smtps:// and name a host (got {url:?})"
                ));
                ok = false;
            }
            if u.password().is_some() {
                // Never echo the URL here: it carries the password.
                problems.push(
                    "alerts.email.smtp_url must not contain a password: put it in the variable named by password_env".into(),
                );
                ok = false;
            }
            for (k, v) in u.query_pairs() {
                if k != "tls" || !(v == "required" || v == "opportunistic") {
                    problems.push(format!(
                        "alerts.email.smtp_url: only ?tls=required or ?tls=opportunistic is understood (got {k}={v})"
                    ));
                    ok = false;
                }
            }
            user = Some(u.username().to_string()).filter(|s| !s.is_empty());
        }
    }
    let password = secret_from_env(
        problems,
        "alerts.email.password_env",
        raw.password_env.as_deref(),
        env,
    );
    if user.is_some()
        && raw
            .password_env
            .as_deref()
            .is_none_or(|v| v.trim().is_empty())
    {
        problems.push(
            "alerts.email.smtp_url names a user: set password_env to the variable holding the password".into(),
        );
        ok = false;
    }
    let from = match raw.from.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => {
            problems.push(
                "alerts.email.from is required (e.g. \"quota-patrol <patrol@example.com>\")".into(),
            );
            None
        }
        Some(f) => match f.parse::<lettre::message::Mailbox>() {
            Ok(m) => Some(m),
            Err(e) => {
                problems.push(format!("alerts.email.from {f:?} is not an address: {e}"));
                None
            }
        },
    };
    if raw.to.is_empty() {
        problems.push("alerts.email.to needs at least one address".into());
        ok = false;
    }
    let mut to = Vec::new();
    for t in &raw.to {
        match t.trim().parse::<lettre::message::Mailbox>() {
            Ok(m) => to.push(m),
            Err(e) => {
                problems.push(format!("alerts.email.to {t:?} is not an address: {e}"));
                ok = false;
            }
        }
    }
    let timeout_seconds = timeout_in(
        problems,
        "alerts.email.timeout_seconds",
        raw.timeout_seconds,
    );
    if !ok {
        return None;
    }
    Some(EmailConfig {
        transport: EmailTransport::Smtp { url, password },
        from: from?,
        to,
        timeout_seconds,
    })
}

fn parse_webhook(
    raw: RawWebhook,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<WebhookConfig> {
    let url = raw.url.unwrap_or_default().trim().to_string();
    let valid = reqwest::Url::parse(&url)
        .map(|u| matches!(u.scheme(), "http" | "https"))
        .unwrap_or(false);
    if !valid {
        // The URL itself is not echoed: webhook URLs often carry a token.
        problems.push("alerts.webhook.url must be an absolute http(s) URL".into());
    }
    let secret = secret_from_env(
        problems,
        "alerts.webhook.secret_env",
        raw.secret_env.as_deref(),
        env,
    );
    let timeout_seconds = timeout_in(
        problems,
        "alerts.webhook.timeout_seconds",
        raw.timeout_seconds,
    );
    valid.then_some(WebhookConfig {
        url,
        secret,
        timeout_seconds,
    })
}

fn parse_alerts(
    raw: RawAlerts,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> AlertsConfig {
    let d = AlertsConfig::default();
    let tz_name = raw.timezone.unwrap_or_else(|| "UTC".into());
    let timezone = tz_name.trim().parse::<chrono_tz::Tz>().unwrap_or_else(|_| {
        problems.push(format!(
            "alerts.timezone {tz_name:?} is not an IANA time zone (e.g. UTC, Europe/Berlin)"
        ));
        chrono_tz::UTC
    });
    AlertsConfig {
        enabled: raw.enabled.unwrap_or(false),
        timezone,
        recovery_confirm_minutes: minutes_in(
            problems,
            "recovery_confirm_minutes",
            raw.recovery_confirm_minutes,
            d.recovery_confirm_minutes,
            0..=1440,
        ),
        min_interval_minutes: minutes_in(
            problems,
            "min_interval_minutes",
            raw.min_interval_minutes,
            d.min_interval_minutes,
            0..=1440,
        ),
        repeat_hours: minutes_in(
            problems,
            "repeat_hours",
            raw.repeat_hours,
            d.repeat_hours,
            0..=168,
        ),
        unreachable_after_minutes: minutes_in(
            problems,
            "unreachable_after_minutes",
            raw.unreachable_after_minutes,
            d.unreachable_after_minutes,
            1..=1440,
        ),
        daily_digest_at: raw.daily_digest_at.and_then(|t| {
            chrono::NaiveTime::parse_from_str(t.trim(), "%H:%M")
                .map_err(|_| {
                    problems.push(format!(
                        "alerts.daily_digest_at {t:?} is not a local time like \"07:30\" (HH:MM)"
                    ))
                })
                .ok()
        }),
        email: raw.email.and_then(|e| parse_email(e, env, problems)),
        webhook: raw.webhook.and_then(|w| parse_webhook(w, env, problems)),
    }
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
        let shutdown_deadline_seconds = raw
            .server
            .shutdown_deadline_seconds
            .unwrap_or(DEFAULT_SHUTDOWN_DEADLINE_SECONDS);
        if !(1..=300).contains(&shutdown_deadline_seconds) {
            problems.push("server.shutdown_deadline_seconds must be between 1 and 300".into());
        }
        let session_hours = raw.server.session_hours.unwrap_or(DEFAULT_SESSION_HOURS);
        if !(1..=720).contains(&session_hours) {
            problems.push("server.session_hours must be between 1 and 720".into());
        }
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
                account_policies: Default::default(),
            });
        }
        let alerts = parse_alerts(raw.alerts, env, &mut problems);
        let router = raw.router.map(|r| parse_router(r, env, &mut problems));
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
            metrics_per_account: raw.metrics.per_account.unwrap_or(false),
            shutdown_deadline_seconds,
            session_hours,
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
            alerts,
            router,
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
        assert!(!cfg.alerts.enabled);
        assert!(cfg.alerts.email.is_some());
    }

    #[test]
    fn per_account_metrics_are_off_unless_the_metrics_table_turns_them_on() {
        let env = env_with(&[]);
        let off = Config::parse("", "t", &env).unwrap();
        assert!(!off.metrics_per_account);
        let on = Config::parse("[metrics]\nper_account = true\n", "t", &env).unwrap();
        assert!(on.metrics_per_account);
        let typo = Config::parse("[metrics]\nper_acount = true\n", "t", &env);
        assert!(typo.is_err(), "unknown keys of [metrics] are refused");
    }

    #[test]
    fn the_example_config_parses_with_its_router_section_uncommented() {
        let text = include_str!("../config/quota-patrol.example.toml");
        let cut = text.find("# [router]").expect("router example");
        let (head, tail) = text.split_at(cut);
        let router: String = tail
            .lines()
            .map(|l| {
                l.strip_prefix("# ")
                    .unwrap_or(l.strip_prefix('#').unwrap_or(l))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let env = env_with(&[
            ("CPA_MANAGEMENT_KEY", "k"),
            ("QUOTA_PATROL_ADMIN_TOKEN", "t"),
            ("QP_ROUTER_CPA_MAIN_KEY", "sk-upstream"),
        ]);
        let cfg = Config::parse(&format!("{head}{router}"), "example", &env).unwrap();
        let r = cfg.router.expect("router section");
        assert_eq!(r.settings.listen.port(), 8320);
        assert!(!r.settings.open);
        assert_eq!(r.settings.max_retries, 2);
        assert_eq!(r.settings.first_byte_budget.as_secs(), 60);
        assert_eq!(r.settings.leg_settle.as_millis(), 2000);
        assert_eq!(r.settings.affinity.capacity, 10_000);
        assert_eq!(r.spec.pools[0].models, ["gpt-5-codex", "gpt-5"]);
        let a = &r.spec.accounts[0];
        assert_eq!(
            (a.id.as_str(), a.tier, a.site.as_deref()),
            ("cpa-main", 1, Some("main"))
        );
        assert!(a.api_key.is_some());
        assert_eq!(r.spec.legs_for("codex-auto").len(), 2);
        assert!(!format!("{:?}", r.spec).contains("sk-upstream"));
    }

    #[test]
    fn router_problems_are_all_reported_at_once() {
        let text = r#"
            [router]
            listen = "0.0.0.0:8320"
            open = true
            [[router.pools]]
            id = "p"
            models = ["m"]
            [[router.accounts]]
            pool = "p"
            id = "a"
            base_url = "ftp://x"
            api_key_env = "MISSING_KEY"
            [[router.accounts]]
            pool = "ghost"
            id = "b"
            base_url = "http://127.0.0.1:1/v1"
            [[router.chains]]
            name = "c"
            legs = [{ pool = "p", model = "other" }]
        "#;
        let err = Config::parse(text, "t.toml", &|_| None)
            .unwrap_err()
            .to_string();
        for needle in [
            "only allowed on a loopback",
            "environment variable MISSING_KEY is not set",
            "base URL must start with http",
            "unknown pool",
            "does not serve model \"other\"",
        ] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
        assert!(
            Config::parse("", "t.toml", &|_| None)
                .unwrap()
                .router
                .is_none()
        );
    }

    /// docs/decisions.md §19: `[router] threads` defaults to the available cores, is bounded.
    #[test]
    fn router_threads_default_to_the_cores_and_are_bounded() {
        let cfg = Config::parse("[router]\n", "t.toml", &|_| None).unwrap();
        assert_eq!(
            cfg.router.unwrap().settings.threads,
            default_router_threads()
        );
        let cfg = Config::parse("[router]\nthreads = 3\n", "t.toml", &|_| None).unwrap();
        assert_eq!(cfg.router.unwrap().settings.threads, 3);
        for bad in ["0", "65"] {
            let text = format!("[router]\nthreads = {bad}\n");
            let err = Config::parse(&text, "t.toml", &|_| None).unwrap_err();
            assert!(
                err.to_string()
                    .contains("router.threads must be between 1 and 64"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_shutdown_deadline_defaults_to_20_seconds_and_is_bounded() {
        let cfg = Config::parse("", "t.toml", &|_| None).unwrap();
        assert_eq!(cfg.shutdown_deadline_seconds, 20);
        let cfg = Config::parse(
            "[server]\nshutdown_deadline_seconds = 5\n",
            "t.toml",
            &|_| None,
        )
        .unwrap();
        assert_eq!(cfg.shutdown_deadline_seconds, 5);
        for bad in ["0", "301"] {
            let text = format!("[server]\nshutdown_deadline_seconds = {bad}\n");
            let err = Config::parse(&text, "t.toml", &|_| None).unwrap_err();
            assert!(
                err.to_string()
                    .contains("server.shutdown_deadline_seconds must be between 1 and 300"),
                "{err}"
            );
        }
    }

    #[test]
    fn alerts_default_to_off_with_the_documented_intervals() {
        let cfg = Config::parse("", "t.toml", &|_| None).unwrap();
        let a = &cfg.alerts;
        assert!(!a.enabled && !a.has_channel());
        assert_eq!(a.timezone, chrono_tz::UTC);
        assert_eq!(
            (
                a.recovery_confirm_minutes,
                a.min_interval_minutes,
                a.repeat_hours,
                a.unreachable_after_minutes
            ),
            (10, 30, 0, 15)
        );
        assert_eq!(a.daily_digest_at, None, "no digest unless configured");
    }

    #[test]
    fn the_daily_digest_time_is_a_local_hh_mm() {
        let cfg = Config::parse("[alerts]\ndaily_digest_at = \"07:30\"\n", "t.toml", &|_| {
            None
        })
        .unwrap();
        assert_eq!(
            cfg.alerts.daily_digest_at,
            chrono::NaiveTime::from_hms_opt(7, 30, 0)
        );
        for bad in ["7", "25:00", "07:30:00", "noon"] {
            let text = format!("[alerts]\ndaily_digest_at = {bad:?}\n");
            let err = Config::parse(&text, "t.toml", &|_| None).unwrap_err();
            assert!(
                err.to_string().contains("alerts.daily_digest_at"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_full_alerts_section_parses_with_secrets_from_the_environment() {
        let text = r#"
            [alerts]
            enabled = true
            timezone = "Europe/Berlin"
            recovery_confirm_minutes = 5
            min_interval_minutes = 60
            repeat_hours = 6
            unreachable_after_minutes = 20
            [alerts.email]
            smtp_url = "smtps://patrol@mail.example.com"
            from = "quota-patrol <patrol@example.com>"
            to = ["ops@example.com", "Oncall <oncall@example.com>"]
            password_env = "SMTP_PW"
            timeout_seconds = 7
            [alerts.webhook]
            url = "https://hooks.example.com/x"
            secret_env = "HOOK_SECRET"
        "#;
        let env = env_with(&[
            ("SMTP_PW", "pw-VERY-SECRET"),
            ("HOOK_SECRET", "hs-VERY-SECRET"),
        ]);
        let cfg = Config::parse(text, "t.toml", &env).unwrap();
        let a = &cfg.alerts;
        assert!(a.enabled);
        assert_eq!(a.timezone, chrono_tz::Europe::Berlin);
        assert_eq!(
            (
                a.recovery_confirm_minutes,
                a.min_interval_minutes,
                a.repeat_hours
            ),
            (5, 60, 6)
        );
        let email = a.email.as_ref().unwrap();
        assert_eq!(email.to.len(), 2);
        assert_eq!(email.timeout_seconds, 7);
        assert!(matches!(
            &email.transport,
            EmailTransport::Smtp {
                password: Some(_),
                ..
            }
        ));
        let hook = a.webhook.as_ref().unwrap();
        assert!(hook.secret.is_some());
        assert_eq!(hook.timeout_seconds, 10);
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("VERY-SECRET"), "{dbg}");
    }

    #[test]
    fn every_alerts_problem_is_reported_together_without_echoing_secrets() {
        let text = r#"
            [alerts]
            timezone = "Mars/Olympus"
            min_interval_minutes = -1
            [alerts.email]
            smtp_url = "smtp://user:pw-IN-URL@mail.example.com"
            from = "not an address"
            to = []
            password_env = "UNSET_PW"
            timeout_seconds = 0
            [alerts.webhook]
            url = "ftp://hooks.example.com/tok-IN-URL"
            secret_env = "UNSET_SECRET"
        "#;
        let err = Config::parse(text, "t.toml", &|_| None).unwrap_err();
        let ConfigError::Invalid { problems, .. } = err else {
            panic!("{err}")
        };
        let all = problems.join("\n");
        for needle in [
            "alerts.timezone",
            "alerts.min_interval_minutes",
            "must not contain a password",
            "UNSET_PW",
            "alerts.email.from",
            "alerts.email.to",
            "alerts.email.timeout_seconds",
            "alerts.webhook.url",
            "UNSET_SECRET",
        ] {
            assert!(all.contains(needle), "{needle} missing in {all}");
        }
        assert!(!all.contains("IN-URL"), "{all}");
    }

    #[test]
    fn starttls_and_plain_smtp_urls_are_accepted_and_unknown_options_are_not() {
        for (url, ok) in [
            ("smtp://127.0.0.1:2525", true),
            ("smtp://mail.example.com:587?tls=required", true),
            ("smtp://mail.example.com?tls=opportunistic", true),
            ("smtp://mail.example.com?tls=sometimes", false),
            ("http://mail.example.com", false),
        ] {
            let text = format!(
                "[alerts.email]\nsmtp_url = {url:?}\nfrom = \"a@example.com\"\nto = [\"b@example.com\"]\n"
            );
            assert_eq!(
                Config::parse(&text, "t.toml", &|_| None).is_ok(),
                ok,
                "{url}"
            );
        }
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
    fn window_thresholds_and_the_five_hour_rule_are_read_from_site_settings() {
        let text = "[[sites]]\nname = \"a\"\ncpa_base_url = \"http://127.0.0.1:8317\"\nmanagement_key_env = \"K\"\n[sites.settings]\nusedPercentThreshold = 90\nfiveHourThreshold = 80\nfiveHourRule = \"all\"\n";
        let cfg = Config::parse(text, "t", &env_with(&[("K", "k")])).unwrap();
        let s = &cfg.sites[0].settings;
        assert_eq!(
            (s.weekly_threshold, s.five_hour_threshold),
            (None, Some(80))
        );
        assert_eq!(s.five_hour_rule, crate::core::policy::FiveHourRule::All);
        let bad = text.replace("fiveHourThreshold = 80", "fiveHourThreshold = 0");
        assert!(Config::parse(&bad, "t", &env_with(&[("K", "k")])).is_err());
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
