//! Test support for the API tests of every resource file: the real router over an in-memory
//! store and a manual clock, called with `oneshot`. The site's CPA is `127.0.0.1:9` (nothing
//! listens), so CPA calls fail fast. Every response body is checked for the management key and
//! the admin token.

use std::sync::Arc;

pub(super) use axum::body::Body;
pub(super) use axum::http::{HeaderMap, Method, Request, StatusCode};
pub(super) use serde_json::{Value, json};
pub(super) use tower::ServiceExt;

use chrono::{DateTime, TimeZone, Utc};
use metrics_exporter_prometheus::PrometheusBuilder;
use secrecy::SecretString;

use super::{ApiState, router};
use crate::clock::ManualClock;
use crate::core::account::Account;
use crate::jobs::sites::{SiteInput, create_site};
use crate::jobs::{Patrol, PatrolOptions};
use crate::store::Store;

pub(super) const TOKEN: &str = "admin-TOKEN-s3cr3t";
pub(super) const KEY: &str = "mk-SECRET";
pub(super) const DEAD_CPA: &str = "http://127.0.0.1:9";

pub(super) fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
}

pub(super) struct TestApp {
    pub(super) app: axum::Router,
    pub(super) patrol: Patrol,
    pub(super) clock: ManualClock,
}

pub(super) struct Resp {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) text: String,
}

impl Resp {
    pub(super) fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

/// Options of the app under test.
pub(super) struct Setup {
    pub(super) metrics_public: bool,
    pub(super) metrics: bool,
    pub(super) site: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            metrics_public: false,
            metrics: true,
            site: true,
        }
    }
}

pub(super) async fn spawn(setup: Setup) -> TestApp {
    let clock = ManualClock::new(start());
    let patrol = Patrol::new(
        Store::open_in_memory().unwrap(),
        Arc::new(clock.clone()),
        PatrolOptions::default(),
    )
    .with_random(Arc::new(crate::random::FixedRandom::new(0.0)));
    if setup.site {
        create_site(
            &patrol,
            SiteInput {
                site_name: Some("Main".into()),
                cpa_base_url: Some(DEAD_CPA.into()),
                management_key: Some(KEY.into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    let app = router(
        ApiState {
            patrol: patrol.clone(),
            admin_token: SecretString::from(TOKEN),
            metrics_public: setup.metrics_public,
            metrics: setup
                .metrics
                .then(|| PrometheusBuilder::new().build_recorder().handle()),
        },
        axum::Router::new(),
    );
    TestApp { app, patrol, clock }
}

pub(super) async fn app() -> TestApp {
    spawn(Setup::default()).await
}

impl TestApp {
    /// Sends a request with `auth` as the Authorization header (if any).
    pub(super) async fn send(
        &self,
        method: Method,
        uri: &str,
        auth: Option<&str>,
        body: Option<Body>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let res = self
            .app
            .clone()
            .oneshot(req.body(body.unwrap_or_else(Body::empty)).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        assert!(
            !text.contains(KEY),
            "{uri} leaked the management key: {text}"
        );
        assert!(
            !text.contains(TOKEN),
            "{uri} leaked the admin token: {text}"
        );
        Resp {
            status,
            headers,
            text,
        }
    }

    /// An authorised call with an optional JSON body.
    pub(super) async fn call(&self, method: Method, uri: &str, body: Option<Value>) -> Resp {
        let bearer = format!("Bearer {TOKEN}");
        match body {
            Some(v) => {
                self.send(
                    method,
                    uri,
                    Some(&bearer),
                    Some(Body::from(v.to_string())),
                    &[("content-type", "application/json")],
                )
                .await
            }
            None => self.send(method, uri, Some(&bearer), None, &[]).await,
        }
    }

    pub(super) async fn get(&self, uri: &str) -> Resp {
        self.call(Method::GET, uri, None).await
    }

    pub(super) async fn post(&self, uri: &str, body: Option<Value>) -> Resp {
        self.call(Method::POST, uri, body).await
    }

    pub(super) async fn put(&self, uri: &str, body: Value) -> Resp {
        self.call(Method::PUT, uri, Some(body)).await
    }

    pub(super) async fn delete(&self, uri: &str) -> Resp {
        self.call(Method::DELETE, uri, None).await
    }

    /// Puts accounts in the site's stored listing as if CPA had listed them.
    pub(super) async fn seed_accounts(&self, site_id: &str, names: &[&str]) {
        let accounts: Vec<Account> = names
            .iter()
            .map(|n| Account {
                name: n.to_string(),
                auth_index: Some(format!("{:016x}", n.len())),
                email: Some(format!("{n}@example.com")),
                status: "active".into(),
                ..Default::default()
            })
            .collect();
        let sid = site_id.to_string();
        let now = self.patrol.now();
        self.patrol
            .store
            .run(move |c| crate::store::accounts::replace_listing(c, &sid, &accounts, now))
            .await
            .unwrap();
    }
}

pub(super) fn assert_error(r: &Resp, status: StatusCode, code: &str) {
    assert_eq!(r.status, status, "body: {}", r.text);
    assert_eq!(r.json()["code"], code, "body: {}", r.text);
    assert!(r.json()["error"].is_string(), "body: {}", r.text);
}
