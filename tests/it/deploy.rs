//! The service files under `deploy/` agree with the daemon: the systemd unit gives the graceful
//! stop more time than its default deadline, runs subcommands the binary has, and keeps the
//! hardening an operator relies on. (`systemd-analyze verify deploy/quota-patrol.service` checks
//! the syntax where systemd is installed; see docs/rules/patrol.md §11.5 for the stop.)

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
}

#[test]
fn init_refuses_an_address_that_is_not_a_url_with_the_reason() {
    let out = quota_patrol(&["init", "--cpa-url", "127.0.0.1:8317"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cpa-url"), "{err}");
    assert!(out.stdout.is_empty(), "nothing is written on an error");
}
