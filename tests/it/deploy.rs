//! The service files agree with the daemon: the systemd unit (`deploy/quota-patrol.service`) and
//! the container (`Dockerfile`, `deploy/compose.yaml` and its config) give the graceful stop more
//! time than its deadline, run subcommands the binary has, run as a non-root user, and keep
//! secrets out of their files. (`systemd-analyze verify` checks the unit's syntax where systemd
//! is installed; building the image needs a container engine, which these tests do not; see
//! docs/rules/patrol.md §11.5 for the stop.)

use std::collections::HashMap;
use std::path::Path;

use quota_patrol::config::DEFAULT_SHUTDOWN_DEADLINE_SECONDS;

/// `key=value` lines of a unit file (the last value of a repeated key wins; comments skipped).
fn unit(path: &str) -> HashMap<String, String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

#[test]
fn the_unit_waits_longer_than_the_graceful_stop_and_runs_real_subcommands() {
    let u = unit("deploy/quota-patrol.service");
    let stop: u64 = u["TimeoutStopSec"].parse().unwrap();
    assert!(
        stop > DEFAULT_SHUTDOWN_DEADLINE_SECONDS,
        "TimeoutStopSec {stop} must exceed the {DEFAULT_SHUTDOWN_DEADLINE_SECONDS} s deadline"
    );
    assert_eq!(u["KillSignal"], "SIGTERM");
    assert_eq!(u["Restart"], "on-failure");
    for (key, sub) in [("ExecStart", "serve"), ("ExecStartPre", "check-config")] {
        let words: Vec<&str> = u[key].split_whitespace().collect();
        assert_eq!(words[1], sub, "{key}");
        let help = std::process::Command::new(env!("CARGO_BIN_EXE_quota-patrol"))
            .args([sub, "--help"])
            .output()
            .unwrap();
        assert!(help.status.success(), "quota-patrol {sub} exists");
        assert!(words.contains(&"--config"));
    }
}

#[test]
fn the_unit_is_hardened_and_keeps_secrets_out_of_the_unit() {
    let u = unit("deploy/quota-patrol.service");
    for (key, want) in [
        ("DynamicUser", "yes"),
        ("StateDirectory", "quota-patrol"),
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
    ] {
        assert_eq!(u.get(key).map(String::as_str), Some(want), "{key}");
    }
    assert!(u["EnvironmentFile"].ends_with("quota-patrol.env"));
    assert!(
        !u.contains_key("Environment"),
        "secrets belong in the EnvironmentFile"
    );
}

fn quota_patrol(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_quota-patrol"));
    cmd.args(args)
        .env_remove("QUOTA_PATROL_CONFIG")
        .env_remove("QUOTA_PATROL_ADMIN_TOKEN")
        .env_remove("CPA_MANAGEMENT_KEY");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn init_writes_a_config_that_check_config_accepts_and_holds_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quota-patrol.toml");
    let p = path.to_str().unwrap();
    let out = quota_patrol(
        &["init", "--cpa-url", "http://127.0.0.1:8317", "--output", p],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("cpa_base_url = \"http://127.0.0.1:8317\""));
    assert!(text.contains("management_key_env = \"CPA_MANAGEMENT_KEY\""));
    assert!(!text.contains("secret_key") && !text.contains("management_key ="));

    let secrets = [
        ("QUOTA_PATROL_ADMIN_TOKEN", "admin-token-for-init-test"),
        ("CPA_MANAGEMENT_KEY", "mgmt-key-for-init-test"),
    ];
    let check = quota_patrol(&["check-config", "--config", p], &secrets);
    let said = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{said}");
    assert!(said.contains("is valid: 1 site(s)"), "{said}");
    assert!(
        !said.contains("admin-token-for-init-test") && !said.contains("mgmt-key-for-init-test")
    );

    // A second init does not replace the file without --force.
    let again = quota_patrol(
        &["init", "--cpa-url", "http://cpa:9000", "--output", p],
        &[],
    );
    assert_eq!(again.status.code(), Some(2));
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("127.0.0.1:8317")
    );
    let forced = quota_patrol(
        &[
            "init",
            "--cpa-url",
            "http://cpa:9000",
            "--listen",
            "127.0.0.1:8491",
            "--database",
            "second.db",
            "--output",
            p,
            "--force",
        ],
        &[],
    );
    assert!(forced.status.success());
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("http://cpa:9000")
    );
    // --listen moves the API (a second daemon beside the demo, or 0.0.0.0 in a container).
    let check = quota_patrol(&["check-config", "--config", p], &secrets);
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{said}");
    assert!(said.contains("API on 127.0.0.1:8491"), "{said}");
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("path = \"second.db\"")
    );
}

#[test]
fn init_refuses_an_address_that_is_not_a_url_with_the_reason() {
    let out = quota_patrol(&["init", "--cpa-url", "127.0.0.1:8317"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cpa-url"), "{err}");
    assert!(out.stdout.is_empty(), "nothing is written on an error");
}

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// Dockerfile instructions as (INSTRUCTION, arguments), continuation lines joined.
type Instructions = Vec<(String, String)>;

/// The instructions of the Dockerfile's last stage (the image), and of the whole file (for the
/// build stage).
fn dockerfile() -> (Instructions, Instructions) {
    // Comment lines go first (Docker drops them, even inside a continued instruction).
    let text: String = repo_file("Dockerfile")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let all: Vec<(String, String)> = text
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_once(char::is_whitespace) {
            Some((i, a)) => (
                i.to_uppercase(),
                a.split_whitespace().collect::<Vec<_>>().join(" "),
            ),
            None => (l.to_uppercase(), String::new()),
        })
        .collect();
    let last_from = all.iter().rposition(|(i, _)| i == "FROM").unwrap();
    (all[last_from..].to_vec(), all)
}

/// The one argument of `instruction` in the image stage (it must appear exactly once).
fn only<'a>(image: &'a [(String, String)], instruction: &str) -> &'a str {
    let found: Vec<&str> = image
        .iter()
        .filter(|(i, _)| i == instruction)
        .map(|(_, a)| a.as_str())
        .collect();
    assert_eq!(found.len(), 1, "one {instruction} in the image stage");
    found[0]
}

/// A JSON-array (exec form) argument, e.g. `["quota-patrol", "serve"]`.
fn exec_form(args: &str) -> Vec<String> {
    serde_json::from_str(args).unwrap_or_else(|e| panic!("{args:?} is not exec form: {e}"))
}

fn assert_subcommand_exists(sub: &str) {
    let help = quota_patrol(&[sub, "--help"], &[]);
    assert!(help.status.success(), "quota-patrol {sub} exists");
}

#[test]
fn the_image_runs_real_subcommands_as_a_non_root_user_and_stops_on_sigterm() {
    let (image, all) = dockerfile();
    assert_eq!(exec_form(only(&image, "ENTRYPOINT")), ["quota-patrol"]);
    let cmd = exec_form(only(&image, "CMD"));
    assert_eq!(cmd, ["serve"]);
    assert_subcommand_exists(&cmd[0]);
    let health = only(&image, "HEALTHCHECK");
    let (_, probe) = health.split_once(" CMD ").expect("HEALTHCHECK … CMD [...]");
    let probe = exec_form(probe);
    assert_eq!(probe[..2], ["quota-patrol", "healthcheck"]);
    assert_subcommand_exists(&probe[1]);

    assert_eq!(only(&image, "STOPSIGNAL"), "SIGTERM");
    let user = only(&image, "USER");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a numeric UID");
    assert_ne!(uid, 0, "USER {user} is not root");
    assert_eq!(only(&image, "VOLUME"), r#"["/var/lib/quota-patrol"]"#);
    assert_eq!(
        only(&image, "ENV"),
        "QUOTA_PATROL_CONFIG=/etc/quota-patrol/quota-patrol.toml"
    );
    let exposed: Vec<&str> = only(&image, "EXPOSE").split(' ').collect();
    assert_eq!(
        exposed,
        ["8390", "8320"],
        "the API's and the router's ports"
    );

    // The build: the workspace's rust-version and the release command of the systemd unit.
    let manifest: toml::Table = repo_file("Cargo.toml").parse().unwrap();
    let msrv = manifest["workspace"]["package"]["rust-version"]
        .as_str()
        .unwrap();
    assert!(all.contains(&("ARG".into(), format!("RUST_VERSION={msrv}"))));
    assert!(all.contains(&(
        "FROM".into(),
        "docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS builder".into()
    )));
    let build = all
        .iter()
        .find(|(i, a)| i == "RUN" && a.contains("cargo build"))
        .expect("a cargo build step");
    assert!(
        build
            .1
            .contains("cargo build --release --locked --no-default-features"),
        "{}",
        build.1
    );
    assert!(
        repo_file(".dockerignore")
            .lines()
            .any(|l| l.trim() == "**/*.env"),
        "env files (secrets) stay out of the build context"
    );
}

/// The lines of one service of `deploy/compose.yaml` (those indented under `  name:`).
fn compose_service(name: &str) -> Vec<String> {
    let text = repo_file("deploy/compose.yaml");
    let header = format!("  {name}:");
    text.lines()
        .skip_while(|l| *l != header)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| l.split(" #").next().unwrap().trim().to_owned())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The value of `key:` among a service's lines.
fn compose_value<'a>(service: &'a [String], key: &str) -> &'a str {
    service
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("{key} in the service"))
        .trim()
}

/// Seconds of a compose duration such as `45s` or `1m30s`.
fn compose_seconds(text: &str) -> u64 {
    let (mut total, mut n) = (0, String::new());
    for c in text.chars() {
        match c {
            '0'..='9' => n.push(c),
            'm' => total += 60 * n.drain(..).as_str().parse::<u64>().unwrap(),
            's' => total += n.drain(..).as_str().parse::<u64>().unwrap(),
            _ => panic!("{text:?} is not a duration like 45s"),
        }
    }
    assert!(n.is_empty(), "{text:?} has a unit");
    total
}

/// `NAME=` lines of an env example file: (name, value).
fn env_example(path: &str) -> Vec<(String, String)> {
    repo_file(path)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').expect("NAME=");
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

#[test]
fn the_compose_config_passes_check_config_and_fits_the_image_and_its_stop() {
    let (image, _) = dockerfile();
    let qp = compose_service("quota-patrol");
    let config_mount = "./quota-patrol.compose.toml:/etc/quota-patrol/quota-patrol.toml:ro";
    assert!(qp.iter().any(|l| l == &format!("- {config_mount}")));
    assert!(
        qp.iter()
            .any(|l| l == "- quota-patrol-data:/var/lib/quota-patrol")
    );
    assert!(qp.contains(&"- cpa.env".to_string()) && qp.contains(&"- quota-patrol.env".into()));

    // The env examples name every secret the config reads, and hold no value.
    let cpa = env_example("deploy/cpa.env.example");
    let own = env_example("deploy/quota-patrol.env.example");
    assert!(
        cpa.iter().chain(&own).all(|(_, v)| v.is_empty()),
        "no values"
    );
    let secrets: Vec<(&str, &str)> = cpa
        .iter()
        .chain(&own)
        .map(|(k, _)| (k.as_str(), "a-value-for-the-deploy-test"))
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/quota-patrol.compose.toml");
    let check = quota_patrol(
        &["check-config", "--config", path.to_str().unwrap()],
        &secrets,
    );
    let said = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{said}");

    let env = |k: &str| {
        secrets
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    };
    let cfg = quota_patrol::config::Config::load(&path, &env).unwrap();
    assert!(
        cfg.listen.ip().is_unspecified(),
        "reachable from outside the container"
    );
    assert!(cfg.database_path.starts_with("/var/lib/quota-patrol/"));
    assert_eq!(cfg.sites[0].cpa_base_url, "http://cli-proxy-api:8317");
    assert!(compose_service("cli-proxy-api").contains(&"- \"8317:8317\"".to_string()));
    let port = cfg.listen.port().to_string();
    assert!(only(&image, "EXPOSE").split(' ').any(|p| p == port));
    assert!(qp.contains(&format!("- \"127.0.0.1:{port}:{port}\"")));

    // Compose waits longer than the daemon's graceful stop, and asks the binary's /healthz.
    let grace = compose_seconds(compose_value(&qp, "stop_grace_period"));
    assert!(
        grace > cfg.shutdown_deadline_seconds,
        "stop_grace_period {grace} s must exceed the {} s deadline",
        cfg.shutdown_deadline_seconds
    );
    assert_eq!(compose_value(&qp, "stop_signal"), "SIGTERM");
    let test = exec_form(compose_value(&qp, "test"));
    assert_eq!(test[..3], ["CMD", "quota-patrol", "healthcheck"]);
    assert_eq!(test[4], format!("http://127.0.0.1:{port}/healthz"));
    assert_subcommand_exists(&test[2]);
}

/// `quota-patrol healthcheck` without blocking the runtime the app under test runs on.
async fn healthcheck(url: &str) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_quota-patrol"))
        .args(["healthcheck", "--url", url, "--timeout-seconds", "5"])
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn healthcheck_exits_0_when_healthz_answers_and_1_otherwise() {
    let t = crate::helpers::spawn_app(vec![]).await;
    let ok = healthcheck(&format!("{}/healthz", t.api)).await;
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("200"));

    let missing = healthcheck(&format!("{}/no-such-page", t.api)).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("404"));

    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = healthcheck(&format!("http://127.0.0.1:{port}/healthz")).await;
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).contains("did not answer"));
}
