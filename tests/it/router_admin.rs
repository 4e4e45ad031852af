//! The router's admin API (`/api/router/*`, docs/rules/router.md §5 part D) over real HTTP on the real app, with
//! a fake `RouterControl` installed through `Patrol::set_router_admin` that records every
//! `set_keys` and `reload`: client keys are shown once and stored hashed, revoked keys leave the
//! router, API-owned accounts are stored and reload the router, config-owned entries are 409,
//! invalid specs are 422 listing the problems, and no secret appears in any answer.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use quota_patrol::core::router::{
    Api, PoolSpec, RouterSpec, SpecSource, UpstreamAccount, UsageRecord, key_hash,
};
use quota_patrol::jobs::router::{RouterAdmin, RouterControl, spawn_usage_writer};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use crate::helpers::*;

const CONFIG_KEY: &str = "sk-config-UPSTREAM-secret";
const API_KEY: &str = "sk-api-UPSTREAM-secret";

/// Records what the admin side asked of the router.
#[derive(Default)]
struct FakeRouter {
    keys: Mutex<Vec<HashSet<String>>>,
    reloads: Mutex<Vec<RouterSpec>>,
}

impl RouterControl for FakeRouter {
    fn set_keys(&self, hashes: HashSet<String>) {
        self.keys.lock().unwrap().push(hashes);
    }
    fn reload(&self, spec: RouterSpec) -> Result<(), Vec<String>> {
        let problems = spec.problems();
        self.reloads.lock().unwrap().push(spec);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
    fn status_json(&self) -> Value {
        json!({"pools": [{"id": "codex"}]})
    }
    fn preview_json(&self, model: &str, session_key: Option<&str>) -> Result<Value, String> {
        match model {
            "gpt-5" => Ok(json!({"model": model, "sessionKey": session_key})),
            _ => Err(format!("unknown model {model:?}")),
        }
    }
}

impl FakeRouter {
    fn last_keys(&self) -> HashSet<String> {
        self.keys
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
    }
    fn reload_count(&self) -> usize {
        self.reloads.lock().unwrap().len()
    }
    fn last_spec(&self) -> RouterSpec {
        self.reloads
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a reload")
    }
}

/// The config file's part: pool `codex` (gpt-5, gpt-5-mini) with account `cpa-main`.
fn config_part() -> RouterSpec {
    RouterSpec {
        pools: vec![PoolSpec {
            id: "codex".into(),
            models: vec!["gpt-5".into(), "gpt-5-mini".into()],
            source: SpecSource::Config,
        }],
        accounts: vec![UpstreamAccount {
            id: "cpa-main".into(),
            pool: "codex".into(),
            base_url: "http://127.0.0.1:8317/v1".into(),
            api_key: Some(SecretString::from(CONFIG_KEY)),
            api_key_env: Some("QP_ROUTER_CPA_MAIN_KEY".into()),
            tier: 1,
            weight: None,
            models: vec![],
            site: Some(SITE.into()),
            enabled: true,
            source: SpecSource::Config,
        }],
        chains: vec![],
    }
}

async fn with_router() -> (TestApp, Arc<FakeRouter>) {
    let t = spawn_app(vec![]).await;
    let fake = Arc::new(FakeRouter::default());
    t.patrol
        .set_router_admin(Some(RouterAdmin::new(fake.clone(), config_part())));
    (t, fake)
}

/// Status and body of a response; asserts no upstream key, admin token or management key is in
/// it (the one answer carrying a client key, its creation, is read apart).
async fn read(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    for secret in [CONFIG_KEY, API_KEY, ADMIN_TOKEN, MGMT_KEY] {
        assert!(!text.contains(secret), "a secret in {text}");
    }
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn without_a_router_every_router_endpoint_is_503_router_disabled() {
    let t = spawn_app(vec![]).await;
    for path in [
        "/api/router/status",
        "/api/router/keys",
        "/api/router/accounts",
        "/api/router/usage",
    ] {
        let (status, body) = read(t.get(path).await).await;
        assert_eq!(status, 503, "{path}");
        assert_eq!(body["code"], "router_disabled", "{path}");
    }
    let (status, _) = read(t.post("/api/router/keys", json!({"name": "ci"})).await).await;
    assert_eq!(status, 503);
}

#[tokio::test]
async fn a_created_key_is_shown_once_listed_without_it_and_revoking_removes_it_from_the_router() {
    let (t, fake) = with_router().await;
    let r = t.post("/api/router/keys", json!({"name": "ci"})).await;
    let status = r.status().as_u16();
    let created: Value = r.json().await.unwrap();
    assert_eq!(status, 201, "{created}");
    let key = created["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("qpr-") && key.len() == 4 + 64, "{key}");
    assert_eq!(created["name"], "ci");
    let id = created["id"].as_str().unwrap().to_string();
    assert!(fake.last_keys().contains(&key_hash(&key)));

    let (status, list) = read(t.get("/api/router/keys").await).await;
    assert_eq!(status, 200);
    assert!(!list.to_string().contains(&key), "the key is never listed");
    assert_eq!(list[0]["id"], id.as_str());
    assert_eq!(list[0]["hint"], format!("qpr-…{}", &key[key.len() - 4..]));
    assert!(list[0]["revokedAt"].is_null());
    // The database holds the hash, never the key.
    let db = t.patrol.store.clone();
    let rows: Vec<String> = db
        .run(|c| {
            let mut st = c.prepare("SELECT key_id||name||key_hash||last4 FROM router_keys")?;
            Ok(st.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?)
        })
        .await
        .unwrap();
    assert!(rows.iter().all(|r| !r.contains(&key)), "{rows:?}");

    let r = t.delete(&format!("/api/router/keys/{id}")).await;
    assert_eq!(r.status(), 204);
    assert!(
        fake.last_keys().is_empty(),
        "a revoked key leaves the router"
    );
    let (_, list) = read(t.get("/api/router/keys").await).await;
    assert!(list[0]["revokedAt"].is_string(), "{list}");
    let (status, body) = read(t.delete("/api/router/keys/nope").await).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, body) = read(t.post("/api/router/keys", json!({"name": " "})).await).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid")));
}

#[tokio::test]
async fn an_api_created_account_is_stored_reloads_the_router_and_never_shows_its_key() {
    let (t, fake) = with_router().await;
    let body = json!({
        "pool": "codex", "id": "extra", "baseUrl": "http://127.0.0.1:9999/v1/",
        "apiKey": API_KEY, "tier": 2, "models": ["gpt-5"]
    });
    let (status, created) = read(t.post("/api/router/accounts", body).await).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["apiKeySet"], true);
    assert_eq!(created["source"], "api");
    assert_eq!(created["baseUrl"], "http://127.0.0.1:9999/v1");
    assert_eq!(fake.reload_count(), 1);
    let spec = fake.last_spec();
    assert_eq!(spec.accounts.len(), 2, "config and API accounts");
    let extra = spec.accounts.iter().find(|a| a.id == "extra").unwrap();
    assert_eq!(extra.api_key.as_ref().unwrap().expose_secret(), API_KEY);
    assert_eq!(extra.tier, 2);

    // A replace without a key keeps the stored one.
    let put = json!({"baseUrl": "http://127.0.0.1:9998/v1", "enabled": false});
    let (status, updated) = read(t.put("/api/router/accounts/codex/extra", put).await).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["enabled"], false);
    assert_eq!(updated["apiKeySet"], true);
    let spec = fake.last_spec();
    let extra = spec.accounts.iter().find(|a| a.id == "extra").unwrap();
    assert_eq!(extra.api_key.as_ref().unwrap().expose_secret(), API_KEY);

    // The list shows both, the config one with its variable name, and no key.
    let (status, list) = read(t.get("/api/router/accounts").await).await;
    assert_eq!(status, 200);
    assert_eq!(list[0]["id"], "cpa-main");
    assert_eq!(list[0]["source"], "config");
    assert_eq!(list[0]["apiKeyEnv"], "QP_ROUTER_CPA_MAIN_KEY");
    assert_eq!(list[1]["id"], "extra");

    // Stored: a restart of the admin side (new control, same database) loads it again.
    let spec = quota_patrol::jobs::router::load_spec(&t.patrol.store, &config_part())
        .await
        .unwrap();
    assert!(spec.accounts.iter().any(|a| a.id == "extra" && !a.enabled));

    let r = t.delete("/api/router/accounts/codex/extra").await;
    assert_eq!(r.status(), 204);
    assert_eq!(fake.last_spec().accounts.len(), 1);
    let (status, _) = read(t.delete("/api/router/accounts/codex/extra").await).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn config_owned_entries_are_read_only_through_the_api() {
    let (t, fake) = with_router().await;
    let account = json!({"pool": "codex", "id": "cpa-main", "baseUrl": "http://127.0.0.1:1/v1"});
    for r in [
        t.post("/api/router/accounts", account.clone()).await,
        t.put("/api/router/accounts/codex/cpa-main", account).await,
        t.delete("/api/router/accounts/codex/cpa-main").await,
        t.post("/api/router/pools", json!({"id": "codex", "models": []}))
            .await,
        t.delete("/api/router/pools/codex").await,
    ] {
        let (status, body) = read(r).await;
        assert_eq!(status, 409, "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("declared in the config file"),
            "{body}"
        );
    }
    assert_eq!(fake.reload_count(), 0, "nothing changed");
}

#[tokio::test]
async fn a_change_giving_an_invalid_spec_is_422_listing_every_problem_and_stores_nothing() {
    let (t, fake) = with_router().await;
    let body = json!({"pool": "ghost", "id": "x", "baseUrl": "ftp://nowhere", "tier": 0});
    let (status, err) = read(t.post("/api/router/accounts", body).await).await;
    assert_eq!(status, 422, "{err}");
    assert_eq!(err["code"], "invalid_spec");
    let problems: Vec<String> = serde_json::from_value(err["problems"].clone()).unwrap();
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("unknown pool")));
    assert!(problems.iter().any(|p| p.contains("base URL")));
    assert!(problems.iter().any(|p| p.contains("tier must be")));

    let chain = json!({"name": "auto", "legs": [{"pool": "codex", "model": "gpt-4"}]});
    let (status, err) = read(t.post("/api/router/chains", chain).await).await;
    assert_eq!(status, 422, "{err}");
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains("does not serve model")
    );
    assert_eq!(fake.reload_count(), 0, "nothing stored, no reload");
    let (_, accounts) = read(t.get("/api/router/accounts").await).await;
    assert_eq!(accounts.as_array().unwrap().len(), 1);

    // A pool still used by a chain cannot be deleted.
    let (status, _) = read(
        t.post(
            "/api/router/pools",
            json!({"id": "backup", "models": ["m"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201);
    let chain = json!({"name": "auto", "legs": [{"pool": "backup", "model": "m"}]});
    let (status, created) = read(t.post("/api/router/chains", chain).await).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(fake.reload_count(), 2);
    let (status, err) = read(t.delete("/api/router/pools/backup").await).await;
    assert_eq!(status, 422, "{err}");
    assert!(
        err["error"].as_str().unwrap().contains("unknown pool"),
        "{err}"
    );
}

#[tokio::test]
async fn status_and_preview_come_from_the_router() {
    let (t, _) = with_router().await;
    let (status, body) = read(t.get("/api/router/status").await).await;
    assert_eq!((status, &body["pools"][0]["id"]), (200, &json!("codex")));
    let (status, body) = read(t.get("/api/router/preview?model=gpt-5&sessionKey=s1").await).await;
    assert_eq!(status, 200);
    assert_eq!(body["sessionKey"], "s1");
    let (status, body) = read(t.get("/api/router/preview?model=nope").await).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
}

#[tokio::test]
async fn usage_written_by_the_writer_is_answered_per_account_and_day() {
    let (t, _) = with_router().await;
    let queue = std::sync::Arc::new(quota_patrol::router::UsageQueue::new(8192, 1024));
    let writer = spawn_usage_writer(t.patrol.store.clone(), queue.clone(), false);
    let record = |account: &str, ok: bool, ttfb: Option<u64>| UsageRecord {
        at: t0(),
        api: Api::ChatCompletions,
        requested_model: "gpt-5".into(),
        pool: Some("codex".into()),
        model: Some("gpt-5".into()),
        account: Some(account.into()),
        session_key_hash: None,
        ok,
        status: if ok { 200 } else { 502 },
        prompt_tokens: 1000,
        completion_tokens: 50,
        cached_tokens: 900,
        attempts: 1,
        duration_ms: 200,
        ttfb_ms: ttfb,
    };
    assert!(queue.push(record("cpa-main", true, Some(30))));
    assert!(queue.push(record("cpa-main", false, None)));
    assert!(queue.push(record("extra", true, Some(10))));
    queue.close();
    writer.await.unwrap();
    let (status, days) = read(t.get("/api/router/usage?days=1").await).await;
    assert_eq!(status, 200, "{days}");
    let main = &days[0];
    assert_eq!(main["day"], "2026-05-21");
    assert_eq!(main["account"], "cpa-main");
    assert_eq!(
        (main["requests"].as_u64(), main["ok"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(main["promptTokens"], 2000);
    assert_eq!(main["cachedTokens"], 1800);
    assert_eq!(main["avgDurationMs"], 200.0);
    assert_eq!(
        main["avgTtfbMs"], 30.0,
        "over the requests that had a first byte"
    );
    assert_eq!(days[1]["account"], "extra");
    let (status, _) = read(t.get("/api/router/usage?days=0").await).await;
    assert_eq!(status, 400);
}
