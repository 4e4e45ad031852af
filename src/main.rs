//! quota-patrol command line: parses arguments, sets up telemetry, hands over to the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use quota_patrol::app::{App, AppOptions};
use quota_patrol::clock::{Clock, SystemClock};
use quota_patrol::config::Config;
use quota_patrol::jobs::inspect::{RoundKind, RoundOptions, run_round};
use quota_patrol::jobs::{Patrol, PatrolOptions};

/// jemalloc instead of glibc malloc: it hands the space of freed large buffers (each round's
/// listing body) back to the OS, where glibc kept it and RSS grew round after round.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Patrols pools of Codex accounts behind CLIProxyAPI: probes quota, disables exhausted accounts,
/// re-enables recovered ones, and serves a management REST API.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: scheduler, warm-up and the REST API.
    Serve {
        #[arg(long, short, env = "QUOTA_PATROL_CONFIG")]
        config: PathBuf,
    },
    /// Write a commented starter config for one CPA (no secrets: they stay in the environment).
    Init {
        /// CPA's base address, e.g. http://127.0.0.1:8317.
        #[arg(long)]
        cpa_url: String,
        /// Site id (lower-case letters, digits, '-', '_').
        #[arg(long, default_value = "main")]
        site_id: String,
        /// Site name shown in tables, alerts and the status page.
        #[arg(long, default_value = "Main CPA")]
        site_name: String,
        /// The API's listener in the written config (another port when a demo or a second
        /// daemon already uses 8390; 0.0.0.0:8390 inside a container).
        #[arg(long, default_value = "127.0.0.1:8390")]
        listen: std::net::SocketAddr,
        /// The SQLite file in the written config (relative to the daemon's working directory).
        #[arg(long, default_value = "quota-patrol.db")]
        database: PathBuf,
        /// Write here instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Overwrite an existing --output file.
        #[arg(long)]
        force: bool,
    },
    /// Validate a config file and list every problem.
    CheckConfig {
        #[arg(long, short, env = "QUOTA_PATROL_CONFIG")]
        config: PathBuf,
    },
    /// Run one inspection round of a site, print the result and exit.
    Inspect {
        #[arg(long, short, env = "QUOTA_PATROL_CONFIG")]
        config: PathBuf,
        /// Site id (default: the first enabled site).
        #[arg(long)]
        site: Option<String>,
        /// Probe every account for real instead of reusing fresh snapshots.
        #[arg(long)]
        force: bool,
        /// Decide but do not act.
        #[arg(long)]
        dry_run: bool,
        /// Print the InspectionRunResult JSON.
        #[arg(long)]
        json: bool,
        /// Try a management key CPA refused once more (otherwise a refused key waits for its
        /// automatic try, once per 3 h: CPA bans an IP after 5 refused keys).
        #[arg(long)]
        retry_key: bool,
    },
    /// Ask a running daemon's /healthz; exit 0 when it answers 2xx, 1 otherwise (for a
    /// container's HEALTHCHECK: the image has no curl).
    Healthcheck {
        /// The address to ask (the API listener's `/healthz`).
        #[arg(long, default_value = "http://127.0.0.1:8390/healthz")]
        url: String,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 5)]
        timeout_seconds: u64,
    },
    /// Start a simulated CPA with realistic accounts and run the daemon against it.
    #[cfg(feature = "demo")]
    Demo {
        /// One round, print, exit.
        #[arg(long)]
        once: bool,
        /// Print JSON instead of the table (with --once).
        #[arg(long)]
        json: bool,
        /// API listener.
        #[arg(long, default_value = "127.0.0.1:8390")]
        listen: std::net::SocketAddr,
        /// Router listener (OpenAI-compatible; not started with --once).
        #[arg(long, default_value = "127.0.0.1:8320")]
        router_listen: std::net::SocketAddr,
        /// Folder of the demo's SQLite file.
        #[arg(long, default_value = "demo-data")]
        data_dir: PathBuf,
        /// Keep the previous run's database instead of starting fresh.
        #[arg(long)]
        keep_data: bool,
    },
}

fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path, &|k| std::env::var(k).ok()).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(2)
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Init {
            cpa_url,
            site_id,
            site_name,
            listen,
            database,
            output,
            force,
        } => {
            let site = (cpa_url.as_str(), site_id.as_str(), site_name.as_str());
            let place = quota_patrol::init::Place { listen, database };
            return match init(site, &place, output.as_deref(), force) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::from(2)
                }
            };
        }
        Command::Healthcheck {
            url,
            timeout_seconds,
        } => {
            return match healthcheck(&url, timeout_seconds).await {
                Ok(status) => {
                    println!("healthy: {url} answered {status}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("unhealthy: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::CheckConfig { config } => {
            return match load(&config) {
                Ok(c) if c.admin_token.is_none() => {
                    eprintln!(
                        "{} has 1 problem(s):\n  - environment variable {} (admin token) is not set: `serve` refuses to start without it",
                        config.display(),
                        c.admin_token_env
                    );
                    ExitCode::from(2)
                }
                Ok(c) => {
                    println!(
                        "{} is valid: {} site(s), API on {}",
                        config.display(),
                        c.sites.len(),
                        c.listen
                    );
                    ExitCode::SUCCESS
                }
                Err(code) => {
                    if std::env::var(quota_patrol::config::DEFAULT_ADMIN_TOKEN_ENV).is_err() {
                        eprintln!(
                            "  - also: {} (admin token) is not set, which `serve` needs",
                            quota_patrol::config::DEFAULT_ADMIN_TOKEN_ENV
                        );
                    }
                    code
                }
            };
        }
        Command::Serve { config } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            quota_patrol::telemetry::init(cfg.log_format, &cfg.log_level);
            serve(cfg).await
        }
        Command::Inspect {
            config,
            site,
            force,
            dry_run,
            json,
            retry_key,
        } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            quota_patrol::telemetry::init(cfg.log_format, "warn");
            inspect(
                cfg,
                site,
                InspectFlags {
                    force,
                    dry_run,
                    json,
                    retry_key,
                },
            )
            .await
        }
        #[cfg(feature = "demo")]
        Command::Demo {
            once,
            json,
            listen,
            router_listen,
            data_dir,
            keep_data,
        } => {
            quota_patrol::telemetry::init(quota_patrol::config::LogFormat::Pretty, "error");
            quota_patrol::demo::run(quota_patrol::demo::DemoOptions {
                once,
                json,
                listen,
                router_listen,
                data_dir,
                keep_data,
            })
            .await
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(cfg: Config) -> anyhow::Result<()> {
    // Handlers first: a SIGTERM during start-up also stops cleanly.
    let stop = quota_patrol::app::stop_signal()?;
    let app = App::build(
        &cfg,
        AppOptions {
            clock: Arc::new(SystemClock),
            random: Arc::new(quota_patrol::random::ThreadRandom),
            scheduler: true,
        },
    )
    .await?;
    // The bound addresses (a `:0` listen gets its port from the OS; tests read it here).
    match app.router_addr() {
        Some(router) => tracing::info!(api = %app.api_addr(), %router, "quota-patrol serving"),
        None => tracing::info!(api = %app.api_addr(), "quota-patrol serving"),
    }
    app.run_until_stopped(async {
        let signal = stop.await;
        tracing::info!(signal, "stop requested");
    })
    .await?;
    Ok(())
}

/// `healthcheck`: GET `url` without following redirects; the 2xx status, or why not.
async fn healthcheck(url: &str, timeout_seconds: u64) -> anyhow::Result<reqwest::StatusCode> {
    let timeout = std::time::Duration::from_secs(timeout_seconds.max(1));
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let status = anyhow::Context::with_context(client.get(url).send().await, || {
        format!("{url} did not answer")
    })?
    .status();
    anyhow::ensure!(status.is_success(), "{url} answered {status}");
    Ok(status)
}

/// The flags of `inspect`.
struct InspectFlags {
    force: bool,
    dry_run: bool,
    json: bool,
    retry_key: bool,
}

async fn inspect(cfg: Config, site: Option<String>, flags: InspectFlags) -> anyhow::Result<()> {
    let InspectFlags {
        force,
        dry_run,
        json,
        retry_key,
    } = flags;
    let clock = Arc::new(SystemClock);
    let store = quota_patrol::store::Store::open(&cfg.database_path)?;
    let patrol = Patrol::new(
        store,
        clock.clone(),
        PatrolOptions {
            allow_short_intervals: cfg.allow_short_intervals,
            ..Default::default()
        },
    );
    for s in &cfg.sites {
        quota_patrol::jobs::sites::bootstrap_site(&patrol, s.clone()).await?;
    }
    let site = patrol.resolve_site(site.as_deref()).await?;
    if retry_key
        && !quota_patrol::jobs::connection::request_key_retry(&patrol, &site.site_id).await?
    {
        eprintln!(
            "--retry-key: no refused management key is stored for site {}",
            site.site_id
        );
    }
    let r = run_round(
        &patrol,
        &site.site_id,
        RoundOptions {
            kind: RoundKind::Manual,
            force,
            dry_run,
            only: None,
        },
    )
    .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        let runs_out = quota_patrol::jobs::forecast::runs_out(&patrol, &r.site_id)
            .await
            .unwrap_or_default();
        let credits = quota_patrol::jobs::reset_credits::round_credits(&patrol, &r.site_id)
            .await
            .unwrap_or_default();
        let table =
            quota_patrol::table::render_round_with_credits(&r, clock.now(), &runs_out, &credits);
        print!("{table}");
    }
    match (r.status, r.error) {
        // Decided and acted on what answered: a warning, not a failure of the command.
        (quota_patrol::core::report::RunStatus::Partial, Some(e)) => {
            eprintln!("warning: the round was partial: {e}");
            Ok(())
        }
        (_, Some(e)) => anyhow::bail!("the round failed: {e}"),
        (_, None) => Ok(()),
    }
}

/// `init`: the starter config to `output` (refusing to replace a file without `force`) or stdout.
/// `site` is (CPA URL, site id, site name).
fn init(
    (cpa_url, site_id, site_name): (&str, &str, &str),
    place: &quota_patrol::init::Place,
    output: Option<&std::path::Path>,
    force: bool,
) -> anyhow::Result<()> {
    let text = quota_patrol::init::starter_config(cpa_url, site_id, site_name, place)?;
    match output {
        None => print!("{text}"),
        Some(path) if path.exists() && !force => {
            anyhow::bail!("{} exists; pass --force to overwrite it", path.display())
        }
        Some(path) => {
            anyhow::Context::with_context(std::fs::write(path, text), || {
                format!("cannot write {}", path.display())
            })?;
            eprintln!(
                "wrote {}; next: check-config --config {} (then inspect --dry-run, then serve)",
                path.display(),
                path.display()
            );
        }
    }
    Ok(())
}
