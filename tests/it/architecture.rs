//! The dependency rule of ARCHITECTURE.md: `src/core` is pure — it imports no adapter crate and
//! no other module of this crate outside `core`, no telemetry, no randomness source, no API
//! documentation derive (issue 8 item 7).

use std::path::Path;

const FORBIDDEN: &[&str] = &[
    // Adapter crates: I/O, runtime, HTTP, SQL, mail, schedules.
    "tokio",
    "tokio_util",
    "tokio_cron_scheduler",
    "reqwest",
    "rusqlite",
    "rusqlite_migration",
    "axum",
    "tower",
    "tower_http",
    "lettre",
    "minijinja",
    // API documentation belongs on API view types (`api::schemas`), not on core types.
    "utoipa",
    "utoipa_axum",
    // Telemetry is the callers' business: core returns values, jobs log and count them.
    "metrics",
    "metrics_exporter_prometheus",
    "tracing",
    "tracing_subscriber",
    // Randomness is injected (`crate::random`), as the clock is: core takes a jitter argument.
    "rand",
    // Every top-level module of the crate (src/lib.rs) but `core`.
    "crate::alerts",
    "crate::api",
    "crate::app",
    "crate::clock",
    "crate::config",
    "crate::cpa",
    "crate::demo",
    "crate::jobs",
    "crate::random",
    "crate::router",
    "crate::scheduler",
    "crate::sim",
    "crate::store",
    "crate::table",
    "crate::telemetry",
    "crate::web",
    "quota_patrol",
    "std::fs",
    "std::net",
    "std::process",
    "std::thread",
];

/// Every top-level module declared in src/lib.rs but `core` is forbidden (new modules too).
#[test]
fn every_non_core_module_of_the_crate_is_forbidden_in_core() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    for module in lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';'))
        .filter(|m| *m != "core")
    {
        let path = format!("crate::{module}");
        assert!(
            FORBIDDEN.contains(&path.as_str()),
            "{path} is not in FORBIDDEN"
        );
    }
}

#[test]
fn core_imports_no_adapter() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut offenders = Vec::new();
    for path in rust_files(&dir) {
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for f in FORBIDDEN {
                if uses(code, f) {
                    offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
            if code.contains("Utc::now") || code.contains("SystemTime::now") {
                offenders.push(format!("{}:{}: reads the clock", path.display(), n + 1));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "core must stay pure:\n{}",
        offenders.join("\n")
    );
}

/// Every `.rs` file under `dir`, submodule folders (`core/failure/tests.rs`) included.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// Whether a line of code names `path` as a path root: `path::…` or `use path`, not as the
/// tail of a longer name (`tokio` must not match `my_tokio::`, `rand` not `operand::`).
fn uses(code: &str, path: &str) -> bool {
    [format!("{path}::"), format!("use {path}")]
        .iter()
        .any(|pat| {
            code.match_indices(pat.as_str()).any(|(at, _)| {
                // `::tokio::` (an absolute path) counts; `super::retry::` does not.
                let head = code[..at].strip_suffix("::").unwrap_or(&code[..at]);
                let before = head.chars().next_back();
                let after = code[at + pat.len()..].chars().next();
                let starts = !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
                let ends =
                    pat.ends_with("::") || !after.is_some_and(|c| c.is_alphanumeric() || c == '_');
                starts && ends
            })
        })
}

#[test]
fn the_path_matcher_sees_roots_only() {
    assert!(uses("    let x = rand::rng();", "rand"));
    assert!(uses("use rand::Rng;", "rand"));
    assert!(uses("#[derive(utoipa::ToSchema)]", "utoipa"));
    assert!(uses("use crate::clock::Clock;", "crate::clock"));
    assert!(!uses("operand::x()", "rand"));
    assert!(!uses("use randomness::X;", "rand"));
    assert!(uses("let t = ::tokio::spawn(f);", "tokio"));
    assert!(!uses("super::retry::Backoff", "retry"));
}
