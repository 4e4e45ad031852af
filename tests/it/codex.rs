//! Contract test against the real Codex CLI (docs/router.md "Codex CLI"):
//! `codex exec` (0.171.0, which `.ci/run` installs) against the real binary's router, whose
//! accounts are fake upstreams on 127.0.0.1. Without Codex the tests print one line and pass,
//! unless `QP_REQUIRE_CODEX` is set (`.ci/run` sets it). Each Codex run is killed after
//! [`RUN_LIMIT`]; Codex gets its own `CODEX_HOME`, a cleared environment and proxies pointing at a
//! trap listener that must see no connection (nothing leaves 127.0.0.1).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Datelike, Duration, DurationRound, Utc};
use quota_patrol::clock::{Clock, ManualClock, SharedClock, SystemClock};
use quota_patrol_sim::openai::{ANSWER_TEXT, FakeUpstream, Route, Step};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

use crate::helpers::{ADMIN_TOKEN, Logs};

const SKIP_LINE: &str = "skipped: Codex CLI not found (QP_CODEX_BIN, or `npm install --prefix \
target/codex-cli @openai/codex@0.171.0` as .ci/run does); set QP_REQUIRE_CODEX=1 to make this \
a failure";
/// The longest one `codex exec` may take (it takes well under a second against the fakes).
const RUN_LIMIT: StdDuration = StdDuration::from_secs(60);
const ADMIN_ENV: &str = "QP_CODEX_TEST_ADMIN_TOKEN";
/// The provider's `env_key`, as in docs/router.md "Codex CLI".
const KEY_ENV: &str = "QUOTA_PATROL_ROUTER_KEY";
const MODEL: &str = "gpt-5-codex";
/// The provider name of docs/router.md "Codex CLI": Codex compacts locally for it.
const DOCS_PROVIDER_NAME: &str = "quota-patrol router";
/// A provider name Codex takes for OpenAI (Codex CLI 0.171
/// codex-rs/model-provider-info: `is_openai` compares the name): remote compaction v2.
const OPENAI_PROVIDER_NAME: &str = "OpenAI";

/// The Codex binary: `QP_CODEX_BIN`, else the native binary `.ci/run`'s project-local npm install
/// ships (`target/codex-cli/node_modules/@openai/codex-<platform>/vendor/<triple>/bin/codex`).
/// None (after printing [`SKIP_LINE`]) when absent; a failure with `QP_REQUIRE_CODEX`.
fn codex_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("QP_CODEX_BIN") {
        let bin = PathBuf::from(bin);
        assert!(bin.is_file(), "QP_CODEX_BIN={} is no file", bin.display());
        return Some(bin);
    }
    let scope = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/codex-cli/node_modules/@openai");
    let found = std::fs::read_dir(&scope)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|package| std::fs::read_dir(package.path().join("vendor")).into_iter())
        .flatten()
        .flatten()
        .map(|triple| triple.path().join("bin/codex"))
        .find(|bin| bin.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("QP_REQUIRE_CODEX").is_none(),
            "QP_REQUIRE_CODEX is set but no Codex CLI was found (QP_CODEX_BIN or {})",
            scope.display()
        );
        println!("{SKIP_LINE}");
    }
    found
}

/// A listener every proxy variable of Codex's environment points at: anything Codex would send
/// beyond 127.0.0.1 arrives here instead (and gets no answer). Keeps each connection's first
/// line (`CONNECT host:443 …`), one connection after the other, in the order accepted.
struct Trap {
    port: u16,
    seen: tokio::sync::watch::Receiver<Vec<String>>,
}

/// What [`Trap::assert_untouched`] sends to know every earlier connection was read.
const TRAP_MARKER: &str = "quota-patrol trap marker";

impl Trap {
    async fn start() -> Trap {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, seen) = tokio::sync::watch::channel(Vec::new());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut head = [0u8; 200];
                let read = tokio::time::timeout(StdDuration::from_secs(2), conn.read(&mut head));
                let n = read.await.ok().and_then(Result::ok).unwrap_or(0);
                let text = String::from_utf8_lossy(&head[..n]);
                let line = text.lines().next().unwrap_or("").to_string();
                tx.send_modify(|seen| seen.push(line));
            }
        });
        Trap { port, seen }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Fails when any connection but the marker reached the trap. The marker connection comes
    /// after every connection Codex made (it exited), so all of them have been read when it is.
    async fn assert_untouched(&self) {
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut conn, format!("{TRAP_MARKER}\r\n").as_bytes())
            .await
            .unwrap();
        let mut seen = self.seen.clone();
        let all = tokio::time::timeout(
            StdDuration::from_secs(10),
            seen.wait_for(|s| s.iter().any(|l| l == TRAP_MARKER)),
        )
        .await
        .expect("the trap reads its marker")
        .unwrap()
        .clone();
        let others: Vec<&String> = all.iter().filter(|l| *l != TRAP_MARKER).collect();
        assert!(others.is_empty(), "Codex tried the network: {others:?}");
    }
}

/// What one `codex exec` printed.
struct Run {
    success: bool,
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "success {}\n--- stdout\n{}\n--- stderr\n{}",
            self.success, self.stdout, self.stderr
        )
    }
}

/// The real binary serving a router whose pool `codex` has one account per fake upstream
/// (`acct-0`, `acct-1`, …), a client key made through the admin API, and a Codex home whose
/// provider points at the router.
struct Rig {
    codex: PathBuf,
    upstreams: Vec<FakeUpstream>,
    router: String,
    key: String,
    logs: Logs,
    trap: Trap,
    _child: tokio::process::Child,
    dir: tempfile::TempDir,
}

impl Rig {
    /// Starts `n` fake upstreams reading "now" from `clock`, the binary, and writes Codex's
    /// `config.toml` with the provider named `provider_name`.
    async fn start(codex: PathBuf, n: usize, clock: SharedClock, provider_name: &str) -> Rig {
        let mut upstreams = Vec::new();
        for _ in 0..n {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            upstreams.push(
                FakeUpstream::start_with_clock(addr, clock.clone())
                    .await
                    .unwrap(),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(dir.path(), &upstreams);
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_quota-patrol"))
            .args(["serve", "--config"])
            .arg(&config)
            .env(ADMIN_ENV, ADMIN_TOKEN)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the binary starts");
        let mut logs = Logs::follow(child.stderr.take().unwrap());
        let serving = logs.wait_for("quota-patrol serving").await;
        let api = format!("http://{}", serving["fields"]["api"].as_str().unwrap());
        let router = format!("http://{}", serving["fields"]["router"].as_str().unwrap());
        let created: Value = reqwest::Client::new()
            .post(format!("{api}/api/router/keys"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({"name": "codex"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let key = created["key"].as_str().expect("a key").to_string();
        let rig = Rig {
            codex,
            upstreams,
            router,
            key,
            logs,
            trap: Trap::start().await,
            _child: child,
            dir,
        };
        rig.write_codex_config(provider_name);
        rig
    }

    fn codex_home(&self) -> PathBuf {
        self.dir.path().join("home/.codex")
    }

    /// The provider block of docs/router.md "Codex CLI", plus what keeps Codex off the network: no
    /// update check, no analytics, no plugins (0.171 syncs them from github.com and chatgpt.com at
    /// start).
    fn write_codex_config(&self, provider_name: &str) {
        let text = format!(
            r#"model = "{MODEL}"
model_provider = "quota-patrol"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false

[model_providers.quota-patrol]
name = "{provider_name}"
base_url = "{router}/v1"
env_key = "{KEY_ENV}"
wire_api = "responses"
"#,
            router = self.router,
        );
        std::fs::create_dir_all(self.codex_home()).unwrap();
        std::fs::write(self.codex_home().join("config.toml"), text).unwrap();
        std::fs::create_dir_all(self.dir.path().join("work")).unwrap();
    }

    /// `codex exec <args>` in a fresh work directory, read-only sandbox, `TZ=UTC`, the router key
    /// in [`KEY_ENV`] and nothing else from this process's environment but `PATH`; killed after
    /// [`RUN_LIMIT`].
    async fn exec(&self, args: &[&str]) -> Run {
        let home = self.dir.path().join("home");
        let mut cmd = tokio::process::Command::new(&self.codex);
        cmd.args([
            "exec",
            "--strict-config",
            "--skip-git-repo-check",
            "--color",
            "never",
        ])
        .args(["--sandbox", "read-only"])
        .args(args)
        .current_dir(self.dir.path().join("work"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("CODEX_HOME", self.codex_home())
        .env("TZ", "UTC")
        .env(KEY_ENV, &self.key)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
        for var in [
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "ALL_PROXY",
            "https_proxy",
            "http_proxy",
        ] {
            cmd.env(var, self.trap.url());
        }
        let child = cmd.spawn().expect("codex starts");
        // On timeout the child is dropped, and `kill_on_drop` kills it.
        let out = tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("codex exec {args:?} ran over {RUN_LIMIT:?}"))
            .unwrap();
        Run {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Inference calls per account, in `acct-N` order.
    fn calls(&self) -> Vec<u64> {
        self.upstreams.iter().map(FakeUpstream::calls).collect()
    }

    /// The index of the only account that was called; fails unless exactly one was.
    fn only_called(&mut self) -> usize {
        let calls = self.calls();
        let called: Vec<usize> = (0..calls.len()).filter(|i| calls[*i] > 0).collect();
        assert_eq!(called.len(), 1, "calls {calls:?}\n{}", self.logs.so_far());
        called[0]
    }

    /// Nothing tried to leave 127.0.0.1.
    async fn assert_no_outside_traffic(&self) {
        self.trap.assert_untouched().await;
    }
}

fn write_config(dir: &Path, upstreams: &[FakeUpstream]) -> PathBuf {
    let mut text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_token_env = "{ADMIN_ENV}"

[database]
path = "{db}"

[logging]
format = "json"
level = "info"

[scheduler]
tick_seconds = 60
warmup = false

[router]
listen = "127.0.0.1:0"

[[router.pools]]
id = "codex"
models = ["{MODEL}"]
"#,
        db = dir.join("qp.db").display(),
    );
    for (i, up) in upstreams.iter().enumerate() {
        text.push_str(&format!(
            "\n[[router.accounts]]\npool = \"codex\"\nid = \"acct-{i}\"\nbase_url = \"{}\"\n",
            up.base_url()
        ));
    }
    let path = dir.join("quota-patrol.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The `prompt_cache_key` (Codex's conversation id) of an account's last request.
fn conversation(up: &FakeUpstream) -> String {
    let body = up.last_request().expect("a request");
    body["prompt_cache_key"]
        .as_str()
        .expect("prompt_cache_key")
        .to_string()
}

/// The types of an account's last `input` items.
fn input_types(up: &FakeUpstream) -> Vec<String> {
    let body = up.last_request().expect("a request");
    let items = body["input"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .map(|i| i["type"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Cases 1 and 2: the answer is printed, and `resume --last` stays on the conversation's account.
/// A fresh session key would take the free account (docs/router.md "Spreading new sessions": a
/// fresh key takes the first account without a live binding), so landing on the first account again
/// is the binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_prints_the_answer_and_resume_stays_on_the_conversations_account() {
    let Some(codex) = codex_bin() else { return };
    let mut rig = Rig::start(codex, 2, Arc::new(SystemClock), DOCS_PROVIDER_NAME).await;

    let first = rig.exec(&["Say hello."]).await;
    assert!(first.success, "{first:?}");
    assert_eq!(first.stdout.trim(), ANSWER_TEXT, "{first:?}");
    let account = rig.only_called();
    assert_eq!(rig.upstreams[account].calls(), 1);
    let id = conversation(&rig.upstreams[account]);

    let again = rig.exec(&["resume", "--last", "And once more."]).await;
    assert!(again.success, "{again:?}");
    assert_eq!(again.stdout.trim(), ANSWER_TEXT, "{again:?}");
    assert_eq!(rig.only_called(), account, "resume stays on the account");
    assert_eq!(rig.upstreams[account].calls(), 2);
    assert_eq!(
        conversation(&rig.upstreams[account]),
        id,
        "the same conversation"
    );
    rig.assert_no_outside_traffic().await;
}

/// Case 3 with the documented provider: Codex 0.171 compacts locally (its summary prompt as a
/// normal `/v1/responses` turn), on the conversation's account, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_compaction_runs_through_the_router_on_the_conversations_account() {
    let Some(codex) = codex_bin() else { return };
    let mut rig = Rig::start(codex, 2, Arc::new(SystemClock), DOCS_PROVIDER_NAME).await;
    let first = rig.exec(&["Say hello."]).await;
    assert!(first.success, "{first:?}");
    let account = rig.only_called();

    // Each turn reports 19 tokens: a limit of 5 compacts before the next turn.
    let limit = "model_auto_compact_token_limit=5";
    let resumed = rig.exec(&["-c", limit, "resume", "--last", "Go on."]).await;
    assert!(resumed.success, "{resumed:?}");
    assert!(resumed.stderr.contains("context compacted"), "{resumed:?}");
    assert_eq!(resumed.stdout.trim(), ANSWER_TEXT, "{resumed:?}");
    assert_eq!(rig.only_called(), account);
    assert_eq!(rig.upstreams[account].calls(), 3, "turn, compaction, turn");
    for up in &rig.upstreams {
        assert_eq!(up.compaction_triggers(), 0);
        assert_eq!(up.calls_on(Route::ResponsesCompact), 0);
    }
    rig.assert_no_outside_traffic().await;
}

/// Case 3 with remote compaction: for a provider it takes for OpenAI, Codex 0.171 asks for a
/// compaction with a `/v1/responses` request ending in a `compaction_trigger` item (remote
/// compaction v2; it never calls `/v1/responses/compact`), sends the compaction item it got back
/// as the history of its next turn, and stays on the conversation's account throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_compaction_goes_through_responses_on_the_conversations_account() {
    let Some(codex) = codex_bin() else { return };
    let mut rig = Rig::start(codex, 2, Arc::new(SystemClock), OPENAI_PROVIDER_NAME).await;
    let first = rig.exec(&["Say hello."]).await;
    assert!(first.success, "{first:?}");
    let account = rig.only_called();
    let id = conversation(&rig.upstreams[account]);

    let limit = "model_auto_compact_token_limit=5";
    let resumed = rig.exec(&["-c", limit, "resume", "--last", "Go on."]).await;
    assert!(resumed.success, "{resumed:?}");
    assert_eq!(resumed.stdout.trim(), ANSWER_TEXT, "{resumed:?}");
    assert_eq!(rig.only_called(), account);
    let up = &rig.upstreams[account];
    assert_eq!(up.compaction_triggers(), 1, "{resumed:?}");
    assert_eq!(up.calls_on(Route::Responses), 3, "turn, compaction, turn");
    assert_eq!(up.calls_on(Route::ResponsesCompact), 0, "not used by 0.171");
    let types = input_types(up);
    assert!(types.iter().any(|t| t == "compaction"), "{types:?}");
    assert!(
        !types.iter().any(|t| t == "compaction_trigger"),
        "{types:?}"
    );
    assert_eq!(conversation(up), id, "the same conversation");
    rig.assert_no_outside_traffic().await;
}

/// How Codex CLI 0.171 writes a reset time that is not today (observed: "Dec 6th, 2026 1:21 PM"):
/// month, day with its ordinal suffix, year, 12-hour time, in the local time zone (UTC here).
fn codex_reset_text(at: DateTime<Utc>) -> String {
    let day = at.day();
    let suffix = match (day % 10, day % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!(
        "{} {day}{suffix}, {} {}",
        at.format("%b"),
        at.format("%Y"),
        at.format("%-I:%M %p")
    )
}

#[test]
fn codex_reset_text_matches_what_codex_printed() {
    let at = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 12, 6, 13, 21, 0).unwrap();
    assert_eq!(codex_reset_text(at), "Dec 6th, 2026 1:21 PM");
    let at = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 1, 22, 0, 5, 0).unwrap();
    assert_eq!(codex_reset_text(at), "Jan 22nd, 2026 12:05 AM");
}

/// Case 4: every account answers Codex's `usage_limit_reached`; the router fails over, then
/// answers the all-exhausted 429 with the earliest reset, and Codex ends the turn at once with
/// its usage-limit message and that reset time (no retry, no waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_account_is_out_of_quota_codex_ends_the_turn_with_the_reset_time() {
    let Some(codex) = codex_bin() else { return };
    // Whole minutes, so the minute Codex prints is unambiguous.
    let now = SystemClock
        .now()
        .duration_trunc(Duration::minutes(1))
        .unwrap();
    let clock = Arc::new(ManualClock::new(now));
    let rig = Rig::start(codex, 2, clock, DOCS_PROVIDER_NAME).await;
    let reset_in = Duration::days(3);
    for up in &rig.upstreams {
        up.script([Step::UsageLimitJson {
            resets_in_seconds: reset_in.num_seconds(),
        }]);
    }

    let run = rig.exec(&["Say hello."]).await;
    assert!(!run.success, "{run:?}");
    assert_eq!(run.stdout.trim(), "", "{run:?}");
    let message = format!(
        "You’ve hit your usage limit. Try again at {}.",
        codex_reset_text(now + reset_in)
    );
    assert!(run.stderr.contains(&message), "{message}\n{run:?}");
    assert!(!run.stderr.contains("Reconnecting"), "no retry: {run:?}");
    assert_eq!(rig.calls(), [1, 1], "each account asked once");

    // The time is the router's `resets_at`: its own answer now, without asking an account.
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/responses", rig.router))
        .bearer_auth(&rig.key)
        .json(&json!({"model": MODEL, "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    assert_eq!(answer.headers()["x-quota-patrol-attempts"], "0");
    let error = &answer.json::<Value>().await.unwrap()["error"];
    assert_eq!(error["code"], "all_accounts_exhausted");
    assert_eq!(error["resets_at"], (now + reset_in).timestamp());
    rig.assert_no_outside_traffic().await;
}
