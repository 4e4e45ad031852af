//! The exception list of a site (docs/rules/api.md §4): accounts the patrol never acts on. Every
//! answer is the whole list `{exceptions}`; unknown account names ⇒ 400 (checked by `jobs`).

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiJson, ApiPath, ApiQuery};
use super::{ApiError, ErrorBody, Shared, SiteQuery};
use crate::jobs::accounts;

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new()
        .routes(routes!(list_exceptions, add_exception, replace_exceptions))
        .routes(routes!(remove_exception))
}

/// The exception list (`GET`/`PUT` body and every answer).
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
pub struct ExceptionList {
    /// Account names.
    pub exceptions: Vec<String>,
}

/// Body of `POST /api/exceptions`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewException {
    pub account_name: String,
}

/// The site's exception list.
#[utoipa::path(
    get,
    path = "/api/exceptions",
    tag = "exceptions",
    params(SiteQuery),
    responses(
        (status = 200, body = ExceptionList),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn list_exceptions(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<ExceptionList>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    let exceptions = accounts::exceptions(&st.patrol, &site.site_id).await?;
    Ok(Json(ExceptionList { exceptions }))
}

/// Adds one account (trimmed; must be a known account of the site).
#[utoipa::path(
    post,
    path = "/api/exceptions",
    tag = "exceptions",
    params(SiteQuery),
    request_body = NewException,
    responses(
        (status = 200, body = ExceptionList),
        (status = 400, description = "blank or unknown account", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn add_exception(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
    ApiJson(body): ApiJson<NewException>,
) -> Result<Json<ExceptionList>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    let name = body.account_name.trim();
    if name.is_empty() {
        return Err(ApiError::Invalid(vec!["accountName is required".into()]));
    }
    let exceptions = accounts::add_exception(&st.patrol, &site.site_id, name).await?;
    Ok(Json(ExceptionList { exceptions }))
}

/// Replaces the list (blanks dropped, duplicates removed; every name must be known).
#[utoipa::path(
    put,
    path = "/api/exceptions",
    tag = "exceptions",
    params(SiteQuery),
    request_body = ExceptionList,
    responses(
        (status = 200, body = ExceptionList),
        (status = 400, description = "unknown accounts listed", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn replace_exceptions(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
    ApiJson(body): ApiJson<ExceptionList>,
) -> Result<Json<ExceptionList>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    let exceptions = accounts::set_exceptions(&st.patrol, &site.site_id, body.exceptions).await?;
    Ok(Json(ExceptionList { exceptions }))
}

/// Removes one account from the list (no error if it was not there).
#[utoipa::path(
    delete,
    path = "/api/exceptions/{name}",
    tag = "exceptions",
    params(("name" = String, Path, description = "account name"), SiteQuery),
    responses(
        (status = 200, body = ExceptionList),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn remove_exception(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<ExceptionList>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    let exceptions = accounts::remove_exception(&st.patrol, &site.site_id, &name).await?;
    Ok(Json(ExceptionList { exceptions }))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    #[tokio::test]
    async fn exceptions_are_added_replaced_and_removed() {
        let t = app().await;
        t.seed_accounts("main", &["a.json", "b.json", "c.json"])
            .await;
        assert_eq!(
            t.get("/api/exceptions").await.json(),
            json!({"exceptions": []})
        );

        let r = t
            .post("/api/exceptions", Some(json!({"accountName": " a.json "})))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.json(), json!({"exceptions": ["a.json"]}));

        let r = t
            .put(
                "/api/exceptions",
                json!({"exceptions": ["b.json", "c.json", ""]}),
            )
            .await;
        assert_eq!(r.json(), json!({"exceptions": ["b.json", "c.json"]}));

        let r = t.delete("/api/exceptions/b.json").await;
        assert_eq!(r.json(), json!({"exceptions": ["c.json"]}));
        assert_eq!(
            t.get("/api/accounts").await.json()[2]["exception"],
            true,
            "c.json is marked"
        );
    }

    #[tokio::test]
    async fn exceptions_with_unknown_accounts_are_400() {
        let t = app().await;
        t.seed_accounts("main", &["a.json"]).await;
        let r = t
            .post(
                "/api/exceptions",
                Some(json!({"accountName": "ghost.json"})),
            )
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid");
        assert_eq!(r.json()["problems"], json!(["unknown account ghost.json"]));

        let r = t
            .put(
                "/api/exceptions",
                json!({"exceptions": ["a.json", "x", "y"]}),
            )
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid");
        assert_eq!(
            r.json()["problems"],
            json!(["unknown account x", "unknown account y"])
        );
        let r = t
            .post("/api/exceptions", Some(json!({"accountName": "  "})))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid");
        assert_eq!(
            t.get("/api/exceptions").await.json(),
            json!({"exceptions": []})
        );
    }
}
