//! The management REST API (docs/rules/api.md): the router, its shared state, the bearer-token
//! guard, request ids and tracing, and the OpenAPI 3.1 document generated from the handlers. One
//! file per resource; handlers call `jobs` and read `core` types only, never the store or CPA.
//! `/api/router/*` (router.md, `router.rs`) answers 503 `router_disabled` until the app wiring
//! installs the router's admin side (`Patrol::set_router_admin`).

mod accounts;
mod alerts;
mod error;
mod exceptions;
mod forecast;
mod health;
mod inspection;
mod policies;
mod pool;
mod priority;
mod quotas;
mod router;
mod runtime;
mod settings;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, HeaderName};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use error::{ApiError, ErrorBody};

use crate::core::access::token_matches;
use crate::core::site::Site;
use crate::jobs::Patrol;

/// What the API serves from; built by the app wiring.
pub struct ApiState {
    /// The use cases (store, clock, per-site runtime).
    pub patrol: Patrol,
    /// Bearer token of every `/api/*` call (`QUOTA_PATROL_ADMIN_TOKEN` or the config). An empty
    /// token admits nobody.
    pub admin_token: SecretString,
    /// `[server] metrics_public`: `/metrics` without the token.
    pub metrics_public: bool,
    /// Prometheus exporter; `None` ⇒ `/metrics` answers 404.
    pub metrics: Option<PrometheusHandle>,
}

impl ApiState {
    /// The site named by `?siteId=`, else the default site (docs/rules/api.md §1).
    async fn site(&self, site_id: Option<&str>) -> Result<Site, ApiError> {
        Ok(self.patrol.resolve_site(site_id).await?)
    }
}

/// State as handlers see it.
type Shared = Arc<ApiState>;

/// `?siteId=` of every per-site endpoint.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct SiteQuery {
    /// Site id; missing ⇒ the first enabled site by id.
    site_id: Option<String>,
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The OpenAPI document's fixed parts; paths and schemas come from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "quota-patrol management API",
        description = "Admin API of quota-patrol (reference: docs/api.md in its repository). Every /api/* path needs `Authorization: Bearer <admin token>`."
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "settings", description = "Sites and their patrol settings"),
        (name = "accounts", description = "Accounts of a site and manual actions"),
        (name = "quotas", description = "Quota snapshots and refreshes"),
        (name = "exceptions", description = "Accounts the patrol leaves alone"),
        (name = "inspection", description = "Inspection rounds and auto polling"),
        (name = "pool", description = "The published pool snapshot: availability of every account"),
        (name = "runtime", description = "Operation log and progress"),
        (name = "alerts", description = "Alert history and test messages"),
        (name = "router", description = "The request router: status, preview, client keys, pools, accounts, chains, usage"),
        (name = "health", description = "Liveness, readiness, metrics"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Every operation the API implements, as (method, OpenAPI path). Tests check that the
/// OpenAPI document lists exactly these and that each is routed.
pub const OPERATIONS: &[(&str, &str)] = &[
    ("get", "/api/settings/sites"),
    ("post", "/api/settings/sites"),
    ("delete", "/api/settings/sites/{siteId}"),
    ("post", "/api/settings/sites/{siteId}/retry-connection"),
    ("get", "/api/settings"),
    ("put", "/api/settings"),
    ("get", "/api/settings/priority-routing"),
    ("put", "/api/settings/priority-routing"),
    ("get", "/api/accounts"),
    ("post", "/api/accounts/refresh"),
    ("post", "/api/accounts/{name}/disable"),
    ("post", "/api/accounts/{name}/enable"),
    ("post", "/api/accounts/{name}/release"),
    ("post", "/api/accounts/{name}/reset-credit"),
    ("get", "/api/accounts/{name}/policy"),
    ("put", "/api/accounts/{name}/policy"),
    ("delete", "/api/accounts/{name}/policy"),
    ("get", "/api/quotas"),
    ("get", "/api/quotas/{name}/history"),
    ("post", "/api/quotas/refresh"),
    ("post", "/api/quotas/{name}/refresh"),
    ("get", "/api/exceptions"),
    ("post", "/api/exceptions"),
    ("put", "/api/exceptions"),
    ("delete", "/api/exceptions/{name}"),
    ("post", "/api/inspection/run"),
    ("get", "/api/inspection/status"),
    ("get", "/api/inspection/last-run"),
    ("get", "/api/inspection/runs"),
    ("post", "/api/inspection/auto/start"),
    ("post", "/api/inspection/auto/stop"),
    ("get", "/api/pool"),
    ("get", "/api/sites/{id}/forecast"),
    ("get", "/api/runtime/logs"),
    ("get", "/api/runtime/progress"),
    ("get", "/api/alerts"),
    ("post", "/api/alerts/test"),
    ("get", "/api/router/status"),
    ("get", "/api/router/preview"),
    ("get", "/api/router/keys"),
    ("post", "/api/router/keys"),
    ("delete", "/api/router/keys/{id}"),
    ("get", "/api/router/pools"),
    ("post", "/api/router/pools"),
    ("put", "/api/router/pools/{id}"),
    ("delete", "/api/router/pools/{id}"),
    ("get", "/api/router/accounts"),
    ("post", "/api/router/accounts"),
    ("put", "/api/router/accounts/{pool}/{id}"),
    ("delete", "/api/router/accounts/{pool}/{id}"),
    ("get", "/api/router/chains"),
    ("post", "/api/router/chains"),
    ("put", "/api/router/chains/{name}"),
    ("delete", "/api/router/chains/{name}"),
    ("get", "/api/router/usage"),
    ("get", "/api/router/usage/minutes"),
    ("get", "/api/openapi.json"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
];

/// The whole app: `/api/*` (token), `/api/openapi.json` (token), `/healthz`, `/readyz` (open),
/// `/metrics` (open only when `metrics_public`), and `pages` (the status page, which guards
/// itself with its session cookie; `axum::Router::new()` for none). Every answer carries
/// `x-request-id` and is traced.
pub fn router(state: ApiState, pages: axum::Router) -> axum::Router {
    let state: Shared = Arc::new(state);
    let (app, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(settings::routes())
        .merge(accounts::routes())
        .merge(policies::routes())
        .merge(quotas::routes())
        .merge(exceptions::routes())
        .merge(priority::routes())
        .merge(inspection::routes())
        .merge(pool::routes())
        .merge(forecast::routes())
        .merge(runtime::routes())
        .merge(alerts::routes())
        .merge(router::routes())
        .merge(health::routes())
        .routes(routes!(openapi_json))
        .split_for_parts();
    app.with_state(state.clone())
        .merge(pages)
        .fallback(no_route)
        .layer(Extension(Arc::new(doc)))
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .layer(middleware::from_fn(scope_request_id))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &Request| {
                let id = req
                    .headers()
                    .get(&REQUEST_ID)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-");
                // The path only: no query string, never headers (the token lives there).
                tracing::info_span!("http", method = %req.method(), path = %req.uri().path(), request_id = %id)
            }),
        )
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}

/// Whether `path` needs the admin token.
fn guarded(path: &str, metrics_public: bool) -> bool {
    path == "/api" || path.starts_with("/api/") || (path == "/metrics" && !metrics_public)
}

/// Whether the request carries `Authorization: Bearer <token>` (`core::access::token_matches`:
/// constant time; an empty configured token admits nobody).
fn authorized(headers: &HeaderMap, token: &SecretString) -> bool {
    let Some((scheme, given)) = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
    else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer") && token_matches(given.trim(), token.expose_secret())
}

/// 401 for guarded paths without the token (docs/rules/api.md §1); nothing about the token is logged.
async fn require_token(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if guarded(req.uri().path(), st.metrics_public) && !authorized(req.headers(), &st.admin_token) {
        tracing::debug!("request refused: missing or invalid admin token");
        return ApiError::Unauthorized.into_response();
    }
    next.run(req).await
}

/// Makes the request id visible to [`ApiError`] (500 bodies name it).
async fn scope_request_id(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    error::REQUEST_ID.scope(id, next.run(req)).await
}

async fn no_route() -> ApiError {
    ApiError::NotFound("no such endpoint".into())
}

/// The OpenAPI 3.1 document of this API, generated from the handlers.
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    tag = "health",
    responses(
        (status = 200, description = "OpenAPI 3.1 document", content_type = "application/json"),
        (status = 401, body = ErrorBody),
    )
)]
async fn openapi_json(
    Extension(doc): Extension<Arc<utoipa::openapi::OpenApi>>,
) -> Json<utoipa::openapi::OpenApi> {
    Json(doc.as_ref().clone())
}

#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
