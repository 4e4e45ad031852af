//! Per-account quota policy overrides (docs/rules/patrol.md §9): `GET/PUT/DELETE
//! /api/accounts/{name}/policy` (`?siteId=` as every account endpoint). The HTTP side only:
//! reading the body, validating it into an `AccountPolicy` (422 `invalid_policy` with every
//! problem), and answering `jobs::policies`' view; storage and republishing are the job's.

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiJson, ApiPath, ApiQuery};
use super::{ApiError, ErrorBody, Shared, SiteQuery};
use crate::core::policy::AccountPolicyInput;
use crate::jobs::policies::{self, AccountPolicyView};

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new().routes(routes!(get_policy, put_policy, delete_policy))
}

/// The account's policy override (all fields `null`/`false` when it follows the site) beside
/// its effective policy with the source (`site` / `account`) of each value.
#[utoipa::path(
    get,
    path = "/api/accounts/{name}/policy",
    tag = "accounts",
    params(("name" = String, Path, description = "account (auth file) name"), SiteQuery),
    responses(
        (status = 200, body = AccountPolicyView),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown site or account", body = ErrorBody),
    )
)]
async fn get_policy(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<AccountPolicyView>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(policies::get(&st.patrol, &site, &name).await?))
}

/// Replaces the account's override: `weeklyThreshold`, `fiveHourThreshold`,
/// `monthlyThreshold` (1..=100), `fiveHourRule` (`paid` | `all` | `never`), `neverAct`; an
/// absent field is not overridden (an empty body is the same as DELETE). Stored, so it
/// survives restarts; applies from the next evaluation (the pool is republished at once).
#[utoipa::path(
    put,
    path = "/api/accounts/{name}/policy",
    tag = "accounts",
    params(("name" = String, Path, description = "account (auth file) name"), SiteQuery),
    request_body = AccountPolicyInput,
    responses(
        (status = 200, body = AccountPolicyView),
        (status = 400, description = "malformed JSON", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown site or account", body = ErrorBody),
        (status = 422, description = "invalid_policy: every problem listed", body = ErrorBody),
    )
)]
async fn put_policy(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<SiteQuery>,
    ApiJson(body): ApiJson<AccountPolicyInput>,
) -> Result<Json<AccountPolicyView>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    let policy = body.validate().map_err(ApiError::InvalidPolicy)?;
    Ok(Json(policies::put(&st.patrol, &site, &name, policy).await?))
}

/// Removes the account's override: it follows the site settings again.
#[utoipa::path(
    delete,
    path = "/api/accounts/{name}/policy",
    tag = "accounts",
    params(("name" = String, Path, description = "account (auth file) name"), SiteQuery),
    responses(
        (status = 200, body = AccountPolicyView),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown site or account", body = ErrorBody),
    )
)]
async fn delete_policy(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<AccountPolicyView>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(policies::delete(&st.patrol, &site, &name).await?))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_policy_is_stored_shown_with_its_sources_and_removed() {
        let t = app().await;
        t.seed_accounts("main", &["a.json"]).await;
        let r = t.get("/api/accounts/a.json/policy").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.json()["overridden"], false);
        assert_eq!(r.json()["effective"]["weekly"], 95);
        assert_eq!(r.json()["effective"]["sources"]["weekly"], "site");

        let r = t
            .put(
                "/api/accounts/a.json/policy",
                json!({"fiveHourThreshold": 80, "fiveHourRule": "all", "neverAct": true}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let v = r.json();
        assert_eq!(v["policy"]["fiveHourThreshold"], 80);
        assert!(v["policy"]["weeklyThreshold"].is_null());
        assert_eq!(v["effective"]["fiveHour"], 80);
        assert_eq!(v["effective"]["fiveHourRule"], "all");
        assert_eq!(v["effective"]["neverAct"], true);
        assert_eq!(v["effective"]["sources"]["fiveHour"], "account");
        assert_eq!(v["effective"]["sources"]["weekly"], "site");
        let again = t.get("/api/accounts/a.json/policy").await.json();
        assert_eq!(again["overridden"], true);
        assert_eq!(again["policy"]["neverAct"], true);
        assert_eq!(t.get("/api/accounts").await.json()[0]["neverAct"], true);

        let r = t.delete("/api/accounts/a.json/policy").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.json()["overridden"], false);
        assert_eq!(
            t.get("/api/accounts/a.json/policy").await.json()["effective"]["fiveHour"],
            95
        );
    }

    #[tokio::test]
    async fn an_invalid_policy_is_a_422_listing_every_problem_and_an_unknown_account_a_404() {
        let t = app().await;
        t.seed_accounts("main", &["a.json"]).await;
        let r = t
            .put(
                "/api/accounts/a.json/policy",
                json!({"weeklyThreshold": 0, "monthlyThreshold": 101, "fiveHourRule": "free"}),
            )
            .await;
        assert_error(&r, StatusCode::UNPROCESSABLE_ENTITY, "invalid_policy");
        assert_eq!(
            r.json()["problems"].as_array().unwrap().len(),
            3,
            "{}",
            r.text
        );
        assert_eq!(
            t.get("/api/accounts/a.json/policy").await.json()["overridden"],
            false,
            "nothing stored"
        );
        for r in [
            t.get("/api/accounts/ghost.json/policy").await,
            t.put("/api/accounts/ghost.json/policy", json!({"neverAct": true}))
                .await,
            t.delete("/api/accounts/ghost.json/policy").await,
        ] {
            assert_error(&r, StatusCode::NOT_FOUND, "not_found");
        }
    }
}
