//! The exhaustion forecast of a site (`GET /api/sites/{id}/forecast`, docs/rules/patrol.md §10): usable
//! and active accounts, remaining capacity, summed burn, projected dry time against the
//! earliest reset. Computed on request by `jobs::forecast` from the stored history.

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiPath;
use super::{ApiError, ErrorBody, Shared};
use crate::jobs::forecast::{self, SiteForecastView};

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new().routes(routes!(site_forecast))
}

/// When the site's pool runs dry at the current burn (docs/patrol.md "The exhaustion forecast"):
/// the usable accounts' headroom to their deciding threshold on the long window, against the summed
/// burn of the accounts in use (the active set under priority routing), compared with the earliest
/// reset of any account. 404 for an unknown site.
#[utoipa::path(
    get,
    path = "/api/sites/{id}/forecast",
    tag = "pool",
    params(("id" = String, Path, description = "site id")),
    responses(
        (status = 200, body = SiteForecastView),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown site", body = ErrorBody),
    )
)]
async fn site_forecast(
    State(st): State<Shared>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SiteForecastView>, ApiError> {
    match forecast::site_forecast(&st.patrol, &id).await? {
        Some(f) => Ok(Json(SiteForecastView::new(&id, &f))),
        None => Err(ApiError::NotFound(format!("site {id} not found"))),
    }
}
