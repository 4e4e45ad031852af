//! The dependency rule of ARCHITECTURE.md: `src/core` is pure — it imports no adapter crate and
//! no other module of this crate outside `core`.

use std::path::Path;

const FORBIDDEN: &[&str] = &[
    "tokio",
    "reqwest",
    "rusqlite",
    "axum",
    "lettre",
    "tokio_cron_scheduler",
    "crate::store",
    "crate::cpa",
    "crate::api",
    "crate::jobs",
    "crate::app",
    "crate::sim",
    "std::fs",
    "std::net",
];

#[test]
fn core_imports_no_adapter() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut offenders = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for f in FORBIDDEN {
                if code.contains(&format!("{f}::")) || code.contains(&format!("use {f}")) {
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
