//! Accounts of a site (docs/rules/api.md §3): the stored list, a reload from CPA, and the
//! manual disable / enable / release actions with their disable-reason bookkeeping (done by
//! `jobs::accounts`). Each action answers the account as `GET /api/accounts` shows it.

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiPath, ApiQuery};
use super::{ApiError, ErrorBody, Shared, SiteQuery};
use crate::core::site::Site;
use crate::jobs::accounts;
use crate::jobs::queries::{self, AccountView};

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new()
        .routes(routes!(list_accounts))
        .routes(routes!(refresh_accounts))
        .routes(routes!(disable_account))
        .routes(routes!(enable_account))
        .routes(routes!(release_account))
        .routes(routes!(redeem_reset_credit))
}

/// The account `name` of `site_id` as the list shows it; 404 if absent.
async fn view(st: &Shared, site: &Site, name: &str) -> Result<AccountView, ApiError> {
    let site_id = &site.site_id;
    queries::accounts(&st.patrol, site)
        .await?
        .into_iter()
        .find(|a| a.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("account {name} not found in site {site_id}")))
}

/// Accounts of the site as last loaded from CPA, with priorities and disable reasons.
#[utoipa::path(
    get,
    path = "/api/accounts",
    tag = "accounts",
    params(SiteQuery),
    responses(
        (status = 200, body = Vec<AccountView>),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn list_accounts(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<Vec<AccountView>>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(queries::accounts(&st.patrol, &site).await?))
}

/// Reloads the list from CPA, then answers it.
#[utoipa::path(
    post,
    path = "/api/accounts/refresh",
    tag = "accounts",
    params(SiteQuery),
    responses(
        (status = 200, body = Vec<AccountView>),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 502, description = "CPA failed", body = ErrorBody),
    )
)]
async fn refresh_accounts(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<Vec<AccountView>>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    accounts::refresh_accounts(&st.patrol, &site.site_id).await?;
    Ok(Json(queries::accounts(&st.patrol, &site).await?))
}

/// Manual disable in CPA: reason ManualDisabled, owner manual (the patrol will not re-enable it).
#[utoipa::path(
    post,
    path = "/api/accounts/{name}/disable",
    tag = "accounts",
    params(("name" = String, Path, description = "account (auth file) name"), SiteQuery),
    responses(
        (status = 200, body = AccountView),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 502, description = "CPA failed", body = ErrorBody),
    )
)]
async fn disable_account(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<AccountView>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    accounts::disable(&st.patrol, &site.site_id, &name).await?;
    Ok(Json(view(&st, &site, &name).await?))
}

/// Manual enable in CPA: the disable reason is cleared.
#[utoipa::path(
    post,
    path = "/api/accounts/{name}/enable",
    tag = "accounts",
    params(("name" = String, Path, description = "account (auth file) name"), SiteQuery),
    responses(
        (status = 200, body = AccountView),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 502, description = "CPA failed", body = ErrorBody),
    )
)]
async fn enable_account(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<AccountView>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    accounts::enable(&st.patrol, &site.site_id, &name).await?;
    Ok(Json(view(&st, &site, &name).await?))
}

/// Clears a ManualDisabled reason without enabling: the patrol may manage the account again.
/// 404 when the account holds no ManualDisabled reason.
#[utoipa::path(
    post,
    path = "/api/accounts/{name}/release",
    tag = "accounts",
    params(("name" = String, Path, description = "account (auth file) name"), SiteQuery),
    responses(
        (status = 200, body = AccountView),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn release_account(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<AccountView>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    accounts::release(&st.patrol, &site.site_id, &name).await?;
    Ok(Json(view(&st, &site, &name).await?))
}

/// Redeems one banked rate-limit reset credit on the account now (docs/reset-credits.md
/// "Redeeming by hand"), under the same guard as the patrol: re-lists the credits, writes the
/// guard, consumes; after a reset, clears CPA's cooldown and probes the account again. Works in
/// every `resetCreditsMode`. Answers what happened (`outcome`: `reset`, `already_redeemed`,
/// `nothing_to_reset`, `no_credit`, `ambiguous` — retried with the same `redeemRequestId` by the
/// next round or call —, `refused`, `list_failed`).
#[utoipa::path(
    post,
    path = "/api/accounts/{name}/reset-credit",
    tag = "accounts",
    params(("name" = String, Path, description = "account (auth file) name"), SiteQuery),
    responses(
        (status = 200, body = crate::core::reset_credits::RedeemReport),
        (status = 400, description = "`invalid`: not limited, no chatgpt_account_id, disabled by a person, observe-only, or already tried in this window", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "`busy`: a round runs", body = ErrorBody),
        (status = 502, body = ErrorBody),
    )
)]
async fn redeem_reset_credit(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<crate::core::reset_credits::RedeemReport>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(
        crate::jobs::inspect::redeem_by_hand(&st.patrol, &site.site_id, &name).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core::account::{DisableReason, ReasonOwner};

    #[tokio::test]
    async fn accounts_are_listed_from_the_store() {
        let t = app().await;
        t.seed_accounts("main", &["a.json", "b.json"]).await;
        let r = t.get("/api/accounts").await;
        assert_eq!(r.status, StatusCode::OK);
        let list = r.json();
        assert_eq!(list.as_array().unwrap().len(), 2);
        assert_eq!(list[0]["name"], "a.json");
        assert_eq!(list[0]["displayAccount"], "a.json@example.com");
        assert_eq!(list[0]["disableReason"], "");
        assert!(list[0]["disabledBy"].is_null());
    }

    #[tokio::test]
    async fn reloading_accounts_from_an_unreachable_cpa_is_a_502() {
        let t = app().await;
        let r = t.post("/api/accounts/refresh", None).await;
        assert_error(&r, StatusCode::BAD_GATEWAY, "cpa_error");
        assert!(
            r.json()["error"]
                .as_str()
                .unwrap()
                .contains("CPA unavailable"),
            "{}",
            r.text
        );
    }

    #[tokio::test]
    async fn manual_actions_on_unknown_accounts_need_cpa_and_cpa_failures_are_502() {
        let t = app().await;
        t.seed_accounts("main", &["a.json"]).await;
        // An unknown name triggers one reload from CPA, which is down here.
        for verb in ["disable", "enable", "release"] {
            let r = t
                .post(&format!("/api/accounts/ghost.json/{verb}"), None)
                .await;
            assert_error(&r, StatusCode::BAD_GATEWAY, "cpa_error");
        }
        assert_error(
            &t.post("/api/accounts/a.json/disable", None).await,
            StatusCode::BAD_GATEWAY,
            "cpa_error",
        );
        assert_error(
            &t.post("/api/accounts/a.json/release", None).await,
            StatusCode::NOT_FOUND,
            "not_found",
        );
    }

    #[tokio::test]
    async fn releasing_a_manually_disabled_account_clears_its_reason() {
        let t = app().await;
        t.seed_accounts("main", &["a.json"]).await;
        let now = t.patrol.now();
        t.patrol
            .store
            .run(move |c| {
                crate::store::accounts::set_reason(
                    c,
                    "main",
                    "a.json",
                    DisableReason::ManualDisabled,
                    ReasonOwner::Manual,
                    now,
                )
            })
            .await
            .unwrap();
        assert_eq!(
            t.get("/api/accounts").await.json()[0]["disableReason"],
            "ManualDisabled"
        );
        let r = t.post("/api/accounts/a.json/release", None).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.json()["name"], "a.json");
        assert_eq!(r.json()["disableReason"], "");
    }
}
