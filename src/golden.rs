//! Golden files under `fixtures/`: a test renders a fixed value, compares it to the file and
//! fails with the path when they differ; `UPDATE_GOLDEN=1` rewrites the files instead (after a
//! deliberate change of a contract, reviewed in the diff).

use std::path::PathBuf;

/// The text of `fixtures/<rel>`; panics with the path when it is missing.
pub fn read(rel: &str) -> String {
    let path = path(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to write it)",
            path.display()
        )
    })
}

/// Asserts that `actual` equals `fixtures/<rel>` (or writes it under `UPDATE_GOLDEN`).
pub fn check(rel: &str, actual: &str) {
    let path = path(rel);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("a fixture has a folder")).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    assert_eq!(
        actual,
        read(rel),
        "{} differs (UPDATE_GOLDEN=1 rewrites it after a deliberate change)",
        path.display()
    );
}

/// `value` as pretty JSON with a final newline, the form of the JSON golden files.
pub fn pretty<T: serde::Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).expect("a fixture value serialises");
    s.push('\n');
    s
}

fn path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(rel)
}
