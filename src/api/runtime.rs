//! Runtime views (docs/rules/api.md §6, §5): the operation log with
//! its filters (docs/rules/patrol.md §7) and the live progress of a site's current operation.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiQuery;
use super::{ApiError, ErrorBody, Shared, SiteQuery};
use crate::core::oplog::{Category, Level, LogEntry, LogQuery};
use crate::jobs::{Progress, queries};

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new()
        .routes(routes!(logs))
        .routes(routes!(progress))
}

/// Filters of `GET /api/runtime/logs`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct LogsQuery {
    /// Only this site's entries; missing ⇒ every site and the process-wide entries.
    site_id: Option<String>,
    /// Entries to return, newest first (default 200, at most 1000).
    limit: Option<u32>,
    /// `inspection`, `quota`, `account`, `priority`, `alert` or `system`.
    category: Option<String>,
    /// Minimum level: `info`, `warning` or `error`.
    level: Option<String>,
    /// Exact account name.
    account: Option<String>,
    /// RFC 3339 instant; only entries at or after it.
    since: Option<String>,
}

/// The trimmed value, `None` when absent or blank.
fn blank(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// Turns the query into a [`LogQuery`], listing every bad value.
fn parse_logs_query(q: LogsQuery) -> Result<LogQuery, ApiError> {
    let mut problems = Vec::new();
    let category = blank(q.category.as_deref()).and_then(|c| {
        let parsed = Category::parse(&c.to_ascii_lowercase());
        if parsed.is_none() {
            problems.push(format!(
                "category must be one of inspection, quota, account, priority, alert, system (got {c:?})"
            ));
        }
        parsed
    });
    let level = blank(q.level.as_deref()).and_then(|l| {
        let parsed = Level::parse(&l.to_ascii_lowercase());
        if parsed.is_none() {
            problems.push(format!(
                "level must be one of info, warning, error (got {l:?})"
            ));
        }
        parsed
    });
    let since = blank(q.since.as_deref()).and_then(|s| match DateTime::parse_from_rfc3339(s) {
        Ok(t) => Some(t.with_timezone(&Utc)),
        Err(e) => {
            problems.push(format!(
                "since must be an RFC 3339 instant (got {s:?}: {e})"
            ));
            None
        }
    });
    if !problems.is_empty() {
        return Err(ApiError::Invalid(problems));
    }
    Ok(LogQuery {
        site_id: blank(q.site_id.as_deref()).map(str::to_string),
        category,
        level,
        account: blank(q.account.as_deref()).map(str::to_string),
        since,
        limit: q.limit.unwrap_or(200).clamp(1, 1000),
    })
}

/// Operation-log entries, newest first.
#[utoipa::path(
    get,
    path = "/api/runtime/logs",
    tag = "runtime",
    params(LogsQuery),
    responses(
        (status = 200, body = Vec<LogEntry>),
        (status = 400, description = "bad category, level or since (all listed)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown siteId", body = ErrorBody),
    )
)]
async fn logs(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> Result<Json<Vec<LogEntry>>, ApiError> {
    let query = parse_logs_query(q)?;
    if let Some(id) = &query.site_id {
        st.patrol.site(id).await?;
    }
    Ok(Json(queries::logs(&st.patrol, query).await?))
}

/// What the site is doing now (stage, counts, percent).
#[utoipa::path(
    get,
    path = "/api/runtime/progress",
    tag = "runtime",
    params(SiteQuery),
    responses(
        (status = 200, body = Progress),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn progress(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<Progress>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(st.patrol.runtime(&site.site_id).progress()))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use chrono::Duration;

    #[tokio::test]
    async fn progress_of_an_idle_site_is_idle() {
        let t = app().await;
        let p = t.get("/api/runtime/progress").await.json();
        assert_eq!(p["status"], "idle");
        assert_eq!(p["percent"], 0.0);
    }

    #[tokio::test]
    async fn logs_are_filtered_by_category_level_account_site_and_time() {
        let t = app().await;
        t.clock.advance(Duration::minutes(5));
        let after_creation = t.patrol.now();
        t.post("/api/inspection/run", None).await;
        t.clock.advance(Duration::minutes(5));
        t.put("/api/settings", json!({"pollIntervalMinutes": 20}))
            .await;

        let all = t.get("/api/runtime/logs").await.json();
        let ops: Vec<&str> = all
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["operationType"].as_str().unwrap())
            .collect();
        assert_eq!(
            ops,
            vec![
                "settingsChanged",
                "inspection",
                "cpaUnavailable",
                "siteCreated"
            ],
            "newest first"
        );

        let errors = t.get("/api/runtime/logs?level=error").await.json();
        // The failed listing (system) and the failed round (inspection).
        assert_eq!(errors.as_array().unwrap().len(), 2);
        assert_eq!(errors[0]["category"], "inspection");
        assert_eq!(errors[1]["operationType"], "cpaUnavailable");
        assert_eq!(errors[0]["level"], "error");

        let warnings_up = t.get("/api/runtime/logs?level=warning").await.json();
        assert_eq!(warnings_up.as_array().unwrap().len(), 2, "minimum level");

        let system = t.get("/api/runtime/logs?category=system").await.json();
        assert_eq!(system.as_array().unwrap().len(), 3);

        let since = after_creation.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let recent = t
            .get(&format!("/api/runtime/logs?since={since}"))
            .await
            .json();
        assert_eq!(recent.as_array().unwrap().len(), 3);

        let limited = t.get("/api/runtime/logs?limit=1").await.json();
        assert_eq!(limited.as_array().unwrap().len(), 1);
        assert_eq!(limited[0]["operationType"], "settingsChanged");

        let nobody = t.get("/api/runtime/logs?account=a.json").await.json();
        assert_eq!(nobody, json!([]));
        let main = t
            .get("/api/runtime/logs?siteId=main&category=inspection")
            .await
            .json();
        assert_eq!(main.as_array().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn bad_log_filters_are_a_400_listing_each() {
        let t = app().await;
        let r = t
            .get("/api/runtime/logs?category=gossip&level=loud&since=yesterday")
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid");
        let problems = r.json()["problems"].clone();
        assert_eq!(problems.as_array().unwrap().len(), 3, "{problems}");
        let r = t.get("/api/runtime/logs?limit=lots").await;
        assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");
    }
}
