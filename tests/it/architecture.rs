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

// ---- No import circle between files -------------------------------------------------------

use std::collections::{BTreeMap, BTreeSet};

/// One crate's source tree: its `src` folder and each file's module path (`src/router/http.rs`
/// → `["router", "http"]`; `lib.rs`, `main.rs` and a folder's `mod.rs` name their folder).
struct SourceTree {
    src: std::path::PathBuf,
    modules: BTreeMap<Vec<String>, std::path::PathBuf>,
}

/// The module path of a file under `src`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    let is_root = parts.is_empty() && (stem == "lib" || stem == "main");
    if stem != "mod" && !is_root {
        parts.push(stem.to_string());
    }
    parts
}

/// The crate roots to walk: this crate's `src`, then every `crates/*/src` (each its own
/// `crate::` root).
fn source_trees(root: &Path) -> Vec<SourceTree> {
    let mut srcs = vec![root.join("src")];
    if let Ok(entries) = std::fs::read_dir(root.join("crates")) {
        let mut more: Vec<_> = entries
            .filter_map(|e| Some(e.ok()?.path().join("src")))
            .filter(|p| p.is_dir())
            .collect();
        more.sort();
        srcs.extend(more);
    }
    srcs.into_iter()
        .map(|src| {
            let modules = rust_files(&src)
                .into_iter()
                .map(|f| (module_path(&src, &f), f))
                .collect();
            SourceTree { src, modules }
        })
        .collect()
}

/// The non-test code of a file as one string: the lines before its first `#[cfg(test)]`,
/// comments cut (a `use` group spread over lines stays one statement).
fn production_code(text: &str) -> String {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Module names a file declares under `#[cfg(test)]` (`#[cfg(test)] mod tests;`): those files
/// are test code as a whole.
fn test_children(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|w| w[0] == "#[cfg(test)]")
        .filter_map(|w| {
            let decl = w[1].strip_suffix(';')?;
            let name = decl.rsplit(' ').next()?;
            decl.split(' ')
                .any(|t| t == "mod")
                .then(|| name.to_string())
        })
        .collect()
}

fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Reads a path (or a `{…}` group of paths) at the start of `s`, each spelled out after
/// `prefix`, into `out`; returns the bytes read.
fn read_tree(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut segs = prefix.to_vec();
    let mut at = 0;
    loop {
        let rest = &s[at..];
        let skipped = rest.len() - rest.trim_start().len();
        at += skipped;
        let rest = &s[at..];
        if rest.starts_with('{') {
            at += 1;
            loop {
                at += read_tree(&s[at..], &segs, out);
                let rest = &s[at..];
                let skipped = rest.len() - rest.trim_start().len();
                at += skipped;
                match s[at..].chars().next() {
                    Some(',') => at += 1,
                    Some('}') => return at + 1,
                    _ => return at,
                }
            }
        }
        let len = rest.find(|c: char| !ident_char(c)).unwrap_or(rest.len());
        if len == 0 {
            break;
        }
        segs.push(rest[..len].to_string());
        at += len;
        if s[at..].starts_with("::") {
            at += 2;
        } else {
            break;
        }
    }
    if segs.len() > prefix.len() {
        out.push(segs);
    }
    at
}

/// The module paths that `code` (of the module at `module`) names through `crate::`, `super::`
/// or `self::`, made absolute (`super::super::x` from `a::b::c` → `a::x`); groups spelled out.
/// Bare relative paths (a parent's `child::X`) are not read.
fn references(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for root in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(root) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| ident_char(c) || c == ':' || c == '$') {
                continue;
            }
            let mut paths = Vec::new();
            read_tree(&code[at..], &[], &mut paths);
            for path in paths {
                let mut abs: Vec<String> = module.to_vec();
                for (i, seg) in path.iter().enumerate() {
                    match seg.as_str() {
                        "crate" if i == 0 => abs.clear(),
                        "super" => {
                            abs.pop();
                        }
                        "self" => {}
                        _ => abs.push(seg.clone()),
                    }
                }
                out.push(abs);
            }
        }
    }
    out
}

/// The file a module path names: its longest prefix that is a file of `tree` (`a/b.rs` or
/// `a/b/mod.rs`; the crate root when none is).
fn resolve<'t>(tree: &'t SourceTree, path: &[String]) -> Option<&'t std::path::PathBuf> {
    (0..=path.len())
        .rev()
        .find_map(|n| tree.modules.get(&path[..n]))
}

/// The file graph of every crate: file → the files its non-test code names.
fn import_graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let rel = |p: &Path| {
        p.strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/")
    };
    let mut graph = BTreeMap::new();
    for tree in source_trees(root) {
        let mut tests = BTreeSet::new();
        for (module, file) in &tree.modules {
            let text = std::fs::read_to_string(file).unwrap();
            for child in test_children(&text) {
                let mut m = module.clone();
                m.push(child);
                tests.insert(m);
            }
        }
        for (module, file) in &tree.modules {
            let name = rel(file);
            if tests.iter().any(|t| module.starts_with(t)) || TEST_FILES.contains(&name.as_str()) {
                continue;
            }
            let text = std::fs::read_to_string(file).unwrap();
            let edges: BTreeSet<String> = references(&production_code(&text), module)
                .iter()
                .filter_map(|p| resolve(&tree, p))
                .filter(|to| *to != file)
                .map(|to| rel(to))
                .collect();
            graph.insert(name, edges);
        }
        assert!(tree.src.is_dir());
    }
    graph
}

/// The strongly connected groups of more than one file (Tarjan), each sorted.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    group.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// No file of `src/` (or of a crate under `crates/`) imports, directly or through others, a
/// file that imports it back: each group of files that do is listed.
#[test]
fn no_import_circle_between_files() {
    let graph = import_graph(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        graph.contains_key("src/router/http.rs"),
        "the walker reads src"
    );
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "import circles between files:\n{}",
        found
            .iter()
            .map(|g| g.join(" ⇄ "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_import_reader_resolves_paths_to_files() {
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let here = m("router::http");
    assert_eq!(
        references("use super::{answer::error, attempt::{self, X}};", &here),
        vec![
            m("router::answer::error"),
            m("router::attempt"),
            m("router::attempt::X")
        ]
    );
    assert_eq!(
        references("use crate::core::failure::{\n    A,\n    B,\n};", &here),
        vec![m("core::failure::A"), m("core::failure::B")]
    );
    assert_eq!(
        references("super::super::clock::X", &here),
        vec![m("clock::X")]
    );
    assert_eq!(
        references("self::inner::f()", &here),
        vec![m("router::http::inner::f")]
    );
    assert!(references("my_crate::x; a::super::y; pub(super) fn f()", &here).is_empty());
    let tree = SourceTree {
        src: "src".into(),
        modules: [
            (vec![], "src/lib.rs"),
            (m("router"), "src/router/mod.rs"),
            (m("router::http"), "src/router/http.rs"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect(),
    };
    let file = |p: &str| {
        resolve(&tree, &m(p))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    };
    assert_eq!(file("router::http::error"), "src/router/http.rs");
    assert_eq!(file("router::Shared"), "src/router/mod.rs");
    assert_eq!(file("Thing"), "src/lib.rs");
    assert_eq!(
        module_path(Path::new("src"), Path::new("src/router/mod.rs")),
        m("router")
    );
    assert_eq!(
        module_path(Path::new("src"), Path::new("src/lib.rs")),
        Vec::<String>::new()
    );
    assert_eq!(
        test_children("#[cfg(test)]\nmod tests;\nmod real;"),
        vec!["tests".to_string()]
    );
}
