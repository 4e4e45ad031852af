//! References stay inside the repository: every text file a contributor reads (sources, tests,
//! benches, templates, config examples, migrations, manifests, the README and `docs/`) is
//! scanned for three kinds of broken pointer, each reported as `file:line`:
//! - a path into the team notebook outside the repository (`../shared…`, `shared/spec…`);
//! - this project's own issue numbers (`issue 10`, `issues 7`; case-insensitive). Public
//!   references with a `#` (`CPA #5277`, `upstream issue #74`, `PR #5211`) are fine;
//! - a `<name>.md §<n>` citation whose page is not under `docs/` or whose section has no
//!   heading there (`## 3. …` or `### 2.1 …`). The page resolves as written from the repository
//!   root when it starts with `docs/`, else relative to the citing file, else (for a path with a
//!   folder, like `rules/router.md`) relative to `docs/`. A list after a citation
//!   (`router.md §1, §2`, `§3–§4`) is checked too.
//!
//! This file itself is not scanned: its unit checks hold examples of every broken form.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

const NOTEBOOK: [&str; 2] = ["../shared", "shared/spec"];
const ISSUE_WORDS: [&str; 2] = ["issue", "issues"];

/// This file, left out of the scan (its unit checks quote broken references).
const SELF: &str = "tests/it/references.rs";
const SECTION: char = '§';

/// Folders scanned recursively from the repository root.
const TREES: [&str; 8] = [
    "src",
    "crates",
    "tests",
    "benches",
    "templates",
    "config",
    "migrations",
    "docs",
];

/// Single files scanned beside the trees.
const FILES: [&str; 3] = ["README.md", "Cargo.toml", "fixtures/README.md"];

/// One `<page>.md §<section>` citation found on a line: the page as written and the section.
#[derive(Debug, PartialEq, Eq)]
struct Citation {
    page: String,
    section: String,
}

/// Every citation on `line`: each `§<n>` right after a `<name>.md` (optionally in backticks),
/// and the `§<n>` that follow it in a list (`, §4`, `–§5`, ` and §6`, `/§7`).
fn citations(line: &str) -> Vec<Citation> {
    let mut out = Vec::new();
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != SECTION {
            i += 1;
            continue;
        }
        let Some(page) = page_before(&chars[..i]) else {
            i += 1;
            continue;
        };
        let mut at = i;
        loop {
            let (section, end) = section_after(&chars, at + 1);
            if section.is_empty() {
                break;
            }
            out.push(Citation {
                page: page.clone(),
                section,
            });
            match next_in_list(&chars, end) {
                Some(next) => at = next,
                None => {
                    at = end;
                    break;
                }
            }
        }
        i = at.max(i + 1);
    }
    out
}

/// The `<name>.md` token ending right before a `§` (spaces and backticks between allowed).
fn page_before(before: &[char]) -> Option<String> {
    let mut end = before.len();
    while end > 0 && (before[end - 1] == ' ' || before[end - 1] == '`') {
        end -= 1;
    }
    let mut start = end;
    while start > 0 && is_path_char(before[start - 1]) {
        start -= 1;
    }
    let token: String = before[start..end].iter().collect();
    let token = token.trim_start_matches(['.', '/']).len();
    let full: String = before[start..end].iter().collect();
    (token > 3 && full.ends_with(".md")).then_some(full)
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')
}

/// The section number starting at `from` (spaces skipped) and the index after it; a trailing
/// dot (end of a sentence) is not part of it.
fn section_after(chars: &[char], from: usize) -> (String, usize) {
    let mut i = from;
    while i < chars.len() && chars[i] == ' ' {
        i += 1;
    }
    let start = i;
    while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
        i += 1;
    }
    let mut section: String = chars[start..i].iter().collect();
    while section.ends_with('.') {
        section.pop();
    }
    if section.starts_with('.') {
        section.clear();
    }
    (section, i)
}

/// The index of the next `§` when the text at `from` continues a list of sections.
fn next_in_list(chars: &[char], from: usize) -> Option<usize> {
    let rest: String = chars[from..].iter().take(8).collect();
    for sep in [", ", "–", "-", " and ", " or ", "/", ","] {
        if let Some(after) = rest.strip_prefix(sep) {
            let skipped = after.chars().take_while(|c| *c == ' ').count();
            if after[skipped..].starts_with(SECTION) {
                return Some(from + sep.chars().count() + skipped);
            }
        }
    }
    None
}

/// Whether `line` names one of this project's issues by number (`issue 7`, `Issues 10`).
fn cites_issue_number(line: &str) -> bool {
    let lower = line.to_lowercase();
    let bytes = lower.as_bytes();
    for word in ISSUE_WORDS {
        let mut from = 0;
        while let Some(pos) = lower[from..].find(word) {
            let start = from + pos;
            let end = start + word.len();
            from = end;
            let word_start = start == 0 || !bytes[start - 1].is_ascii_alphanumeric();
            let rest = &lower[end..];
            let spaced = rest.trim_start_matches(' ');
            let numbered = spaced.len() < rest.len()
                && spaced.chars().next().is_some_and(|c| c.is_ascii_digit());
            if word_start && numbered {
                return true;
            }
        }
    }
    false
}

/// The section numbers of a Markdown page: `## 3. Title` → `3`, `### 2.1 Title` → `2.1`.
fn headings(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| {
            let title = l.trim_start_matches('#').trim_start();
            let first = title.split_whitespace().next()?;
            let number = first.trim_end_matches('.');
            let numeric = !number.is_empty()
                && number.chars().all(|c| c.is_ascii_digit() || c == '.')
                && number.chars().next().is_some_and(|c| c.is_ascii_digit());
            numeric.then(|| number.to_string())
        })
        .collect()
}

/// `path` with `.` and `..` folded, without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The page a citation in `citing` (repository-relative) names, repository-relative, if it is
/// an existing file under `docs/`.
fn resolve(root: &Path, citing: &Path, page: &str) -> Option<PathBuf> {
    let mut tries = Vec::new();
    if page.starts_with("docs/") {
        tries.push(PathBuf::from(page));
    } else {
        let dir = citing.parent().unwrap_or(Path::new(""));
        tries.push(normalise(&dir.join(page)));
        if page.contains('/') {
            tries.push(normalise(&Path::new("docs").join(page)));
        }
    }
    tries
        .into_iter()
        .find(|p| p.starts_with("docs") && root.join(p).is_file())
}

/// Every file to scan, repository-relative, sorted.
fn scanned_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = FILES.iter().map(PathBuf::from).collect();
    let mut stack: Vec<PathBuf> = TREES.iter().map(PathBuf::from).collect();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let rel = dir.join(entry.file_name());
            let name = entry.file_name().to_string_lossy().to_string();
            if name == "target" || name.starts_with('.') {
                continue;
            }
            let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir {
                stack.push(rel);
            } else if rel.starts_with("docs") && !name.ends_with(".md") {
                continue;
            } else {
                files.push(rel);
            }
        }
    }
    files.retain(|f| root.join(f).is_file() && f != Path::new(SELF));
    files.sort();
    files
}

/// Every broken reference of the repository at `root`, as `file:line: what`.
fn offenders(root: &Path) -> Vec<String> {
    let mut pages: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut out = Vec::new();
    for file in scanned_files(root) {
        let Ok(bytes) = std::fs::read(root.join(&file)) else {
            continue;
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue; // binary
        };
        if text.contains('\0') {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let at = format!("{}:{}", file.display(), n + 1);
            if let Some(needle) = NOTEBOOK.iter().find(|s| line.contains(*s)) {
                out.push(format!("{at}: points outside the repository ({needle})"));
            }
            if cites_issue_number(line) {
                out.push(format!("{at}: cites an issue number of this project"));
            }
            for c in citations(line) {
                let Some(page) = resolve(root, &file, &c.page) else {
                    out.push(format!(
                        "{at}: {} §{}: no such page under docs/",
                        c.page, c.section
                    ));
                    continue;
                };
                let sections = pages.entry(page.clone()).or_insert_with(|| {
                    headings(&std::fs::read_to_string(root.join(&page)).unwrap_or_default())
                });
                if !sections.contains(&c.section) {
                    out.push(format!(
                        "{at}: {} §{}: {} has no heading for that section",
                        c.page,
                        c.section,
                        page.display()
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn every_reference_stays_inside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = offenders(root);
    assert!(
        found.is_empty(),
        "{} broken reference(s) (cite docs/rules/<page>.md §N or docs/decisions.md §N, or a \
         public source):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_scan_covers_code_tests_and_docs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = scanned_files(root);
    for expected in [
        "README.md",
        "Cargo.toml",
        "src/lib.rs",
        "crates/core/src/lib.rs",
        "crates/core/Cargo.toml",
        "tests/it/main.rs",
        "docs/rules/router.md",
        "docs/decisions.md",
    ] {
        assert!(
            files.contains(&PathBuf::from(expected)),
            "{expected} is scanned"
        );
    }
    assert!(files.iter().all(|f| !f.starts_with("target")));
}

#[test]
fn citations_are_parsed_with_their_lists() {
    let page = |p: &str, s: &str| Citation {
        page: p.to_string(),
        section: s.to_string(),
    };
    assert_eq!(
        citations("Rules: docs/rules/router.md §3 (retries)."),
        vec![page("docs/rules/router.md", "3")]
    );
    assert_eq!(
        citations("see `cpa.md` §2.1, §4.3 and §5.2."),
        vec![
            page("cpa.md", "2.1"),
            page("cpa.md", "4.3"),
            page("cpa.md", "5.2")
        ]
    );
    assert_eq!(
        citations("patrol.md §5–§6 and router.md §1/§2"),
        vec![
            page("patrol.md", "5"),
            page("patrol.md", "6"),
            page("router.md", "1"),
            page("router.md", "2"),
        ]
    );
    assert_eq!(
        citations("ends a sentence: ../decisions.md §12."),
        vec![page("../decisions.md", "12")]
    );
    assert!(citations("a lone § 3 and a file.rs §2 cite no page").is_empty());
    assert!(citations("no number: router.md §").is_empty());
}

#[test]
fn issue_numbers_are_told_from_public_references() {
    let bad = cites_issue_number;
    assert!(bad("fixed in issue 10 item 3"));
    assert!(bad("(issues 7 and 8)"));
    assert!(bad("issue  9"));
    assert!(bad("ISSUE 11"));
    assert!(!bad("CPA issue #5277 and PR #5211"));
    assert!(!bad("upstream issue #74"));
    assert!(!bad("an issue of an upstream project"));
    assert!(!bad("reissue 7"));
}

#[test]
fn headings_give_section_numbers() {
    let s = headings("# Title\n## 3. Failures, cooldown\n### 2.1 Session key\n## Notes\n#no\n");
    assert_eq!(
        s,
        BTreeSet::from(["3".to_string(), "2.1".to_string()]),
        "only numbered headings"
    );
}

#[test]
fn pages_resolve_relative_to_the_citing_file_or_docs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = Path::new("src/lib.rs");
    let rules = Path::new("docs/rules/patrol.md");
    let want = Some(PathBuf::from("docs/rules/router.md"));
    assert_eq!(resolve(root, src, "docs/rules/router.md"), want);
    assert_eq!(resolve(root, src, "rules/router.md"), want);
    assert_eq!(resolve(root, rules, "router.md"), want);
    assert_eq!(
        resolve(root, rules, "../decisions.md"),
        Some(PathBuf::from("docs/decisions.md"))
    );
    assert_eq!(resolve(root, src, "router.md"), None, "bare name from code");
    assert_eq!(resolve(root, src, "README.md"), None, "not under docs/");
}
