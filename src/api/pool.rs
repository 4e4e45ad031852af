//! The published pool snapshot of a site (`GET /api/pool`, docs/rules/patrol.md §12.2): every account's
//! availability, tier, admin state and disable reason as the patrol last published them, read
//! from memory (`jobs::pool`), never from the database.

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiQuery;
use super::{ApiError, ErrorBody, Shared, SiteQuery};
use crate::jobs::pool::{self, PoolView};

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new().routes(routes!(get_pool))
}

/// The site's published pool: accounts in routing order (priority order when routing is on,
/// else CPA's listing order) with availability (`until` for exhausted accounts), tier, admin
/// state and reason; counts by availability and the pool's `usableUntil`. Replaced after every
/// round, reset re-check, listing reload, manual account action and settings change.
#[utoipa::path(
    get,
    path = "/api/pool",
    tag = "pool",
    params(SiteQuery),
    responses(
        (status = 200, body = PoolView),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn get_pool(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<PoolView>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(pool::view(&st.patrol, &site.site_id).await?))
}
