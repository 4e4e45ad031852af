//! Page-time benchmark (docs/rules/api.md §7: "pages answer in ≤ 50 ms for a site of 1,000 accounts"). The
//! real app (`App::build` + `run_until_stopped`, API listener with the status pages on
//! 127.0.0.1:0, no scheduler) patrols a simulated CPA of 1,000 generated accounts running in a
//! child process (this binary again, `QP_BENCH_ROLE=sim`, as in `benches/round.rs`). Seven days
//! of pool samples (one per 10 minutes) are seeded so the chart is drawn at full size, then three
//! forced rounds fill the snapshot history, operation log and round list. It signs in once and
//! times `GET /`, `GET /sites/{id}`, `GET /healthz` (the floor: loopback, hyper, axum) and, as
//! the JSON API's reference, `GET /api/quotas` with a reqwest client over loopback: 20 warm-up
//! requests, then 200 sequential requests and 200 at concurrency 4, each timed from send to the
//! end of its body. Then, in the app's process without HTTP, the read side of the pages
//! (`jobs::status_page` and the parts it calls), so a page's time splits into reading and
//! rendering. Prints a table (ms) and writes `target/status-page.json`; it asserts nothing.
//! Run: `cargo bench --bench status_page`; `QP_BENCH_ACCOUNTS` changes the account count.

#[path = "support/sim_child.rs"]
mod sim_child;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::TimeDelta;
use quota_patrol::app::{App, AppOptions};
use quota_patrol::clock::{Clock, SystemClock};
use quota_patrol::config::{AlertsConfig, Config, LogFormat};
use quota_patrol::core::pool::PoolSample;
use quota_patrol::jobs::inspect::{RoundKind, RoundOptions, run_round};
use quota_patrol::jobs::{JobError, Patrol, forecast, priority, queries, status_page};
use quota_patrol::random::ThreadRandom;
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, COOKIE, HeaderMap, HeaderValue, SET_COOKIE};
use secrecy::SecretString;
use serde::Serialize;

/// The daemon's allocator (src/main.rs), so that the pages are served as the daemon serves them.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Accounts of the simulated CPA unless `QP_BENCH_ACCOUNTS` says otherwise.
const DEFAULT_ACCOUNTS: usize = 1_000;
/// Forced rounds before measuring (history, operation log and round list filled).
const ROUNDS: usize = 3;
/// Requests per page before measuring (connections open, caches warm).
const WARM_UP: usize = 20;
/// Timed requests per page and mode.
const SAMPLES: usize = 200;
/// Requests in flight at once in the concurrent mode.
const CONCURRENCY: usize = 4;
/// The page-time target of docs/rules/api.md §7, in milliseconds (judged on the sequential p99).
const TARGET_MS: f64 = 50.0;
/// The bench's site id and admin token (bench-only values).
const SITE: &str = "bench";
const ADMIN_TOKEN: &str = "status-page-bench-admin-token";
/// Pool samples seeded before the rounds: 7 days, one per 10 minutes (the chart at full size).
const SEEDED_SAMPLES: i64 = 7 * 24 * 6;

/// The app's config: API listener on 127.0.0.1:0, no config sites, alerts off, no router.
fn app_config(database_path: PathBuf) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().expect("a socket address"),
        admin_token: Some(SecretString::from(ADMIN_TOKEN)),
        admin_token_env: "QUOTA_PATROL_ADMIN_TOKEN".into(),
        metrics_public: false,
        metrics_per_account: false,
        shutdown_deadline_seconds: 20,
        session_hours: quota_patrol::config::DEFAULT_SESSION_HOURS,
        database_path,
        log_retention_days: 30,
        log_format: LogFormat::Pretty,
        log_level: "warn".into(),
        tick_seconds: 1,
        warmup: false,
        allow_short_intervals: false,
        interval_unit_seconds: 60,
        sites: vec![],
        alerts: AlertsConfig::default(),
        router: None,
    }
}

/// The app under test, serving on its own task until `stop` is sent.
struct Served {
    base_url: String,
    patrol: Patrol,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
    _sim: sim_child::SimProcess,
    _dir: tempfile::TempDir,
}

/// Writes [`SEEDED_SAMPLES`] pool samples of a site of `n` accounts, one per 10 minutes over
/// the 7 days before now (the last one 10 minutes ago), in one transaction. The usable count
/// follows a daily wave between 30 % and 90 % of `n` so the chart's lines are not flat.
async fn seed_samples(patrol: &Patrol, n: usize) -> anyhow::Result<()> {
    let now = SystemClock.now();
    let total = u32::try_from(n)?;
    patrol
        .store
        .run(move |c| {
            let tx = c.unchecked_transaction()?;
            for k in 0..SEEDED_SAMPLES {
                let at = now - TimeDelta::minutes(10 * (SEEDED_SAMPLES - k));
                let phase = k as f64 / 144.0 * std::f64::consts::TAU;
                let usable = (f64::from(total) * (0.6 + 0.3 * phase.sin())) as u32;
                let invalid = total / 50;
                let sample = PoolSample {
                    at,
                    total,
                    usable,
                    active: usable,
                    exhausted: total.saturating_sub(usable + invalid),
                    invalid,
                    remaining_percent: f64::from(usable) * 45.0,
                };
                quota_patrol::store::samples::insert(&tx, SITE, &sample)?;
            }
            tx.commit()?;
            Ok(())
        })
        .await?;
    Ok(())
}

/// Builds the app on a temp store, creates the site against the simulated CPA, runs
/// [`ROUNDS`] forced rounds, then serves.
async fn serve_app(n: usize) -> anyhow::Result<Served> {
    let sim = sim_child::SimProcess::start().await?;
    let dir = tempfile::tempdir()?;
    let app = App::build(
        &app_config(dir.path().join("bench.db")),
        AppOptions {
            clock: Arc::new(SystemClock),
            random: Arc::new(ThreadRandom),
            scheduler: false,
        },
    )
    .await?;
    let patrol = app.patrol().clone();
    sim.create_site(&patrol, SITE).await?;
    seed_samples(&patrol, n).await?;
    for i in 1..=ROUNDS {
        let started = Instant::now();
        let opts = RoundOptions {
            kind: RoundKind::Manual,
            force: true,
            dry_run: false,
            only: None,
        };
        let r = run_round(&patrol, SITE, opts).await?;
        eprintln!(
            "status_page: round {i}/{ROUNDS} {:.2} s, {} probed, {} failed, {} actions",
            started.elapsed().as_secs_f64(),
            r.probed_count,
            r.failed_count,
            r.action_outcomes.len()
        );
    }
    let base_url = format!("http://{}", app.api_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        app.run_until_stopped(async {
            let _ = stopped.await;
        })
        .await?;
        Ok(())
    });
    Ok(Served {
        base_url,
        patrol,
        stop,
        server,
        _sim: sim,
        _dir: dir,
    })
}

/// One measured request: what to fetch and with which credentials.
#[derive(Clone)]
struct Target {
    page: &'static str,
    url: String,
    headers: HeaderMap,
}

/// Latency figures of one page and mode, in milliseconds (nearest-rank percentiles over every
/// sample), the body size in KiB and, for the concurrent mode, requests per second.
#[derive(Debug, Serialize)]
struct Row {
    page: &'static str,
    mode: &'static str,
    n: usize,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    body_kib: f64,
    req_per_s: f64,
}

impl Row {
    fn of(
        page: &'static str,
        mode: &'static str,
        mut samples: Vec<Duration>,
        body_bytes: usize,
        wall: Duration,
    ) -> Self {
        samples.sort_unstable();
        let at = |q: f64| -> f64 {
            if samples.is_empty() {
                return f64::NAN;
            }
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            samples[rank - 1].as_secs_f64() * 1_000.0
        };
        Self {
            page,
            mode,
            n: samples.len(),
            p50_ms: at(0.50),
            p90_ms: at(0.90),
            p99_ms: at(0.99),
            max_ms: at(1.0),
            body_kib: body_bytes as f64 / 1024.0,
            req_per_s: samples.len() as f64 / wall.as_secs_f64(),
        }
    }
}

/// One GET: time from send to the end of the body, and the body's length in bytes. A status
/// other than 200 is an error (a redirect means the session was not accepted).
async fn fetch(client: &reqwest::Client, target: &Target) -> anyhow::Result<(Duration, usize)> {
    let started = Instant::now();
    let resp = client
        .get(&target.url)
        .headers(target.headers.clone())
        .send()
        .await?;
    let status = resp.status();
    let body = resp.bytes().await?;
    let elapsed = started.elapsed();
    if status != StatusCode::OK {
        bail!("GET {} answered {status}", target.url);
    }
    Ok((elapsed, body.len()))
}

/// [`SAMPLES`] requests one after the other.
async fn sequential(client: &reqwest::Client, target: &Target) -> anyhow::Result<Row> {
    let mut samples = Vec::with_capacity(SAMPLES);
    let mut bytes = 0;
    let started = Instant::now();
    for _ in 0..SAMPLES {
        let (t, len) = fetch(client, target).await?;
        samples.push(t);
        bytes = len;
    }
    Ok(Row::of(
        target.page,
        "sequential",
        samples,
        bytes,
        started.elapsed(),
    ))
}

/// [`SAMPLES`] requests shared by [`CONCURRENCY`] workers, each sending its next request when
/// its previous one has been read (closed loop).
async fn concurrent(client: &reqwest::Client, target: &Target) -> anyhow::Result<Row> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (client, target, next) = (client.clone(), target.clone(), next.clone());
        workers.spawn(async move {
            let mut mine = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < SAMPLES {
                mine.push(fetch(&client, &target).await?);
            }
            anyhow::Ok(mine)
        });
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    let mut bytes = 0;
    while let Some(done) = workers.join_next().await {
        for (t, len) in done?? {
            samples.push(t);
            bytes = len;
        }
    }
    let mode = "concurrency 4";
    Ok(Row::of(
        target.page,
        mode,
        samples,
        bytes,
        started.elapsed(),
    ))
}

/// Signs in once (`POST /signin`, form `token=`) and returns the `Cookie` header carrying the
/// session. Errors: any answer but 303, or no session cookie.
async fn sign_in(client: &reqwest::Client, base: &str) -> anyhow::Result<HeaderValue> {
    let resp = client
        .post(format!("{base}/signin"))
        .form(&[("token", ADMIN_TOKEN), ("next", "/")])
        .send()
        .await?;
    if resp.status() != StatusCode::SEE_OTHER {
        bail!("POST /signin answered {}", resp.status());
    }
    let session = resp
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .find(|pair| pair.starts_with(&format!("{}=", quota_patrol::web::COOKIE)))
        .with_context(|| format!("POST /signin set no {} cookie", quota_patrol::web::COOKIE))?
        .to_string();
    Ok(HeaderValue::from_str(&session)?)
}

/// The targets: the two pages with the session cookie, `/healthz` (the floor: loopback, hyper,
/// axum), the JSON API with the Bearer token.
async fn targets(client: &reqwest::Client, base: &str) -> anyhow::Result<Vec<Target>> {
    let mut cookie = HeaderMap::new();
    cookie.insert(COOKIE, sign_in(client, base).await?);
    let mut bearer = HeaderMap::new();
    bearer.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {ADMIN_TOKEN}"))?,
    );
    Ok(vec![
        Target {
            page: "/",
            url: format!("{base}/"),
            headers: cookie.clone(),
        },
        Target {
            page: "/sites/{id}",
            url: format!("{base}/sites/{SITE}"),
            headers: cookie,
        },
        Target {
            page: "/healthz",
            url: format!("{base}/healthz"),
            headers: HeaderMap::new(),
        },
        Target {
            page: "/api/quotas",
            url: format!("{base}/api/quotas?siteId={SITE}"),
            headers: bearer,
        },
    ])
}

/// Fetches `target` once more, writes the body to `target/status-page<path>.html` (to look at
/// what was measured) and prints what it holds: site cards, account rows, whether the chart
/// is there.
async fn describe(client: &reqwest::Client, target: &Target) -> anyhow::Result<()> {
    let body = client
        .get(&target.url)
        .headers(target.headers.clone())
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let slug = target.page.replace(['/', '{', '}'], "_");
    let path = out_dir().join(format!("status-page{slug}.html"));
    std::fs::write(&path, &body)?;
    // Points of the chart's lines: `x,y` pairs in the polylines' `points` attributes.
    let chart_points: usize = body
        .split("<polyline points=\"")
        .skip(1)
        .map(|rest| {
            rest.split('"')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .count()
        })
        .sum();
    eprintln!(
        "status_page: {} holds {} site card(s), {} account row(s), chart: {} ({chart_points} \
         line points); written to {}",
        target.page,
        body.matches("<article class=\"site-card\"").count(),
        body.matches("<tr data-account=").count(),
        if body.contains("<figure id=\"history\"") {
            "yes"
        } else {
            "no"
        },
        path.display()
    );
    Ok(())
}

/// `SAMPLES` sequential calls of `call` in the app's process (no HTTP): the read side of a page,
/// without its rendering. Row of page `label`, mode "in-process".
async fn in_process<F, Fut>(label: &'static str, mut call: F) -> anyhow::Result<Row>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), JobError>>,
{
    for _ in 0..WARM_UP {
        call().await?;
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    let started = Instant::now();
    for _ in 0..SAMPLES {
        let t = Instant::now();
        call().await?;
        samples.push(t.elapsed());
    }
    Ok(Row::of(label, "in-process", samples, 0, started.elapsed()))
}

/// Where a page's time goes before rendering: the read models of both pages and the parts the
/// site page's read calls (and, as references, the API's `inspection_status` and
/// `priority::status`, which the pages no longer call), each timed on its own in the app's
/// process.
async fn read_side(p: &Patrol) -> anyhow::Result<Vec<Row>> {
    let site = p.site(SITE).await?;
    let site = &site;
    Ok(vec![
        in_process("read: status_page::overview", || async {
            status_page::overview(p).await.map(drop)
        })
        .await?,
        in_process("read: status_page::site_page", || async {
            status_page::site_page(p, site).await.map(drop)
        })
        .await?,
        in_process("  part: status_page::card", || async {
            status_page::card(p, site, status_page::RECENT_ROUNDS)
                .await
                .map(drop)
        })
        .await?,
        in_process("  ref: queries::inspection_status (API only)", || async {
            queries::inspection_status(p, site).await.map(drop)
        })
        .await?,
        in_process("  part: forecast::site_forecast", || async {
            forecast::site_forecast(p, SITE).await.map(drop)
        })
        .await?,
        in_process("  ref: priority::status (API only)", || async {
            priority::status(p, site).await.map(drop)
        })
        .await?,
        in_process("  one full load: Patrol::pool", || async {
            p.pool(SITE).await.map(drop)
        })
        .await?,
    ])
}

/// Warm-up, then both modes for every target.
async fn measure(base: String) -> anyhow::Result<Vec<Row>> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let mut rows = Vec::new();
    for target in targets(&client, &base).await? {
        for _ in 0..WARM_UP {
            fetch(&client, &target).await?;
        }
        describe(&client, &target).await?;
        rows.push(sequential(&client, &target).await?);
        rows.push(concurrent(&client, &target).await?);
    }
    Ok(rows)
}

fn print_table(rows: &[Row]) {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    t.set_header([
        "page",
        "mode",
        "n",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "body KB",
        "req/s",
        "p99 ≤ 50 ms",
    ]);
    for r in rows {
        let met = if r.page != "/" && r.page != "/sites/{id}" {
            "-"
        } else if r.p99_ms <= TARGET_MS {
            "yes"
        } else {
            "NO"
        };
        t.add_row([
            r.page.to_string(),
            r.mode.to_string(),
            r.n.to_string(),
            format!("{:.1}", r.p50_ms),
            format!("{:.1}", r.p90_ms),
            format!("{:.1}", r.p99_ms),
            format!("{:.1}", r.max_ms),
            if r.mode == "in-process" {
                "-".to_string()
            } else {
                format!("{:.0}", r.body_kib)
            },
            format!("{:.0}", r.req_per_s),
            met.to_string(),
        ]);
    }
    println!("{t}");
}

/// `$CARGO_TARGET_DIR`, else the crate's `target/`: where the figures and pages are written.
fn out_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("QP_BENCH_ACCOUNTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ACCOUNTS);
    // The app runs on a multi-thread runtime as in the daemon (`#[tokio::main]`).
    let app_rt = tokio::runtime::Runtime::new()?;
    if sim_child::is_child() {
        return app_rt.block_on(sim_child::serve(n));
    }
    let served = app_rt.block_on(serve_app(n))?;
    println!(
        "status page benchmark: {n} accounts, {ROUNDS} forced rounds done; app at {}; \
         {WARM_UP} warm-up, {SAMPLES} timed requests per page and mode",
        served.base_url
    );
    // The load generator on its own thread and current-thread runtime, not on the app's workers.
    let base = served.base_url.clone();
    let rows = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(measure(base))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the load generator panicked"))??;
    let mut rows = rows;
    rows.extend(app_rt.block_on(read_side(&served.patrol))?);
    print_table(&rows);
    let path = out_dir().join("status-page.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&rows)?)?;
    println!("written: {}", path.display());
    let _ = served.stop.send(());
    app_rt.block_on(served.server)??;
    Ok(())
}
