//! Golden answers of the API's main reads (`fixtures/api/*.json`): the app of `test_support`
//! (manual clock at 2026-05-21T03:00:00Z, site `main` with accounts `a.json` and `b.json`, CPA
//! unreachable) answers each GET, the body is normalised (see [`normalise`]) and compared to
//! its file (keys sorted: the body is read as a `Value`), so a renamed field of an API type
//! fails here. `UPDATE_GOLDEN=1 cargo test --lib
//! api::golden_tests` rewrites them after a deliberate change.

use super::test_support::*;
use crate::golden;

/// The answers pinned, as (fixture name, path).
const ANSWERS: &[(&str, &str)] = &[
    ("accounts__two-unprobed", "/api/accounts"),
    ("quotas__two-unprobed", "/api/quotas"),
    ("settings__defaults", "/api/settings"),
    ("settings-sites__one-site", "/api/settings/sites"),
    ("alerts__none", "/api/alerts"),
    ("exceptions__none", "/api/exceptions"),
    ("inspection-status__idle", "/api/inspection/status"),
];

/// Replaces values that differ between runs (generated ids, the process's start) by
/// `"<normalised>"`, keeping the field so its name stays pinned.
fn normalise(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if NONDETERMINISTIC.contains(&k.as_str()) && !x.is_null() {
                    *x = Value::String("<normalised>".into());
                } else {
                    normalise(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalise),
        _ => {}
    }
}

/// Field names whose values are generated per run.
const NONDETERMINISTIC: &[&str] = &["requestId", "runId", "id"];

#[tokio::test]
async fn the_main_answers_match_their_golden_files() {
    let t = app().await;
    t.seed_accounts("main", &["a.json", "b.json"]).await;
    for (name, path) in ANSWERS {
        let r = t.get(path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text);
        let mut body = r.json();
        normalise(&mut body);
        golden::check(&format!("api/{name}.json"), &golden::pretty(&body));
    }
}
