//! Health endpoints (docs/rules/api.md §6): `/healthz` (process up),
//! `/readyz` (database answers; each site's last CPA contact) and `/metrics` (Prometheus text).
//! The first two are open; `/metrics` is guarded unless `metrics_public` (see `require_token`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{ApiError, ErrorBody, Shared};
use crate::jobs::queries::{self, CpaContact};

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// `GET /healthz`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// `GET /readyz`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// `ready` or `unavailable`.
    pub status: String,
    /// Each site's last successful CPA contact (empty when unavailable).
    pub sites: Vec<CpaContact>,
}

/// 200 while the process serves requests.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    security(()),
    responses((status = 200, body = Health))
)]
async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// 200 when the database answers (it is migrated when opened), with each site's last CPA
/// contact; 503 otherwise (the cause is logged, not shown).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    security(()),
    responses(
        (status = 200, body = Readiness),
        (status = 503, description = "database unavailable", body = Readiness),
    )
)]
async fn readyz(State(st): State<Shared>) -> Response {
    let contacts = match st.patrol.store.ping().await {
        Ok(()) => queries::cpa_contacts(&st.patrol).await,
        Err(e) => Err(e.into()),
    };
    match contacts {
        Ok(sites) => Json(Readiness {
            status: "ready".into(),
            sites,
        })
        .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "not ready: the database does not answer");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(Readiness {
                    status: "unavailable".into(),
                    sites: vec![],
                }),
            )
                .into_response()
        }
    }
}

/// Prometheus text exposition; 404 when no exporter is installed.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    responses(
        (status = 200, description = "Prometheus text format", body = String, content_type = "text/plain"),
        (status = 401, description = "token needed unless metrics_public", body = ErrorBody),
        (status = 404, description = "metrics not enabled", body = ErrorBody),
    )
)]
async fn metrics(State(st): State<Shared>) -> Result<Response, ApiError> {
    let handle = st.metrics.as_ref().ok_or(ApiError::MetricsDisabled)?;
    Ok((
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        handle.render(),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    #[tokio::test]
    async fn healthz_and_readyz_are_open() {
        let t = app().await;
        let r = t.send(Method::GET, "/healthz", None, None, &[]).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.json(), json!({"status": "ok"}));

        let r = t.send(Method::GET, "/readyz", None, None, &[]).await;
        assert_eq!(r.status, StatusCode::OK);
        let body = r.json();
        assert_eq!(body["status"], "ready");
        assert_eq!(body["sites"][0]["siteId"], "main");
        assert!(body["sites"][0]["lastCpaContactAt"].is_null());
        assert!(body["sites"][0]["cpaVersion"].is_null());
    }

    #[tokio::test]
    async fn metrics_need_the_token_unless_public() {
        let t = app().await;
        let r = t.send(Method::GET, "/metrics", None, None, &[]).await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
        let r = t.get("/metrics").await;
        assert_eq!(r.status, StatusCode::OK);
        assert!(
            r.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain")
        );

        let open = spawn(Setup {
            metrics_public: true,
            ..Setup::default()
        })
        .await;
        let r = open.send(Method::GET, "/metrics", None, None, &[]).await;
        assert_eq!(r.status, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_answer_404_without_an_exporter() {
        let t = spawn(Setup {
            metrics: false,
            ..Setup::default()
        })
        .await;
        assert_error(
            &t.get("/metrics").await,
            StatusCode::NOT_FOUND,
            "metrics_disabled",
        );
    }
}
