//! Router load benchmark (docs/rules/router.md §5 "Benchmarks", docs/rules/router.md §6): the fake OpenAI upstream
//! (`sim::openai::FakeUpstream`) called directly and through the router, measured in one run with
//! the same load generator, so every router figure stands beside its direct twin:
//! 1. added latency at concurrency 1 (p50, p99 of router minus direct);
//! 2. added p99 at a fixed 1,000 req/s (open loop);
//! 3. the sustained req/s through the router (closed loop, 64 connections) and its % of direct;
//! 4. streaming time to first body byte (chat `stream: true`, concurrency 1);
//! 5. the router's RSS after 10,000 distinct session keys were bound over 1,000 accounts.
//!
//! The router is the real binary (`quota-patrol serve`, release build under `cargo bench`) in its
//! own process, `[router] open = true` on 127.0.0.1, no sites; readiness is polled on
//! `GET /v1/models`. The fake upstream runs in this process on its own one-worker Tokio runtime;
//! the generator runs on a current-thread runtime (raw hyper HTTP/1 keep-alive connections).
//! Direct and router blocks alternate so the shared machine's drift hits both alike.
//! Output: a table on stdout and `target/router-load.json`. It owns no router logic and asserts
//! nothing: it measures and reports whether each target was met.
//! Run: `nice -n 10 cargo bench --bench router_load`.

use std::future::Future;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper_util::rt::TokioIo;
use quota_patrol::clock::{Clock, SystemClock};
use quota_patrol_sim::openai::FakeUpstream;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// A two-message chat: the router keys it by its fingerprint (docs/rules/router.md §2.1), so every
/// request of items 1–4 is one conversation bound to one account, as a client's would be.
const CHAT: &str = r#"{"model":"gpt-5","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}]}"#;
const CHAT_STREAM: &str = r#"{"model":"gpt-5","stream":true,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}]}"#;
/// Sequential samples per side for item 1, in alternating blocks.
const SEQ_SAMPLES: usize = 20_000;
const SEQ_BLOCK: usize = 1_000;
/// Item 2: requests per second and seconds per side (in blocks of `PACED_BLOCK_S`).
const PACED_RATE: u64 = 1_000;
const PACED_SECONDS: u64 = 10;
const PACED_BLOCK_S: u64 = 2;
/// Item 3: connections and seconds per side (in blocks of `CLOSED_BLOCK_S`).
const CLOSED_CONNECTIONS: usize = 64;
const CLOSED_SECONDS: u64 = 10;
const CLOSED_BLOCK_S: u64 = 5;
/// Item 4: streaming samples per side.
const STREAM_SAMPLES: usize = 5_000;
/// Item 5: accounts of the wide pool and distinct session keys bound over it.
const WIDE_ACCOUNTS: usize = 1_000;
const SESSIONS: usize = 10_000;
/// Accounts of the pool for items 1–4.
const SMALL_ACCOUNTS: usize = 4;
/// The variables the router child reads (bench-only values, never printed).
const UPSTREAM_KEY_ENV: &str = "QP_BENCH_UPSTREAM_KEY";
const ADMIN_TOKEN_ENV: &str = "QUOTA_PATROL_ADMIN_TOKEN";
const ADMIN_TOKEN: &str = "router-load-bench-admin-token";
/// Run only some items (`1,3`) / item 3 longer (seconds per side): profiling aids.
const ITEMS_ENV: &str = "QP_BENCH_ITEMS";
const CLOSED_SECONDS_ENV: &str = "QP_BENCH_CLOSED_SECONDS";
/// How long the router child may take to answer `GET /v1/models`.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// Where requests go: the fake upstream itself, or the router in front of it.
#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    host: HeaderValue,
}

impl Target {
    fn new(addr: SocketAddr) -> Self {
        let host = HeaderValue::from_str(&addr.to_string()).expect("an address is a valid host");
        Target { addr, host }
    }
}

/// One keep-alive HTTP/1 connection to a target; reconnects when the peer closed it.
struct Client {
    target: Target,
    conn: SendRequest<Full<Bytes>>,
}

/// Time to the first non-empty body frame and to the end of the body.
#[derive(Clone, Copy)]
struct Timing {
    first_byte: Duration,
    total: Duration,
}

impl Client {
    async fn connect(target: &Target) -> anyhow::Result<Client> {
        let stream = TcpStream::connect(target.addr)
            .await
            .with_context(|| format!("connect {}", target.addr))?;
        stream.set_nodelay(true)?;
        let (conn, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(driver);
        Ok(Client {
            target: target.clone(),
            conn,
        })
    }

    /// `POST /v1/chat/completions` with `body` (and `x-session-id` when given), read whole.
    /// Errors: transport, or a non-2xx status.
    async fn chat(&mut self, body: &'static str, session: Option<&str>) -> anyhow::Result<Timing> {
        if self.conn.is_closed() {
            *self = Client::connect(&self.target).await?;
        }
        let mut req = Request::post("/v1/chat/completions")
            .header(HOST, self.target.host.clone())
            .header(CONTENT_TYPE, "application/json");
        if let Some(s) = session {
            req = req.header("x-session-id", s);
        }
        let req = req.body(Full::new(Bytes::from_static(body.as_bytes())))?;
        let start = Instant::now();
        self.conn.ready().await?;
        let resp = self.conn.send_request(req).await?;
        let status = resp.status();
        let mut body = resp.into_body();
        let mut first_byte = None;
        while let Some(frame) = body.frame().await {
            let frame = frame?;
            if first_byte.is_none() && frame.data_ref().is_some_and(|d| !d.is_empty()) {
                first_byte = Some(start.elapsed());
            }
        }
        let total = start.elapsed();
        if !status.is_success() {
            bail!("{} answered {status}", self.target.addr);
        }
        Ok(Timing {
            first_byte: first_byte.unwrap_or(total),
            total,
        })
    }
}

/// A `GET` with an optional bearer token, the body as text. Errors: transport, non-2xx.
async fn get_text(target: &Target, path: &str, token: Option<&str>) -> anyhow::Result<String> {
    let stream = TcpStream::connect(target.addr).await?;
    let (mut conn, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(driver);
    let mut req = Request::get(path).header(HOST, target.host.clone());
    if let Some(t) = token {
        req = req.header(AUTHORIZATION, format!("Bearer {t}"));
    }
    let resp = conn.send_request(req.body(Empty::<Bytes>::new())?).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        bail!("GET {path} answered {status}");
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Latency figures in microseconds (nearest-rank percentiles over every sample).
#[derive(Clone, Copy, Debug, Serialize)]
struct Latency {
    samples: usize,
    errors: u64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
}

impl Latency {
    fn of(mut ns: Vec<u64>, errors: u64) -> Latency {
        ns.sort_unstable();
        let at = |q: f64| -> f64 {
            if ns.is_empty() {
                return f64::NAN;
            }
            let rank = ((q * ns.len() as f64).ceil() as usize).clamp(1, ns.len());
            ns[rank - 1] as f64 / 1_000.0
        };
        Latency {
            samples: ns.len(),
            errors,
            p50_us: at(0.50),
            p99_us: at(0.99),
            max_us: at(1.0),
        }
    }
}

/// One figure measured both ways (direct and through the router).
#[derive(Clone, Copy, Debug, Serialize)]
struct Pair<T> {
    direct: T,
    router: T,
}

/// Item 1 (or 4 with `first_byte`): `samples` sequential requests per side after a warm-up,
/// direct and router alternating in blocks of `SEQ_BLOCK`.
async fn sequential_run(
    direct: &Target,
    router: &Target,
    body: &'static str,
    samples: usize,
    first_byte: bool,
) -> anyhow::Result<Pair<Latency>> {
    let mut clients = [
        Client::connect(direct).await?,
        Client::connect(router).await?,
    ];
    for c in &mut clients {
        for _ in 0..2_000 {
            c.chat(body, None).await?;
        }
    }
    let mut ns: [Vec<u64>; 2] = [Vec::with_capacity(samples), Vec::with_capacity(samples)];
    let mut errors = [0u64; 2];
    while ns.iter().any(|v| v.len() < samples) {
        for side in 0..2 {
            for _ in 0..SEQ_BLOCK.min(samples - ns[side].len()) {
                match clients[side].chat(body, None).await {
                    Ok(t) if first_byte => ns[side].push(t.first_byte.as_nanos() as u64),
                    Ok(t) => ns[side].push(t.total.as_nanos() as u64),
                    Err(_) => errors[side] += 1,
                }
            }
        }
        if errors.iter().sum::<u64>() > samples as u64 {
            bail!("more errors than samples in the sequential run");
        }
    }
    let [d, r] = ns;
    Ok(Pair {
        direct: Latency::of(d, errors[0]),
        router: Latency::of(r, errors[1]),
    })
}

/// Item 2 for one side and one block: `rate` requests per second for `seconds`, each sent at its
/// tick whether earlier ones answered or not (open loop; idle connections reused, new ones opened
/// when all are busy). Latency from the request's send to the end of its body.
async fn paced_block(
    target: &Target,
    idle: &Arc<Mutex<Vec<Client>>>,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<(Vec<u64>, u64)> {
    let mut ticker = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks: Vec<JoinHandle<anyhow::Result<u64>>> = Vec::new();
    for _ in 0..rate * seconds {
        ticker.tick().await;
        let (idle, target) = (idle.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            let popped = idle.lock().expect("pool lock").pop();
            let mut client = match popped {
                Some(c) => c,
                None => Client::connect(&target).await?,
            };
            let t = client.chat(CHAT, None).await;
            idle.lock().expect("pool lock").push(client);
            Ok(t?.total.as_nanos() as u64)
        }));
    }
    let (mut ns, mut errors) = (Vec::with_capacity(tasks.len()), 0);
    for t in tasks {
        match t.await? {
            Ok(v) => ns.push(v),
            Err(_) => errors += 1,
        }
    }
    Ok((ns, errors))
}

/// Item 2: `PACED_SECONDS` per side at `PACED_RATE`, alternating blocks, after a 1 s warm-up.
async fn paced(direct: &Target, router: &Target) -> anyhow::Result<Pair<Latency>> {
    let pools = [
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    ];
    let targets = [direct, router];
    for side in 0..2 {
        for _ in 0..8 {
            let client = Client::connect(targets[side]).await?;
            pools[side].lock().expect("pool lock").push(client);
        }
        paced_block(targets[side], &pools[side], PACED_RATE, 1).await?;
    }
    let mut ns = [Vec::new(), Vec::new()];
    let mut errors = [0u64; 2];
    for _ in 0..PACED_SECONDS / PACED_BLOCK_S {
        for side in 0..2 {
            let (v, e) =
                paced_block(targets[side], &pools[side], PACED_RATE, PACED_BLOCK_S).await?;
            ns[side].extend(v);
            errors[side] += e;
        }
    }
    let [d, r] = ns;
    Ok(Pair {
        direct: Latency::of(d, errors[0]),
        router: Latency::of(r, errors[1]),
    })
}

/// Closed-loop figures of one side: answered requests per second over the timed blocks.
#[derive(Clone, Copy, Debug, Serialize)]
struct Throughput {
    requests: u64,
    errors: u64,
    seconds: f64,
    rps: f64,
}

/// Item 3 for one side and one block: `clients` each send the next request as soon as the last
/// answered, until `seconds` have passed. Returns (answered, errors, elapsed seconds).
async fn closed_block(clients: &mut Vec<Client>, seconds: u64) -> anyhow::Result<(u64, u64, f64)> {
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let tasks: Vec<JoinHandle<Client>> = clients
        .drain(..)
        .map(|mut c| {
            let (ok, failed) = (ok.clone(), failed.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    match c.chat(CHAT, None).await {
                        Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
                c
            })
        })
        .collect();
    for t in tasks {
        clients.push(t.await?);
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok((
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        elapsed,
    ))
}

/// Seconds per side of item 3: `QP_BENCH_CLOSED_SECONDS` (a multiple of `CLOSED_BLOCK_S`, for
/// a longer profile), default `CLOSED_SECONDS`.
fn closed_seconds() -> u64 {
    std::env::var(CLOSED_SECONDS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CLOSED_SECONDS)
        .max(CLOSED_BLOCK_S)
}

/// Item 3: `CLOSED_CONNECTIONS` per side, 1 s warm-up, then alternating timed blocks.
async fn closed(
    direct: &Target,
    router: &Target,
    seconds: u64,
) -> anyhow::Result<Pair<Throughput>> {
    let targets = [direct, router];
    let mut clients: [Vec<Client>; 2] = [Vec::new(), Vec::new()];
    for side in 0..2 {
        for _ in 0..CLOSED_CONNECTIONS {
            clients[side].push(Client::connect(targets[side]).await?);
        }
        closed_block(&mut clients[side], 1).await?;
    }
    let mut sums = [(0u64, 0u64, 0f64); 2];
    for _ in 0..seconds / CLOSED_BLOCK_S {
        for side in 0..2 {
            let (ok, failed, secs) = closed_block(&mut clients[side], CLOSED_BLOCK_S).await?;
            sums[side].0 += ok;
            sums[side].1 += failed;
            sums[side].2 += secs;
        }
    }
    let fig = |(requests, errors, seconds): (u64, u64, f64)| Throughput {
        requests,
        errors,
        seconds,
        rps: requests as f64 / seconds,
    };
    Ok(Pair {
        direct: fig(sums[0]),
        router: fig(sums[1]),
    })
}

/// A running `quota-patrol serve` child with a `[router]`; killed (by its own pid) on drop.
struct RouterProcess {
    child: Child,
    router: Target,
    api: Target,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port: bound on port 0, then closed for the child to take.
fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(StdListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The child's config: admin API and router on free loopback ports, its database in `dir`, no
/// sites, one pool `bench` serving `gpt-5` with `accounts` accounts all at `upstream`.
fn config_text(
    dir: &Path,
    api: SocketAddr,
    router: SocketAddr,
    upstream: &str,
    accounts: usize,
) -> String {
    let db = toml::Value::String(dir.join("bench.db").display().to_string());
    let mut text = format!(
        "[server]\nlisten = \"{api}\"\n\n[database]\npath = {db}\n\n[scheduler]\nwarmup = false\n\n\
         [router]\nlisten = \"{router}\"\nopen = true\n\n\
         [[router.pools]]\nid = \"bench\"\nmodels = [\"gpt-5\"]\n"
    );
    for i in 0..accounts {
        text.push_str(&format!(
            "\n[[router.accounts]]\npool = \"bench\"\nid = \"acct-{i:04}\"\nbase_url = \"{upstream}\"\napi_key_env = \"{UPSTREAM_KEY_ENV}\"\n"
        ));
    }
    text
}

impl RouterProcess {
    /// Starts the release binary and waits (bounded by `READY_WITHIN`) until the router answers
    /// `GET /v1/models`. Errors: the child exits or never answers (with its log's tail).
    async fn start(upstream: &str, accounts: usize) -> anyhow::Result<RouterProcess> {
        let dir = tempfile::tempdir()?;
        let (api, router) = (free_port()?, free_port()?);
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            config_text(dir.path(), api, router, upstream, accounts),
        )?;
        let log = dir.path().join("serve.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_quota-patrol"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env(UPSTREAM_KEY_ENV, "bench-upstream-key")
            .env(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("spawn quota-patrol serve")?;
        let mut p = RouterProcess {
            child,
            router: Target::new(router),
            api: Target::new(api),
            log,
            _dir: dir,
        };
        p.wait_ready().await?;
        Ok(p)
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("quota-patrol serve exited ({status}):\n{}", self.log_tail());
            }
            if get_text(&self.router, "/v1/models", None).await.is_ok() {
                return Ok(());
            }
            if start.elapsed() > READY_WITHIN {
                bail!(
                    "the router did not answer GET /v1/models within {READY_WITHIN:?}:\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// (VmRSS, VmHWM) of the child in MiB, from /proc/<pid>/status.
    fn memory_mib(&self) -> anyhow::Result<(f64, f64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let field = |name: &str| -> anyhow::Result<f64> {
            let line = status
                .lines()
                .find(|l| l.starts_with(name))
                .with_context(|| format!("{name} not in /proc status"))?;
            let kib: f64 = line[name.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()?;
            Ok(kib / 1024.0)
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// Live bindings the admin API reports (every numeric `bindings` field of
    /// `GET /api/router/status`, summed); `None` when the status is not available.
    async fn bindings(&self) -> Option<u64> {
        let text = get_text(&self.api, "/api/router/status", Some(ADMIN_TOKEN))
            .await
            .ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        fn walk(v: &serde_json::Value, sum: &mut Option<u64>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        match (k.as_str(), v.as_u64()) {
                            ("bindings", Some(n)) => *sum = Some(sum.unwrap_or(0) + n),
                            _ => walk(v, sum),
                        }
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, sum)),
                _ => {}
            }
        }
        let mut sum = None;
        walk(&json, &mut sum);
        sum
    }
}

/// Item 5 figures.
#[derive(Clone, Copy, Debug, Serialize)]
struct Memory {
    accounts: usize,
    sessions: usize,
    errors: u64,
    rss_idle_mib: f64,
    rss_bound_mib: f64,
    hwm_bound_mib: f64,
    bindings_reported: Option<u64>,
}

/// Item 5: a fresh router with `WIDE_ACCOUNTS` accounts; `SESSIONS` requests, each with its own
/// `x-session-id`, over 16 connections; RSS before and after.
async fn memory(upstream: &str) -> anyhow::Result<Memory> {
    let p = RouterProcess::start(upstream, WIDE_ACCOUNTS).await?;
    let (rss_idle_mib, _) = p.memory_mib()?;
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut c = Client::connect(&p.router).await?;
        let (next, failed) = (next.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= SESSIONS as u64 {
                    break;
                }
                if c.chat(CHAT, Some(&format!("bench-session-{i:05}")))
                    .await
                    .is_err()
                {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let (rss_bound_mib, hwm_bound_mib) = p.memory_mib()?;
    Ok(Memory {
        accounts: WIDE_ACCOUNTS,
        sessions: SESSIONS,
        errors: failed.load(Ordering::Relaxed),
        rss_idle_mib,
        rss_bound_mib,
        hwm_bound_mib,
        bindings_reported: p.bindings().await,
    })
}

/// Everything one run measured, as written to `target/router-load.json`.
#[derive(Debug, Serialize)]
struct Report {
    measured_at: String,
    cores: usize,
    sequential: Pair<Latency>,
    paced_1000_rps: Pair<Latency>,
    closed_loop_64: Pair<Throughput>,
    stream_first_byte: Pair<Latency>,
    router_rss_after_load_mib: f64,
    memory: Memory,
    rows: Vec<Row>,
}

/// One line of the table.
#[derive(Debug, Serialize)]
struct Row {
    figure: &'static str,
    direct: Option<f64>,
    router: f64,
    added: Option<f64>,
    target: &'static str,
    met: bool,
}

fn latency_row(figure: &'static str, d: f64, r: f64, limit: f64, target: &'static str) -> Row {
    Row {
        figure,
        direct: Some(d),
        router: r,
        added: Some(r - d),
        target,
        met: r - d <= limit,
    }
}

fn rows(r: &Report) -> Vec<Row> {
    let (s, p, c, f) = (
        &r.sequential,
        &r.paced_1000_rps,
        &r.closed_loop_64,
        &r.stream_first_byte,
    );
    let share = 100.0 * c.router.rps / c.direct.rps;
    vec![
        latency_row(
            "c=1 latency p50 (µs)",
            s.direct.p50_us,
            s.router.p50_us,
            100.0,
            "added ≤ 100",
        ),
        latency_row(
            "c=1 latency p99 (µs)",
            s.direct.p99_us,
            s.router.p99_us,
            250.0,
            "added ≤ 250",
        ),
        latency_row(
            "1,000 req/s p99 (µs)",
            p.direct.p99_us,
            p.router.p99_us,
            1_000.0,
            "added ≤ 1000",
        ),
        Row {
            figure: "closed loop, 64 conns (req/s)",
            direct: Some(c.direct.rps),
            router: c.router.rps,
            added: Some(share),
            target: "≥ 10000 and ≥ 50 % (added = %)",
            met: c.router.rps >= 10_000.0 && share >= 50.0,
        },
        latency_row(
            "stream TTFB p50 (µs)",
            f.direct.p50_us,
            f.router.p50_us,
            1_000.0,
            "added ≤ 1000",
        ),
        latency_row(
            "stream TTFB p99 (µs)",
            f.direct.p99_us,
            f.router.p99_us,
            1_000.0,
            "added ≤ 1000",
        ),
        Row {
            figure: "RSS, 10k bindings / 1k accounts (MiB)",
            direct: None,
            router: r.memory.rss_bound_mib,
            added: None,
            target: "≤ 64",
            met: r.memory.rss_bound_mib <= 64.0,
        },
    ]
}

fn print_table(rows: &[Row]) {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    t.set_header(["figure", "direct", "router", "added", "target", "met?"]);
    let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for r in rows {
        t.add_row([
            r.figure.to_string(),
            num(r.direct),
            num(Some(r.router)),
            num(r.added),
            r.target.to_string(),
            if r.met { "yes" } else { "NO" }.to_string(),
        ]);
    }
    println!("{t}");
}

fn json_path() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("router-load.json")
}

/// Runs `f` on the generator's current-thread runtime.
fn on_generator<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("generator runtime")
        .block_on(f)
}

/// The items to run: `QP_BENCH_ITEMS` (e.g. `3` or `1,2`; default every item). A skipped
/// item's figures are NaN / 0 and its row reads "NO" (profiling aid, not a verdict).
fn items() -> Vec<u32> {
    match std::env::var(ITEMS_ENV) {
        Ok(v) if !v.trim().is_empty() => {
            v.split(',').filter_map(|s| s.trim().parse().ok()).collect()
        }
        _ => (1..=5).collect(),
    }
}

/// Figures of an item that did not run.
fn skipped_latency() -> Pair<Latency> {
    Pair {
        direct: Latency::of(Vec::new(), 0),
        router: Latency::of(Vec::new(), 0),
    }
}

async fn run(upstream: &FakeUpstream) -> anyhow::Result<Report> {
    let base = upstream.base_url();
    let direct = Target::new(upstream.local_addr());
    let items = items();
    let router = RouterProcess::start(&base, SMALL_ACCOUNTS).await?;
    eprintln!("router_load: router pid {}", router.child.id());
    let mut sequential = skipped_latency();
    if items.contains(&1) {
        eprintln!("router_load: 1/5 sequential ({SEQ_SAMPLES} per side)");
        sequential = sequential_run(&direct, &router.router, CHAT, SEQ_SAMPLES, false).await?;
    }
    let mut paced_1000_rps = skipped_latency();
    if items.contains(&2) {
        eprintln!("router_load: 2/5 paced {PACED_RATE} req/s ({PACED_SECONDS} s per side)");
        paced_1000_rps = paced(&direct, &router.router).await?;
    }
    let skipped = Throughput {
        requests: 0,
        errors: 0,
        seconds: 0.0,
        rps: f64::NAN,
    };
    let mut closed_loop_64 = Pair {
        direct: skipped,
        router: skipped,
    };
    if items.contains(&3) {
        let seconds = closed_seconds();
        eprintln!(
            "router_load: 3/5 closed loop {CLOSED_CONNECTIONS} connections ({seconds} s per side)"
        );
        closed_loop_64 = closed(&direct, &router.router, seconds).await?;
    }
    let mut stream_first_byte = skipped_latency();
    if items.contains(&4) {
        eprintln!("router_load: 4/5 streaming first byte ({STREAM_SAMPLES} per side)");
        stream_first_byte =
            sequential_run(&direct, &router.router, CHAT_STREAM, STREAM_SAMPLES, true).await?;
    }
    let (router_rss_after_load_mib, _) = router.memory_mib()?;
    drop(router);
    let mut memory = Memory {
        accounts: WIDE_ACCOUNTS,
        sessions: 0,
        errors: 0,
        rss_idle_mib: f64::NAN,
        rss_bound_mib: f64::NAN,
        hwm_bound_mib: f64::NAN,
        bindings_reported: None,
    };
    if items.contains(&5) {
        eprintln!("router_load: 5/5 memory ({SESSIONS} sessions over {WIDE_ACCOUNTS} accounts)");
        memory = self::memory(&base).await?;
    }
    let mut report = Report {
        measured_at: SystemClock.now().to_rfc3339(),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        sequential,
        paced_1000_rps,
        closed_loop_64,
        stream_first_byte,
        router_rss_after_load_mib,
        memory,
        rows: Vec::new(),
    };
    report.rows = rows(&report);
    Ok(report)
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; any filter argument is ignored (one benchmark).
    let upstream_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("fake-upstream")
        .enable_all()
        .build()?;
    let upstream = upstream_rt.block_on(FakeUpstream::start())?;
    let report = on_generator(run(&upstream))?;
    print_table(&report.rows);
    let m = &report.memory;
    println!(
        "errors: direct/router c=1 {}/{}, paced {}/{}, closed {}/{}, stream {}/{}, sessions {}",
        report.sequential.direct.errors,
        report.sequential.router.errors,
        report.paced_1000_rps.direct.errors,
        report.paced_1000_rps.router.errors,
        report.closed_loop_64.direct.errors,
        report.closed_loop_64.router.errors,
        report.stream_first_byte.direct.errors,
        report.stream_first_byte.router.errors,
        m.errors
    );
    println!(
        "memory: idle {:.1} MiB with {} accounts, {:.1} MiB (peak {:.1}) after {} sessions, bindings reported {:?}; after items 1-4 {:.1} MiB",
        m.rss_idle_mib,
        m.accounts,
        m.rss_bound_mib,
        m.hwm_bound_mib,
        m.sessions,
        m.bindings_reported,
        report.router_rss_after_load_mib
    );
    let path = json_path();
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("written: {}", path.display());
    upstream_rt.block_on(upstream.stop());
    Ok(())
}
