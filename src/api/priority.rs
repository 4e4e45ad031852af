//! Priority routing configuration (api.md `GET/PUT /api/settings/priority-routing`,
//! docs/rules/patrol.md §6.4): the switch, the minimum of active accounts, the ordered list, the active
//! set, and the CPA priority sync warning of a save.

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiJson, ApiQuery};
use super::{ApiError, ErrorBody, Shared, SiteQuery};
use crate::jobs::priority::{self, RoutingStatus, RoutingUpdate};

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new().routes(routes!(get_routing, put_routing))
}

/// Routing status: switch, minimum, the list by priority and the active set now.
#[utoipa::path(
    get,
    path = "/api/settings/priority-routing",
    tag = "settings",
    params(SiteQuery),
    responses(
        (status = 200, body = RoutingStatus),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn get_routing(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<RoutingStatus>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(priority::status(&st.patrol, &site).await?))
}

/// Saves switch, minimum (1..10) and, when sent, the list (unknown names are left out and named
/// in `warnings`). Never enables or disables accounts; always syncs CPA priorities and returns
/// `cpaPrioritySyncWarning` when the sync stopped (the save itself stands).
#[utoipa::path(
    put,
    path = "/api/settings/priority-routing",
    tag = "settings",
    params(SiteQuery),
    request_body = RoutingUpdate,
    responses(
        (status = 200, body = RoutingStatus),
        (status = 400, description = "malformed body", body = ErrorBody),
        (status = 409, description = "a round is running", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn put_routing(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
    ApiJson(body): ApiJson<RoutingUpdate>,
) -> Result<Json<RoutingStatus>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(priority::save(&st.patrol, &site.site_id, body).await?))
}
