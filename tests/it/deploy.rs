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
