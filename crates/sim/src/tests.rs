//! End-to-end checks of the simulated CPA over real HTTP on 127.0.0.1 (no other network, no
//! readiness sleeps: `SimCpa::start` has bound the socket when it returns).

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, TimeZone, Utc};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use super::*;
use quota_patrol_core::clock::ManualClock;

const KEY: &str = "test-key";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0)
        .single()
        .expect("valid time")
}

struct Sim {
    handle: SimHandle,
    clock: ManualClock,
    client: Client,
}

impl Sim {
    async fn start(config: SimConfig) -> Sim {
        let clock = ManualClock::new(t0());
        let handle = SimCpa::start(config, Arc::new(clock.clone())).expect("sim starts");
        let client = Client::builder().no_proxy().build().expect("client");
        Sim {
            handle,
            clock,
            client,
        }
    }

    async fn with_accounts(version: &str, accounts: Vec<SimAccount>) -> Sim {
        Sim::start(SimConfig {
            management_key: Some(KEY.to_string()),
            version: version.to_string(),
            accounts,
            ..SimConfig::default()
        })
        .await
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v0/management{path}", self.handle.base_url())
    }

    /// Sends an authorised request; returns status, headers and the body text.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, reqwest::header::HeaderMap, String) {
        let mut request = self.client.request(method, self.url(path)).bearer_auth(KEY);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status();
        let headers = response.headers().clone();
        (status, headers, response.text().await.expect("body"))
    }

    async fn json(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let (status, _, text) = self.call(method, path, body).await;
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn files(&self) -> Vec<Value> {
        let (status, body) = self.json(Method::GET, "/auth-files", None).await;
        assert_eq!(status, StatusCode::OK);
        body["files"].as_array().cloned().expect("files array")
    }

    async fn probe(&self, name: &str) -> (StatusCode, Value) {
        let view = self.handle.account(name).expect("account exists");
        let mut header = json!({
            "Authorization": "Bearer $TOKEN$",
            "User-Agent": "codex_cli_rs/0.76.0 (Debian 13.0.0; x86_64) WindowsTerminal",
            "Accept": "application/json",
        });
        if let Some(id) = &view.chatgpt_account_id {
            header["ChatGPT-Account-Id"] = json!(id);
        }
        let body = json!({
            "auth_index": view.auth_index,
            "method": "GET",
            "url": "https://chatgpt.com/backend-api/wham/usage",
            "header": header,
        });
        self.json(Method::POST, "/api-call", Some(body)).await
    }
}

fn plus(email: &str) -> SimAccount {
    SimAccount::codex(
        email,
        "plus",
        SimUsage::paid(
            20.0,
            t0() + Duration::hours(2),
            40.0,
            t0() + Duration::days(3),
        ),
    )
}

fn free(email: &str) -> SimAccount {
    SimAccount::codex(
        email,
        "free",
        SimUsage::weekly_only(10.0, t0() + Duration::days(5)),
    )
}

// ---- authentication -------------------------------------------------------------------------

#[tokio::test]
async fn a_missing_key_is_refused_with_401_and_the_version_headers() {
    let sim = Sim::with_accounts("v7.1.19", vec![]).await;
    let response = sim
        .client
        .get(sim.url("/auth-files"))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(response.headers()["x-cpa-version"], "v7.1.19");
    assert!(response.headers().contains_key("x-cpa-commit"));
    assert!(response.headers().contains_key("x-cpa-build-date"));
    let body: Value = response.json().await.expect("json");
    assert_eq!(body, json!({"error": "missing management key"}));
}

#[tokio::test]
async fn a_wrong_key_is_refused_as_invalid() {
    let sim = Sim::with_accounts("v7.1.19", vec![]).await;
    let response = sim
        .client
        .get(sim.url("/auth-files"))
        .bearer_auth("nope")
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.json::<Value>().await.expect("json"),
        json!({"error": "invalid management key"})
    );
}

#[tokio::test]
async fn a_bare_authorization_header_and_x_management_key_are_both_accepted() {
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    let bare = sim
        .client
        .get(sim.url("/auth-files"))
        .header("Authorization", KEY)
        .send()
        .await
        .expect("sent");
    assert_eq!(bare.status(), StatusCode::OK);
    let lower = sim
        .client
        .get(sim.url("/auth-files"))
        .header("Authorization", format!("bearer {KEY}"))
        .send();
    assert_eq!(lower.await.expect("sent").status(), StatusCode::OK);
    let x = sim
        .client
        .get(sim.url("/auth-files"))
        .header("X-Management-Key", KEY)
        .send()
        .await
        .expect("sent");
    assert_eq!(x.status(), StatusCode::OK);
    assert_eq!(x.headers()["x-cpa-version"], "v7.1.19");
}

#[tokio::test]
async fn five_failures_ban_the_ip_for_thirty_minutes_even_with_the_right_key() {
    let sim = Sim::with_accounts("v7.1.19", vec![]).await;
    for _ in 0..5 {
        let r = sim
            .client
            .get(sim.url("/auth-files"))
            .bearer_auth("wrong")
            .send()
            .await
            .expect("sent");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
    let (status, headers, text) = sim.call(Method::GET, "/auth-files", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(headers["x-cpa-version"], "v7.1.19");
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        body["error"],
        "IP banned due to too many failed attempts. Try again in 30m0s"
    );
    sim.clock
        .advance(Duration::minutes(10) + Duration::seconds(48));
    let (_, body) = sim.json(Method::GET, "/auth-files", None).await;
    assert_eq!(
        body["error"],
        "IP banned due to too many failed attempts. Try again in 19m12s"
    );
    sim.clock.advance(Duration::minutes(20));
    let (status, _) = sim.json(Method::GET, "/auth-files", None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_success_clears_the_failure_count_and_the_ban_can_be_switched_off() {
    let sim = Sim::with_accounts("v7.1.19", vec![]).await;
    for _ in 0..4 {
        sim.client
            .get(sim.url("/auth-files"))
            .bearer_auth("wrong")
            .send()
            .await
            .expect("sent");
    }
    assert_eq!(
        sim.call(Method::GET, "/auth-files", None).await.0,
        StatusCode::OK
    );
    for _ in 0..4 {
        sim.client
            .get(sim.url("/auth-files"))
            .bearer_auth("wrong")
            .send()
            .await
            .expect("sent");
    }
    assert_eq!(
        sim.call(Method::GET, "/auth-files", None).await.0,
        StatusCode::OK
    );

    let lenient = Sim::start(SimConfig {
        management_key: Some(KEY.to_string()),
        ban_after_failures: None,
        ..SimConfig::default()
    })
    .await;
    for _ in 0..12 {
        lenient
            .client
            .get(lenient.url("/auth-files"))
            .send()
            .await
            .expect("sent");
    }
    assert_eq!(
        lenient.call(Method::GET, "/auth-files", None).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn without_a_management_key_every_management_path_is_an_empty_404() {
    let sim = Sim::start(SimConfig {
        management_key: None,
        ..SimConfig::default()
    })
    .await;
    let response = sim
        .client
        .get(sim.url("/auth-files"))
        .bearer_auth(KEY)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(!response.headers().contains_key("x-cpa-version"));
    assert_eq!(response.text().await.expect("body"), "");
    assert_eq!(sim.handle.management_key(), None);
}

#[tokio::test]
async fn unknown_paths_answer_gins_plain_404_on_v7_1_19_and_a_keyed_empty_404_at_head() {
    let old = Sim::with_accounts("v7.1.19", vec![]).await;
    let (status, headers, text) = old.call(Method::GET, "/usage", None).await;
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::NOT_FOUND, "404 page not found")
    );
    assert!(!headers.contains_key("x-cpa-version"));
    let (status, _, text) = old
        .call(
            Method::POST,
            "/reset-quota",
            Some(json!({"auth_index": "x"})),
        )
        .await;
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::NOT_FOUND, "404 page not found")
    );

    let head = Sim::with_accounts("v7.2.140", vec![]).await;
    let unkeyed = head
        .client
        .get(head.url("/usage"))
        .send()
        .await
        .expect("sent");
    assert_eq!(unkeyed.status(), StatusCode::UNAUTHORIZED);
    let (status, headers, text) = head.call(Method::GET, "/usage", None).await;
    assert_eq!((status, text.as_str()), (StatusCode::NOT_FOUND, ""));
    assert_eq!(headers["x-cpa-version"], "v7.2.140");
}

// ---- listing --------------------------------------------------------------------------------

#[tokio::test]
async fn the_listing_is_sorted_by_lowercased_name_and_has_cpa_fields() {
    let mut upper = plus("Zed@example.com");
    upper.name = "codex-Beta@example.com-plus.json".to_string();
    let mut noindex = free("ken@example.com");
    noindex.has_auth_index = false;
    let mut prioritised = plus("user1@example.com");
    prioritised.priority = 10;
    prioritised.note = Some("team A".to_string());
    prioritised.success = 148;
    prioritised.failed = 3;
    let sim = Sim::with_accounts(
        "v7.1.19",
        vec![plus("alpha@example.com"), upper, noindex, prioritised],
    )
    .await;
    let files = sim.files().await;
    let names: Vec<_> = files
        .iter()
        .map(|f| f["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        names,
        vec![
            "codex-alpha@example.com-plus.json",
            "codex-Beta@example.com-plus.json",
            "codex-ken@example.com-free.json",
            "codex-user1@example.com-plus.json",
        ]
    );
    let user1 = &files[3];
    assert_eq!(user1["auth_index"], "dced952c87a12d9f");
    assert_eq!(user1["id"], "codex-user1@example.com-plus.json");
    assert_eq!(user1["type"], "codex");
    assert_eq!(user1["provider"], "codex");
    assert_eq!(user1["label"], "user1@example.com");
    assert_eq!(user1["status"], "active");
    assert_eq!(user1["status_message"], "");
    assert_eq!(user1["disabled"], false);
    assert_eq!(user1["unavailable"], false);
    assert_eq!(user1["runtime_only"], false);
    assert_eq!(user1["source"], "file");
    assert_eq!(
        user1["path"],
        "/data/auths/codex-user1@example.com-plus.json"
    );
    assert!(user1["size"].as_u64().is_some_and(|s| s > 0));
    assert_eq!(user1["success"], 148);
    assert_eq!(user1["failed"], 3);
    assert_eq!(user1["email"], "user1@example.com");
    assert_eq!(user1["account_type"], "oauth");
    assert_eq!(user1["account"], "user1@example.com");
    assert_eq!(user1["priority"], 10);
    assert_eq!(user1["note"], "team A");
    assert_eq!(user1["id_token"]["plan_type"], "plus");
    assert_eq!(
        user1["id_token"]["chatgpt_account_id"]
            .as_str()
            .map(str::len),
        Some(36)
    );
    for field in ["created_at", "updated_at", "modtime"] {
        let text = user1[field].as_str().expect("time string");
        assert!(text.ends_with("+08:00"), "{field} = {text}");
        assert!(DateTime::parse_from_rfc3339(text).is_ok());
    }
    let buckets = user1["recent_requests"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 20);
    // t0 = 03:00 UTC = 11:00 +08:00, so the current bucket is 11:00-11:10.
    assert_eq!(buckets[19]["time"], "11:00-11:10");
    assert_eq!(buckets[0]["time"], "07:50-08:00");

    let alpha = &files[0];
    assert!(alpha.get("priority").is_none(), "priority 0 is omitted");
    assert!(alpha.get("note").is_none(), "empty note is omitted");
    assert!(
        files[2].get("auth_index").is_none(),
        "no auth_index => field omitted"
    );
}

#[tokio::test]
async fn list_filters_are_ignored_on_v7_1_19_and_applied_from_v7_2_94() {
    let accounts = vec![plus("a@example.com"), plus("b@example.com")];
    let old = Sim::with_accounts("v7.1.19", accounts.clone()).await;
    let (_, body) = old
        .json(
            Method::GET,
            "/auth-files?name=codex-a@example.com-plus.json",
            None,
        )
        .await;
    assert_eq!(body["files"].as_array().map(Vec::len), Some(2));

    let new = Sim::with_accounts("v7.2.94", accounts).await;
    let (_, body) = new
        .json(
            Method::GET,
            "/auth-files?name=codex-a%40example.com-plus.json",
            None,
        )
        .await;
    assert_eq!(body["files"].as_array().map(Vec::len), Some(1));
    let index = new
        .handle
        .auth_index_for("codex", "codex-b@example.com-plus.json");
    let (_, body) = new
        .json(
            Method::GET,
            &format!("/auth-files?auth_index={index}"),
            None,
        )
        .await;
    assert_eq!(body["files"][0]["name"], "codex-b@example.com-plus.json");
}

#[tokio::test]
async fn a_listing_of_ten_thousand_generated_accounts_is_complete() {
    let sim = Sim::with_accounts("v7.1.19", generated_accounts(10_000, t0())).await;
    let files = sim.files().await;
    assert_eq!(files.len(), 10_000);
    assert!(files.windows(2).all(|w| {
        w[0]["name"].as_str().map(str::to_lowercase) <= w[1]["name"].as_str().map(str::to_lowercase)
    }));
}

#[tokio::test]
async fn traffic_grows_the_counters_and_the_current_bucket() {
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    sim.handle.add_traffic("codex-a@example.com-plus.json", 7);
    let files = sim.files().await;
    assert_eq!(files[0]["success"], 7);
    assert_eq!(files[0]["recent_requests"][19]["success"], 7);
    sim.clock.advance(Duration::minutes(10));
    let files = sim.files().await;
    assert_eq!(files[0]["recent_requests"][18]["success"], 7);
    assert_eq!(files[0]["recent_requests"][19]["success"], 0);
}

#[tokio::test]
async fn garbage_listings_and_outages_are_served_on_request() {
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    sim.handle
        .set_listing_garbage(Some("<html>captive portal</html>".to_string()));
    let (status, _, text) = sim.call(Method::GET, "/auth-files", None).await;
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::OK, "<html>captive portal</html>")
    );
    sim.handle.set_listing_garbage(None);

    sim.handle.set_down(true);
    let (status, headers, text) = sim.call(Method::GET, "/auth-files", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(text.contains("<html>"));
    assert!(!headers.contains_key("x-cpa-version"));
    sim.handle.set_down(false);
    assert_eq!(
        sim.call(Method::GET, "/auth-files", None).await.0,
        StatusCode::OK
    );
}

// ---- status and fields patches --------------------------------------------------------------

#[tokio::test]
async fn the_status_patch_disables_and_enables_with_cpas_status_texts() {
    let name = "codex-a@example.com-plus.json";
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    let (status, body) = sim
        .json(
            Method::PATCH,
            "/auth-files/status",
            Some(json!({"name": name, "disabled": true})),
        )
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"status": "ok", "disabled": true}))
    );
    let files = sim.files().await;
    assert_eq!(files[0]["disabled"], true);
    assert_eq!(files[0]["status"], "disabled");
    assert_eq!(files[0]["status_message"], "disabled via management API");
    let (status, _) = sim
        .json(
            Method::PATCH,
            "/auth-files/status",
            Some(json!({"name": name, "disabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let view = sim.handle.account(name).expect("account");
    assert!(!view.disabled);
    assert_eq!(
        (view.status.as_str(), view.status_message.as_str()),
        ("active", "")
    );
    assert!(
        sim.handle
            .requests()
            .iter()
            .any(|r| r.body.contains("\"disabled\":false"))
    );
}

#[tokio::test]
async fn the_status_patch_validates_its_body() {
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    let cases = [
        (json!({"disabled": true}), 400, "name is required"),
        (
            json!({"name": "codex-a@example.com-plus.json"}),
            400,
            "disabled is required",
        ),
        (
            json!({"name": "codex-a@example.com-plus.json", "disabled": "yes"}),
            400,
            "invalid request body",
        ),
        (json!([1, 2]), 400, "invalid request body"),
        (
            json!({"name": "nobody.json", "disabled": true}),
            404,
            "auth file not found",
        ),
    ];
    for (body, status, message) in cases {
        let (got, answer) = sim
            .json(Method::PATCH, "/auth-files/status", Some(body.clone()))
            .await;
        assert_eq!(
            (got.as_u16(), answer["error"].as_str()),
            (status, Some(message)),
            "{body}"
        );
    }
}

#[tokio::test]
async fn the_status_patch_checks_auth_index_only_from_v7_2_22() {
    let name = "codex-a@example.com-plus.json";
    let accounts = vec![plus("a@example.com"), plus("b@example.com")];
    let wrong = "0000000000000000";
    let old = Sim::with_accounts("v7.1.19", accounts.clone()).await;
    let body = json!({"name": name, "auth_index": wrong, "disabled": true});
    assert_eq!(
        old.json(Method::PATCH, "/auth-files/status", Some(body.clone()))
            .await
            .0,
        StatusCode::OK
    );
    let new = Sim::with_accounts("v7.2.140", accounts).await;
    assert_eq!(
        new.json(Method::PATCH, "/auth-files/status", Some(body))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let right = new.handle.auth_index_for("codex", name);
    let body = json!({"name": name, "auth_index": right, "disabled": true});
    assert_eq!(
        new.json(Method::PATCH, "/auth-files/status", Some(body))
            .await
            .0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_v7_1_19_fields_patch_takes_only_json_integer_priorities() {
    let name = "codex-a@example.com-plus.json";
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    let cases = [
        (
            json!({"name": name, "priority": "10"}),
            400,
            Some("invalid request body"),
        ),
        (
            json!({"name": name, "priority": 1.5}),
            400,
            Some("invalid request body"),
        ),
        (json!({"name": name}), 400, Some("no fields to update")),
        (
            json!({"name": name, "priority": null}),
            400,
            Some("no fields to update"),
        ),
        (
            json!({"name": name, "disabled": true}),
            400,
            Some("no fields to update"),
        ),
        (json!({"priority": 3}), 400, Some("name is required")),
        (
            json!({"name": "nobody.json", "priority": 3}),
            404,
            Some("auth file not found"),
        ),
        (
            json!({"name": name, "priority": 7, "note": "team A"}),
            200,
            None,
        ),
    ];
    for (body, status, message) in cases {
        let (got, answer) = sim
            .json(Method::PATCH, "/auth-files/fields", Some(body.clone()))
            .await;
        assert_eq!(
            (got.as_u16(), answer["error"].as_str()),
            (status, message),
            "{body}"
        );
    }
    let view = sim.handle.account(name).expect("account");
    assert_eq!(
        (view.priority, view.note.as_deref(), view.disabled),
        (7, Some("team A"), false)
    );
    let (status, _) = sim
        .json(
            Method::PATCH,
            "/auth-files/fields",
            Some(json!({"name": name, "priority": 0})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        sim.files().await[0].get("priority").is_none(),
        "0 clears the priority"
    );
}

#[tokio::test]
async fn the_generic_fields_patch_takes_numeric_strings_and_null() {
    let name = "codex-a@example.com-plus.json";
    let sim = Sim::with_accounts("v7.2.140", vec![plus("a@example.com")]).await;
    let (status, _) = sim
        .json(
            Method::PATCH,
            "/auth-files/fields",
            Some(json!({"name": name, "priority": "12"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sim.handle.account(name).map(|a| a.priority), Some(12));
    let (status, _) = sim
        .json(
            Method::PATCH,
            "/auth-files/fields",
            Some(json!({"name": name, "priority": null})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sim.handle.account(name).map(|a| a.priority), Some(0));
    let (status, body) = sim
        .json(
            Method::PATCH,
            "/auth-files/fields",
            Some(json!({"name": name})),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("no fields to update"))
    );
}

#[tokio::test]
async fn injected_patch_failures_answer_with_the_configured_status() {
    let name = "codex-a@example.com-plus.json";
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    sim.handle.set_fail_patch(name, Some(500));
    let (status, body) = sim
        .json(
            Method::PATCH,
            "/auth-files/status",
            Some(json!({"name": name, "disabled": true})),
        )
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("failed to update auth"))
    );
    assert!(!sim.handle.account(name).expect("account").disabled);
    let (status, _) = sim
        .json(Method::DELETE, &format!("/auth-files?name={name}"), None)
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    sim.handle.set_fail_patch(name, None);
    let (status, _) = sim
        .json(
            Method::PATCH,
            "/auth-files/fields",
            Some(json!({"name": name, "priority": 2})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
}

// ---- delete ---------------------------------------------------------------------------------

#[tokio::test]
async fn deletes_answer_ok_for_one_and_many_and_207_for_partial_failures() {
    let names: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| format!("codex-{n}@example.com-plus.json"))
        .collect();
    let accounts = ["a", "b", "c", "d"]
        .iter()
        .map(|n| plus(&format!("{n}@example.com")))
        .collect();
    let sim = Sim::with_accounts("v7.1.19", accounts).await;

    let (status, body) = sim
        .json(
            Method::DELETE,
            &format!("/auth-files?name={}", names[0]),
            None,
        )
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let (status, body) = sim
        .json(
            Method::DELETE,
            &format!("/auth-files?name={}", names[0]),
            None,
        )
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"error": "auth file not found"})
        )
    );

    let path = format!("/auth-files?name={}&name={}", names[1], names[2]);
    let (status, body) = sim.json(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"status": "ok", "deleted": 2, "files": [names[1], names[2]]})
    );

    let (status, body) = sim
        .json(
            Method::DELETE,
            "/auth-files",
            Some(json!({"names": [names[3], "ghost.json"]})),
        )
        .await;
    assert_eq!(status, StatusCode::MULTI_STATUS);
    assert_eq!(
        body,
        json!({"status": "partial", "deleted": 1, "files": [names[3]],
               "failed": [{"name": "ghost.json", "error": "auth file not found"}]})
    );
    let (status, body) = sim.json(Method::DELETE, "/auth-files", None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid name"))
    );
    let (status, body) = sim
        .json(Method::DELETE, "/auth-files?name=..%2Fetc.json", None)
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid name"))
    );

    assert!(sim.files().await.is_empty());
    assert!(sim.handle.account(&names[0]).is_some_and(|a| a.deleted));
}

// ---- api-call -------------------------------------------------------------------------------

#[tokio::test]
async fn a_normal_probe_gets_the_usage_payload_wrapped_in_cpas_envelope() {
    let name = "codex-a@example.com-plus.json";
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    let (status, envelope) = sim.probe(name).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(envelope["status_code"], 200);
    assert_eq!(
        envelope["header"]["Content-Type"],
        json!(["application/json"])
    );
    let payload: Value =
        serde_json::from_str(envelope["body"].as_str().expect("body is a string")).expect("json");
    assert_eq!(payload["plan_type"], "plus");
    assert_eq!(
        payload["rate_limit"]["primary_window"]["limit_window_seconds"],
        18000
    );
    assert_eq!(payload["rate_limit"]["primary_window"]["used_percent"], 20);
    assert_eq!(
        payload["rate_limit"]["primary_window"]["reset_at"],
        (t0() + Duration::hours(2)).timestamp()
    );
    assert_eq!(
        payload["rate_limit"]["secondary_window"]["limit_window_seconds"],
        604800
    );
    assert_eq!(
        payload["rate_limit"]["secondary_window"]["used_percent"],
        40
    );
    assert_eq!(payload["credits"]["balance"], "0");
    assert_eq!(sim.handle.api_call_count(), 1);
}

#[tokio::test]
async fn a_free_probe_has_one_weekly_window_and_authindex_spellings_work() {
    let name = "codex-f@example.com-free.json";
    let sim = Sim::with_accounts("v7.1.19", vec![free("f@example.com")]).await;
    let view = sim.handle.account(name).expect("account");
    let body = json!({
        "AuthIndex": view.auth_index,
        "method": "get",
        "url": "https://chatgpt.com/backend-api/wham/usage",
        "header": {"authorization": "Bearer $TOKEN$"},
    });
    let (_, envelope) = sim.json(Method::POST, "/api-call", Some(body)).await;
    let payload: Value =
        serde_json::from_str(envelope["body"].as_str().unwrap_or("")).expect("json");
    assert_eq!(
        payload["rate_limit"]["primary_window"]["limit_window_seconds"],
        604800
    );
    assert!(payload["rate_limit"]["secondary_window"].is_null());
}

#[tokio::test]
async fn status_behaviours_are_wrapped_with_their_status_and_escaped_body() {
    let mut invalid = plus("bad@example.com");
    invalid.behaviour = UpstreamBehaviour::Status {
        status: 401,
        content_type: "application/json".to_string(),
        body: r#"{"error":{"code":"token_invalidated"}}"#.to_string(),
    };
    let mut edge = plus("edge@example.com");
    edge.behaviour = UpstreamBehaviour::Status {
        status: 403,
        content_type: "text/html; charset=UTF-8".to_string(),
        body: "<html>Just a moment...</html>".to_string(),
    };
    let sim = Sim::with_accounts("v7.1.19", vec![invalid, edge]).await;
    let (status, envelope) = sim.probe("codex-bad@example.com-plus.json").await;
    assert_eq!(
        (status, envelope["status_code"].as_u64()),
        (StatusCode::OK, Some(401))
    );

    let view = sim
        .handle
        .account("codex-edge@example.com-plus.json")
        .expect("account");
    let body = json!({"auth_index": view.auth_index, "method": "GET",
                      "url": "https://chatgpt.com/backend-api/wham/usage",
                      "header": {"Authorization": "Bearer $TOKEN$"}});
    let (_, _, raw) = sim.call(Method::POST, "/api-call", Some(body)).await;
    assert!(
        raw.contains("\\u003chtml\\u003e"),
        "gin escapes < and >: {raw}"
    );
    let envelope: Value = serde_json::from_str(&raw).expect("json");
    assert_eq!(envelope["status_code"], 403);
    assert_eq!(envelope["body"], "<html>Just a moment...</html>");
    assert_eq!(
        envelope["header"]["Content-Type"],
        json!(["text/html; charset=UTF-8"])
    );
}

#[tokio::test]
async fn transport_failures_answer_502_and_garbage_answers_200() {
    let mut broken = plus("broken@example.com");
    broken.behaviour = UpstreamBehaviour::TransportFailure;
    let mut garbage = plus("garbage@example.com");
    garbage.behaviour = UpstreamBehaviour::Garbage("not json at all".to_string());
    let sim = Sim::with_accounts("v7.1.19", vec![broken, garbage]).await;
    let (status, body) = sim.probe("codex-broken@example.com-plus.json").await;
    assert_eq!(
        (status, body),
        (StatusCode::BAD_GATEWAY, json!({"error": "request failed"}))
    );
    let (status, envelope) = sim.probe("codex-garbage@example.com-plus.json").await;
    assert_eq!(
        (status, envelope["status_code"].as_u64()),
        (StatusCode::OK, Some(200))
    );
    assert_eq!(envelope["body"], "not json at all");
}

#[tokio::test]
async fn an_unknown_auth_index_sends_the_literal_token_and_the_upstream_answers_401() {
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    let body = json!({"auth_index": "ffffffffffffffff", "method": "GET",
                      "url": "https://chatgpt.com/backend-api/wham/usage",
                      "header": {"Authorization": "Bearer $TOKEN$"}});
    let (status, envelope) = sim.json(Method::POST, "/api-call", Some(body)).await;
    assert_eq!(
        (status, envelope["status_code"].as_u64()),
        (StatusCode::OK, Some(401))
    );
    let mut noindex = plus("n@example.com");
    noindex.has_auth_index = false;
    sim.handle.add_account(noindex);
    let body = json!({"method": "GET", "url": "https://chatgpt.com/backend-api/wham/usage",
                      "header": {"Authorization": "Bearer $TOKEN$"}});
    let (_, envelope) = sim.json(Method::POST, "/api-call", Some(body)).await;
    assert_eq!(envelope["status_code"], 401);
}

#[tokio::test]
async fn a_wrong_chatgpt_account_id_gets_a_403_from_the_upstream() {
    let name = "codex-a@example.com-plus.json";
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    let view = sim.handle.account(name).expect("account");
    let body = json!({"auth_index": view.auth_index, "method": "GET",
                      "url": "https://chatgpt.com/backend-api/wham/usage",
                      "header": {"Authorization": "Bearer $TOKEN$", "Chatgpt-Account-Id": "someone-else"}});
    let (_, envelope) = sim.json(Method::POST, "/api-call", Some(body)).await;
    assert_eq!(envelope["status_code"], 403);
}

#[tokio::test]
async fn api_call_validates_method_url_and_body() {
    let sim = Sim::with_accounts("v7.1.19", vec![]).await;
    let cases = [
        (
            json!({"url": "https://chatgpt.com/backend-api/wham/usage"}),
            "missing method",
        ),
        (json!({"method": "GET"}), "missing url"),
        (
            json!({"method": "GET", "url": "chatgpt.com/backend-api/wham/usage"}),
            "invalid url",
        ),
        (
            json!({"method": "GET", "url": "https://x/y", "header": {"A": 1}}),
            "invalid body",
        ),
    ];
    for (body, message) in cases {
        let (status, answer) = sim
            .json(Method::POST, "/api-call", Some(body.clone()))
            .await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some(message)),
            "{body}"
        );
    }
    assert_eq!(sim.handle.api_call_count(), 0);
}

#[tokio::test]
async fn passed_windows_roll_forward_unless_the_account_is_stale() {
    let name = "codex-a@example.com-plus.json";
    let mut account = plus("a@example.com");
    account.usage.weekly = Some(SimWindow::weekly(100.0, t0() + Duration::minutes(4)));
    let sim = Sim::with_accounts("v7.1.19", vec![account]).await;
    sim.handle.set_stale(name, true);
    sim.clock.advance(Duration::minutes(5));
    let (_, envelope) = sim.probe(name).await;
    let payload: Value =
        serde_json::from_str(envelope["body"].as_str().unwrap_or("")).expect("json");
    assert_eq!(
        payload["rate_limit"]["secondary_window"]["used_percent"],
        100
    );
    assert_eq!(
        payload["rate_limit"]["secondary_window"]["reset_after_seconds"],
        0
    );

    sim.handle.set_stale(name, false);
    let (_, envelope) = sim.probe(name).await;
    let payload: Value =
        serde_json::from_str(envelope["body"].as_str().unwrap_or("")).expect("json");
    let weekly = &payload["rate_limit"]["secondary_window"];
    assert_eq!(weekly["used_percent"], 0);
    assert_eq!(
        weekly["reset_at"],
        (t0() + Duration::minutes(4) + Duration::days(7)).timestamp()
    );
    assert_eq!(payload["rate_limit"]["limit_reached"], false);
}

#[tokio::test]
async fn the_sim_goes_down_after_the_configured_number_of_api_calls() {
    let name = "codex-a@example.com-plus.json";
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    sim.handle.die_after_api_calls(2);
    assert_eq!(sim.probe(name).await.0, StatusCode::OK);
    assert_eq!(sim.probe(name).await.0, StatusCode::OK);
    assert_eq!(sim.probe(name).await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        sim.call(Method::GET, "/auth-files", None).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(sim.handle.api_call_count(), 2);
}

#[tokio::test]
async fn a_hanging_upstream_outlasts_the_client_timeout_and_shutdown_still_stops_at_once() {
    let mut slow = plus("slow@example.com");
    slow.behaviour = UpstreamBehaviour::Hang;
    let sim = Sim::with_accounts("v7.1.19", vec![slow]).await;
    let view = sim
        .handle
        .account("codex-slow@example.com-plus.json")
        .expect("account");
    let body = json!({"auth_index": view.auth_index, "method": "GET",
                      "url": "https://chatgpt.com/backend-api/wham/usage",
                      "header": {"Authorization": "Bearer $TOKEN$"}});
    let result = sim
        .client
        .post(sim.url("/api-call"))
        .bearer_auth(KEY)
        .json(&body)
        .timeout(StdDuration::from_millis(300))
        .send()
        .await;
    assert!(result.is_err_and(|e| e.is_timeout()));

    let base = sim.handle.base_url();
    let started = std::time::Instant::now();
    sim.handle.shutdown().await;
    assert!(started.elapsed() < StdDuration::from_secs(3));
    let after = sim
        .client
        .get(format!("{base}/v0/management/auth-files"))
        .send()
        .await;
    assert!(after.is_err(), "the port is closed after shutdown");
}

// ---- usage queue and traffic ----------------------------------------------------------------

#[tokio::test]
async fn the_usage_queue_pops_records_destructively_and_validates_count() {
    let name = "codex-a@example.com-plus.json";
    let sim = Sim::with_accounts("v7.1.19", vec![plus("a@example.com")]).await;
    let (status, body) = sim.json(Method::GET, "/usage-queue", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!([])));
    sim.handle.add_traffic(name, 3);
    let (_, body) = sim.json(Method::GET, "/usage-queue?count=2", None).await;
    let records = body.as_array().expect("array");
    assert_eq!(records.len(), 2);
    let record = &records[0];
    assert_eq!(record["source"], "a@example.com");
    assert_eq!(
        record["auth_index"],
        sim.handle.auth_index_for("codex", name)
    );
    assert_eq!(record["failed"], false);
    assert_eq!(record["fail"]["status_code"], 200);
    assert_eq!(record["auth_type"], "oauth");
    assert_eq!(
        record["response_headers"]["X-Codex-Primary-Used-Percent"],
        json!(["20"])
    );
    assert!(record["tokens"]["total_tokens"].as_u64().is_some());
    let (_, body) = sim.json(Method::GET, "/usage-queue?count=10", None).await;
    assert_eq!(body.as_array().map(Vec::len), Some(1));
    for bad in ["0", "-1", "abc"] {
        let (status, body) = sim
            .json(Method::GET, &format!("/usage-queue?count={bad}"), None)
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (
                StatusCode::BAD_REQUEST,
                Some("count must be a positive integer")
            )
        );
    }
    sim.handle.add_traffic(name, 1);
    sim.clock.advance(Duration::seconds(61));
    let (_, body) = sim.json(Method::GET, "/usage-queue?count=10", None).await;
    assert_eq!(
        body,
        json!([]),
        "records older than the retention are dropped"
    );
}

#[tokio::test]
async fn simulated_traffic_burns_quota_only_on_enabled_usable_top_priority_accounts() {
    let mut high = plus("high@example.com");
    high.priority = 10;
    let mut disabled = plus("off@example.com");
    disabled.disabled = true;
    disabled.priority = 20;
    let mut spent = plus("spent@example.com");
    spent.priority = 30;
    spent.usage.weekly = Some(SimWindow::weekly(100.0, t0() + Duration::days(1)));
    let low = plus("low@example.com");
    let sim = Sim::with_accounts("v7.1.19", vec![high, disabled, spent, low]).await;
    sim.handle.simulate_traffic(7, 1.0, 30);
    let get = |n: &str| {
        sim.handle
            .account(&format!("codex-{n}@example.com-plus.json"))
            .expect("account")
    };
    assert_eq!(get("high").success, 30);
    assert_eq!(
        get("high").usage.five_hour.map(|w| w.used_percent),
        Some(50.0)
    );
    assert_eq!(get("high").usage.weekly.map(|w| w.used_percent), Some(47.5));
    assert_eq!(get("off").success, 0);
    assert_eq!(get("spent").success, 0);
    assert_eq!(get("low").success, 0);

    // Once the top account's five-hour window is full, traffic falls to the next group.
    sim.handle.simulate_traffic(8, 1.0, 60);
    assert_eq!(
        get("high").usage.five_hour.map(|w| w.used_percent),
        Some(100.0)
    );
    assert_eq!(get("high").success + get("low").success, 90);
    assert!(get("low").success > 0);
}

#[tokio::test]
async fn simulated_traffic_on_a_revoked_account_fails_over_and_cools_it_down() {
    let mut revoked = plus("revoked@example.com");
    revoked.behaviour = UpstreamBehaviour::Status {
        status: 401,
        content_type: "application/json".to_string(),
        body: "{}".to_string(),
    };
    let sim = Sim::with_accounts("v7.1.19", vec![revoked, plus("ok@example.com")]).await;
    sim.handle.simulate_traffic(1, 0.5, 20);
    let revoked = sim
        .handle
        .account("codex-revoked@example.com-plus.json")
        .expect("account");
    let ok = sim
        .handle
        .account("codex-ok@example.com-plus.json")
        .expect("account");
    assert_eq!(ok.success, 20);
    assert!(revoked.failed <= 1);
    if revoked.failed == 1 {
        assert_eq!(
            (revoked.status.as_str(), revoked.status_message.as_str()),
            ("error", "unauthorized")
        );
        assert_eq!(revoked.next_retry_after, Some(t0() + Duration::minutes(30)));
    }
}

#[tokio::test]
async fn the_demo_pool_answers_every_kind_of_probe() {
    let sim = Sim::with_accounts("v7.1.19", demo_accounts(t0())).await;
    let files = sim.files().await;
    assert_eq!(files.len(), demo_accounts(t0()).len());
    let mut codes = Vec::new();
    for view in sim.handle.accounts() {
        if view.auth_index.is_none() || view.behaviour == UpstreamBehaviour::Hang {
            continue;
        }
        let (status, envelope) = sim.probe(&view.name).await;
        assert_eq!(status, StatusCode::OK, "{}", view.name);
        codes.push(envelope["status_code"].as_u64().unwrap_or(0));
    }
    for expected in [200, 401, 402, 403] {
        assert!(
            codes.contains(&expected),
            "demo pool lacks a {expected}: {codes:?}"
        );
    }
}

#[test]
fn starting_outside_a_tokio_runtime_is_an_error_not_a_panic() {
    let clock = ManualClock::new(t0());
    let result = SimCpa::start(SimConfig::default(), Arc::new(clock));
    assert!(result.is_err_and(|e| e.to_string().contains("Tokio runtime")));
}

#[tokio::test]
async fn a_v8_build_that_dropped_v0_answers_an_empty_404_with_its_version() {
    let sim = Sim::with_accounts(
        "v8.0.3",
        vec![SimAccount::codex(
            "a@example.com",
            "plus",
            SimUsage::default(),
        )],
    )
    .await;
    // An 8.x that still serves /v0 answers as before.
    assert_eq!(sim.files().await.len(), 1);
    sim.handle.set_mode(SimMode::V0Dropped);
    for (method, path) in [
        (Method::GET, "/auth-files"),
        (Method::POST, "/api-call"),
        (Method::PATCH, "/auth-files/status"),
    ] {
        let (status, headers, text) = sim.call(method, path, Some(json!({}))).await;
        assert_eq!(
            (status, text.as_str()),
            (StatusCode::NOT_FOUND, ""),
            "{path}"
        );
        assert_eq!(headers["x-cpa-version"], "v8.0.3", "{path}");
    }
    assert_eq!(sim.handle.api_call_count(), 0);
    assert_eq!(sim.handle.key_checks(), KeyCheckCounts::default());
}

#[tokio::test]
async fn a_cluster_node_answers_every_management_route_with_an_empty_404_and_no_headers() {
    let sim = Sim::with_accounts("v7.2.140", vec![]).await;
    sim.handle.set_mode(SimMode::ClusterNode);
    for (method, path) in [
        (Method::GET, "/auth-files"),
        (Method::GET, "/usage-queue?count=1"),
        (Method::POST, "/api-call"),
    ] {
        let (status, headers, text) = sim.call(method, path, None).await;
        assert_eq!(
            (status, text.as_str()),
            (StatusCode::NOT_FOUND, ""),
            "{path}"
        );
        assert!(!headers.contains_key("x-cpa-version"), "{path}");
    }
    let v8 = format!("{}/v8/management/auth-files", sim.handle.base_url());
    let response = sim
        .client
        .get(v8)
        .bearer_auth(KEY)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(response.text().await.expect("body"), "");
    sim.handle.set_mode(SimMode::Standalone);
    assert_eq!(
        sim.call(Method::GET, "/auth-files", None).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_numeric_auth_index_is_listed_as_a_number_and_accepted_back_as_decimal_text() {
    let name = "codex-a@example.com-plus.json";
    let sim = Sim::with_accounts(
        "v7.2.140",
        vec![SimAccount::codex(
            "a@example.com",
            "plus",
            SimUsage::default(),
        )],
    )
    .await;
    let hex = sim.handle.auth_index_for("codex", name);
    assert_eq!(sim.files().await[0]["auth_index"], json!(hex));
    sim.handle.set_auth_index_as_number(true);
    let number = u64::from_str_radix(&hex, 16).expect("hex");
    assert_eq!(sim.files().await[0]["auth_index"], json!(number));
    let (status, body) = sim
        .json(
            Method::POST,
            "/reset-quota",
            Some(json!({"auth_index": number.to_string()})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn passive_quota_is_listed_in_the_documented_shape_only_when_switched_on() {
    // docs/rules/cpa.md §9: absent on older CPAs; `{"signals": {}}` while nothing was seen;
    // served traffic replaces the signals with the account's headers, windows by minutes.
    let weekly_only = SimAccount::codex(
        "free@example.com",
        "free",
        SimUsage::weekly_only(20.0, t0() + Duration::days(3)),
    );
    let sim = Sim::with_accounts("v7.2.140", vec![plus("user1@example.com"), weekly_only]).await;
    assert!(sim.files().await.iter().all(|f| f.get("quota").is_none()));

    sim.handle.set_passive_quota(true);
    for f in sim.files().await {
        assert_eq!(f["quota"], json!({"signals": {}}), "{f}");
    }

    sim.clock.advance(Duration::minutes(5));
    sim.handle
        .add_traffic("codex-user1@example.com-plus.json", 3);
    sim.handle
        .add_traffic("codex-free@example.com-free.json", 1);
    let files = sim.files().await;
    let q = &files[1]["quota"];
    assert_eq!(files[1]["name"], "codex-user1@example.com-plus.json");
    assert_eq!(q["signals"]["X-Codex-Primary-Window-Minutes"], "300");
    assert_eq!(q["signals"]["X-Codex-Secondary-Window-Minutes"], "10080");
    assert_eq!(q["signals"]["X-Codex-Plan-Type"], "plus");
    let observed = q["observed_at"].as_str().expect("observed_at");
    assert_eq!(
        DateTime::parse_from_rfc3339(observed).map(|t| t.with_timezone(&Utc)),
        Ok(t0() + Duration::minutes(5))
    );
    // A weekly-only account puts 10080 in *primary*.
    let free = &files[0]["quota"]["signals"];
    assert_eq!(free["X-Codex-Primary-Window-Minutes"], "10080");
    assert_eq!(free["X-Codex-Primary-Used-Percent"], "20");
    assert!(free.get("X-Codex-Secondary-Window-Minutes").is_none());

    sim.handle
        .set_passive_override("codex-free@example.com-free.json", Some(json!("garbage")));
    assert_eq!(sim.files().await[0]["quota"], json!("garbage"));
}
