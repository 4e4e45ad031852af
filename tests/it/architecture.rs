//! The dependency rule of ARCHITECTURE.md: `src/core` is pure — it imports no adapter crate and
//! no other module of this crate outside `core`, no telemetry, no randomness source, no API
//! documentation derive. And the adapters' rules: the router reaches neither the store, CPA nor
//! the jobs; the API and the status page reach the store and CPA only through `jobs`; `config` is
//! a leaf that does not import the router.

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

/// One dependency rule of an adapter: no non-test code under `place` (a folder or a file of
/// `src`) names any of `forbidden` as a path root.
struct Rule {
    place: &'static str,
    forbidden: &'static [&'static str],
    why: &'static str,
}

const ADAPTER_RULES: &[Rule] = &[
    Rule {
        place: "src/router",
        forbidden: &["crate::store", "crate::cpa", "crate::jobs"],
        why: "the router serves from the published pool and its own state; it reaches no store, CPA or job",
    },
    Rule {
        place: "src/api",
        forbidden: &["crate::store", "crate::cpa"],
        why: "the API reaches the store and CPA only through `jobs`",
    },
    Rule {
        place: "src/web",
        forbidden: &["crate::store", "crate::cpa"],
        why: "the status page reaches the store and CPA only through `jobs`",
    },
    Rule {
        place: "src/config.rs",
        forbidden: &["crate::router"],
        why: "config is a leaf: the router reads its settings, not the reverse",
    },
];

/// Names an adapter may still spell although their module is forbidden to it: the CPA error that
/// `jobs::JobError::Cpa` hands out (the API maps a refused key to its answer).
const HANDED_OUT_BY_JOBS: &[&str] = &["crate::cpa::CpaError"];

/// Files that are test code as a whole (declared under `#[cfg(test)]`).
const TEST_FILES: &[&str] = &["src/api/test_support.rs", "src/api/tests.rs"];

#[test]
fn adapters_keep_their_dependency_rules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = Vec::new();
    for rule in ADAPTER_RULES {
        let place = root.join(rule.place);
        let files = if place.is_dir() {
            rust_files(&place)
        } else {
            vec![place]
        };
        for path in files {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if TEST_FILES.contains(&rel.as_str()) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, code) in production_lines(&text) {
                for f in rule.forbidden {
                    if uses(&code, f) {
                        offenders.push(format!("{rel}:{}: {} ({})", n + 1, code.trim(), rule.why));
                    }
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "adapter dependency rules broken:\n{}",
        offenders.join("\n")
    );
}

/// The lines of `text` before its first `#[cfg(test)]` (test modules end the files), comments
/// cut, names handed out by jobs blanked, and `crate::{a, b::c}` groups spelled out as
/// `use crate::a; use crate::b::c;`, with their line numbers (0-based).
fn production_lines(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .enumerate()
        .map(|(n, line)| {
            let mut code = line.split("//").next().unwrap_or("").to_string();
            for name in HANDED_OUT_BY_JOBS {
                code = code.replace(name, "_");
            }
            (n, spell_out_groups(&code))
        })
        .collect()
}

/// `use crate::{store, jobs::x};` → the same, then `use crate::store; use crate::jobs::x;`.
fn spell_out_groups(code: &str) -> String {
    let Some(at) = code.find("crate::{") else {
        return code.to_string();
    };
    let inner = &code[at + "crate::{".len()..];
    let inner = inner.split('}').next().unwrap_or("");
    let mut out = code.to_string();
    for item in inner.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        out.push_str(&format!(" use crate::{};", item.trim_start_matches('{')));
    }
    out
}

#[test]
fn the_rule_reader_sees_groups_and_skips_tests_and_handed_out_names() {
    let lines = production_lines(
        "use crate::{jobs, store::Store};\nlet e = crate::cpa::CpaError::Auth;\n#[cfg(test)]\nuse crate::store;\n",
    );
    assert_eq!(lines.len(), 2, "test code is not read");
    assert!(uses(&lines[0].1, "crate::store") && uses(&lines[0].1, "crate::jobs"));
    assert!(!uses(&lines[1].1, "crate::cpa"));
    assert!(uses(
        &production_lines("crate::cpa::wire::X")[0].1,
        "crate::cpa"
    ));
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
