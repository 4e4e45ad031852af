//! Cross-cutting API tests: the token guard, request ids, error bodies, site selection and the
//! OpenAPI document (every documented operation is routed, every route is documented).
//! Per-resource behaviour is tested next to each handler file.

use secrecy::SecretString;

use super::test_support::*;
use super::{ApiError, ApiState, router};

use super::OPERATIONS as DOCUMENTED;

#[tokio::test]
async fn api_paths_refuse_requests_without_a_token() {
    let t = app().await;
    for uri in [
        "/api/settings",
        "/api/accounts",
        "/api/openapi.json",
        "/api/no-such-thing",
    ] {
        let r = t.send(Method::GET, uri, None, None, &[]).await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
        assert_eq!(r.json()["error"], "missing or invalid admin token");
    }
}

#[tokio::test]
async fn api_paths_refuse_a_wrong_or_malformed_token() {
    let t = app().await;
    for auth in [
        "Bearer wrong",
        "Bearer admin-TOKEN-s3cr3",
        "Bearer admin-TOKEN-s3cr3t-and-more",
        TOKEN,
        "Basic YWRtaW46cGFzcw==",
        "Bearer",
        "",
    ] {
        let r = t
            .send(Method::GET, "/api/settings", Some(auth), None, &[])
            .await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    let r = t
        .send(
            Method::GET,
            "/api/openapi.json",
            Some(&format!("bearer {TOKEN}")),
            None,
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "the scheme is case-insensitive");
}

#[tokio::test]
async fn an_empty_admin_token_admits_nobody() {
    let t = app().await;
    let app = router(
        ApiState {
            patrol: t.patrol.clone(),
            admin_token: SecretString::from(""),
            metrics_public: false,
            metrics: None,
        },
        axum::Router::new(),
    );
    let res = app
        .oneshot(
            Request::get("/api/settings")
                .header("authorization", "Bearer ")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn every_answer_carries_a_request_id_and_keeps_the_callers() {
    let t = app().await;
    let r = t.send(Method::GET, "/healthz", None, None, &[]).await;
    let id = r.headers["x-request-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "generated id {id}");

    let r = t
        .send(
            Method::GET,
            "/api/settings",
            None,
            None,
            &[("x-request-id", "abc-123")],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers["x-request-id"], "abc-123");
}

#[tokio::test]
async fn an_internal_error_shows_the_request_id_and_hides_the_detail() {
    let body = super::error::REQUEST_ID
        .scope("req-42".to_string(), async {
            ApiError::Internal("database error: disk I/O at /var/lib/qp.db".into()).body()
        })
        .await;
    assert_eq!(body.code, "internal");
    assert_eq!(body.request_id.as_deref(), Some("req-42"));
    assert!(body.error.contains("req-42"));
    assert!(!body.error.contains("disk"));
}

#[tokio::test]
async fn unknown_paths_answer_a_json_404() {
    let t = app().await;
    assert_error(
        &t.get("/api/nope").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

#[tokio::test]
async fn openapi_json_lists_every_implemented_path() {
    let t = app().await;
    let r = t.get("/api/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    let doc = r.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let paths = doc["paths"].as_object().unwrap();
    for (method, path) in DOCUMENTED {
        assert!(
            paths.get(*path).and_then(|p| p.get(*method)).is_some(),
            "{method} {path} is not documented"
        );
    }
    let documented: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(
        documented,
        DOCUMENTED.len(),
        "undocumented extras or missing entries"
    );
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    let mut ids: Vec<&str> = paths
        .values()
        .flat_map(|p| p.as_object().unwrap().values())
        .map(|op| op["operationId"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), DOCUMENTED.len(), "operation ids are unique");
    let site_param = &paths["/api/settings"]["get"]["parameters"][0];
    assert_eq!(site_param["name"], "siteId");
    assert_eq!(site_param["in"], "query");
}

#[tokio::test]
async fn every_documented_operation_is_routed() {
    let t = app().await;
    for (method, path) in DOCUMENTED {
        let uri = path
            .replace("{siteId}", "no-such-site")
            .replace("{name}", "nobody")
            .replace("{id}", "nobody")
            .replace("{pool}", "nobody");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let body = matches!(method, Method::POST | Method::PUT).then(|| json!({}));
        let r = t.call(method.clone(), &uri, body).await;
        assert_ne!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        assert!(
            !r.text.contains("no such endpoint"),
            "{method} {uri} is not routed"
        );
    }
}

#[tokio::test]
async fn an_unknown_site_is_a_404_naming_it() {
    let t = app().await;
    for uri in [
        "/api/settings?siteId=ghost",
        "/api/accounts?siteId=ghost",
        "/api/quotas?siteId=ghost",
        "/api/exceptions?siteId=ghost",
        "/api/inspection/status?siteId=ghost",
        "/api/runtime/progress?siteId=ghost",
        "/api/runtime/logs?siteId=ghost",
    ] {
        let r = t.get(uri).await;
        assert_error(&r, StatusCode::NOT_FOUND, "unknown_site");
        assert_eq!(r.json()["error"], "unknown site ghost", "{uri}");
    }
}

#[tokio::test]
async fn without_any_site_per_site_endpoints_are_404() {
    let t = spawn(Setup {
        site: false,
        ..Setup::default()
    })
    .await;
    assert_error(
        &t.get("/api/settings").await,
        StatusCode::NOT_FOUND,
        "unknown_site",
    );
}

#[test]
fn a_cpa_5xx_is_a_502_carrying_cpa_status_and_message() {
    use crate::cpa::CpaError;
    use crate::jobs::JobError;
    let e = ApiError::from(JobError::Cpa(CpaError::ServerError {
        status: 500,
        message: "failed to update auth".into(),
    }));
    let body = e.body();
    assert_eq!(body.code, "cpa_error");
    assert_eq!(body.cpa_status, Some(500));
    assert_eq!(
        body.error,
        "CPA unavailable: CPA answered 500: failed to update auth"
    );
    let no_answer = ApiError::from(JobError::Cpa(CpaError::Transient(
        "request timed out".into(),
    )));
    assert_eq!(no_answer.body().cpa_status, None);
}

/// Every schema component of the document (95): the API's own types and the core types it
/// shows, which derive their schema in `crates/core` (feature `openapi`).
const SCHEMAS: &[&str] = &[
    "AccountCreditsView",
    "AccountLine",
    "AccountPolicy",
    "AccountPolicyInput",
    "AccountPolicyView",
    "AccountView",
    "Action",
    "ActionCounts",
    "ActionOutcome",
    "AlertDetails",
    "AlertEventView",
    "AlertHistory",
    "AlertMessageView",
    "Api",
    "AppliedThreshold",
    "AutoActionMode",
    "AutoPolling",
    "AvailabilityView",
    "Category",
    "ChannelKind",
    "ChannelResult",
    "CpaContact",
    "Credits",
    "DecisionRecord",
    "DeliveryAttemptView",
    "DeliveryStatus",
    "Digest",
    "DigestCredits",
    "DisableReason",
    "ErrorBody",
    "EventKind",
    "EvidenceSource",
    "ExceptionList",
    "FiveHourRule",
    "Health",
    "HistoryEntry",
    "InspectionRunResult",
    "InspectionStatus",
    "KeyRefusalView",
    "Level",
    "LogEntry",
    "MinuteKey",
    "NewException",
    "OriginView",
    "PassiveView",
    "PatrolSettings",
    "PolicySource",
    "PolicySources",
    "PoolAccountView",
    "PoolCounts",
    "PoolSummaryView",
    "PoolView",
    "PriorityEntry",
    "Progress",
    "Projection",
    "QuotaPolicy",
    "QuotaView",
    "QuotaWindow",
    "QuotaWindowView",
    "Readiness",
    "ReasonOwner",
    "RedeemReport",
    "RefreshSummary",
    "ResetCreditsMode",
    "RetryConnectionResult",
    "RouterAccount",
    "RouterAccountInput",
    "RouterChain",
    "RouterChainInput",
    "RouterKey",
    "RouterKeyCreated",
    "RouterKeyInput",
    "RouterLeg",
    "RouterPool",
    "RouterPoolInput",
    "RouterUsageDay",
    "RouterUsageMinute",
    "RoutingStatus",
    "RoutingUpdate",
    "RunStatus",
    "RunSummary",
    "SavedPriorityEntry",
    "SettingsPatch",
    "SettingsResponse",
    "Severity",
    "SiteCreditsView",
    "SiteForecastView",
    "SiteInput",
    "SiteSummary",
    "SitesResponse",
    "Source",
    "StateChange",
    "TestResults",
    "UsageFigures",
    "WindowKind",
];

#[tokio::test]
async fn openapi_json_lists_every_schema_including_the_core_types() {
    let t = app().await;
    let doc = t.get("/api/openapi.json").await.json();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let mut got: Vec<&str> = schemas.keys().map(String::as_str).collect();
    got.sort_unstable();
    assert_eq!(got, SCHEMAS, "schema components changed");
    // Core twins keep the serde shape: names, enum spellings and defaults of the core type.
    let window = &schemas["QuotaWindow"]["properties"];
    assert!(window["usedPercent"].is_object() && window["resetAt"].is_object());
    assert_eq!(window["kind"]["$ref"], "#/components/schemas/WindowKind");
    let kinds = &schemas["WindowKind"]["enum"];
    assert_eq!(
        *kinds,
        serde_json::json!(["fiveHour", "weekly", "monthly", "other"])
    );
    let settings = &schemas["PatrolSettings"]["properties"];
    assert_eq!(settings["probeBatchDelayMinMs"]["default"], 2000);
    assert_eq!(
        schemas["DisableReason"]["enum"],
        serde_json::json!([
            "QuotaExhausted",
            "OrderedStandby",
            "ManualDisabled",
            "ErrorDisabled"
        ])
    );
}
