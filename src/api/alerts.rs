//! Alerts (docs/rules/api.md §6; docs/rules/alerts.md): the alert history with its
//! messages and delivery attempts, and a test message on every configured channel.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiQuery;
use super::{ApiError, ErrorBody, Shared, SiteQuery};
use crate::jobs::alerts::{self, AlertHistory, ChannelResult};

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new()
        .routes(routes!(list_alerts))
        .routes(routes!(test_alerts))
}

/// `?siteId=&limit=` of `GET /api/alerts`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct AlertsQuery {
    /// Only this site's events; missing ⇒ every site (like the operation log).
    site_id: Option<String>,
    /// Events to return, newest first (default 50, at most 500).
    limit: Option<u32>,
}

/// Answer of `POST /api/alerts/test`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestResults {
    /// One entry per configured channel, e-mail first.
    pub results: Vec<ChannelResult>,
}

/// Alert events newest first, each with its messages (one per channel) and their delivery
/// attempts; plus whether alerts are enabled and which channels are configured.
#[utoipa::path(
    get,
    path = "/api/alerts",
    tag = "alerts",
    params(AlertsQuery),
    responses(
        (status = 200, body = AlertHistory),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown siteId", body = ErrorBody),
    )
)]
async fn list_alerts(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<AlertsQuery>,
) -> Result<Json<AlertHistory>, ApiError> {
    let site_id = q
        .site_id
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    if let Some(id) = &site_id {
        st.patrol.site(id).await?;
    }
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    Ok(Json(alerts::history(&st.patrol, site_id, limit).await?))
}

/// Sends a test message now on every configured channel (not queued, not retried) and reports
/// each channel's answer (SMTP reply, HTTP status) or error. 409 when no channel is configured.
#[utoipa::path(
    post,
    path = "/api/alerts/test",
    tag = "alerts",
    params(SiteQuery),
    responses(
        (status = 200, description = "per-channel results (check `success`)", body = TestResults),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown siteId", body = ErrorBody),
        (status = 409, description = "no alert channel is configured", body = ErrorBody),
    )
)]
async fn test_alerts(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<TestResults>, ApiError> {
    let site = match q.site_id.as_deref().filter(|s| !s.trim().is_empty()) {
        Some(id) => Some(st.patrol.site(id).await?),
        None => st.patrol.resolve_site(None).await.ok(),
    };
    let results = alerts::send_test(&st.patrol, site.as_ref()).await;
    if results.is_empty() {
        return Err(ApiError::Conflict {
            code: "alerts_not_configured",
            message: "no alert channel is configured ([alerts.email] or [alerts.webhook])".into(),
        });
    }
    Ok(Json(TestResults { results }))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    #[tokio::test]
    async fn without_alerting_the_history_is_empty_and_the_test_is_a_409() {
        let t = app().await;
        let h = t.get("/api/alerts").await;
        assert_eq!(h.status, StatusCode::OK, "{}", h.text);
        assert_eq!(
            h.json(),
            json!({"enabled": false, "channels": [], "events": []})
        );
        let r = t.post("/api/alerts/test", None).await;
        assert_error(&r, StatusCode::CONFLICT, "alerts_not_configured");
        let unknown = t.get("/api/alerts?siteId=nope").await;
        assert_error(&unknown, StatusCode::NOT_FOUND, "unknown_site");
        let bad = t.get("/api/alerts?limit=many").await;
        assert_error(&bad, StatusCode::BAD_REQUEST, "bad_request");
    }
}
