//! References stay inside the repository: every text file a contributor reads (sources, tests,
//! benches, templates, config examples, migrations, manifests, the README and `docs/`) is
//! scanned for these kinds of broken pointer, each reported as `file:line`:
//! - a path into the team notebook outside the repository (`../shared…`, `shared/spec…`), or a
//!   page of its old spec folder (`spec/alerts.md`): the rules are `docs/rules/<page>.md`;
//! - this project's own issue numbers (`issue 10`, `issues 7`; case-insensitive). Public
//!   references with a `#` (`CPA #5277`, `upstream issue #74`, `PR #5211`) are fine;
//! - a `<name>.md §<n>` citation whose page is not under `docs/` or whose section has no
//!   heading there (`## 3. …` or `### 2.1 …`). The page resolves as written from the repository
//!   root when it starts with `docs/`, else relative to the citing file, else (for a path with a
//!   folder, like `rules/router.md`) relative to `docs/`. A list after a citation
//!   (`router.md §1, §2`, `§3–§4`) is checked too;
//! - a `<name>.md "<Heading>"` citation (the page optionally in backticks, the quote right after
//!   it) whose page resolves, as above, under `docs/` but has no heading with that text at any
//!   level, or that resolves nowhere (a bare `api.md "Auth"` from code names no file a clone
//!   has; a page that exists outside `docs/` is not checked). Backticks are ignored on both sides, and a numbered heading (`## 5. Thresholds …`)
//!   may be cited with or without its number. A quote left open at the end of a line goes on
//!   into the next one (comment markers dropped), and a list (`"A", "B"`, `"A" and "B"`) is
//!   checked too;
//! - a citation of a README section (`README "Stopping"`, `README 'Headers'`, `README §2`,
//!   `README's "Router"`): the README is an entry point, the content lives in `docs/`.
//!
//! This file itself is not scanned: its unit checks hold examples of every broken form.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

const NOTEBOOK: [&str; 2] = ["../shared", "shared/spec"];
/// The team notebook's spec folder, as a path prefix (`spec/<name>.md`).
const SPEC_DIR: &str = "spec/";
/// The forms of a citation of a README section (case-sensitive `README`).
const README_SECTION: [&str; 4] = ["README \"", "README '", "README §", "README's \""];
/// Comment markers dropped from a line that continues an open quote.
const COMMENT_MARKERS: [&str; 8] = ["//!", "///", "//", "{#-", "{#", "--", "#", "*"];
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
const FILES: [&str; 5] = [
    "README.md",
    "Cargo.toml",
    "fixtures/README.md",
    ".cargo/config.toml",
    ".ci/run",
];

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

/// One `<page>.md "<Heading>"` citation: the page as written and the heading as quoted.
#[derive(Debug, PartialEq, Eq)]
struct HeadingCitation {
    page: String,
    heading: String,
}

/// Every heading citation in `text` with the char index of its page token: a `"` after a
/// `<name>.md` token and at least one space (backticks and a JSON `\` between allowed; a quote
/// touching the token closes a string like `"docs/api.md"`), the heading up to the next `"`, and
/// the headings that follow it in a list (`, "B"`, ` and "C"`). A quote left open at the end of
/// `text` is not a citation.
fn heading_citations(text: &str) -> Vec<(usize, HeadingCitation)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '"' {
            i += 1;
            continue;
        }
        let mut before = i;
        if before > 0 && chars[before - 1] == '\\' {
            before -= 1;
        }
        let gap = &chars[before - page_gap(&chars[..before])..before];
        let Some(page) = page_before(&chars[..before]).filter(|_| gap.contains(&' ')) else {
            i += 1;
            continue;
        };
        let start = before - gap.len() - page.chars().count();
        let mut open = i;
        loop {
            let Some(close) = (open + 1..chars.len()).find(|&k| chars[k] == '"') else {
                return out; // open quote: not a citation
            };
            let mut heading: String = chars[open + 1..close].iter().collect();
            if heading.ends_with('\\') {
                heading.pop();
            }
            out.push((
                start,
                HeadingCitation {
                    page: page.clone(),
                    heading,
                },
            ));
            match next_heading_in_list(&chars, close + 1) {
                Some(next) => open = next,
                None => {
                    i = close + 1;
                    break;
                }
            }
        }
    }
    out
}

/// How many spaces and backticks sit between a page token and what follows it.
fn page_gap(before: &[char]) -> usize {
    before
        .iter()
        .rev()
        .take_while(|c| **c == ' ' || **c == '`')
        .count()
}

/// The index of the next opening `"` when the text at `from` continues a list of headings.
fn next_heading_in_list(chars: &[char], from: usize) -> Option<usize> {
    let rest: String = chars[from..].iter().take(8).collect();
    for sep in [", ", " and ", " or "] {
        if rest
            .strip_prefix(sep)
            .is_some_and(|after| after.starts_with('"'))
        {
            return Some(from + sep.chars().count());
        }
    }
    None
}

/// `line` and, when `next` continues it, the text of `next` without its indentation and
/// comment marker, joined by a space: a quote left open at the end of a line closes there.
fn with_continuation(line: &str, next: Option<&str>) -> String {
    let Some(next) = next else {
        return line.to_string();
    };
    let mut rest = next.trim_start();
    if let Some(marker) = COMMENT_MARKERS.iter().find(|m| rest.starts_with(*m)) {
        rest = &rest[marker.len()..];
    }
    format!("{line} {}", rest.trim_start())
}

/// A heading as compared: backticks dropped, runs of white space made one space.
fn heading_key(text: &str) -> String {
    text.replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The headings of a Markdown page as they may be cited: the text after the `#`s of every
/// heading outside code fences, and for a numbered one (`## 5. Title`, `### 2.1 Title`) also the
/// text without its number.
fn heading_texts(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if fenced || hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let title = heading_key(&line[hashes..]);
        if let Some((first, rest)) = title.split_once(' ') {
            let number = first.trim_end_matches('.');
            let numbered = number.chars().next().is_some_and(|c| c.is_ascii_digit())
                && number.chars().all(|c| c.is_ascii_digit() || c == '.');
            if numbered {
                out.insert(rest.to_string());
            }
        }
        out.insert(title);
    }
    out
}

/// The `spec/<name>.md` paths on `line` (the team notebook's spec folder).
fn spec_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in line.match_indices(SPEC_DIR) {
        let word_start = line[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        let path: String = line[at..]
            .chars()
            .take_while(|c| is_path_char(*c))
            .collect();
        let path = path.trim_end_matches('.');
        if word_start && path.len() > SPEC_DIR.len() + 3 && path.ends_with(".md") {
            out.push(path.to_string());
        }
    }
    out
}

/// The README-section citation form `line` uses, if any.
fn cites_readme_section(line: &str) -> Option<&'static str> {
    README_SECTION.into_iter().find(|form| line.contains(form))
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
/// Whether `page`, cited from `citing`, names a file that exists outside `docs/` (from the
/// repository root or beside the citing file).
fn exists_outside_docs(root: &Path, citing: &Path, page: &str) -> bool {
    let beside = citing.parent().unwrap_or(Path::new("")).join(page);
    root.join(page).is_file() || root.join(normalise(&beside)).is_file()
}

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
    let mut titles: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
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
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let at = format!("{}:{}", file.display(), n + 1);
            if let Some(needle) = NOTEBOOK.iter().find(|s| line.contains(*s)) {
                out.push(format!("{at}: points outside the repository ({needle})"));
            }
            for path in spec_paths(line) {
                out.push(format!(
                    "{at}: {path}: a page of the notebook's spec folder (cite docs/rules/)"
                ));
            }
            if let Some(form) = cites_readme_section(line) {
                out.push(format!(
                    "{at}: cites a README section ({form}…): cite the docs/ page that holds it"
                ));
            }
            let joined = with_continuation(line, lines.get(n + 1).copied());
            let own = line.chars().count();
            for (_, c) in heading_citations(&joined)
                .into_iter()
                .filter(|(start, _)| *start < own)
            {
                let Some(page) = resolve(root, &file, &c.page) else {
                    // A page outside docs/ that exists (a fixtures README) is not checked; a
                    // name that is no file at all is a pointer a clone cannot follow.
                    if !exists_outside_docs(root, &file, &c.page) {
                        out.push(format!(
                            "{at}: {} \"{}\": no such page under docs/",
                            c.page, c.heading
                        ));
                    }
                    continue;
                };
                let known = titles.entry(page.clone()).or_insert_with(|| {
                    heading_texts(&std::fs::read_to_string(root.join(&page)).unwrap_or_default())
                });
                if !known.contains(&heading_key(&c.heading)) {
                    out.push(format!(
                        "{at}: {} \"{}\": {} has no such heading",
                        c.page,
                        c.heading,
                        page.display()
                    ));
                }
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
        "{} broken reference(s) (cite docs/rules/<page>.md §N, docs/decisions.md §N, a docs/ \
         page and its heading as docs/<page>.md \"<Heading>\", or a public source):\n{}",
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
        "fixtures/README.md",
        ".cargo/config.toml",
        "templates/README.md",
        "migrations/0002_alerts.sql",
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

#[test]
fn heading_citations_are_parsed_with_their_lists() {
    let cite = |p: &str, h: &str| HeadingCitation {
        page: p.to_string(),
        heading: h.to_string(),
    };
    let parsed = |t: &str| -> Vec<HeadingCitation> {
        heading_citations(t).into_iter().map(|(_, c)| c).collect()
    };
    assert_eq!(
        parsed(r#"(docs/operations.md "Stopping"): nothing new starts"#),
        vec![cite("docs/operations.md", "Stopping")]
    );
    assert_eq!(
        parsed(r#"see `docs/router.md` "Headers and streaming", "Metrics" and "Try it"."#),
        vec![
            cite("docs/router.md", "Headers and streaming"),
            cite("docs/router.md", "Metrics"),
            cite("docs/router.md", "Try it"),
        ]
    );
    assert_eq!(
        parsed(r#"{"description": "pool metrics (docs/operations.md \"Pool and forecast\")."}"#),
        vec![cite("docs/operations.md", "Pool and forecast")]
    );
    assert!(
        parsed(r#"a "quoted" word, file.rs "x" and README "Stopping" cite no page"#).is_empty()
    );
    assert!(
        parsed(r#"resolve(root, src, "docs/rules/router.md"), Some("x")"#).is_empty(),
        "a string holding a page is no citation"
    );
    assert!(
        parsed(r#"an open quote: docs/patrol.md "Thresholds per window and per"#).is_empty(),
        "an open quote is not a citation"
    );
    let joined = with_continuation(
        r#"//! Rules: docs/patrol.md "Thresholds per window and per"#,
        Some("//! account\". Pure."),
    );
    assert_eq!(
        parsed(&joined),
        vec![cite(
            "docs/patrol.md",
            "Thresholds per window and per account"
        )]
    );
    let starts: Vec<usize> = heading_citations(r#"a.md "x" b.md "y""#)
        .into_iter()
        .map(|(start, _)| start)
        .collect();
    assert_eq!(starts, vec![0, 9], "where each page token starts");
}

#[test]
fn continuation_lines_lose_their_comment_markers() {
    for (next, want) in [
        ("//! made\", dry runs", "x made\", dry runs"),
        ("    /// made\"", "x made\""),
        ("# made\"", "x made\""),
        ("-- made\"", "x made\""),
        ("      made\" #}", "x made\" #}"),
    ] {
        assert_eq!(with_continuation("x", Some(next)), want, "{next}");
    }
    assert_eq!(with_continuation("x", None), "x");
}

#[test]
fn heading_texts_are_every_heading_with_and_without_its_number() {
    let page = "# Title\n## 5. Thresholds per window\n### `[alerts]`\n### 2.1 Session key\n\
                ```toml\n# not a heading\n```\n#no\n## status_page (`benches/status_page.rs`)\n";
    let want: BTreeSet<String> = [
        "Title",
        "5. Thresholds per window",
        "Thresholds per window",
        "[alerts]",
        "2.1 Session key",
        "Session key",
        "status_page (benches/status_page.rs)",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(heading_texts(page), want);
    assert_eq!(
        heading_key(" status_page  (`benches/status_page.rs`) "),
        "status_page (benches/status_page.rs)"
    );
}

#[test]
fn heading_citations_resolve_to_real_headings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = resolve(root, Path::new("src/app.rs"), "docs/operations.md").expect("a docs page");
    let titles = heading_texts(&std::fs::read_to_string(root.join(page)).unwrap());
    assert!(titles.contains("Stopping"));
    assert!(!titles.contains("Real use against a CPA"));
}

#[test]
fn spec_folder_paths_are_found() {
    assert_eq!(
        spec_paths("USE CASE alerts (spec/alerts.md): after"),
        vec!["spec/alerts.md"]
    );
    assert_eq!(
        spec_paths("see ../spec/cpa.md and `spec/router.md`."),
        vec!["spec/cpa.md", "spec/router.md"]
    );
    assert!(spec_paths("docs/rules/alerts.md, the spec/ folder, inspec/x.md").is_empty());
    assert!(spec_paths("spec/ and spec/notes.txt").is_empty());
}

#[test]
fn readme_section_citations_are_told_from_mentions() {
    let bad = cites_readme_section;
    assert!(bad(r#"(README "Stopping")"#).is_some());
    assert!(bad("README 'Headers'").is_some());
    assert!(bad("README §3").is_some());
    assert!(bad(r#"the README's "Router" section"#).is_some());
    assert!(bad("See README.md and docs/ for the map.").is_none());
    assert!(bad(r#"templates/README.md "Status page""#).is_none());
    assert!(bad(r#"readme "x""#).is_none(), "case-sensitive");
}

#[test]
fn a_repository_with_each_broken_form_reports_each_line() {
    let root = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let path = root.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "docs/operations.md",
        "# Operations\n## Stopping\n## 3. First start\n```sh\n# Not a heading\n```\n",
    );
    write(
        "src/lib.rs",
        "//! (docs/operations.md \"Stopping\") and `docs/operations.md` \"First start\"\n\
         //! (docs/operations.md \"Not a heading\")\n\
         //! (docs/operations.md \"Stopping\", \"Real use\")\n\
         //! (docs/operations.md \"First\n\
         //! start\") and (docs/operations.md \"Stop\n\
         //! ping\")\n\
         //! (README \"Stopping\"; spec/alerts.md; api.md \"Auth\")\n",
    );
    let found = offenders(root.path());
    let lines: Vec<&str> = found
        .iter()
        .map(|o| o.split(": ").next().unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            "src/lib.rs:2",
            "src/lib.rs:3",
            "src/lib.rs:5",
            "src/lib.rs:7",
            "src/lib.rs:7",
            "src/lib.rs:7"
        ],
        "{found:#?}"
    );
    assert!(found[0].contains("\"Not a heading\""), "{found:#?}");
    assert!(found[1].contains("\"Real use\""), "{found:#?}");
    assert!(found[2].contains("\"Stop ping\""), "{found:#?}");
    assert!(found[3].contains("spec/alerts.md"), "{found:#?}");
    assert!(found[4].contains("README section"), "{found:#?}");
    assert!(
        found[5].contains("api.md \"Auth\": no such page"),
        "a bare page name that is no file: {found:#?}"
    );
}
