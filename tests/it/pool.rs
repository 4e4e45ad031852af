//! The published pool snapshot (docs/rules/patrol.md §12.2) over real HTTP against the simulated CPA:
//! `GET /api/pool` answers what the patrol last published, and the patrol publishes when a
//! manual action returns, when a round ends, after a listing reload and at start-up. Every
//! read happens right after the call that should have published: nothing waits.

use chrono::Duration;
use serde_json::Value;

use crate::helpers::*;

/// `GET /api/pool` of the test site (asserts 200 and that no secret is in the body).
async fn pool(t: &TestApp) -> Value {
    let r = t.get(&format!("/api/pool?siteId={SITE}")).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(
        !text.contains(MGMT_KEY) && !text.contains(ADMIN_TOKEN),
        "{text}"
    );
    serde_json::from_str(&text).unwrap()
}

/// The account `name` of a `GET /api/pool` body.
fn account<'a>(pool: &'a Value, name: &str) -> &'a Value {
    pool["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in the pool: {pool}"))
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[tokio::test]
async fn a_manual_disable_through_the_api_is_in_the_published_pool_when_the_call_returns() {
    let t = spawn_app(vec![free("a@x.com", 10.0), free("b@x.com", 20.0)]).await;
    t.inspect().await;
    let a = t.name_of("a@x.com");
    let before = pool(&t).await;
    assert_eq!(account(&before, &a)["availability"], "usable", "{before}");
    assert_eq!(before["counts"]["usable"], 2, "{before}");

    t.disable_by_hand(&a).await;
    let after = pool(&t).await;
    let acc = account(&after, &a);
    assert_eq!(acc["availability"], "disabled", "{after}");
    assert_eq!(acc["disabled"], true);
    assert_eq!(acc["disableReason"], "ManualDisabled");
    assert_eq!(acc["disabledBy"], "manual");
    assert_eq!(acc["disableReasonProvisional"], false);
    assert_eq!(after["origin"]["cause"], "manualAction");
    assert_eq!(after["origin"]["action"], "disable");
    assert_eq!(after["origin"]["account"], a.as_str());
    assert_eq!(after["counts"]["usable"], 1, "{after}");
    assert_eq!(after["counts"]["disabled"], 1, "{after}");
    assert!(after["version"].as_u64() > before["version"].as_u64());
    // The inspection status shows the same publish.
    let status: Value = t
        .get(&format!("/api/inspection/status?siteId={SITE}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["pool"]["version"], after["version"], "{status}");
    assert_eq!(status["pool"]["counts"]["disabled"], 1);

    // Enabling it again is visible at once as well.
    let r = t
        .post(
            &format!("/api/accounts/{a}/enable?siteId={SITE}"),
            Value::Null,
        )
        .await;
    assert_eq!(r.status(), 200);
    let enabled = pool(&t).await;
    assert_eq!(account(&enabled, &a)["availability"], "usable", "{enabled}");
    assert_eq!(account(&enabled, &a)["disableReason"], "");
}

#[tokio::test]
async fn a_rounds_result_is_published_when_the_round_ends() {
    let t = spawn_app(vec![
        free("full@x.com", 100.0),
        plus("ok@x.com", 10.0, 20.0),
    ])
    .await;
    let (full, ok) = (t.name_of("full@x.com"), t.name_of("ok@x.com"));
    let before = pool(&t).await;
    assert_eq!(before["origin"]["cause"], "startup", "{before}");
    assert_eq!(
        before["counts"]["total"], 0,
        "no listing stored yet: {before}"
    );

    let mut rounds = t.patrol.subscribe_rounds();
    let r = t.inspect().await;
    // Published before the round is announced: a subscriber reads the round's own snapshot.
    let announced = rounds.recv().await.unwrap();
    let snap = t.patrol.pool_snapshot(SITE).expect("published");
    assert_eq!(
        snap.origin,
        quota_patrol::core::pool::PublishCause::Round {
            run_id: announced.run_id.clone(),
            kind: "manual".into()
        }
    );

    let after = pool(&t).await;
    assert_eq!(after["origin"]["cause"], "round");
    assert_eq!(after["origin"]["runId"], r.run_id.as_str());
    assert_eq!(after["origin"]["kind"], "manual");
    assert_eq!(after["takenAt"], rfc3339(t0()));
    let f = account(&after, &full);
    assert_eq!(f["availability"], "exhausted", "{after}");
    assert_eq!(f["until"], rfc3339(t0() + Duration::days(4)), "{after}");
    // The round disabled it for quota: its reason is the patrol's, its availability the quota's.
    assert_eq!(f["disableReason"], "QuotaExhausted", "{after}");
    assert_eq!(account(&after, &ok)["availability"], "usable");
    assert_eq!(after["counts"]["exhausted"], 1);
    assert!(after["usableUntil"].is_null(), "ok@ is usable: {after}");

    // Once every account is exhausted the pool is usable again at the earliest reset.
    let five_hour_full = quota_patrol_sim::SimUsage::paid(
        100.0,
        t0() + Duration::hours(3),
        40.0,
        t0() + Duration::days(3),
    );
    t.sim.set_usage(&ok, five_hour_full);
    t.inspect_forced().await;
    let all = pool(&t).await;
    assert_eq!(account(&all, &ok)["availability"], "exhausted", "{all}");
    assert_eq!(
        account(&all, &ok)["until"],
        rfc3339(t0() + Duration::hours(3))
    );
    assert_eq!(
        all["usableUntil"],
        rfc3339(t0() + Duration::hours(3)),
        "{all}"
    );
}

#[tokio::test]
async fn a_listing_reload_publishes_the_new_account_and_a_restart_publishes_the_stored_state() {
    let t = spawn_app(vec![free("full@x.com", 100.0)]).await;
    t.inspect().await;
    t.sim.add_account(free("new@x.com", 5.0));
    let r = t
        .post(&format!("/api/accounts/refresh?siteId={SITE}"), Value::Null)
        .await;
    assert_eq!(r.status(), 200);
    let reloaded = pool(&t).await;
    assert_eq!(reloaded["origin"]["cause"], "listingReload", "{reloaded}");
    let new = t.name_of("new@x.com");
    assert_eq!(account(&reloaded, &new)["availability"], "noData");

    let full = t.name_of("full@x.com");
    let t = t.restart().await;
    let started = pool(&t).await;
    assert_eq!(started["origin"]["cause"], "startup", "{started}");
    assert_eq!(started["version"], 1, "first publish of the new process");
    assert_eq!(account(&started, &full)["availability"], "exhausted");
    assert_eq!(
        account(&started, &full)["until"],
        rfc3339(t0() + Duration::days(4))
    );
}

#[tokio::test]
async fn a_full_round_publishes_what_it_holds_the_same_as_a_publish_read_back_from_the_store() {
    let t = spawn_app(vec![
        free("full@x.com", 100.0),
        plus("ok@x.com", 10.0, 20.0),
        free("except@x.com", 30.0),
    ])
    .await;
    // The first round disables full@ for quota: its outcome is applied to what it held.
    t.inspect().await;
    same_as_the_store(&t).await;
    let except = t.name_of("except@x.com");
    let r = t
        .post(
            &format!("/api/exceptions?siteId={SITE}"),
            serde_json::json!({ "accountName": except }),
        )
        .await;
    assert!(r.status().is_success(), "{}", r.status());
    // A full round hands its own accounts and states to the publish (no read-back)…
    t.inspect_forced().await;
    let from_round = t.patrol.pool_snapshot(SITE).expect("published");
    assert!(matches!(
        from_round.origin,
        quota_patrol::core::pool::PublishCause::Round { .. }
    ));
    // …and that snapshot is the one the stored state gives.
    same_as_the_store(&t).await;
    let full = from_round
        .account(&t.name_of("full@x.com"))
        .expect("listed");
    assert!(full.disabled, "disabled by the first round for quota");
    let ex = from_round
        .account(&except)
        .expect("the exception is still shown");
    assert!(ex.exception);
}

/// The published snapshot equals one rebuilt from the stored state now: same accounts
/// (exceptions included), flags, reasons and availabilities, same counts and `usableUntil`.
async fn same_as_the_store(t: &TestApp) {
    let published = t.patrol.pool_snapshot(SITE).expect("published");
    let from_store = t
        .patrol
        .publish_pool(SITE, quota_patrol::core::pool::PublishCause::SettingsChange)
        .await
        .unwrap();
    assert_eq!(published.accounts, from_store.accounts);
    assert_eq!(published.counts, from_store.counts);
    assert_eq!(published.usable_until, from_store.usable_until);
}
