//! Quotas (docs/rules/api.md §3): current snapshots, one account's history, a site-wide
//! evaluation without actions, and one forced probe. Rounds run through `jobs` (409 while another
//! round holds the site); a round that fails as a whole is reported, not hidden.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiPath, ApiQuery};
use super::{ApiError, ErrorBody, Shared};
use crate::core::report::RunStatus;
use crate::jobs::inspect::{self, RoundKind, RoundOptions};
use crate::jobs::queries::{self, HistoryEntry, QuotaView};
use crate::jobs::refresh;

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new()
        .routes(routes!(list_quotas))
        .routes(routes!(history))
        .routes(routes!(refresh_all))
        .routes(routes!(refresh_account))
}

/// `?siteId=&limit=` of the history.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct HistoryQuery {
    /// Site id; missing ⇒ the default site.
    site_id: Option<String>,
    /// Entries to return, newest first (default 100, at most 1000).
    limit: Option<u32>,
}

/// `?siteId=&force=` of the refreshes.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct RefreshQuery {
    /// Site id; missing ⇒ the default site.
    site_id: Option<String>,
    /// Probe every account for real instead of reusing fresh snapshots (default false).
    force: Option<bool>,
}

/// Answer of `POST /api/quotas/refresh`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefreshSummary {
    /// Accounts evaluated (probed, reused or skipped).
    pub refreshed: usize,
    /// Real probes made.
    pub probed: usize,
    /// Fresh snapshots reused.
    pub reused: usize,
    /// Probes that failed.
    pub failed: usize,
    /// `completed`, or `error` when the round failed as a whole (e.g. CPA unreachable).
    pub status: RunStatus,
    /// Why the round failed.
    pub error: Option<String>,
}

/// Quota snapshots of every account of the site.
#[utoipa::path(
    get,
    path = "/api/quotas",
    tag = "quotas",
    params(super::SiteQuery),
    responses(
        (status = 200, body = Vec<QuotaView>),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn list_quotas(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<super::SiteQuery>,
) -> Result<Json<Vec<QuotaView>>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(queries::quotas(&st.patrol, &site).await?))
}

/// Past snapshots of one account, newest first.
#[utoipa::path(
    get,
    path = "/api/quotas/{name}/history",
    tag = "quotas",
    params(("name" = String, Path, description = "account name"), HistoryQuery),
    responses(
        (status = 200, body = Vec<HistoryEntry>),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown site or account", body = ErrorBody),
    )
)]
async fn history(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> Result<Json<Vec<HistoryEntry>>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    let known = queries::accounts(&st.patrol, &site)
        .await?
        .iter()
        .any(|a| a.name == name);
    if !known {
        return Err(ApiError::NotFound(format!(
            "account {name} not found in site {}",
            site.site_id
        )));
    }
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    Ok(Json(
        queries::history(&st.patrol, &site.site_id, &name, limit).await?,
    ))
}

/// Evaluates every account of the site (exceptions included) without acting.
#[utoipa::path(
    post,
    path = "/api/quotas/refresh",
    tag = "quotas",
    params(RefreshQuery),
    responses(
        (status = 200, description = "the round ran (check `status`)", body = RefreshSummary),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "busy", body = ErrorBody),
    )
)]
async fn refresh_all(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<RefreshQuery>,
) -> Result<Json<RefreshSummary>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    let opts = RoundOptions {
        force: q.force.unwrap_or(false),
        ..RoundOptions::new(RoundKind::QuotaRefresh)
    };
    let r = inspect::run_round(&st.patrol, &site.site_id, opts).await?;
    Ok(Json(RefreshSummary {
        refreshed: r.total_accounts,
        probed: r.probed_count,
        reused: r.reused_count,
        failed: r.failed_count,
        status: r.status,
        error: r.error,
    }))
}

/// One forced real probe of one account (exceptions included), no action; answers its snapshot.
/// 502 when the round could not reach CPA.
#[utoipa::path(
    post,
    path = "/api/quotas/{name}/refresh",
    tag = "quotas",
    params(("name" = String, Path, description = "account name"), super::SiteQuery),
    responses(
        (status = 200, body = QuotaView),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown site or account", body = ErrorBody),
        (status = 409, description = "busy", body = ErrorBody),
        (status = 502, description = "CPA failed", body = ErrorBody),
    )
)]
async fn refresh_account(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<super::SiteQuery>,
) -> Result<Json<QuotaView>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    let (round, _) = refresh::refresh_one(&st.patrol, &site.site_id, &name).await?;
    if round.status == RunStatus::Error {
        return Err(ApiError::Cpa {
            status: None,
            message: round
                .error
                .unwrap_or_else(|| "the refresh round failed".into()),
        });
    }
    queries::quotas(&st.patrol, &site)
        .await?
        .into_iter()
        .find(|v| v.account_name == name)
        .map(Json)
        .ok_or_else(|| {
            ApiError::NotFound(format!("account {name} not found in site {}", site.site_id))
        })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    #[tokio::test]
    async fn quotas_list_every_account_and_history_needs_a_known_account() {
        let t = app().await;
        t.seed_accounts("main", &["a.json"]).await;
        let q = t.get("/api/quotas").await.json();
        assert_eq!(q[0]["accountName"], "a.json");
        assert_eq!(q[0]["success"], false);
        assert_eq!(q[0]["windows"], json!([]));

        let h = t.get("/api/quotas/a.json/history?limit=5").await;
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.json(), json!([]));
        assert_error(
            &t.get("/api/quotas/ghost.json/history").await,
            StatusCode::NOT_FOUND,
            "not_found",
        );
    }

    #[tokio::test]
    async fn refreshing_all_quotas_against_a_dead_cpa_reports_the_failed_round() {
        let t = app().await;
        let r = t.post("/api/quotas/refresh?force=true", None).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let s = r.json();
        assert_eq!(s["status"], "error");
        assert_eq!(
            (&s["refreshed"], &s["probed"], &s["reused"], &s["failed"]),
            (&json!(0), &json!(0), &json!(0), &json!(0))
        );
        assert!(s["error"].as_str().unwrap().contains("CPA unavailable"));
    }

    #[tokio::test]
    async fn refreshing_one_quota_against_a_dead_cpa_is_a_502() {
        let t = app().await;
        t.seed_accounts("main", &["a.json"]).await;
        let r = t.post("/api/quotas/a.json/refresh", None).await;
        assert_error(&r, StatusCode::BAD_GATEWAY, "cpa_error");
    }

    #[tokio::test]
    async fn quota_refreshes_on_a_busy_site_are_409() {
        let t = app().await;
        let rt = t.patrol.runtime("main");
        let _round = rt.try_begin().expect("the site is free");
        assert_error(
            &t.post("/api/quotas/refresh", None).await,
            StatusCode::CONFLICT,
            "busy",
        );
        assert_error(
            &t.post("/api/quotas/a.json/refresh", None).await,
            StatusCode::CONFLICT,
            "busy",
        );
    }
}
