//! The management API over real HTTP against the simulated CPA (docs/rules/api.md): every endpoint
//! the API implements, with the behaviour the spec names for it. Every body read here goes through
//! [`read`], which fails the test when it carries the management key or the admin token, or when
//! the answer has no `x-request-id`.

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{Duration, SecondsFormat};
use quota_patrol_sim::{SimConfig, SimCpa, SimHandle, UpstreamBehaviour};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::smtp::SmtpServer;
use crate::webhook::HookServer;

/// One answer of the app, read once and checked for secrets.
struct Reply {
    what: String,
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {}", self.what, self.text))
    }

    /// Asserts the status and answers the JSON body.
    fn ok(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "{}: {}", self.what, self.text);
        self.json()
    }

    /// Asserts an error answer `{error, code}` with this status and code; answers the body.
    fn err(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status, status, "{}: {}", self.what, self.text);
        let body = self.json();
        assert_eq!(body["code"], code, "{}: {}", self.what, self.text);
        assert!(body["error"].is_string(), "{}: {}", self.what, self.text);
        body
    }
}

/// Fails when `text` carries the management key or the admin token.
fn assert_no_secrets(what: &str, text: &str) {
    assert!(
        !text.contains(MGMT_KEY),
        "{what} leaked the management key: {text}"
    );
    assert!(
        !text.contains(ADMIN_TOKEN),
        "{what} leaked the admin token: {text}"
    );
}

/// Reads an answer: no secrets in the body, an `x-request-id` on the answer.
async fn read(what: String, r: reqwest::Response) -> Reply {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.expect("body readable");
    assert_no_secrets(&what, &text);
    assert!(
        headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| !v.is_empty()),
        "{what}: no x-request-id on the answer"
    );
    Reply {
        what,
        status,
        headers,
        text,
    }
}

async fn get(t: &TestApp, path: &str) -> Reply {
    read(format!("GET {path}"), t.get(path).await).await
}

async fn post(t: &TestApp, path: &str, body: Value) -> Reply {
    read(format!("POST {path}"), t.post(path, body).await).await
}

async fn put(t: &TestApp, path: &str, body: Value) -> Reply {
    read(format!("PUT {path}"), t.put(path, body).await).await
}

async fn delete(t: &TestApp, path: &str) -> Reply {
    read(format!("DELETE {path}"), t.delete(path).await).await
}

/// A request without the admin token.
async fn get_open(t: &TestApp, path: &str) -> Reply {
    read(
        format!("GET {path} (no token)"),
        t.http.get(t.url(path)).send().await.unwrap(),
    )
    .await
}

/// The element of a JSON array whose `key` is `value`.
fn find<'a>(list: &'a Value, key: &str, value: &str) -> &'a Value {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .find(|e| e[key] == value)
        .unwrap_or_else(|| panic!("no element with {key} = {value} in {list}"))
}

/// Whether a JSON array has an element whose `key` is `value`.
fn has(list: &Value, key: &str, value: &str) -> bool {
    list.as_array().unwrap().iter().any(|e| e[key] == value)
}

fn len(v: &Value) -> usize {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .len()
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Loads the site's accounts from CPA through the API (sites start with an empty list).
async fn load_accounts(t: &TestApp) -> Value {
    post(t, "/api/accounts/refresh", Value::Null).await.ok(200)
}

/// Bodies of the `PATCH /auth-files/status` requests the sim received, oldest first.
fn status_patch_bodies(sim: &SimHandle) -> Vec<Value> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/auth-files/status"))
        .map(|r| serde_json::from_str(&r.body).expect("patch body is JSON"))
        .collect()
}

use quota_patrol::api::OPERATIONS;

// ---------------------------------------------------------------------------------------------
// OpenAPI, auth, request ids, health
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_openapi_document_is_3_1_needs_the_token_and_lists_exactly_the_tested_operations() {
    let t = spawn_app(vec![]).await;
    get_open(&t, "/api/openapi.json")
        .await
        .err(401, "unauthorized");
    let doc = get(&t, "/api/openapi.json").await.ok(200);
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| ["get", "post", "put", "delete", "patch"].contains(&k.as_str()))
                .map(move |m| (m.clone(), path.clone()))
        })
        .collect();
    let tested: BTreeSet<(String, String)> = OPERATIONS
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        documented, tested,
        "a new endpoint needs its integration test here (and in OPERATIONS)"
    );
}

#[tokio::test]
async fn api_paths_without_the_admin_token_are_401_and_health_paths_are_open() {
    let t = spawn_app(vec![plus("a@example.com", 1.0, 1.0)]).await;
    for path in [
        "/api/settings",
        "/api/settings/sites",
        "/api/accounts",
        "/api/quotas",
        "/api/exceptions",
        "/api/inspection/status",
        "/api/runtime/logs",
        "/api/runtime/progress",
    ] {
        let body = get_open(&t, path).await.err(401, "unauthorized");
        assert_eq!(body["error"], "missing or invalid admin token");
    }
    let wrong = read(
        "GET /api/settings (wrong token)".into(),
        t.http
            .get(t.url("/api/settings"))
            .bearer_auth("not-the-token")
            .send()
            .await
            .unwrap(),
    )
    .await;
    wrong.err(401, "unauthorized");
    // A refused POST changes nothing in CPA.
    let refused = read(
        "POST disable (no token)".into(),
        t.http
            .post(t.url(&format!(
                "/api/accounts/{}/disable",
                t.name_of("a@example.com")
            )))
            .send()
            .await
            .unwrap(),
    )
    .await;
    refused.err(401, "unauthorized");
    assert!(t.sim.requests().is_empty(), "{:?}", t.sim.requests());

    assert_eq!(
        get_open(&t, "/healthz").await.ok(200),
        json!({"status": "ok"})
    );
    assert_eq!(get_open(&t, "/readyz").await.ok(200)["status"], "ready");
}

#[tokio::test]
async fn a_request_id_sent_by_the_client_comes_back_and_one_is_made_up_otherwise() {
    let t = spawn_app(vec![]).await;
    let r = read(
        "GET /api/settings with an id".into(),
        t.http
            .get(t.url("/api/settings"))
            .bearer_auth(ADMIN_TOKEN)
            .header("x-request-id", "trace-me-42")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["x-request-id"], "trace-me-42");

    let a = get(&t, "/api/settings").await;
    let b = get(&t, "/api/settings").await;
    assert_ne!(
        a.headers["x-request-id"], b.headers["x-request-id"],
        "every request gets its own id"
    );
    // Errors and open paths carry one too (checked by `read`).
    get(&t, "/api/no-such-endpoint").await.err(404, "not_found");
    get_open(&t, "/healthz").await.ok(200);
}

#[tokio::test]
async fn readiness_lists_each_site_with_its_last_successful_cpa_contact() {
    let t = spawn_app(vec![plus("a@example.com", 1.0, 1.0)]).await;
    let ready = get_open(&t, "/readyz").await.ok(200);
    assert_eq!(ready["status"], "ready");
    assert_eq!(len(&ready["sites"]), 1);
    assert_eq!(ready["sites"][0]["siteId"], SITE);
    assert_eq!(ready["sites"][0]["siteEnabled"], true);
    assert!(ready["sites"][0]["lastCpaContactAt"].is_null(), "{ready}");

    t.clock.advance(Duration::minutes(3));
    load_accounts(&t).await;
    let ready = get_open(&t, "/readyz").await.ok(200);
    assert_eq!(
        ready["sites"][0]["lastCpaContactAt"],
        rfc3339(t0() + Duration::minutes(3))
    );
    assert_eq!(ready["sites"][0]["cpaVersion"], "v7.1.19");
}

#[tokio::test]
async fn metrics_need_the_token_and_count_the_probes_of_a_round() {
    let t = spawn_app(vec![plus("a@example.com", 1.0, 1.0)]).await;
    get_open(&t, "/metrics").await.err(401, "unauthorized");
    post(&t, "/api/inspection/run", Value::Null).await.ok(200);
    let m = get(&t, "/metrics").await;
    assert_eq!(m.status, 200, "{}", m.text);
    assert!(
        m.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"),
        "{:?}",
        m.headers
    );
    assert!(m.text.contains("quota_patrol_probes_total"), "{}", m.text);
    assert!(m.text.contains(r#"site="test""#), "{}", m.text);
}

#[tokio::test]
async fn metrics_are_open_when_the_config_makes_them_public() {
    let t = spawn_app_opts(vec![], fast_settings(), true).await;
    let m = get_open(&t, "/metrics").await;
    assert_eq!(m.status, 200, "{}", m.text);
    // Only /metrics opens up; the API still needs the token.
    get_open(&t, "/api/settings").await.err(401, "unauthorized");
}

// ---------------------------------------------------------------------------------------------
// Sites and settings
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_sites_list_selects_the_default_site_and_shows_no_key() {
    let t = spawn_app(vec![]).await;
    let sites = get(&t, "/api/settings/sites").await.ok(200);
    assert_eq!(
        sites,
        json!({
            "selectedSiteId": SITE,
            "sites": [{
                "siteId": SITE,
                "siteName": "Test",
                "siteEnabled": true,
                "cpaBaseUrl": t.sim.base_url(),
                "hasManagementKey": true,
                "provider": "codex",
                // Nothing has called CPA yet (no warm-up, no scheduler in tests).
                "cpaVersion": null,
                "cpaUnsupported": null,
            }]
        })
    );
    get(&t, "/api/settings/sites?siteId=nowhere")
        .await
        .err(404, "unknown_site");
}

#[tokio::test]
async fn a_second_site_created_through_the_api_is_selected_with_site_id_and_deleted_with_its_data()
{
    let t = spawn_app(vec![plus("first@example.com", 1.0, 10.0)]).await;
    let sim2 = SimCpa::start(
        SimConfig {
            management_key: Some(MGMT_KEY.into()),
            accounts: vec![
                plus("second-ok@example.com", 1.0, 10.0),
                plus("second-full@example.com", 1.0, 99.0),
            ],
            ban_after_failures: None,
            ..Default::default()
        },
        Arc::new(t.clock.clone()),
    )
    .unwrap();
    let create = json!({
        "siteName": "Zweite Site",
        "cpaBaseUrl": format!("{}/", sim2.base_url()),
        "managementKey": MGMT_KEY,
        "usageUrl": format!("{}/backend-api/wham/usage", sim2.base_url()),
        "probeBatchDelayMinMs": 0,
        "probeBatchDelayMaxMs": 0,
        "timeoutMs": 1000,
        "retryCount": 0,
        "usedPercentThreshold": 90,
    });
    let created = post(&t, "/api/settings/sites", create.clone())
        .await
        .ok(201);
    assert_eq!(created["siteId"], "zweite-site");
    assert_eq!(created["cpaBaseUrl"], sim2.base_url(), "trailing / dropped");
    assert_eq!(created["hasManagementKey"], true);
    assert_eq!(created["usedPercentThreshold"], 90);
    assert_eq!(created["pollIntervalMinutes"], 10, "defaults for the rest");
    assert!(created.get("managementKey").is_none());

    let sites = get(&t, "/api/settings/sites").await.ok(200);
    assert_eq!(
        sites["selectedSiteId"], SITE,
        "the first enabled site by id"
    );
    assert_eq!(len(&sites["sites"]), 2);
    assert_eq!(
        get(&t, "/api/settings/sites?siteId=zweite-site")
            .await
            .ok(200)["selectedSiteId"],
        "zweite-site"
    );
    assert_eq!(
        get(&t, "/api/settings?siteId=zweite-site").await.ok(200),
        created
    );

    // Each site talks to its own CPA.
    let run = post(&t, "/api/inspection/run?siteId=zweite-site", Value::Null)
        .await
        .ok(200);
    assert_eq!(run["siteId"], "zweite-site");
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["totalAccounts"], 2);
    assert_eq!(
        find(
            &run["decisions"],
            "accountName",
            &sim2_name(&sim2, "second-full@example.com")
        )["action"],
        "disable"
    );
    assert!(
        sim2.account(&sim2_name(&sim2, "second-full@example.com"))
            .unwrap()
            .disabled
    );
    assert_eq!(
        len(&get(&t, "/api/accounts?siteId=zweite-site").await.ok(200)),
        2
    );
    assert_eq!(
        len(&get(&t, "/api/accounts").await.ok(200)),
        0,
        "the default site has loaded nothing"
    );
    assert!(t.sim.requests().is_empty(), "the first CPA was not asked");

    // A second site with the same name gets a suffix.
    let again = post(&t, "/api/settings/sites", create.clone())
        .await
        .ok(201);
    assert_eq!(again["siteId"], "zweite-site-2");

    // Deleting removes the site and its data.
    let gone = delete(&t, "/api/settings/sites/zweite-site").await;
    assert_eq!(gone.status, 204, "{}", gone.text);
    for path in [
        "/api/settings?siteId=zweite-site",
        "/api/accounts?siteId=zweite-site",
        "/api/quotas?siteId=zweite-site",
        "/api/inspection/last-run?siteId=zweite-site",
        "/api/runtime/progress?siteId=zweite-site",
    ] {
        let body = get(&t, path).await.err(404, "unknown_site");
        assert!(
            body["error"].as_str().unwrap().contains("zweite-site"),
            "{body}"
        );
    }
    post(&t, "/api/inspection/run?siteId=zweite-site", Value::Null)
        .await
        .err(404, "unknown_site");
    delete(&t, "/api/settings/sites/zweite-site")
        .await
        .err(404, "unknown_site");
    let ids: Vec<Value> = get(&t, "/api/settings/sites").await.ok(200)["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["siteId"].clone())
        .collect();
    assert_eq!(ids, vec![json!(SITE), json!("zweite-site-2")]);

    // A new site under the freed id starts empty: no accounts, no runs.
    let reborn = post(&t, "/api/settings/sites", create).await.ok(201);
    assert_eq!(reborn["siteId"], "zweite-site");
    assert_eq!(
        get(&t, "/api/accounts?siteId=zweite-site").await.ok(200),
        json!([])
    );
    assert_eq!(
        get(&t, "/api/inspection/runs?siteId=zweite-site")
            .await
            .ok(200),
        json!([])
    );
    assert_eq!(
        get(&t, "/api/inspection/last-run?siteId=zweite-site")
            .await
            .status,
        204
    );
}

fn sim2_name(sim: &SimHandle, email: &str) -> String {
    sim.accounts()
        .into_iter()
        .find(|a| a.email == email)
        .map(|a| a.name)
        .expect("account exists")
}

#[tokio::test]
async fn creating_a_site_without_name_and_url_is_a_400_listing_both() {
    let t = spawn_app(vec![]).await;
    let body = post(
        &t,
        "/api/settings/sites",
        json!({"managementKey": MGMT_KEY}),
    )
    .await
    .err(400, "invalid");
    assert_eq!(
        body["problems"],
        json!(["siteName is required", "cpaBaseUrl is required"])
    );
}

#[tokio::test]
async fn a_partial_settings_update_changes_only_what_it_sends_takes_effect_at_once_and_is_logged() {
    let t = spawn_app(vec![plus("eighty@example.com", 1.0, 85.0)]).await;
    let before = get(&t, "/api/settings").await.ok(200);
    assert_eq!(before["usedPercentThreshold"], 95);

    let r = put(
        &t,
        "/api/settings?siteId=test",
        json!({"usedPercentThreshold": 80, "autoEnableRecovered": false, "managementKey": ""}),
    )
    .await;
    let after = r.ok(200);
    assert_eq!(after["usedPercentThreshold"], 80);
    assert_eq!(after["autoEnableRecovered"], false);
    assert_eq!(after["hasManagementKey"], true, "a blank key keeps the key");
    for (k, v) in before.as_object().unwrap() {
        if k != "usedPercentThreshold" && k != "autoEnableRecovered" {
            assert_eq!(&after[k], v, "{k} changed");
        }
    }
    assert_eq!(get(&t, "/api/settings").await.ok(200), after, "persisted");

    // The new threshold applies to the next round without a restart; the key still works.
    let run = post(&t, "/api/inspection/run", Value::Null).await.ok(200);
    assert_eq!(run["status"], "completed", "{run}");
    let d = find(
        &run["decisions"],
        "accountName",
        &t.name_of("eighty@example.com"),
    );
    assert_eq!(d["action"], "disable", "85 % >= 80 %: {d}");

    let system = get(&t, "/api/runtime/logs?category=system").await.ok(200);
    let changed = find(&system, "operationType", "settingsChanged");
    assert_eq!(changed["category"], "system");
    assert_eq!(changed["siteId"], SITE);
    assert_eq!(changed["source"], "manual");
    let msg = changed["message"].as_str().unwrap();
    assert!(
        msg.contains("usedPercentThreshold") && msg.contains("autoEnableRecovered"),
        "{msg}"
    );
    assert!(
        system
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["category"] == "system"),
        "{system}"
    );
}

#[tokio::test]
async fn a_settings_update_with_several_bad_values_is_a_400_listing_every_problem_and_changing_nothing()
 {
    let t = spawn_app(vec![]).await;
    let before = get(&t, "/api/settings").await.ok(200);
    let body = put(
        &t,
        "/api/settings",
        json!({
            "timeoutMs": 10,
            "usedPercentThreshold": 0,
            "probeWorkers": 0,
            "autoActionMode": "explode",
            "retryCount": -1,
        }),
    )
    .await
    .err(400, "invalid");
    let problems: Vec<String> = body["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    for field in [
        "timeoutMs",
        "usedPercentThreshold",
        "probeWorkers",
        "autoActionMode",
        "retryCount",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(field)),
            "{field} not named in {problems:?}"
        );
    }
    assert_eq!(problems.len(), 5, "{problems:?}");
    assert_eq!(get(&t, "/api/settings").await.ok(200), before);
    put(
        &t,
        "/api/settings?siteId=nowhere",
        json!({"timeoutMs": 2000}),
    )
    .await
    .err(404, "unknown_site");
}

#[tokio::test]
async fn a_wrong_management_key_makes_cpa_calls_a_502_with_cpa_status_and_never_shows_the_key() {
    let t = spawn_app(vec![plus("a@example.com", 1.0, 1.0)]).await;
    let wrong = "wrong-mgmt-KEY-value";
    let s = put(&t, "/api/settings", json!({"managementKey": wrong}))
        .await
        .ok(200);
    assert_eq!(s["hasManagementKey"], true);
    let r = post(&t, "/api/accounts/refresh", Value::Null).await;
    assert!(!r.text.contains(wrong), "{}", r.text);
    let body = r.err(502, "management_key_refused");
    assert_eq!(body["cpaStatus"], 401, "{body}");
    // The stored refusal answers the same, without a call to CPA.
    let stored = post(&t, "/api/accounts/refresh", Value::Null).await;
    let body = stored.err(502, "management_key_refused");
    assert_eq!(body["cpaStatus"], 401, "{body}");
    let logs = get(&t, "/api/runtime/logs").await;
    assert!(!logs.text.contains(wrong), "{}", logs.text);

    put(&t, "/api/settings", json!({"managementKey": MGMT_KEY}))
        .await
        .ok(200);
    assert_eq!(len(&load_accounts(&t).await), 1);
}

// ---------------------------------------------------------------------------------------------
// Accounts
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn reloading_accounts_lists_what_cpa_has_with_every_documented_field() {
    let mut external = plus("external@example.com", 1.0, 1.0);
    external.disabled = true;
    let t = spawn_app(vec![plus("a@example.com", 1.0, 1.0), external]).await;
    assert_eq!(get(&t, "/api/accounts").await.ok(200), json!([]));

    let list = load_accounts(&t).await;
    assert_eq!(len(&list), 2);
    let name = t.name_of("a@example.com");
    let a = find(&list, "name", &name);
    assert_eq!(
        a,
        &json!({
            "name": name,
            "authIndex": t.sim.auth_index_for("codex", &name),
            "email": "a@example.com",
            "displayAccount": "a@example.com",
            "planType": "plus",
            "disabled": false,
            "status": "active",
            "statusMessage": "",
            "cpaPriority": 0,
            // The reload put every new account on the priority list, pending (docs/rules/patrol.md §6.1).
            "localPriority": 1,
            "pendingFirstInspection": true,
            "exception": false,
            "disableReason": "",
            "disabledBy": null,
            "disabledAt": null,
            "disableReasonProvisional": false,
            // Never probed: the one rule has no data on it.
            "availability": {"state": "noData", "until": null},
            // No account policy: the patrol may act on it (docs/rules/patrol.md §9).
            "neverAct": false,
            // resetCreditsMode off (the default): nothing shown (docs/reset-credits.md).
            "resetCredits": null,
        })
    );
    let ext = find(&list, "email", "external@example.com");
    assert_eq!(ext["disabled"], true);
    assert_eq!(
        ext["availability"],
        json!({"state": "disabled", "until": null}),
        "disabled by someone else: a provisional ManualDisabled"
    );
    assert_eq!(get(&t, "/api/accounts").await.ok(200), list, "stored");

    // A new login in CPA shows up on the next reload and is logged.
    t.sim.add_account(plus("new@example.com", 1.0, 1.0));
    let list = load_accounts(&t).await;
    assert_eq!(len(&list), 3);
    assert!(has(&list, "email", "new@example.com"));
    let added = get(&t, "/api/runtime/logs?category=account").await.ok(200);
    let added = find(&added, "operationType", "accountsAdded");
    assert!(
        added["message"]
            .as_str()
            .unwrap()
            .contains(&t.name_of("new@example.com")),
        "{added}"
    );
}

#[tokio::test]
async fn a_manual_disable_patches_cpa_and_is_owned_by_manual_until_enabled_or_released() {
    let t = spawn_app(vec![
        plus("a@example.com", 1.0, 10.0),
        plus("b@example.com", 1.0, 10.0),
    ])
    .await;
    load_accounts(&t).await;
    let name = t.name_of("a@example.com");

    t.clock.advance(Duration::minutes(7));
    let acc = post(&t, &format!("/api/accounts/{name}/disable"), Value::Null)
        .await
        .ok(200);
    assert_eq!(acc["name"], name.as_str());
    assert_eq!(acc["disabled"], true);
    assert_eq!(acc["disableReason"], "ManualDisabled");
    assert_eq!(acc["disabledBy"], "manual");
    assert_eq!(acc["disabledAt"], rfc3339(t0() + Duration::minutes(7)));
    assert_eq!(
        status_patch_bodies(&t.sim),
        vec![json!({"name": name, "disabled": true})]
    );
    assert!(t.sim.account(&name).unwrap().disabled);
    let listed = get(&t, "/api/accounts").await.ok(200);
    let listed = find(&listed, "name", &name);
    assert_eq!(
        (&listed["disableReason"], &listed["disabledBy"]),
        (&json!("ManualDisabled"), &json!("manual"))
    );

    // The patrol keeps its hands off a manual disable, whatever the quota says.
    let run = post(&t, "/api/inspection/run?force=true", Value::Null)
        .await
        .ok(200);
    let d = find(&run["decisions"], "accountName", &name);
    assert_eq!(d["action"], "keep", "{d}");
    assert_eq!(d["disableReason"], "ManualDisabled");
    assert_eq!(status_patch_bodies(&t.sim).len(), 1);

    // Enable: CPA patched, reason cleared.
    let acc = post(&t, &format!("/api/accounts/{name}/enable"), Value::Null)
        .await
        .ok(200);
    assert_eq!(acc["disabled"], false);
    assert_eq!(acc["disableReason"], "");
    assert!(
        acc["disabledBy"].is_null() && acc["disabledAt"].is_null(),
        "{acc}"
    );
    assert_eq!(
        status_patch_bodies(&t.sim)[1],
        json!({"name": name, "disabled": false})
    );
    assert!(!t.sim.account(&name).unwrap().disabled);

    // Release: the reason leaves ManualDisabled without any call to CPA; the next round
    // manages the account again (usable + autoEnableRecovered ⇒ enabled).
    post(&t, &format!("/api/accounts/{name}/disable"), Value::Null)
        .await
        .ok(200);
    let patches = status_patch_bodies(&t.sim).len();
    let acc = post(&t, &format!("/api/accounts/{name}/release"), Value::Null)
        .await
        .ok(200);
    assert_eq!(acc["name"], name.as_str());
    assert_ne!(acc["disableReason"], "ManualDisabled", "{acc}");
    assert_eq!(
        status_patch_bodies(&t.sim).len(),
        patches,
        "release sends nothing"
    );
    assert!(
        t.sim.account(&name).unwrap().disabled,
        "release does not enable"
    );
    let listed = get(&t, "/api/accounts").await.ok(200);
    let listed = find(&listed, "name", &name);
    assert_ne!(listed["disableReason"], "ManualDisabled", "{listed}");
    assert_ne!(listed["disabledBy"], "manual", "{listed}");
    let run = post(&t, "/api/inspection/run", Value::Null).await.ok(200);
    assert_eq!(
        find(&run["decisions"], "accountName", &name)["action"],
        "enable"
    );
    assert!(!t.sim.account(&name).unwrap().disabled);

    // Releasing an account that holds no ManualDisabled reason is a 404.
    post(&t, &format!("/api/accounts/{name}/release"), Value::Null)
        .await
        .err(404, "not_found");

    let logs = get(
        &t,
        &format!("/api/runtime/logs?category=account&account={name}"),
    )
    .await
    .ok(200);
    let ops: Vec<&str> = logs
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["operationType"].as_str().unwrap())
        .collect();
    assert!(ops.contains(&"manualAction"), "{ops:?}");
    assert!(ops.contains(&"release"), "{ops:?}");
    assert!(
        logs.as_array()
            .unwrap()
            .iter()
            .all(|e| e["accountName"] == name.as_str()),
        "{logs}"
    );
}

#[tokio::test]
async fn manual_actions_find_accounts_added_since_the_last_reload_and_unknown_names_are_404() {
    let t = spawn_app(vec![plus("a@example.com", 1.0, 10.0)]).await;
    load_accounts(&t).await;
    t.sim.add_account(plus("late@example.com", 1.0, 10.0));
    let late = t.name_of("late@example.com");
    let acc = post(&t, &format!("/api/accounts/{late}/disable"), Value::Null)
        .await
        .ok(200);
    assert_eq!(acc["disableReason"], "ManualDisabled");
    assert!(t.sim.account(&late).unwrap().disabled);

    for verb in ["disable", "enable", "release"] {
        post(&t, &format!("/api/accounts/ghost.json/{verb}"), Value::Null)
            .await
            .err(404, "not_found");
    }
    assert!(
        status_patch_bodies(&t.sim)
            .iter()
            .all(|b| b["name"] != "ghost.json")
    );
    post(&t, "/api/accounts/refresh?siteId=nowhere", Value::Null)
        .await
        .err(404, "unknown_site");
}

#[tokio::test]
async fn a_manual_action_cpa_refuses_is_a_502_with_cpa_status_logged_as_an_error() {
    let t = spawn_app(vec![plus("a@example.com", 1.0, 10.0)]).await;
    load_accounts(&t).await;
    let name = t.name_of("a@example.com");
    t.sim.set_fail_patch(&name, Some(500));
    let body = post(&t, &format!("/api/accounts/{name}/disable"), Value::Null)
        .await
        .err(502, "cpa_error");
    assert_eq!(body["cpaStatus"], 500, "{body}");
    assert!(!t.sim.account(&name).unwrap().disabled);
    let acc = get(&t, "/api/accounts").await.ok(200);
    assert_eq!(
        find(&acc, "name", &name)["disableReason"],
        "",
        "no reason recorded for a disable that did not happen"
    );
    let errors = get(&t, "/api/runtime/logs?level=error").await.ok(200);
    assert_eq!(len(&errors), 1, "{errors}");
    assert_eq!(errors[0]["accountName"], name.as_str());
    assert_eq!(errors[0]["category"], "account");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("manual disable"),
        "{errors}"
    );
}

// ---------------------------------------------------------------------------------------------
// Quotas
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn refreshing_all_quotas_evaluates_exceptions_too_and_takes_no_action() {
    let t = spawn_app(vec![
        plus("ok@example.com", 10.0, 40.0),
        plus("full@example.com", 10.0, 99.0),
        plus("except@example.com", 10.0, 99.0),
    ])
    .await;
    load_accounts(&t).await;
    let except = t.name_of("except@example.com");
    post(&t, "/api/exceptions", json!({"accountName": except}))
        .await
        .ok(200);

    let s = post(&t, "/api/quotas/refresh", Value::Null).await.ok(200);
    assert_eq!(
        s,
        json!({"refreshed": 3, "probed": 3, "reused": 0, "failed": 0, "status": "completed", "error": null})
    );
    assert_eq!(t.sim.api_call_count(), 3);
    assert!(
        status_patch_bodies(&t.sim).is_empty(),
        "no action: {:?}",
        t.sim.requests()
    );
    assert!(t.sim.accounts().iter().all(|a| !a.disabled));

    let quotas = get(&t, "/api/quotas").await.ok(200);
    assert_eq!(len(&quotas), 3);
    let full = find(&quotas, "accountName", &t.name_of("full@example.com"));
    assert_eq!(full["weeklyUsedPercent"], 99.0);
    assert_eq!(full["fiveHourUsedPercent"], 10.0);
    assert_eq!(full["disabled"], false);
    assert_eq!(full["disableReason"], "");
    assert_eq!(full["success"], true);
    assert_eq!(full["statusCode"], 200);
    // Availability is the one rule's answer (core::availability): over the threshold ⇒
    // exhausted until the weekly reset; under it ⇒ usable; the accounts list says the same.
    let weekly_reset = full["windows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["kind"] == "weekly")
        .map(|w| w["resetAt"].clone())
        .unwrap();
    assert!(weekly_reset.is_string(), "{full}");
    assert_eq!(
        full["availability"],
        json!({"state": "exhausted", "until": weekly_reset})
    );
    let ok = find(&quotas, "accountName", &t.name_of("ok@example.com"));
    assert_eq!(
        ok["availability"],
        json!({"state": "usable", "until": null})
    );
    let accounts = get(&t, "/api/accounts").await.ok(200);
    let full_account = find(&accounts, "name", &t.name_of("full@example.com"));
    assert_eq!(full_account["availability"], full["availability"]);
    let ex = find(&quotas, "accountName", &except);
    assert_eq!(ex["weeklyUsedPercent"], 99.0, "exceptions are evaluated");
    assert_eq!(ex["refreshedAt"], rfc3339(t0()));

    // Fresh snapshots are reused unless forced.
    let s = post(&t, "/api/quotas/refresh", Value::Null).await.ok(200);
    assert_eq!((&s["probed"], &s["reused"]), (&json!(0), &json!(3)), "{s}");
    let s = post(&t, "/api/quotas/refresh?force=true", Value::Null)
        .await
        .ok(200);
    assert_eq!((&s["probed"], &s["reused"]), (&json!(3), &json!(0)), "{s}");
    assert_eq!(t.sim.api_call_count(), 6);
    assert!(status_patch_bodies(&t.sim).is_empty());

    // A quota refresh is a run of its own kind, not an inspection.
    let runs = get(&t, "/api/inspection/runs").await.ok(200);
    assert_eq!(len(&runs), 3);
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .all(|r| r["source"] == "quotaRefresh" && r["disableCount"] == 0),
        "{runs}"
    );
    assert_eq!(get(&t, "/api/inspection/last-run").await.status, 204);
}

#[tokio::test]
async fn refreshing_one_quota_forces_a_probe_and_history_lists_the_probes_newest_first() {
    let t = spawn_app(vec![
        plus("a@example.com", 12.0, 30.0),
        plus("b@example.com", 1.0, 1.0),
    ])
    .await;
    let name = t.name_of("a@example.com");

    // Unknown to the store yet: the refresh reloads the listing and probes exactly one account.
    let q = post(&t, &format!("/api/quotas/{name}/refresh"), Value::Null)
        .await
        .ok(200);
    assert_eq!(t.sim.api_call_count(), 1);
    assert_eq!(q["accountName"], name.as_str());
    assert_eq!(q["displayAccount"], "a@example.com");
    assert_eq!(q["planType"], "plus");
    assert_eq!(q["success"], true);
    assert_eq!(q["fromCache"], false);
    assert_eq!(q["statusCode"], 200);
    assert_eq!(q["weeklyUsedPercent"], 30.0);
    assert_eq!(q["fiveHourUsedPercent"], 12.0);
    assert_eq!(q["refreshedAt"], rfc3339(t0()));
    assert!(q["nextRealRefreshAt"].is_string(), "{q}");
    let five = find(&q["windows"], "kind", "fiveHour");
    assert_eq!(five["group"], "main");
    assert_eq!(five["usedPercent"], 12.0);
    assert_eq!(five["limitWindowSeconds"], 18000);
    assert_eq!(five["resetAt"], rfc3339(t0() + Duration::hours(3)));
    let weekly = find(&q["windows"], "kind", "weekly");
    assert_eq!(weekly["usedPercent"], 30.0);
    assert_eq!(weekly["limitWindowSeconds"], 604800);
    assert_eq!(weekly["resetAt"], rfc3339(t0() + Duration::days(3)));
    for w in q["windows"].as_array().unwrap() {
        for field in ["id", "label", "resetAfterSeconds"] {
            assert!(w.get(field).is_some(), "{field} missing in {w}");
        }
    }

    // A second refresh a minute later probes again although the snapshot is fresh.
    t.clock.advance(Duration::minutes(1));
    t.sim.update_usage(&name, |u| {
        u.weekly.as_mut().unwrap().used_percent = 35.0;
    });
    let q = post(&t, &format!("/api/quotas/{name}/refresh"), Value::Null)
        .await
        .ok(200);
    assert_eq!(t.sim.api_call_count(), 2, "forced: a real probe each time");
    assert_eq!(q["weeklyUsedPercent"], 35.0);
    assert_eq!(q["refreshedAt"], rfc3339(t0() + Duration::minutes(1)));
    assert!(status_patch_bodies(&t.sim).is_empty(), "no action");

    let h = get(&t, &format!("/api/quotas/{name}/history"))
        .await
        .ok(200);
    assert_eq!(len(&h), 2, "{h}");
    assert_eq!(
        h[0]["at"],
        rfc3339(t0() + Duration::minutes(1)),
        "newest first"
    );
    assert_eq!(h[1]["at"], rfc3339(t0()));
    assert_eq!(
        (&h[0]["success"], &h[0]["statusCode"]),
        (&json!(true), &json!(200))
    );
    let used = |e: &Value| find(&e["snapshot"]["windows"], "kind", "weekly")["usedPercent"].clone();
    assert_eq!((used(&h[0]), used(&h[1])), (json!(35.0), json!(30.0)));
    let one = get(&t, &format!("/api/quotas/{name}/history?limit=1"))
        .await
        .ok(200);
    assert_eq!(len(&one), 1);
    assert_eq!(one[0]["at"], h[0]["at"]);
    let b = t.name_of("b@example.com");
    assert_eq!(
        get(&t, &format!("/api/quotas/{b}/history")).await.ok(200),
        json!([]),
        "b was never probed"
    );

    // A failed probe is history too, and the last good snapshot stays.
    t.clock.advance(Duration::minutes(1));
    t.sim
        .set_behaviour(&name, UpstreamBehaviour::TransportFailure);
    let q = post(&t, &format!("/api/quotas/{name}/refresh"), Value::Null)
        .await
        .ok(200);
    assert_eq!(q["success"], false);
    assert!(q["error"].is_string(), "{q}");
    assert_eq!(q["consecutiveFailures"], 1);
    assert_eq!(q["weeklyUsedPercent"], 35.0, "last good snapshot kept");
    let h = get(&t, &format!("/api/quotas/{name}/history"))
        .await
        .ok(200);
    assert_eq!(len(&h), 3);
    assert_eq!(h[0]["success"], false);
    assert!(h[0]["error"].is_string());

    post(&t, "/api/quotas/ghost.json/refresh", Value::Null)
        .await
        .err(404, "not_found");
    get(&t, "/api/quotas/ghost.json/history")
        .await
        .err(404, "not_found");
}

#[tokio::test]
async fn refreshing_one_quota_against_a_dead_cpa_is_a_502() {
    let t = spawn_app(vec![plus("a@example.com", 1.0, 1.0)]).await;
    load_accounts(&t).await;
    t.sim.set_down(true);
    let name = t.name_of("a@example.com");
    let body = post(&t, &format!("/api/quotas/{name}/refresh"), Value::Null)
        .await
        .err(502, "cpa_error");
    assert!(body["error"].as_str().unwrap().contains("503"), "{body}");
    let s = post(&t, "/api/quotas/refresh", Value::Null).await.ok(200);
    assert_eq!(s["status"], "error", "{s}");
    assert!(s["error"].is_string());
}

// ---------------------------------------------------------------------------------------------
// Exceptions
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_exception_account_is_listed_but_never_inspected_and_unknown_accounts_are_400() {
    let t = spawn_app(vec![
        plus("ok@example.com", 1.0, 10.0),
        plus("spared@example.com", 1.0, 99.0),
        plus("other@example.com", 1.0, 10.0),
    ])
    .await;
    assert_eq!(
        get(&t, "/api/exceptions").await.ok(200),
        json!({"exceptions": []})
    );
    load_accounts(&t).await;
    let spared = t.name_of("spared@example.com");
    let other = t.name_of("other@example.com");

    let list = post(
        &t,
        "/api/exceptions",
        json!({"accountName": format!(" {spared} ")}),
    )
    .await
    .ok(200);
    assert_eq!(list, json!({"exceptions": [spared]}));
    assert_eq!(get(&t, "/api/exceptions").await.ok(200), list);
    let accounts = get(&t, "/api/accounts").await.ok(200);
    assert_eq!(find(&accounts, "name", &spared)["exception"], true);
    assert_eq!(find(&accounts, "name", &other)["exception"], false);

    let run = post(&t, "/api/inspection/run", Value::Null).await.ok(200);
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["totalAccounts"], 2);
    assert!(!has(&run["decisions"], "accountName", &spared), "{run}");
    assert!(!t.sim.account(&spared).unwrap().disabled, "never acted on");
    assert!(status_patch_bodies(&t.sim).is_empty());

    // Unknown names are refused and nothing changes.
    let body = post(&t, "/api/exceptions", json!({"accountName": "ghost.json"}))
        .await
        .err(400, "invalid");
    assert_eq!(body["problems"], json!(["unknown account ghost.json"]));
    let body = put(
        &t,
        "/api/exceptions",
        json!({"exceptions": [other, "x.json", "y.json"]}),
    )
    .await
    .err(400, "invalid");
    assert_eq!(
        body["problems"],
        json!(["unknown account x.json", "unknown account y.json"])
    );
    post(&t, "/api/exceptions", json!({"accountName": "  "}))
        .await
        .err(400, "invalid");
    post(&t, "/api/exceptions", json!({}))
        .await
        .err(400, "bad_request");
    assert_eq!(
        get(&t, "/api/exceptions").await.ok(200),
        json!({"exceptions": [spared]})
    );

    // PUT replaces the list (blanks and duplicates dropped; answered by name).
    let list = put(
        &t,
        "/api/exceptions",
        json!({"exceptions": [spared, other, "", other]}),
    )
    .await
    .ok(200);
    assert_eq!(list, json!({"exceptions": [other, spared]}));

    // DELETE removes one; the freed account is inspected (and acted on) again.
    let list = delete(&t, &format!("/api/exceptions/{spared}"))
        .await
        .ok(200);
    assert_eq!(list, json!({"exceptions": [other]}));
    let list = delete(&t, "/api/exceptions/not-there.json").await.ok(200);
    assert_eq!(
        list,
        json!({"exceptions": [other]}),
        "removing a non-member is fine"
    );
    let run = post(&t, "/api/inspection/run", Value::Null).await.ok(200);
    assert_eq!(
        find(&run["decisions"], "accountName", &spared)["action"],
        "disable"
    );
    assert!(!has(&run["decisions"], "accountName", &other));
    assert!(t.sim.account(&spared).unwrap().disabled);
    get(&t, "/api/exceptions?siteId=nowhere")
        .await
        .err(404, "unknown_site");
}

// ---------------------------------------------------------------------------------------------
// Inspections
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_inspection_run_decides_per_account_acts_and_is_then_the_last_run() {
    let t = spawn_app(vec![
        plus("ok@example.com", 10.0, 40.0),
        plus("full@example.com", 10.0, 99.0),
    ])
    .await;
    let ok = t.name_of("ok@example.com");
    let full = t.name_of("full@example.com");
    assert_eq!(get(&t, "/api/inspection/last-run").await.status, 204);
    let status = get(&t, "/api/inspection/status").await.ok(200);
    assert!(status["lastRunStartedAt"].is_null(), "{status}");
    assert_eq!(status["isPolling"], false);

    let run = post(&t, "/api/inspection/run", Value::Null).await.ok(200);
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["siteId"], SITE);
    assert_eq!(run["source"], "manual");
    assert_eq!(run["dryRun"], false);
    assert!(run["runId"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(
        (
            &run["totalAccounts"],
            &run["probedCount"],
            &run["reusedCount"],
            &run["disableCount"],
            &run["enableCount"],
            &run["deleteCount"],
            &run["keepCount"],
        ),
        (
            &json!(2),
            &json!(2),
            &json!(0),
            &json!(1),
            &json!(0),
            &json!(0),
            &json!(1)
        ),
        "{run}"
    );
    assert_eq!(run["startedAt"], rfc3339(t0()));
    assert_eq!(run["finishedAt"], rfc3339(t0()));
    assert_eq!(len(&run["decisions"]), 2);
    let d = find(&run["decisions"], "accountName", &full);
    assert_eq!(d["action"], "disable");
    assert_eq!(d["displayAccount"], "full@example.com");
    assert_eq!(d["disableReason"], "QuotaExhausted");
    assert_eq!(d["statusCode"], 200);
    assert_eq!(d["usedPercent"], 99.0);
    assert_eq!(d["isQuotaReached"], true);
    assert_eq!(d["fromCache"], false);
    assert!(d["error"].is_null() && d["reason"].is_string(), "{d}");
    let k = find(&run["decisions"], "accountName", &ok);
    assert_eq!(k["action"], "keep");
    assert_eq!(k["usedPercent"], 40.0);
    assert_eq!(k["isQuotaReached"], false);
    assert_eq!(
        run["actionOutcomes"],
        json!([{"action": "disable", "accountName": full, "success": true, "error": null}])
    );
    assert_eq!(run["priorityRoutingOutcomes"], json!([]));
    assert_eq!(
        status_patch_bodies(&t.sim),
        vec![json!({"name": full, "disabled": true})]
    );
    let accounts = get(&t, "/api/accounts").await.ok(200);
    let f = find(&accounts, "name", &full);
    assert_eq!(f["disabled"], true);
    assert_eq!(f["disableReason"], "QuotaExhausted");
    assert_eq!(f["disabledBy"], "patrol");

    // last-run answers the same result; runs lists its summary; status shows its times.
    assert_eq!(get(&t, "/api/inspection/last-run").await.ok(200), run);
    let runs = get(&t, "/api/inspection/runs").await.ok(200);
    assert_eq!(len(&runs), 1);
    assert_eq!(runs[0]["runId"], run["runId"]);
    assert_eq!(runs[0]["source"], "manual");
    assert_eq!(runs[0]["disableCount"], 1);
    assert!(runs[0].get("decisions").is_none(), "summaries only");
    let status = get(&t, "/api/inspection/status").await.ok(200);
    assert_eq!(status["lastRunStartedAt"], run["startedAt"]);
    assert_eq!(status["lastRunFinishedAt"], run["finishedAt"]);
    assert_eq!(status["isPolling"], false);
    assert!(status["nextRealRefreshAt"].is_string(), "{status}");
    assert_eq!(
        status["nextResetCheckAt"],
        rfc3339(t0() + Duration::days(3) + Duration::minutes(1)),
        "the exhausted account's weekly reset + 1 min grace"
    );
    let progress = get(&t, "/api/runtime/progress").await.ok(200);
    assert_eq!(progress["operationType"], "inspection");
    assert_eq!(progress["status"], "completed");
    assert_eq!(progress["percent"], 100.0);
    assert_eq!(progress["processed"], progress["total"]);

    // A second run an hour later reuses fresh snapshots; force probes again. Newest first.
    t.clock.advance(Duration::hours(1));
    let second = post(&t, "/api/inspection/run", Value::Null).await.ok(200);
    assert_eq!(
        (&second["probedCount"], &second["reusedCount"]),
        (&json!(0), &json!(2)),
        "{second}"
    );
    assert_eq!(second["disableCount"], 0, "already disabled: keep");
    t.clock.advance(Duration::hours(1));
    let third = post(&t, "/api/inspection/run?force=true", Value::Null)
        .await
        .ok(200);
    assert_eq!(third["probedCount"], 2);
    let runs = get(&t, "/api/inspection/runs").await.ok(200);
    let ids: Vec<&Value> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["runId"])
        .collect();
    assert_eq!(ids, vec![&third["runId"], &second["runId"], &run["runId"]]);
    let limited = get(&t, "/api/inspection/runs?limit=1").await.ok(200);
    assert_eq!(len(&limited), 1);
    assert_eq!(limited[0]["runId"], third["runId"]);
    assert_eq!(
        get(&t, "/api/inspection/last-run").await.ok(200)["runId"],
        third["runId"]
    );
    assert_eq!(status_patch_bodies(&t.sim).len(), 1, "no second disable");
}

#[tokio::test]
async fn a_dry_run_inspection_decides_without_acting() {
    let t = spawn_app(vec![plus("full@example.com", 10.0, 99.0)]).await;
    let full = t.name_of("full@example.com");
    let run = post(&t, "/api/inspection/run?dryRun=true", Value::Null)
        .await
        .ok(200);
    assert_eq!(run["dryRun"], true);
    assert_eq!(
        find(&run["decisions"], "accountName", &full)["action"],
        "disable"
    );
    assert_eq!(run["actionOutcomes"], json!([]));
    assert!(!t.sim.account(&full).unwrap().disabled);
    assert!(status_patch_bodies(&t.sim).is_empty());
    post(&t, "/api/inspection/run?force=maybe", Value::Null)
        .await
        .err(400, "bad_request");
}

#[tokio::test]
async fn a_second_round_while_one_is_running_is_a_409_and_the_progress_shows_the_running_one() {
    // The slow probe hangs until the test releases it (no race against a client timeout).
    let mut settings = fast_settings();
    settings.timeout_ms = Some(60_000);
    let t = Arc::new(
        spawn_app_with(
            vec![
                with_behaviour(plus("slow@example.com", 1.0, 10.0), UpstreamBehaviour::Hang),
                plus("full@example.com", 1.0, 99.0),
            ],
            settings,
        )
        .await,
    );
    let slow = t.name_of("slow@example.com");
    let full = t.name_of("full@example.com");
    assert_eq!(
        get(&t, "/api/runtime/progress").await.ok(200)["status"],
        "idle"
    );

    let bg = t.clone();
    let first =
        tokio::spawn(async move { post(&bg, "/api/inspection/run", Value::Null).await.ok(200) });

    // Wait (bounded) until the round is observably running and its fast probe is done; the
    // slow one hangs until released below.
    let mut progress = Value::Null;
    for _ in 0..2000 {
        progress = get(&t, "/api/runtime/progress").await.ok(200);
        if progress["status"] == "running" && progress["processed"] == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(progress["status"], "running", "{progress}");
    assert_eq!(progress["processed"], 1, "{progress}");
    assert_eq!(progress["operationType"], "inspection");
    assert_eq!(progress["source"], "manual");
    assert_eq!(progress["stage"], "probing");
    assert_eq!(progress["total"], 2);
    assert_eq!(progress["percent"], 50.0);
    assert_eq!(progress["currentAccountName"], full.as_str());
    assert_eq!(progress["startedAt"], rfc3339(t0()));

    let body = post(&t, "/api/inspection/run", Value::Null)
        .await
        .err(409, "busy");
    assert!(body["error"].as_str().unwrap().contains(SITE), "{body}");
    post(&t, "/api/quotas/refresh", Value::Null)
        .await
        .err(409, "busy");
    post(&t, &format!("/api/quotas/{full}/refresh"), Value::Null)
        .await
        .err(409, "busy");
    delete(&t, &format!("/api/settings/sites/{SITE}"))
        .await
        .err(409, "busy");
    assert_eq!(
        get(&t, "/api/inspection/status").await.ok(200)["isPolling"],
        true
    );

    t.sim.release_hanging();
    let run = first.await.unwrap();
    // CPA's api-call gave up on the slow account (502): one of two probes unanswered.
    assert_eq!(run["status"], "partial", "{run}");
    let s = find(&run["decisions"], "accountName", &slow);
    assert_eq!(s["action"], "keep");
    assert!(
        s["error"].as_str().unwrap().contains("request failed"),
        "{s}"
    );
    assert_eq!(
        find(&run["decisions"], "accountName", &full)["action"],
        "disable"
    );
    assert_eq!(
        get(&t, "/api/inspection/status").await.ok(200)["isPolling"],
        false
    );
    assert_eq!(
        get(&t, "/api/runtime/progress").await.ok(200)["status"],
        "completed"
    );
    // The site is free again.
    assert_eq!(
        get(&t, "/api/settings/sites").await.ok(200)["selectedSiteId"],
        SITE
    );
}

#[tokio::test]
async fn auto_polling_is_switched_through_the_api_persisted_across_a_restart_and_logged() {
    let t = spawn_app(vec![]).await;
    assert_eq!(
        get(&t, "/api/inspection/status").await.ok(200)["autoPollingEnabled"],
        false
    );
    assert_eq!(
        post(&t, "/api/inspection/auto/start", Value::Null)
            .await
            .ok(200),
        json!({"autoPollingEnabled": true})
    );
    assert_eq!(
        get(&t, "/api/settings").await.ok(200)["autoPollingEnabled"],
        true
    );
    let status = get(&t, "/api/inspection/status").await.ok(200);
    assert_eq!(status["autoPollingEnabled"], true);
    assert_eq!(status["pollIntervalMinutes"], 10);

    let t = t.restart().await;
    assert_eq!(
        get(&t, "/api/settings").await.ok(200)["autoPollingEnabled"],
        true,
        "persisted"
    );
    assert_eq!(
        post(&t, "/api/inspection/auto/stop", Value::Null)
            .await
            .ok(200),
        json!({"autoPollingEnabled": false})
    );
    let status = get(&t, "/api/inspection/status").await.ok(200);
    assert_eq!(status["autoPollingEnabled"], false);
    assert!(status["nextScheduledAt"].is_null(), "{status}");
    let system = get(&t, "/api/runtime/logs?category=system").await.ok(200);
    let switches = system
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["operationType"] == "settingsChanged"
                && e["message"]
                    .as_str()
                    .unwrap()
                    .contains("autoPollingEnabled")
        })
        .count();
    assert_eq!(switches, 2, "{system}");
    post(&t, "/api/inspection/auto/start?siteId=nowhere", Value::Null)
        .await
        .err(404, "unknown_site");
}

// ---------------------------------------------------------------------------------------------
// Runtime logs
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn runtime_logs_filter_by_category_level_account_site_and_time_newest_first() {
    let t = spawn_app(vec![
        plus("a@example.com", 1.0, 10.0),
        plus("b@example.com", 1.0, 99.0),
    ])
    .await;
    let a = t.name_of("a@example.com");
    let b = t.name_of("b@example.com");
    post(&t, "/api/inspection/run", Value::Null).await.ok(200);
    t.clock.advance(Duration::minutes(10));
    let later = t0() + Duration::minutes(5);
    t.sim.set_fail_patch(&a, Some(500));
    post(&t, &format!("/api/accounts/{a}/disable"), Value::Null)
        .await
        .err(502, "cpa_error");

    let all = get(&t, "/api/runtime/logs").await.ok(200);
    assert!(len(&all) >= 5, "{all}");
    let ids: Vec<i64> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    for e in all.as_array().unwrap() {
        for field in [
            "at",
            "siteId",
            "category",
            "operationType",
            "source",
            "level",
            "message",
        ] {
            assert!(!e[field].is_null(), "{field} missing in {e}");
        }
    }

    let inspection = get(&t, "/api/runtime/logs?category=inspection")
        .await
        .ok(200);
    assert!(has(&inspection, "operationType", "summary"), "{inspection}");
    assert!(
        inspection
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["category"] == "inspection")
    );
    let account = get(&t, "/api/runtime/logs?category=account").await.ok(200);
    let action = find(&account, "operationType", "action");
    assert_eq!(action["accountName"], b.as_str());
    assert!(
        action["message"].as_str().unwrap().contains("succeeded"),
        "{action}"
    );

    let errors = get(&t, "/api/runtime/logs?level=error").await.ok(200);
    assert_eq!(len(&errors), 1, "{errors}");
    assert_eq!(errors[0]["accountName"], a.as_str());
    assert_eq!(errors[0]["at"], rfc3339(t0() + Duration::minutes(10)));
    let warnings_up = get(&t, "/api/runtime/logs?level=WARNING").await.ok(200);
    assert!(
        warnings_up
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["level"] == "warning" || e["level"] == "error"),
        "{warnings_up}"
    );
    assert!(has(&warnings_up, "level", "error"), "minimum level");

    let about_b = get(&t, &format!("/api/runtime/logs?account={b}"))
        .await
        .ok(200);
    assert!(len(&about_b) >= 2, "decision and action: {about_b}");
    assert!(
        about_b
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["accountName"] == b.as_str())
    );

    let since = get(&t, &format!("/api/runtime/logs?since={}", rfc3339(later)))
        .await
        .ok(200);
    assert_eq!(
        since, errors,
        "only the failed manual disable is that recent"
    );

    let one = get(&t, "/api/runtime/logs?limit=1").await.ok(200);
    assert_eq!(len(&one), 1);
    assert_eq!(one[0], all[0]);
    let both = get(
        &t,
        &format!("/api/runtime/logs?siteId={SITE}&category=account&level=error&account={a}"),
    )
    .await
    .ok(200);
    assert_eq!(both, errors);
    assert_eq!(
        get(&t, "/api/runtime/logs?account=ghost.json")
            .await
            .ok(200),
        json!([])
    );

    let body = get(
        &t,
        "/api/runtime/logs?category=gossip&level=loud&since=yesterday",
    )
    .await
    .err(400, "invalid");
    assert_eq!(len(&body["problems"]), 3, "{body}");
    get(&t, "/api/runtime/logs?siteId=nowhere")
        .await
        .err(404, "unknown_site");
}

// ---------------------------------------------------------------------------------------------
// Alerts
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_alert_history_lists_events_with_their_messages_and_delivery_attempts() {
    let smtp = SmtpServer::start().await;
    let t = spawn_app_alerts(
        vec![
            plus("a@example.com", 100.0, 10.0),
            free("b@example.com", 99.0),
        ],
        email_alerts(&smtp.url()),
    )
    .await;
    get_open(&t, "/api/alerts").await.err(401, "unauthorized");
    let empty = get(&t, "/api/alerts").await.ok(200);
    assert_eq!(
        empty,
        json!({"enabled": true, "channels": ["email"], "events": []})
    );

    post(&t, "/api/inspection/run", Value::Null).await.ok(200);
    quota_patrol::jobs::alerts::deliver_due(&t.patrol)
        .await
        .unwrap();
    let h = get(&t, &format!("/api/alerts?siteId={SITE}&limit=10"))
        .await
        .ok(200);
    assert_eq!(len(&h["events"]), 1);
    let e = &h["events"][0];
    assert_eq!(e["event"], "all_exhausted");
    assert_eq!(e["level"], "critical");
    assert_eq!(e["siteId"], SITE);
    assert_eq!(e["siteName"], "Test");
    assert_eq!(e["reminder"], false);
    assert_eq!(e["at"], rfc3339(t0()));
    assert!(e["eventId"].as_str().is_some_and(|s| s.len() == 36));
    assert_eq!(e["details"]["totalAccounts"], 2);
    assert_eq!(e["details"]["usableAccounts"], 0);
    assert_eq!(
        e["details"]["earliestResetAt"],
        rfc3339(t0() + Duration::hours(3))
    );
    assert_eq!(len(&e["details"]["accounts"]), 2);
    let m = &e["messages"][0];
    assert_eq!(m["channel"], "email");
    assert_eq!(m["status"], "delivered");
    assert_eq!(m["attempts"], 1);
    assert_eq!(m["nextAttemptAt"], Value::Null);
    assert_eq!(m["deliveredAt"], rfc3339(t0()));
    assert_eq!(m["expiresAt"], rfc3339(t0() + Duration::hours(24)));
    assert_eq!(m["deliveries"][0]["success"], true);
    assert!(
        m["deliveries"][0]["detail"]
            .as_str()
            .unwrap()
            .starts_with("250 "),
        "{m}"
    );
    assert_eq!(smtp.received().len(), 1);

    let logs = get(&t, "/api/runtime/logs?category=alert").await.ok(200);
    let ops: Vec<&str> = logs
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["operationType"].as_str().unwrap())
        .collect();
    assert_eq!(ops, vec!["alertDelivery", "alertRaised"]);

    get(&t, "/api/alerts?siteId=nope")
        .await
        .err(404, "unknown_site");
    get(&t, "/api/alerts?limit=lots")
        .await
        .err(400, "bad_request");
}

#[tokio::test]
async fn an_alert_test_sends_on_every_channel_and_reports_each_answer() {
    let smtp = SmtpServer::start().await;
    let hook = HookServer::start().await;
    let t = spawn_app_alerts(
        vec![],
        quota_patrol::config::AlertsConfig {
            webhook: Some(quota_patrol::config::WebhookConfig {
                url: hook.url(),
                secret: None,
                timeout_seconds: 2,
            }),
            ..email_alerts(&smtp.url())
        },
    )
    .await;
    let r = post(&t, "/api/alerts/test", Value::Null).await.ok(200);
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{r}");
    assert_eq!(results[0]["channel"], "email");
    assert_eq!(results[0]["success"], true);
    assert!(
        results[0]["detail"].as_str().unwrap().starts_with("250 "),
        "{r}"
    );
    assert_eq!(results[1]["channel"], "webhook");
    assert_eq!(results[1]["detail"], "HTTP 200");
    let mail = smtp.received();
    assert_eq!(mail.len(), 1);
    assert_eq!(
        mail[0].parsed().subject().unwrap(),
        "[quota-patrol] INFO: Test message from quota-patrol"
    );
    assert_eq!(hook.hits()[0].json()["event"], "test");

    smtp.set_down(true);
    hook.answer(500);
    let r = post(&t, "/api/alerts/test", Value::Null).await.ok(200);
    assert_eq!(r["results"][0]["success"], false);
    assert!(
        r["results"][0]["detail"].as_str().unwrap().contains("421"),
        "{r}"
    );
    assert_eq!(r["results"][1]["success"], false);
    assert_eq!(r["results"][1]["detail"], "HTTP 500");
    assert_eq!(
        get(&t, "/api/alerts").await.ok(200)["events"],
        json!([]),
        "a test is not an alert event"
    );

    let plain = spawn_app(vec![]).await;
    post(&plain, "/api/alerts/test", Value::Null)
        .await
        .err(409, "alerts_not_configured");
    get_open(&plain, "/api/alerts/test")
        .await
        .err(401, "unauthorized");
}
