//! WIRING for `quota-patrol demo`: the built-in simulated CPA loaded with realistic accounts, the
//! full daemon against it on an embedded SQLite file with demo-speed intervals, a table printed
//! after each round, and simulated client traffic so the pool evolves while you watch. Alert
//! e-mails are written as `.eml` files into `<data dir>/mail/` (lettre's file transport). Beside
//! it the router (`demo::router`): fake OpenAI-compatible upstreams, a client key created once
//! and printed in the start banner (never logged), and client traffic through the router.

pub mod router;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use secrecy::SecretString;

use crate::app::{App, AppOptions};
use crate::clock::{SharedClock, SystemClock};
use crate::config::{AlertsConfig, Config, EmailConfig, EmailTransport, LogFormat};
use crate::core::settings::SettingsPatch;
use crate::jobs::inspect::{RoundKind, RoundOptions, run_round};
use crate::jobs::sites::{SiteInput, create_site, update_site};
use quota_patrol_sim::{SimConfig, SimCpa, demo_accounts};

/// Options of the demo command.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// One manual round, print, exit.
    pub once: bool,
    /// Print the InspectionRunResult JSON instead of the table (with `once`).
    pub json: bool,
    pub listen: SocketAddr,
    /// The router listener (not started with `once`).
    pub router_listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Keep the previous run's database (the simulated CPA always starts fresh, so by default
    /// the demo starts fresh too).
    pub keep_data: bool,
}

/// The demo site id.
pub const DEMO_SITE: &str = "demo";

/// Alerts of the demo: on, e-mail into `<data dir>/mail/*.eml`, a short flap guard so a
/// recovery shows within the demo's minutes.
fn demo_alerts(data_dir: &std::path::Path) -> AlertsConfig {
    AlertsConfig {
        enabled: true,
        recovery_confirm_minutes: 1,
        min_interval_minutes: 2,
        email: Some(EmailConfig {
            transport: EmailTransport::Directory(data_dir.join("mail")),
            from: "quota-patrol demo <quota-patrol@demo.example.com>"
                .parse()
                .expect("a valid address"),
            to: vec!["you@demo.example.com".parse().expect("a valid address")],
            timeout_seconds: 5,
        }),
        ..Default::default()
    }
}

fn demo_settings() -> SettingsPatch {
    SettingsPatch {
        auto_polling_enabled: Some(true),
        poll_interval_minutes: Some(2),
        poll_random_delay_min_minutes: Some(0),
        poll_random_delay_max_minutes: Some(1),
        probe_workers: Some(4),
        probe_batch_delay_min_ms: Some(100),
        probe_batch_delay_max_ms: Some(300),
        timeout_ms: Some(2000),
        retry_count: Some(1),
        auto_action_mode: Some("disable".into()),
        auto_enable_recovered: Some(true),
        invalid_confirmations: Some(2),
        // pool_low (docs/rules/alerts.md §4): six of the demo's accounts start usable; the simulated
        // traffic exhausts erin.busy (weekly 93 %) within the first rounds, so the demo writes
        // a pool_low mail into <data dir>/mail/ (the forecast rule rarely fires here: the
        // demo's hurried resets keep the earliest reset minutes away).
        low_capacity_accounts: Some(6),
        // docs/reset-credits.md: dave.pro holds a banked reset credit; the demo shows it.
        reset_credits_mode: Some("observe".into()),
        ..Default::default()
    }
}

/// Runs the demo until SIGTERM or SIGINT (Ctrl-C), then stops gracefully like `serve`
/// (docs/operations.md "Stopping"); or one round with `once`.
pub async fn run(opts: DemoOptions) -> anyhow::Result<()> {
    let clock: SharedClock = Arc::new(SystemClock);
    let mgmt_key = format!("demo-mk-{}", uuid::Uuid::new_v4().simple());
    let own_start = OwnStart {
        cpa_url: String::new(),
        management_key: mgmt_key.clone(),
        listen: std::net::SocketAddr::new(opts.listen.ip(), opts.listen.port().wrapping_add(1)),
    };
    // The simulated CPA on a fixed port (the API's + 2) when it is free, so a second daemon
    // set up from the banner keeps a valid site address across demo restarts; else any port.
    let sim_config = |listen_port| SimConfig {
        management_key: Some(mgmt_key.clone()),
        accounts: demo_accounts(clock.now()),
        listen_port,
        ..Default::default()
    };
    let sim = match SimCpa::start(
        sim_config(opts.listen.port().wrapping_add(2)),
        clock.clone(),
    ) {
        Ok(sim) => sim,
        Err(_) => SimCpa::start(sim_config(0), clock.clone())?,
    };
    let sim = Arc::new(sim);
    let admin_token = std::env::var(crate::config::DEFAULT_ADMIN_TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| format!("demo-{}", uuid::Uuid::new_v4().simple()));
    // The router's fake upstreams (one per account), not for a single round.
    let upstreams = if opts.once {
        vec![]
    } else {
        router::start_upstreams().await?
    };
    let upstream_urls: Vec<String> = upstreams.iter().map(|u| u.base_url()).collect();
    let cfg = Config {
        listen: opts.listen,
        admin_token: Some(SecretString::from(admin_token.clone())),
        admin_token_env: crate::config::DEFAULT_ADMIN_TOKEN_ENV.into(),
        metrics_public: true,
        metrics_per_account: true,
        shutdown_deadline_seconds: crate::config::DEFAULT_SHUTDOWN_DEADLINE_SECONDS,
        session_hours: crate::config::DEFAULT_SESSION_HOURS,
        database_path: opts.data_dir.join("quota-patrol.db"),
        log_retention_days: 30,
        log_format: LogFormat::Pretty,
        log_level: "error".into(),
        tick_seconds: 1,
        warmup: !opts.once,
        allow_short_intervals: true,
        interval_unit_seconds: 10,
        sites: vec![],
        alerts: demo_alerts(&opts.data_dir),
        router: (!opts.once)
            .then(|| router::demo_router_config(opts.router_listen, &upstream_urls)),
    };
    if !opts.keep_data {
        for suffix in ["", "-wal", "-shm"] {
            let mut f = cfg.database_path.clone().into_os_string();
            f.push(suffix);
            let _ = std::fs::remove_file(f);
        }
    }
    let app = App::build(
        &cfg,
        AppOptions {
            clock: clock.clone(),
            random: Arc::new(crate::random::ThreadRandom),
            scheduler: !opts.once,
        },
    )
    .await?;
    let patrol = app.patrol().clone();
    // The simulated CPA listens on a new port each run: point the (persisted) demo site at it.
    let input = SiteInput {
        site_id: Some(DEMO_SITE.into()),
        site_name: Some("Demo (simulated CPA)".into()),
        cpa_base_url: Some(sim.base_url()),
        management_key: Some(mgmt_key),
        usage_url: Some(format!("{}/backend-api/wham/usage", sim.base_url())),
        settings: demo_settings(),
        ..Default::default()
    };
    if patrol.site(DEMO_SITE).await.is_ok() {
        update_site(&patrol, DEMO_SITE, input).await?;
    } else {
        create_site(&patrol, input).await?;
    }
    let api = format!("http://{}", app.api_addr());
    if !opts.once {
        seed_pool_history(&patrol, clock.now()).await?;
    }
    if opts.once {
        let r = one_round(&patrol, &opts, clock.now()).await;
        drop(sim);
        return r;
    }
    // From here on SIGTERM / SIGINT stop gracefully (`--once` keeps the default: stop at once).
    let stop = crate::app::stop_signal()?;
    let router_key = router::demo_key(&patrol).await?;
    let router_url = format!(
        "http://{}",
        app.router_addr().expect("the demo configures [router]")
    );
    print_banner(&sim, &api, &admin_token, &cfg, &opts);
    print_own_start(&OwnStart {
        cpa_url: sim.base_url(),
        ..own_start
    });
    router::print_banner(&router_url, &router_key, upstreams.len());
    println!(
        "Rounds run every ~20-30 s (demo speed); simulated traffic burns quota in between. Ctrl-C (or SIGTERM) stops.\n"
    );
    spawn_round_printer(patrol.clone(), clock.clone());
    spawn_cpa_traffic(sim.clone(), clock.clone());
    let router_traffic = router::spawn_traffic(
        router_url,
        router_key,
        std::time::Duration::from_secs(5),
        patrol.clone(),
    );
    let report = app
        .run_until_stopped(async move {
            let signal = stop.await;
            router_traffic.abort();
            println!("\n{signal}: stopping (running rounds finish; state is kept in the database)");
        })
        .await?;
    println!("{}", stop_line(&report));
    for up in upstreams {
        up.stop().await;
    }
    Ok(())
}

/// Prints the table of every acting round of the demo as it ends, with its forecast and the
/// site's reset credits (the same table as `inspect`).
fn spawn_round_printer(patrol: crate::jobs::Patrol, clock: SharedClock) {
    let mut rounds = patrol.subscribe_rounds();
    tokio::spawn(async move {
        while let Ok(r) = rounds.recv().await {
            if crate::jobs::inspect::RoundKind::from_source(&r.source)
                .is_some_and(crate::jobs::inspect::RoundKind::acts)
            {
                let runs_out = crate::jobs::forecast::runs_out(&patrol, &r.site_id)
                    .await
                    .unwrap_or_default();
                let credits = crate::jobs::reset_credits::round_credits(&patrol, &r.site_id)
                    .await
                    .unwrap_or_default();
                let now = clock.now();
                println!(
                    "{}",
                    crate::table::render_round_with_credits(&r, now, &runs_out, &credits)
                );
            }
        }
    });
}

/// `demo --once`: one manual round of the demo site, printed as a table (or JSON), and the
/// alert e-mails it made written out.
async fn one_round(
    patrol: &crate::jobs::Patrol,
    opts: &DemoOptions,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<()> {
    let r = run_round(patrol, DEMO_SITE, RoundOptions::new(RoundKind::Manual)).await?;
    let sent = crate::jobs::alerts::deliver_due(patrol).await?;
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        let runs_out = crate::jobs::forecast::runs_out(patrol, DEMO_SITE)
            .await
            .unwrap_or_default();
        let credits = crate::jobs::reset_credits::round_credits(patrol, DEMO_SITE)
            .await
            .unwrap_or_default();
        print!(
            "{}",
            crate::table::render_round_with_credits(&r, now, &runs_out, &credits)
        );
        if sent.delivered > 0 {
            println!(
                "{} alert e-mail(s) written to {}",
                sent.delivered,
                opts.data_dir.join("mail").display()
            );
        }
    }
    Ok(())
}

/// Writes a made-up week of pool samples for the demo site (one per hour, a daily usage cycle
/// over 14 accounts and a weekly reset three days ago), so that the status page's 7-day chart
/// has a history to draw; a real install starts with an empty chart (docs/status-page.md
/// "Where the chart's numbers come from").
/// Skipped when the demo's database already has samples (`--keep-data`).
async fn seed_pool_history(
    patrol: &crate::jobs::Patrol,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<()> {
    use crate::core::pool::PoolSample;
    let since = now - chrono::Duration::days(7);
    patrol
        .store
        .run(move |c| {
            if !crate::store::samples::since(c, DEMO_SITE, since)?.is_empty() {
                return Ok(());
            }
            for h in (1..=168i64).rev() {
                let at = now - chrono::Duration::hours(h);
                // Hours since the (made-up) weekly reset 3 days ago; before it, the week before.
                let since_reset = (72 - h).rem_euclid(168) as f64;
                let day = (at.timestamp() as f64 / 3600.0 / 24.0).fract();
                let busy = (std::f64::consts::TAU * day).sin().max(0.0);
                let left = (1.0 - since_reset / 168.0).clamp(0.0, 1.0);
                let usable = (3.0 + 8.0 * left - 2.0 * busy).round().max(0.0) as u32;
                let sample = PoolSample {
                    at,
                    total: 14,
                    usable,
                    active: usable,
                    exhausted: 11u32.saturating_sub(usable),
                    invalid: 2,
                    remaining_percent: f64::from(usable) * (35.0 + 40.0 * left),
                };
                crate::store::samples::insert(c, DEMO_SITE, &sample)?;
            }
            Ok(())
        })
        .await?;
    Ok(())
}

/// The start banner of the patrol half: simulated CPA, API, status page, admin token (a demo token the user
/// needs, printed once to stdout, never logged), database, alert e-mails.
fn print_banner(
    sim: &quota_patrol_sim::SimHandle,
    api: &str,
    admin_token: &str,
    cfg: &Config,
    opts: &DemoOptions,
) {
    println!(
        "quota-patrol demo: a simulated CPA with {} accounts at {}",
        sim.accounts().len(),
        sim.base_url()
    );
    println!(
        "  API base URL : {api}/api   (OpenAPI, with the admin token: {api}/api/openapi.json; metrics: {api}/metrics)"
    );
    println!("  admin token  : {admin_token}");
    println!("  status page  : {api}/   (sign in with the admin token)");
    println!("  database     : {}", cfg.database_path.display());
    println!(
        "  alert e-mail : {}/*.eml (also GET {api}/api/alerts)",
        opts.data_dir.join("mail").display()
    );
    println!("  try          : curl -H 'Authorization: Bearer {admin_token}' {api}/api/quotas");
}

/// What a newcomer needs to run the five-minute start (the README's first steps against a CPA)
/// against the demo's simulated CPA with a daemon of their own: its address, its management key
/// (a key made up for this run, printed like the demo's admin token, never logged) and a free
/// API port for the second daemon.
struct OwnStart {
    cpa_url: String,
    management_key: String,
    listen: std::net::SocketAddr,
}

/// The banner's lines for [`OwnStart`]: the `init` and `export` commands to paste.
fn print_own_start(own: &OwnStart) {
    println!("  your own daemon against this simulated CPA (in a second terminal):");
    println!(
        "    cargo run -q -- init --cpa-url {} --listen {} --database demo-site.db --output demo-site.toml --force",
        own.cpa_url, own.listen
    );
    println!(
        "    export CPA_MANAGEMENT_KEY={} QUOTA_PATROL_ADMIN_TOKEN=<choose one>",
        own.management_key
    );
    println!(
        "    cargo run -q -- check-config --config demo-site.toml   # then the same with inspect --dry-run, then serve"
    );
    println!(
        "    (its API and status page: http://{}/ ; this demo keeps patrolling the same CPA)",
        own.listen
    );
}

/// Burns the simulated CPA's quota every 5 s, and every ~2 minutes brings one reset forward.
fn spawn_cpa_traffic(traffic: Arc<quota_patrol_sim::SimHandle>, clock: SharedClock) {
    tokio::spawn(async move {
        let mut tick = 0u64;
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            tick += 1;
            traffic.simulate_traffic(tick, 1.0, 10);
            // Real weekly windows take days to reset; every ~2 minutes the demo brings the
            // earliest reset of one exhausted account forward so the whole cycle shows:
            // exhausted -> disabled -> reset re-check -> re-enabled.
            if tick.is_multiple_of(24) {
                hurry_one_reset(&traffic, clock.now());
            }
        }
    });
}

/// The demo's last line after a stop.
fn stop_line(report: &crate::app::StopReport) -> &'static str {
    if report.clean {
        "stopped cleanly"
    } else {
        "stopped after the shutdown deadline"
    }
}

/// Moves the weekly (or monthly) reset of the exhausted, disabled account that resets first to
/// 30 seconds from now, with its usage back to a fresh window (demo speed only).
fn hurry_one_reset(sim: &quota_patrol_sim::SimHandle, now: chrono::DateTime<chrono::Utc>) {
    let candidate = sim
        .accounts()
        .into_iter()
        .filter(|a| a.disabled && !a.deleted && a.usage.is_exhausted())
        .filter_map(|a| {
            a.usage
                .weekly
                .or(a.usage.monthly)
                .map(|w| (w.reset_at, a.name))
        })
        .min();
    if let Some((_, name)) = candidate {
        sim.update_usage(&name, |u| {
            for w in [u.weekly.as_mut(), u.monthly.as_mut(), u.five_hour.as_mut()]
                .into_iter()
                .flatten()
            {
                w.reset_at = now + chrono::Duration::seconds(30);
            }
        });
    }
}
