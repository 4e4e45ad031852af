//! Router overhead measured the way a user measures it (docs/rules/router.md §6): an external
//! load generator, `oha`, against a mock upstream that is not the router's code
//! (`support/mock_upstream.rs`, hyper 1 alone), called directly and through the real router, in
//! one run. Where `router_load` drives both sides with its own in-process generator against
//! `crates/sim`, this bench owns neither the generator nor the upstream.
//!
//! Processes: the mock upstream (this binary again, `QP_BENCH_ROLE=mock-upstream`, one thread),
//! the router (`quota-patrol serve`, the bench profile's release build, `[router] open = true`,
//! one pool of 4 accounts all at the mock, no sites) and one `oha` process per block. Every
//! request is the same 2-message chat with the same `x-session-id`, so the router's affinity keeps
//! one conversation on one account as a client's would.
//!
//! Scenarios, each as warm-up then `QP_BENCH_BLOCKS` (3) blocks per side, direct and router
//! alternating: c=1 closed loop; c=16 closed loop; c=64 closed loop; 1,000 req/s open loop with
//! `--latency-correction`; streaming time to first byte at c=1 (oha's own per-request first-byte
//! time: the first body frame after the request started). Each side's figure is the median over
//! its blocks of oha's per-block figure. Recorded beside each block: the load average
//! (`/proc/loadavg`), the CPU time of the router, the mock and oha, and the cores the rest of the
//! machine kept busy meanwhile (`/proc/stat`).
//!
//! Output: a table on stdout and `target/router-external.json`. Asserts nothing; without `oha`
//! it prints how to install it and exits 0 ("skipped").
//! Run: `cargo bench --bench router_external` (docs/benchmarks.md
//! "router_external (`benches/router_external.rs`)").

#[path = "support/mock_upstream.rs"]
mod mock_upstream;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use quota_patrol::clock::{Clock, SystemClock};
use serde::Serialize;
use serde_json::Value;

use mock_upstream::MockUpstream;

/// The request body of every non-streaming request, both sides.
const CHAT: &str = r#"{"model":"gpt-5","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}]}"#;
const CHAT_STREAM: &str = r#"{"model":"gpt-5","stream":true,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}]}"#;
/// The session header a client would send (docs/rules/router.md §2.1), both sides.
const SESSION_HEADER: &str = "x-session-id: bench-external-session";
/// Accounts of the router's pool, all at the mock.
const ACCOUNTS: usize = 4;
const UPSTREAM_KEY_ENV: &str = "QP_BENCH_UPSTREAM_KEY";
const ADMIN_TOKEN_ENV: &str = "QUOTA_PATROL_ADMIN_TOKEN";
/// Blocks per side and scenario (`QP_BENCH_BLOCKS`).
const BLOCKS: usize = 3;
/// Run only some scenarios (`QP_BENCH_SCENARIOS=c64,ttfb`), lengthen the timed (`-z`) blocks
/// (`QP_BENCH_BLOCK_SECONDS`, e.g. to profile the router under c=64), name the oha binary
/// (`QP_BENCH_OHA`).
const SCENARIOS_ENV: &str = "QP_BENCH_SCENARIOS";
const BLOCKS_ENV: &str = "QP_BENCH_BLOCKS";
const BLOCK_SECONDS_ENV: &str = "QP_BENCH_BLOCK_SECONDS";
const OHA_ENV: &str = "QP_BENCH_OHA";
/// The router's `[router] threads` (`QP_BENCH_ROUTER_THREADS`; unset: one per core).
const ROUTER_THREADS_ENV: &str = "QP_BENCH_ROUTER_THREADS";
/// oha's error text for a request cut by the `-z` deadline.
const OHA_DEADLINE: &str = "aborted due to deadline";
const READY_WITHIN: Duration = Duration::from_secs(60);

/// What a scenario reads from oha's JSON: end-to-end latency or first-byte time.
#[derive(Clone, Copy, PartialEq)]
enum Timed {
    Total,
    FirstByte,
}

/// How long one oha run lasts: a request count (`-n`) or seconds (`-z`).
#[derive(Clone, Copy)]
enum Length {
    Requests(u64),
    Seconds(u64),
}

struct Scenario {
    key: &'static str,
    name: &'static str,
    connections: usize,
    rate: Option<u32>,
    body: &'static str,
    timed: Timed,
    warmup: Length,
    block: Length,
}

fn scenarios() -> Vec<Scenario> {
    let secs = |default: u64| {
        Length::Seconds(
            std::env::var(BLOCK_SECONDS_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default),
        )
    };
    vec![
        Scenario {
            key: "c1",
            name: "c=1 closed loop",
            connections: 1,
            rate: None,
            body: CHAT,
            timed: Timed::Total,
            warmup: Length::Requests(2_000),
            block: Length::Requests(10_000),
        },
        Scenario {
            key: "c16",
            name: "c=16 closed loop",
            connections: 16,
            rate: None,
            body: CHAT,
            timed: Timed::Total,
            warmup: Length::Seconds(1),
            block: secs(3),
        },
        Scenario {
            key: "c64",
            name: "c=64 closed loop",
            connections: 64,
            rate: None,
            body: CHAT,
            timed: Timed::Total,
            warmup: Length::Seconds(1),
            block: secs(3),
        },
        Scenario {
            key: "rate1000",
            name: "1,000 req/s open loop, latency-corrected, 16 connections",
            connections: 16,
            rate: Some(1_000),
            body: CHAT,
            timed: Timed::Total,
            warmup: Length::Seconds(1),
            block: secs(5),
        },
        Scenario {
            key: "ttfb",
            name: "stream first byte, c=1",
            connections: 1,
            rate: None,
            body: CHAT_STREAM,
            timed: Timed::FirstByte,
            warmup: Length::Requests(1_000),
            block: Length::Requests(3_000),
        },
    ]
}

/// The oha arguments of one run (the URL last).
fn oha_args(s: &Scenario, length: Length, url: &str) -> Vec<String> {
    let mut a: Vec<String> = ["--no-tui", "--output-format", "json", "-m", "POST"]
        .map(String::from)
        .to_vec();
    a.extend(["-T".into(), "application/json".into()]);
    a.extend(["-H".into(), SESSION_HEADER.into()]);
    a.extend(["-d".into(), s.body.into()]);
    a.extend(["-c".into(), s.connections.to_string()]);
    match length {
        Length::Requests(n) => a.extend(["-n".into(), n.to_string()]),
        Length::Seconds(z) => a.extend(["-z".into(), format!("{z}s")]),
    }
    if let Some(q) = s.rate {
        a.extend(["-q".into(), q.to_string(), "--latency-correction".into()]);
    }
    a.push(url.into());
    a
}

/// The oha binary: `QP_BENCH_OHA`, else `oha` on the PATH, else cargo's bin directory.
fn find_oha() -> Option<(PathBuf, String)> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os(OHA_ENV) {
        candidates.push(p.into());
    }
    candidates.push("oha".into());
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        candidates.push(Path::new(&home).join("bin/oha"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join(".cargo/bin/oha"));
    }
    candidates.into_iter().find_map(|p| {
        let out = Command::new(&p).arg("--version").output().ok()?;
        out.status
            .success()
            .then(|| (p, String::from_utf8_lossy(&out.stdout).trim().to_string()))
    })
}

/// CPU time (user + system) in ms: of a process (`/proc/<pid>/stat` fields 14–15), or of this
/// process's waited-for children (`/proc/self/stat` fields 16–17: each finished oha run).
fn cpu_ms(stat_path: &str, children: bool, ticks_per_s: f64) -> f64 {
    let Ok(text) = std::fs::read_to_string(stat_path) else {
        return f64::NAN;
    };
    // Fields after the command name, which is in parentheses and may hold blanks: field 3 first.
    let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else {
        return f64::NAN;
    };
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(f64::NAN))
        .collect();
    let (a, b) = if children { (13, 14) } else { (11, 12) };
    match (f.get(a), f.get(b)) {
        (Some(x), Some(y)) => (x + y) * 1_000.0 / ticks_per_s,
        _ => f64::NAN,
    }
}

/// `getconf CLK_TCK` (the unit of `/proc/*/stat` times), 100 when unknown.
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU time the whole machine spent busy, ms: the first line of `/proc/stat` (user, nice,
/// system, irq, softirq, steal; not idle or iowait).
fn machine_busy_ms(ticks_per_s: f64) -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().next().filter(|l| l.starts_with("cpu ")) else {
        return f64::NAN;
    };
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(f64::NAN))
        .collect();
    let busy: f64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| f.get(i)).sum();
    busy * 1_000.0 / ticks_per_s
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn load_1min(line: &str) -> f64 {
    line.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// A running `quota-patrol serve` child with a `[router]`; killed (by its own pid) on drop.
struct RouterProcess {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The router's config (as `router_load`'s): admin API and router on free loopback ports, its
/// database in `dir`, no sites, one pool `bench` serving `gpt-5` with `ACCOUNTS` accounts whose
/// `base_url` is `upstream` (the router calls `{base_url}/chat/completions`).
fn config_text(dir: &Path, api: SocketAddr, router: SocketAddr, upstream: &str) -> String {
    let db = toml::Value::String(dir.join("bench.db").display().to_string());
    // `[router] threads` from `QP_BENCH_ROUTER_THREADS` (default: the router's own, one per core).
    let threads = std::env::var(ROUTER_THREADS_ENV)
        .ok()
        .and_then(|v| v.parse::<u16>().ok())
        .map_or_else(String::new, |n| format!("threads = {n}\n"));
    let mut text = format!(
        "[server]\nlisten = \"{api}\"\n\n[database]\npath = {db}\n\n[scheduler]\nwarmup = false\n\n\
         [router]\nlisten = \"{router}\"\nopen = true\n{threads}\n\
         [[router.pools]]\nid = \"bench\"\nmodels = [\"gpt-5\"]\n"
    );
    for i in 0..ACCOUNTS {
        text.push_str(&format!(
            "\n[[router.accounts]]\npool = \"bench\"\nid = \"acct-{i:04}\"\nbase_url = \"{upstream}\"\napi_key_env = \"{UPSTREAM_KEY_ENV}\"\n"
        ));
    }
    text
}

/// Whether `GET {path}` on `addr` answers 200 (one connection, `Connection: close`).
fn get_ok(addr: SocketAddr, path: &str) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head)?;
        Ok(head.starts_with(b"HTTP/1.1 200"))
    };
    attempt().unwrap_or(false)
}

impl RouterProcess {
    /// Starts the release binary and waits (bounded by `READY_WITHIN`) until the router answers
    /// `GET /v1/models`. Errors: the child exits or never answers (with its log's tail).
    fn start(upstream: &str) -> anyhow::Result<RouterProcess> {
        let dir = tempfile::tempdir()?;
        let (api, addr) = (free_port()?, free_port()?);
        let config = dir.path().join("config.toml");
        std::fs::write(&config, config_text(dir.path(), api, addr, upstream))?;
        let log = dir.path().join("serve.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_quota-patrol"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env(UPSTREAM_KEY_ENV, "bench-upstream-key")
            .env(ADMIN_TOKEN_ENV, "router-external-bench-admin-token")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("spawn quota-patrol serve")?;
        let mut p = RouterProcess {
            child,
            addr,
            log,
            _dir: dir,
        };
        let start = Instant::now();
        loop {
            if let Some(status) = p.child.try_wait()? {
                bail!("quota-patrol serve exited ({status}):\n{}", p.log_tail());
            }
            if get_ok(addr, "/v1/models") {
                return Ok(p);
            }
            if start.elapsed() > READY_WITHIN {
                bail!(
                    "the router did not answer GET /v1/models within {READY_WITHIN:?}:\n{}",
                    p.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// The two sides of every scenario.
#[derive(Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Side {
    Direct,
    Router,
}

/// One oha run's figures, with the load and CPU beside it.
#[derive(Clone, Serialize)]
struct Block {
    side: Side,
    index: usize,
    /// Answers with status 200, other statuses, requests cut by the `-z` deadline (at most one
    /// per connection), other errors (oha's error distribution).
    ok: u64,
    non_200: u64,
    cut_at_deadline: u64,
    errors: u64,
    seconds: f64,
    /// 200 answers per second of the run.
    rps: f64,
    /// oha's percentiles of the timed figure (end-to-end, or first body frame), µs.
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    loadavg_before: String,
    loadavg_after: String,
    /// Cores kept busy by everything but the router, the mock and oha during the block, on
    /// average (`/proc/stat` busy time, steal included, minus theirs): the other load. A rough
    /// figure: `/proc/stat` counts whole ticks, the processes' times do not, so a quiet machine
    /// reads about −0.2 to 0.
    others_cores: f64,
    /// CPU time during the block, ms, and per 200 answer, µs.
    router_cpu_ms: f64,
    mock_cpu_ms: f64,
    oha_cpu_ms: f64,
    router_cpu_us_per_req: f64,
    mock_cpu_us_per_req: f64,
    oha_cpu_us_per_req: f64,
}

/// The processes whose CPU is recorded, and the oha binary.
struct Rig {
    oha: PathBuf,
    router_pid: u32,
    mock_pid: u32,
    ticks: f64,
}

fn secs_to_us(v: &Value) -> f64 {
    v.as_f64().map_or(f64::NAN, |s| s * 1e6)
}

impl Rig {
    /// One oha run; its JSON summary.
    fn oha(&self, args: &[String]) -> anyhow::Result<Value> {
        let out = Command::new(&self.oha)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("run oha")?;
        if !out.status.success() {
            bail!(
                "oha {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        serde_json::from_slice(&out.stdout).context("oha's JSON output")
    }

    fn cpu(&self) -> [f64; 3] {
        [
            cpu_ms(
                &format!("/proc/{}/stat", self.router_pid),
                false,
                self.ticks,
            ),
            cpu_ms(&format!("/proc/{}/stat", self.mock_pid), false, self.ticks),
            cpu_ms("/proc/self/stat", true, self.ticks),
        ]
    }

    fn block(&self, s: &Scenario, side: Side, index: usize, url: &str) -> anyhow::Result<Block> {
        let loadavg_before = loadavg();
        let (cpu0, busy0, t0) = (self.cpu(), machine_busy_ms(self.ticks), Instant::now());
        let json = self.oha(&oha_args(s, s.block, url))?;
        let (cpu1, busy1, wall) = (self.cpu(), machine_busy_ms(self.ticks), t0.elapsed());
        let loadavg_after = loadavg();
        let statuses = json["statusCodeDistribution"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let ok = statuses.get("200").and_then(Value::as_u64).unwrap_or(0);
        let non_200 = statuses
            .iter()
            .filter(|(k, _)| k.as_str() != "200")
            .filter_map(|(_, v)| v.as_u64())
            .sum();
        let errors_of = |deadline: bool| -> u64 {
            json["errorDistribution"].as_object().map_or(0, |m| {
                m.iter()
                    .filter(|(k, _)| (k.as_str() == OHA_DEADLINE) == deadline)
                    .filter_map(|(_, v)| v.as_u64())
                    .sum()
            })
        };
        let seconds = json["summary"]["total"].as_f64().unwrap_or(f64::NAN);
        let (pct, max) = match s.timed {
            Timed::Total => (&json["latencyPercentiles"], &json["summary"]["slowest"]),
            Timed::FirstByte => (
                &json["firstBytePercentiles"],
                &json["details"]["firstByte"]["slowest"],
            ),
        };
        let per_req = |ms: f64| ms * 1_000.0 / ok.max(1) as f64;
        let d = |i: usize| cpu1[i] - cpu0[i];
        Ok(Block {
            side,
            index,
            ok,
            non_200,
            cut_at_deadline: errors_of(true),
            errors: errors_of(false),
            seconds,
            rps: ok as f64 / seconds,
            p50_us: secs_to_us(&pct["p50"]),
            p99_us: secs_to_us(&pct["p99"]),
            max_us: secs_to_us(max),
            loadavg_before,
            loadavg_after,
            others_cores: (busy1 - busy0 - d(0) - d(1) - d(2)) / (wall.as_secs_f64() * 1_000.0),
            router_cpu_ms: d(0),
            mock_cpu_ms: d(1),
            oha_cpu_ms: d(2),
            router_cpu_us_per_req: per_req(d(0)),
            mock_cpu_us_per_req: per_req(d(1)),
            oha_cpu_us_per_req: per_req(d(2)),
        })
    }
}

/// One scenario's blocks and the per-side medians.
#[derive(Serialize)]
struct ScenarioReport {
    key: &'static str,
    name: &'static str,
    oha_args_router: String,
    blocks: Vec<Block>,
    direct: Summary,
    router: Summary,
}

/// Medians over one side's blocks.
#[derive(Clone, Copy, Serialize)]
struct Summary {
    p50_us: f64,
    p99_us: f64,
    rps: f64,
    router_cpu_us_per_req: f64,
    mock_cpu_us_per_req: f64,
    oha_cpu_us_per_req: f64,
    non_200: u64,
    cut_at_deadline: u64,
    errors: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn summary(blocks: &[Block], side: Side) -> Summary {
    let of = |f: fn(&Block) -> f64| {
        median(
            blocks
                .iter()
                .filter(|b| b.side == side)
                .map(f)
                .collect::<Vec<_>>(),
        )
    };
    let sum = |f: fn(&Block) -> u64| blocks.iter().filter(|b| b.side == side).map(f).sum();
    Summary {
        p50_us: of(|b| b.p50_us),
        p99_us: of(|b| b.p99_us),
        rps: of(|b| b.rps),
        router_cpu_us_per_req: of(|b| b.router_cpu_us_per_req),
        mock_cpu_us_per_req: of(|b| b.mock_cpu_us_per_req),
        oha_cpu_us_per_req: of(|b| b.oha_cpu_us_per_req),
        non_200: sum(|b| b.non_200),
        cut_at_deadline: sum(|b| b.cut_at_deadline),
        errors: sum(|b| b.errors),
    }
}

fn run_scenario(
    rig: &Rig,
    s: &Scenario,
    blocks: usize,
    direct: &str,
    router: &str,
) -> anyhow::Result<ScenarioReport> {
    eprintln!("router_external: {} (warm-up)", s.name);
    for url in [direct, router] {
        rig.oha(&oha_args(s, s.warmup, url))?;
    }
    let mut out = Vec::new();
    for index in 1..=blocks {
        for (side, url) in [(Side::Direct, direct), (Side::Router, router)] {
            let b = rig.block(s, side, index, url)?;
            eprintln!(
                "router_external: {:<4} {:<6} {index}/{blocks}: p50 {:>8.1} µs  p99 {:>8.1} µs  {:>8.0} req/s  \
                 cpu/req router {:>5.1} mock {:>5.1} oha {:>5.1} µs  non-200 {} errors {}  others {:.2} cores  load {}",
                s.key,
                match side {
                    Side::Direct => "direct",
                    Side::Router => "router",
                },
                b.p50_us,
                b.p99_us,
                b.rps,
                b.router_cpu_us_per_req,
                b.mock_cpu_us_per_req,
                b.oha_cpu_us_per_req,
                b.non_200,
                b.errors,
                b.others_cores,
                b.loadavg_before
            );
            out.push(b);
        }
    }
    Ok(ScenarioReport {
        key: s.key,
        name: s.name,
        oha_args_router: oha_args(s, s.block, router).join(" "),
        direct: summary(&out, Side::Direct),
        router: summary(&out, Side::Router),
        blocks: out,
    })
}

/// One line of the table.
#[derive(Serialize)]
struct Row {
    figure: String,
    direct: f64,
    router: f64,
    added: f64,
    router_pct_of_direct: f64,
    target: &'static str,
    /// `None`: the figure has no target.
    met: Option<bool>,
    load_1min_min: f64,
    load_1min_max: f64,
    /// The range of `others_cores` over the scenario's blocks.
    others_cores_min: f64,
    others_cores_max: f64,
}

/// What a row judges: added µs at most `limit`, router req/s a share of direct, or nothing.
enum Judge {
    AddedAtMost(f64),
    Throughput,
    None,
}

fn rows(reports: &[ScenarioReport]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in reports {
        let loads: Vec<f64> = r
            .blocks
            .iter()
            .map(|b| load_1min(&b.loadavg_before))
            .collect();
        let lo = loads.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let others: Vec<f64> = r.blocks.iter().map(|b| b.others_cores).collect();
        let others_lo = others.iter().copied().fold(f64::INFINITY, f64::min);
        let others_hi = others.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut row = |figure: &str, d: f64, rt: f64, target: &'static str, judge: Judge| {
            let met = match judge {
                Judge::AddedAtMost(limit) => Some(rt - d <= limit),
                Judge::Throughput => Some(rt >= 10_000.0 && rt >= 0.5 * d),
                Judge::None => None,
            };
            rows.push(Row {
                figure: format!("{} {figure}", r.key),
                direct: d,
                router: rt,
                added: rt - d,
                router_pct_of_direct: 100.0 * rt / d,
                target,
                met,
                load_1min_min: lo,
                load_1min_max: hi,
                others_cores_min: others_lo,
                others_cores_max: others_hi,
            });
        };
        let (d, rt) = (&r.direct, &r.router);
        match r.key {
            "c1" => {
                row(
                    "p50 (µs)",
                    d.p50_us,
                    rt.p50_us,
                    "added ≤ 100",
                    Judge::AddedAtMost(100.0),
                );
                row(
                    "p99 (µs)",
                    d.p99_us,
                    rt.p99_us,
                    "added ≤ 250",
                    Judge::AddedAtMost(250.0),
                );
            }
            "c16" => {
                row("p50 (µs)", d.p50_us, rt.p50_us, "-", Judge::None);
                row(
                    "p99 (µs)",
                    d.p99_us,
                    rt.p99_us,
                    "added ≤ 500",
                    Judge::AddedAtMost(500.0),
                );
                row("req/s", d.rps, rt.rps, "-", Judge::None);
            }
            "c64" => {
                row(
                    "req/s",
                    d.rps,
                    rt.rps,
                    "≥ 50 % of direct, ≥ 10000",
                    Judge::Throughput,
                );
                row("p99 (µs)", d.p99_us, rt.p99_us, "-", Judge::None);
            }
            "rate1000" => {
                row("p50 (µs)", d.p50_us, rt.p50_us, "-", Judge::None);
                row(
                    "p99 (µs)",
                    d.p99_us,
                    rt.p99_us,
                    "added ≤ 1000",
                    Judge::AddedAtMost(1_000.0),
                );
            }
            "ttfb" => {
                row(
                    "p50 (µs)",
                    d.p50_us,
                    rt.p50_us,
                    "added ≤ 1000",
                    Judge::AddedAtMost(1_000.0),
                );
                row(
                    "p99 (µs)",
                    d.p99_us,
                    rt.p99_us,
                    "added ≤ 1000",
                    Judge::AddedAtMost(1_000.0),
                );
            }
            _ => {}
        }
        row(
            "router CPU / req (µs)",
            f64::NAN,
            rt.router_cpu_us_per_req,
            "-",
            Judge::None,
        );
    }
    rows
}

fn print_table(rows: &[Row]) {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    t.set_header([
        "figure",
        "direct",
        "router",
        "added",
        "% of direct",
        "target",
        "met?",
        "load (1 min)",
        "others (cores)",
    ]);
    let num = |v: f64| {
        if v.is_nan() {
            "-".to_string()
        } else {
            format!("{v:.1}")
        }
    };
    for r in rows {
        t.add_row([
            r.figure.clone(),
            num(r.direct),
            num(r.router),
            num(r.added),
            num(r.router_pct_of_direct),
            r.target.to_string(),
            match r.met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            }
            .to_string(),
            format!("{:.2}–{:.2}", r.load_1min_min, r.load_1min_max),
            format!("{:.2}–{:.2}", r.others_cores_min, r.others_cores_max),
        ]);
    }
    println!("{t}");
}

/// Everything one run measured, as written to `target/router-external.json`.
#[derive(Serialize)]
struct Report {
    measured_at: String,
    oha_version: String,
    cores: usize,
    accounts: usize,
    blocks_per_side: usize,
    scenarios: Vec<ScenarioReport>,
    rows: Vec<Row>,
}

fn json_path() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("router-external.json")
}

/// A few requests of each body through each side, all answered 200, before anything is timed.
fn check(rig: &Rig, direct: &str, router: &str, r: &RouterProcess) -> anyhow::Result<()> {
    for body in [CHAT, CHAT_STREAM] {
        for url in [direct, router] {
            let s = Scenario {
                key: "check",
                name: "check",
                connections: 1,
                rate: None,
                body,
                timed: Timed::Total,
                warmup: Length::Requests(10),
                block: Length::Requests(10),
            };
            let json = rig.oha(&oha_args(&s, s.block, url))?;
            let ok = json["statusCodeDistribution"]["200"].as_u64().unwrap_or(0);
            if ok != 10 {
                bail!(
                    "{url} did not answer 200 to all 10 check requests: {} {}\n{}",
                    json["statusCodeDistribution"],
                    json["errorDistribution"],
                    r.log_tail()
                );
            }
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; any filter argument is ignored (one benchmark).
    if mock_upstream::is_child() {
        return mock_upstream::serve();
    }
    let Some((oha, oha_version)) = find_oha() else {
        println!(
            "router_external: oha not found (PATH, $CARGO_HOME/bin, ~/.cargo/bin or {OHA_ENV}).\n\
             Install it with `cargo install oha --locked` (measured with oha 1.16.0).\n\
             router_external: skipped"
        );
        return Ok(());
    };
    let wanted: Option<Vec<String>> = std::env::var(SCENARIOS_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let blocks = std::env::var(BLOCKS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BLOCKS)
        .max(1);
    let mock = MockUpstream::start()?;
    let router = RouterProcess::start(&format!("http://{}/v1", mock.addr))?;
    eprintln!(
        "router_external: {oha_version}; mock upstream {} (pid {}), router {} (pid {})",
        mock.addr,
        mock.pid(),
        router.addr,
        router.child.id()
    );
    let rig = Rig {
        oha,
        router_pid: router.child.id(),
        mock_pid: mock.pid(),
        ticks: clock_ticks(),
    };
    let direct_url = format!("http://{}/v1/chat/completions", mock.addr);
    let router_url = format!("http://{}/v1/chat/completions", router.addr);
    check(&rig, &direct_url, &router_url, &router)?;
    let mut reports = Vec::new();
    for s in scenarios() {
        if wanted
            .as_ref()
            .is_some_and(|w| !w.iter().any(|k| k == s.key))
        {
            continue;
        }
        reports.push(run_scenario(&rig, &s, blocks, &direct_url, &router_url)?);
    }
    let report = Report {
        measured_at: SystemClock.now().to_rfc3339(),
        oha_version,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        accounts: ACCOUNTS,
        blocks_per_side: blocks,
        rows: rows(&reports),
        scenarios: reports,
    };
    print_table(&report.rows);
    for s in &report.scenarios {
        println!(
            "{}: non-200 direct/router {}/{}, errors {}/{} (and {}/{} cut at the -z deadline); mock CPU/req direct/router {:.1}/{:.1} µs, oha CPU/req {:.1}/{:.1} µs",
            s.key,
            s.direct.non_200,
            s.router.non_200,
            s.direct.errors,
            s.router.errors,
            s.direct.cut_at_deadline,
            s.router.cut_at_deadline,
            s.direct.mock_cpu_us_per_req,
            s.router.mock_cpu_us_per_req,
            s.direct.oha_cpu_us_per_req,
            s.router.oha_cpu_us_per_req
        );
    }
    let path = json_path();
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("written: {}", path.display());
    drop(router);
    drop(mock);
    Ok(())
}
