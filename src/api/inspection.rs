//! Inspection rounds (docs/rules/api.md §5): run one now, the schedule status, the last run and
//! past runs, and switching auto polling. A round that fails as a whole (CPA unreachable, key
//! refused) is a 200 result with `status: "error"`; only a busy site (409) or the store fail it.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiQuery;
use super::{ApiError, ErrorBody, Shared, SiteQuery};
use crate::core::report::{InspectionRunResult, RunStatus};
use crate::jobs::inspect::{self, RoundKind, RoundOptions};
use crate::jobs::queries::{self, InspectionStatus};
use crate::jobs::sites;

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new()
        .routes(routes!(run))
        .routes(routes!(status))
        .routes(routes!(last_run))
        .routes(routes!(runs))
        .routes(routes!(auto_start))
        .routes(routes!(auto_stop))
}

/// `?siteId=&force=&dryRun=` of `POST /api/inspection/run`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct RunQuery {
    /// Site id; missing ⇒ the default site.
    site_id: Option<String>,
    /// Probe every account for real (default false).
    force: Option<bool>,
    /// Decide but execute no action (default false).
    dry_run: Option<bool>,
}

/// `?siteId=&limit=` of `GET /api/inspection/runs`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct RunsQuery {
    /// Site id; missing ⇒ the default site.
    site_id: Option<String>,
    /// Runs to return, newest first (default 20, at most 500).
    limit: Option<u32>,
}

/// One past round without its per-account lists (`GET /api/inspection/runs`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub run_id: String,
    pub site_id: String,
    /// `auto`, `manual`, `quotaRefresh`, `reset`, `freshness`.
    pub source: String,
    pub dry_run: bool,
    pub status: RunStatus,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub total_accounts: usize,
    pub probed_count: usize,
    pub reused_count: usize,
    pub failed_count: usize,
    pub delete_count: usize,
    pub disable_count: usize,
    pub enable_count: usize,
    pub keep_count: usize,
}

impl From<InspectionRunResult> for RunSummary {
    fn from(r: InspectionRunResult) -> Self {
        Self {
            run_id: r.run_id,
            site_id: r.site_id,
            source: r.source,
            dry_run: r.dry_run,
            status: r.status,
            error: r.error,
            started_at: r.started_at,
            finished_at: r.finished_at,
            total_accounts: r.total_accounts,
            probed_count: r.probed_count,
            reused_count: r.reused_count,
            failed_count: r.failed_count,
            delete_count: r.delete_count,
            disable_count: r.disable_count,
            enable_count: r.enable_count,
            keep_count: r.keep_count,
        }
    }
}

/// Answer of `/api/inspection/auto/start` and `/auto/stop`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoPolling {
    pub auto_polling_enabled: bool,
}

/// Full inspection of the site now: decisions, actions per `autoActionMode` (none when
/// `dryRun`), persisted as a run.
#[utoipa::path(
    post,
    path = "/api/inspection/run",
    tag = "inspection",
    params(RunQuery),
    responses(
        (status = 200, description = "the round ran (check `status`)", body = InspectionRunResult),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "busy", body = ErrorBody),
    )
)]
async fn run(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<RunQuery>,
) -> Result<Json<InspectionRunResult>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    let opts = RoundOptions {
        force: q.force.unwrap_or(false),
        dry_run: q.dry_run.unwrap_or(false),
        ..RoundOptions::new(RoundKind::Manual)
    };
    Ok(Json(
        inspect::run_round(&st.patrol, &site.site_id, opts).await?,
    ))
}

/// Whether a round runs, the schedule and the last run's times.
#[utoipa::path(
    get,
    path = "/api/inspection/status",
    tag = "inspection",
    params(SiteQuery),
    responses(
        (status = 200, body = InspectionStatus),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn status(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<InspectionStatus>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(queries::inspection_status(&st.patrol, &site).await?))
}

/// The last full round (auto or manual); 204 when there is none yet.
#[utoipa::path(
    get,
    path = "/api/inspection/last-run",
    tag = "inspection",
    params(SiteQuery),
    responses(
        (status = 200, body = InspectionRunResult),
        (status = 204, description = "no round yet"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn last_run(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Response, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(match queries::last_run(&st.patrol, &site.site_id).await? {
        Some(r) => Json(r).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

/// Past rounds of every kind, newest first, without their per-account lists.
#[utoipa::path(
    get,
    path = "/api/inspection/runs",
    tag = "inspection",
    params(RunsQuery),
    responses(
        (status = 200, body = Vec<RunSummary>),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn runs(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> Result<Json<Vec<RunSummary>>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    let limit = q.limit.unwrap_or(20).clamp(1, 500);
    let runs = queries::runs(&st.patrol, &site.site_id, limit).await?;
    Ok(Json(runs.into_iter().map(RunSummary::from).collect()))
}

async fn set_auto(st: &Shared, site_id: Option<&str>, on: bool) -> Result<AutoPolling, ApiError> {
    let site = st.site(site_id).await?;
    let site = sites::set_auto_polling(&st.patrol, &site.site_id, on).await?;
    Ok(AutoPolling {
        auto_polling_enabled: site.settings.auto_polling_enabled,
    })
}

/// Switches auto polling on (persisted); the scheduler plans the next round afresh.
#[utoipa::path(
    post,
    path = "/api/inspection/auto/start",
    tag = "inspection",
    params(SiteQuery),
    responses(
        (status = 200, body = AutoPolling),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn auto_start(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<AutoPolling>, ApiError> {
    Ok(Json(set_auto(&st, q.site_id.as_deref(), true).await?))
}

/// Switches auto polling off (persisted).
#[utoipa::path(
    post,
    path = "/api/inspection/auto/stop",
    tag = "inspection",
    params(SiteQuery),
    responses(
        (status = 200, body = AutoPolling),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn auto_stop(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<AutoPolling>, ApiError> {
    Ok(Json(set_auto(&st, q.site_id.as_deref(), false).await?))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    #[tokio::test]
    async fn a_fresh_site_has_no_last_run() {
        let t = app().await;
        let r = t.get("/api/inspection/last-run").await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        assert!(r.text.is_empty());
        assert_eq!(t.get("/api/inspection/runs").await.json(), json!([]));
    }

    #[tokio::test]
    async fn an_inspection_against_a_dead_cpa_is_a_result_with_status_error() {
        let t = app().await;
        let r = t
            .post("/api/inspection/run?force=true&dryRun=true", None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let run = r.json();
        assert_eq!(run["status"], "error");
        assert_eq!(run["source"], "manual");
        assert_eq!(run["dryRun"], true);
        assert_eq!(run["decisions"], json!([]));
        assert!(run["error"].as_str().unwrap().contains("CPA unavailable"));
        let run_id = run["runId"].clone();

        let last = t.get("/api/inspection/last-run").await;
        assert_eq!(last.status, StatusCode::OK);
        assert_eq!(last.json()["runId"], run_id);

        let runs = t.get("/api/inspection/runs?limit=5").await.json();
        assert_eq!(runs.as_array().unwrap().len(), 1);
        assert_eq!(runs[0]["runId"], run_id);
        assert_eq!(runs[0]["status"], "error");
        assert!(runs[0].get("decisions").is_none(), "summaries only");

        let status = t.get("/api/inspection/status").await.json();
        assert_eq!(status["isPolling"], false);
        // A dry run writes nothing but its run record: the site's run times stay unset.
        assert!(status["lastRunStartedAt"].is_null(), "{status}");
        assert!(status["lastRunFinishedAt"].is_null(), "{status}");

        let progress = t.get("/api/runtime/progress").await.json();
        assert_eq!(progress["status"], "error");
        assert_eq!(progress["operationType"], "inspection");
    }

    #[tokio::test]
    async fn an_inspection_on_a_busy_site_is_a_409() {
        let t = app().await;
        let rt = t.patrol.runtime("main");
        let _round = rt.try_begin().expect("the site is free");
        assert_error(
            &t.post("/api/inspection/run", None).await,
            StatusCode::CONFLICT,
            "busy",
        );
        assert_eq!(
            t.get("/api/inspection/status").await.json()["isPolling"],
            true
        );
    }

    #[tokio::test]
    async fn auto_polling_is_switched_and_persisted() {
        let t = app().await;
        let r = t.post("/api/inspection/auto/start", None).await;
        assert_eq!(r.json(), json!({"autoPollingEnabled": true}));
        assert_eq!(
            t.get("/api/settings").await.json()["autoPollingEnabled"],
            true
        );
        assert_eq!(
            t.get("/api/inspection/status").await.json()["autoPollingEnabled"],
            true
        );
        let r = t.post("/api/inspection/auto/stop", None).await;
        assert_eq!(r.json(), json!({"autoPollingEnabled": false}));
        assert_eq!(
            t.get("/api/settings").await.json()["autoPollingEnabled"],
            false
        );
    }

    #[tokio::test]
    async fn a_bad_query_value_is_a_json_400() {
        let t = app().await;
        let r = t.post("/api/inspection/run?force=maybe", None).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");
    }
}
