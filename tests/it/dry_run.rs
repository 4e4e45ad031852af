//! Dry runs (`quota-patrol inspect --dry-run`, `POST /api/inspection/run?dryRun=true`): they
//! read CPA and decide, and leave the database and the site's runtime state exactly as they
//! found them; their one record is the run itself, marked `dryRun` (docs/patrol.md "What a
//! round does", dry runs).

use std::collections::BTreeMap;

use chrono::Duration;
use quota_patrol::core::inspect::Action;
use quota_patrol::core::report::InspectionRunResult;
use quota_patrol::jobs::inspect::{RoundKind, RoundOptions, run_round};
use quota_patrol_sim::{SimAccount, SimUsage, UpstreamBehaviour};

use crate::helpers::*;

fn revoked(email: &str) -> SimAccount {
    with_behaviour(
        plus(email, 1.0, 1.0),
        UpstreamBehaviour::Status {
            status: 401,
            content_type: "application/json".into(),
            body: r#"{"error":{"message":"token revoked"}}"#.into(),
        },
    )
}

/// One manual dry run, as `inspect --dry-run [--force]` starts it.
async fn dry_run(t: &TestApp, force: bool) -> InspectionRunResult {
    run_round(
        &t.patrol,
        SITE,
        RoundOptions {
            kind: RoundKind::Manual,
            force,
            dry_run: true,
            only: None,
        },
    )
    .await
    .expect("dry run runs")
}

/// Every row of every table of the database, as text, sorted, by table name. The dry runs'
/// own run records (`inspection_runs` rows whose result says `"dryRun":true`) are left out:
/// they are the one record a dry run keeps.
async fn dump(t: &TestApp) -> BTreeMap<String, Vec<String>> {
    t.patrol
        .store
        .run(|c| {
            let tables: Vec<String> = c
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            let mut out = BTreeMap::new();
            for table in tables {
                let mut stmt = c.prepare(&format!("SELECT * FROM \"{table}\""))?;
                let n = stmt.column_count();
                let mut rows: Vec<String> = stmt
                    .query_map([], |r| {
                        (0..n)
                            .map(|i| {
                                r.get::<_, rusqlite::types::Value>(i)
                                    .map(|v| format!("{v:?}"))
                            })
                            .collect::<Result<Vec<_>, _>>()
                            .map(|cells| cells.join(" | "))
                    })?
                    .collect::<Result<_, _>>()?;
                if table == "inspection_runs" {
                    rows.retain(|r| !r.contains(r#"\"dryRun\":true"#));
                }
                rows.sort();
                out.insert(table, rows);
            }
            Ok(out)
        })
        .await
        .expect("database dump")
}

/// What the site's runtime holds in memory that a round may change: the published pool
/// (version, time, counts), the usage-queue marks, the CPA pause and failure streak.
fn runtime(t: &TestApp) -> String {
    let rt = t.patrol.runtime(SITE);
    let pool = t
        .patrol
        .pool_snapshot(SITE)
        .map(|s| format!("{} {} {:?}", s.version, s.taken_at, s.counts));
    let mut marks: Vec<String> = rt.usage_marks.lock().unwrap().iter().cloned().collect();
    marks.sort();
    format!(
        "pool {pool:?}; marks {marks:?}; paused {:?}; failing since {:?}",
        rt.cpa_paused_until(t.patrol.now()),
        rt.cpa_failing_since()
    )
}

#[tokio::test]
async fn a_dry_run_leaves_every_table_and_the_runtime_state_as_it_found_them() {
    let mut s = fast_settings();
    s.usage_queue_enabled = Some(true);
    let back = SimAccount::codex(
        "back@example.com",
        "free",
        SimUsage::weekly_only(100.0, t0() + Duration::minutes(30)),
    );
    let t = spawn_app_with(
        vec![
            revoked("revoked@example.com"),
            plus("spent@example.com", 10.0, 40.0),
            back,
            plus("ok@example.com", 10.0, 20.0),
        ],
        s,
    )
    .await;
    // An acting round: a first 401 (1 of 2 confirmations), the exhausted account disabled.
    let r = t.inspect().await;
    assert_eq!(t.decision(&r, "back@example.com").action, Action::Disable);
    assert_eq!(t.decision(&r, "revoked@example.com").rule, 2);
    // Then one account crosses its threshold, the disabled one's reset passes, traffic queues.
    t.sim.update_usage(&t.name_of("spent@example.com"), |u| {
        u.weekly.as_mut().unwrap().used_percent = 97.0;
    });
    t.clock.advance(Duration::hours(1));
    t.sim.add_traffic(&t.name_of("ok@example.com"), 3);
    let (tables, state) = (dump(&t).await, runtime(&t));
    t.sim.clear_requests();

    let dry = dry_run(&t, true).await;
    assert!(dry.dry_run, "{dry:?}");
    let decided = |email: &str| {
        let d = t.decision(&dry, email);
        (d.action, d.rule)
    };
    assert_eq!(decided("revoked@example.com"), (Action::Disable, 1));
    assert_eq!(decided("spent@example.com"), (Action::Disable, 3));
    assert_eq!(decided("back@example.com"), (Action::Enable, 5));
    assert!(dry.action_outcomes.is_empty());

    let after = dump(&t).await;
    for (table, rows) in &tables {
        assert_eq!(
            after.get(table),
            Some(rows),
            "table {table} changed by a dry run"
        );
    }
    assert_eq!(after.len(), tables.len());
    assert_eq!(runtime(&t), state, "runtime state changed by a dry run");
    // CPA was only read: the listing and the probes (no patch, delete, cooldown reset, and
    // no usage-queue pop, which would consume CPA's records).
    let calls: Vec<String> = t
        .sim
        .requests()
        .into_iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .filter(|c| !c.ends_with("/auth-files") && !c.ends_with("/api-call"))
        .collect();
    assert!(calls.is_empty(), "{calls:?}");
    // The one record: the run, marked as a dry run.
    let last: serde_json::Value = t
        .get(&format!("/api/inspection/last-run?siteId={SITE}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (last["runId"].as_str(), last["dryRun"].as_bool()),
        (Some(dry.run_id.as_str()), Some(true))
    );
}

#[tokio::test]
async fn two_dry_runs_then_an_inspection_do_not_confirm_a_first_401() {
    let t = spawn_app(vec![
        revoked("revoked@example.com"),
        plus("ok@example.com", 10.0, 20.0),
    ])
    .await;
    let name = t.name_of("revoked@example.com");
    for _ in 0..2 {
        let dry = dry_run(&t, false).await;
        let d = t.decision(&dry, "revoked@example.com");
        assert_eq!((d.action, d.rule), (Action::Keep, 2), "{}", d.reason);
        assert!(d.reason.contains("1/2"), "{}", d.reason);
    }
    // The field sequence: the first acting round counts its own 401 only.
    let r = t.inspect().await;
    let d = t.decision(&r, "revoked@example.com");
    assert_eq!((d.action, d.rule), (Action::Keep, 2), "{}", d.reason);
    assert!(
        d.reason.contains("awaiting confirmation 1/2"),
        "{}",
        d.reason
    );
    assert!(!t.sim.account(&name).unwrap().disabled);
    assert!(t.status_patches(&name).is_empty());
    // The second acting round confirms it.
    let r = t.inspect().await;
    let d = t.decision(&r, "revoked@example.com");
    assert_eq!((d.action, d.rule), (Action::Disable, 1), "{}", d.reason);
    assert!(d.reason.contains("confirmed 2/2"), "{}", d.reason);
    assert!(t.sim.account(&name).unwrap().disabled);
}
