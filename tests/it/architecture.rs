//! The dependency rules of the house. The pure core is its own crate (`crates/core`): Cargo
//! refuses any crate its `Cargo.toml` does not list, so the test holds that list against the
//! small pure crates allowed there, and reads its sources for what Cargo cannot see (the wall
//! clock, threads, files, API derives outside the `openapi` feature). The simulator
//! (`crates/sim`) reaches the daemon only as a feature-gated dependency of the `demo` command.
//! And the adapters' rules: the router reaches neither the store, CPA nor the jobs; the API and
//! the status page reach the store and CPA only through `jobs`; `config` is a leaf that does not
//! import the router.

use std::path::Path;

/// The crates `crates/core` may depend on: data, time, hashing, a bounded map, secrets. Runtime,
/// I/O, HTTP, SQL, mail, telemetry and randomness sources are adapters' business.
const CORE_MAY_USE: &[&str] = &[
    "chrono",
    "chrono-tz",
    "hex",
    "lru",
    "secrecy",
    "serde",
    "serde_json",
    "sha2",
    "siphasher",
    "subtle",
    // Optional, behind the `openapi` feature only (checked below).
    "utoipa",
];

fn manifest(path: &str) -> toml::Table {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    text.parse().unwrap()
}

#[test]
fn core_depends_only_on_small_pure_crates() {
    let core = manifest("crates/core/Cargo.toml");
    let deps = core["dependencies"].as_table().unwrap();
    let extra: Vec<&String> = deps
        .keys()
        .filter(|d| !CORE_MAY_USE.contains(&d.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "crates/core must stay pure, but depends on {extra:?}"
    );
    assert_eq!(
        deps["utoipa"]["optional"].as_bool(),
        Some(true),
        "utoipa only behind the `openapi` feature"
    );
    assert_eq!(
        core["features"]["openapi"].as_array().unwrap()[0].as_str(),
        Some("dep:utoipa")
    );
}

/// Sources of `crates/core`: no wall clock but in `clock.rs` (`SystemClock`), no threads, files,
/// sockets or processes, and `utoipa` only inside `cfg_attr(feature = "openapi", …)`.
#[test]
fn core_reads_no_clock_and_derives_api_docs_only_behind_its_feature() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/core/src");
    let mut offenders = Vec::new();
    for path in rust_files(&dir) {
        let text = std::fs::read_to_string(&path).unwrap();
        let is_clock = path.ends_with("clock.rs");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let at = format!("{}:{}: {}", path.display(), n + 1, line.trim());
            if !is_clock && (code.contains("Utc::now") || code.contains("SystemTime::now")) {
                offenders.push(format!("{at} (reads the clock)"));
            }
            for io in [
                "std::fs",
                "std::net",
                "std::process",
                "std::thread",
                "quota_patrol",
            ] {
                if uses(code, io) {
                    offenders.push(format!("{at} (names {io})"));
                }
            }
            if code.contains("utoipa") && !code.contains("cfg_attr(feature = \"openapi\"") {
                offenders.push(format!("{at} (utoipa outside the openapi feature)"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "core must stay pure:\n{}",
        offenders.join("\n")
    );
}

/// The simulator is optional for the daemon (feature `demo`), and only the demo names it: a
/// build without the feature ships no fakes.
#[test]
fn only_the_demo_reaches_the_simulator() {
    let root = manifest("Cargo.toml");
    assert_eq!(
        root["dependencies"]["quota-patrol-sim"]["optional"].as_bool(),
        Some(true)
    );
    assert_eq!(
        root["features"]["demo"].as_array().unwrap()[0].as_str(),
        Some("dep:quota-patrol-sim")
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    for path in rust_files(&src) {
        let rel = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "demo.rs" || rel.starts_with("demo/") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, code) in production_lines(&text) {
            if uses(&code, "quota_patrol_sim") {
                offenders.push(format!("src/{rel}:{}: {}", n + 1, code.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "only the demo uses the simulator:\n{}",
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
