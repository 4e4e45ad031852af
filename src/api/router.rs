//! The router's admin endpoints (docs/rules/api.md §6, docs/rules/router.md §5): status and preview from the
//! running router, client keys (the key shown once on creation), the API-owned pools, accounts
//! and chains (config-owned ones answer 409), and usage per account and day. Every endpoint
//! answers 503 `router_disabled` without `[router]`. Handlers call `jobs::router` only; upstream
//! and client keys never appear in an answer (only `apiKeySet` / `apiKeyEnv`, a key's hint).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiJson, ApiPath, ApiQuery};
use super::{ApiError, ErrorBody, Shared};
use crate::jobs::router::{
    self as jobs, RouterAccount, RouterAccountInput, RouterChain, RouterChainInput, RouterKey,
    RouterKeyCreated, RouterKeyInput, RouterPool, RouterPoolInput, RouterUsageDay,
    RouterUsageMinute,
};

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new()
        .routes(routes!(router_status))
        .routes(routes!(router_preview))
        .routes(routes!(router_list_keys, router_create_key))
        .routes(routes!(router_revoke_key))
        .routes(routes!(router_list_pools, router_create_pool))
        .routes(routes!(router_update_pool, router_delete_pool))
        .routes(routes!(router_list_accounts, router_create_account))
        .routes(routes!(router_update_account, router_delete_account))
        .routes(routes!(router_list_chains, router_create_chain))
        .routes(routes!(router_update_chain, router_delete_chain))
        .routes(routes!(router_usage))
        .routes(routes!(router_usage_minutes))
}

fn control(st: &Shared) -> Result<std::sync::Arc<jobs::RouterAdmin>, ApiError> {
    Ok(jobs::admin(&st.patrol)?)
}

/// Pools, accounts (availability, cooldown, demotion), bindings per lane, request counters.
#[utoipa::path(
    get,
    path = "/api/router/status",
    tag = "router",
    responses(
        (status = 200, description = "router status (camelCase JSON)", content_type = "application/json"),
        (status = 401, body = ErrorBody),
        (status = 503, description = "no [router]", body = ErrorBody),
    )
)]
async fn router_status(State(st): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(control(&st)?.control().status_json()))
}

/// `GET /api/router/preview` query.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct PreviewQuery {
    /// The model a client would ask for (a chain name or a pool model).
    model: String,
    /// The session key a client would send (`x-session-id`), if any.
    session_key: Option<String>,
}

/// The ranked candidates the router would use now, per leg, with each exclusion's reason.
#[utoipa::path(
    get,
    path = "/api/router/preview",
    tag = "router",
    params(PreviewQuery),
    responses(
        (status = 200, description = "per leg: ranking and exclusions", content_type = "application/json"),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown model", body = ErrorBody),
        (status = 503, description = "no [router]", body = ErrorBody),
    )
)]
async fn router_preview(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<PreviewQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    control(&st)?
        .control()
        .preview_json(&q.model, q.session_key.as_deref())
        .map(Json)
        .map_err(ApiError::NotFound)
}

/// Client keys of the router, revoked ones too; never the keys.
#[utoipa::path(
    get,
    path = "/api/router/keys",
    tag = "router",
    responses(
        (status = 200, body = Vec<RouterKey>),
        (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_list_keys(State(st): State<Shared>) -> Result<Json<Vec<RouterKey>>, ApiError> {
    Ok(Json(jobs::list_keys(&st.patrol).await?))
}

/// Creates a client key; the answer carries the key this once (only its hash is stored).
#[utoipa::path(
    post,
    path = "/api/router/keys",
    tag = "router",
    request_body = RouterKeyInput,
    responses(
        (status = 201, body = RouterKeyCreated),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_create_key(
    State(st): State<Shared>,
    ApiJson(body): ApiJson<RouterKeyInput>,
) -> Result<(StatusCode, Json<RouterKeyCreated>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(jobs::create_key(&st.patrol, body).await?),
    ))
}

/// Revokes a client key: the router refuses it from now on (it stays listed).
#[utoipa::path(
    delete,
    path = "/api/router/keys/{id}",
    tag = "router",
    params(("id" = String, Path, description = "key id")),
    responses(
        (status = 204, description = "revoked"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_revoke_key(
    State(st): State<Shared>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    jobs::revoke_key(&st.patrol, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One entry of the running spec's view (`jobs::router::spec_view`), picked by `pick` from the
/// part `part` selects; 404 `router <what> not found` when none matches.
async fn one_of<T>(
    st: &Shared,
    part: impl FnOnce(jobs::RouterSpecView) -> Vec<T>,
    pick: impl Fn(&T) -> bool,
    what: String,
) -> Result<Json<T>, ApiError> {
    part(jobs::spec_view(&st.patrol).await?)
        .into_iter()
        .find(|x| pick(x))
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("router {what} not found")))
}

async fn pool_view(st: &Shared, id: &str) -> Result<Json<RouterPool>, ApiError> {
    one_of(st, |v| v.pools, |p| p.id == id, format!("pool {id:?}")).await
}

async fn account_view(st: &Shared, pool: &str, id: &str) -> Result<Json<RouterAccount>, ApiError> {
    let what = format!("account {id:?} of pool {pool:?}");
    one_of(st, |v| v.accounts, |a| a.pool == pool && a.id == id, what).await
}

async fn chain_view(st: &Shared, name: &str) -> Result<Json<RouterChain>, ApiError> {
    one_of(
        st,
        |v| v.chains,
        |c| c.name == name,
        format!("chain {name:?}"),
    )
    .await
}

/// Every pool: the config file's, then the API's.
#[utoipa::path(
    get,
    path = "/api/router/pools",
    tag = "router",
    responses(
        (status = 200, body = Vec<RouterPool>),
        (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_list_pools(State(st): State<Shared>) -> Result<Json<Vec<RouterPool>>, ApiError> {
    Ok(Json(jobs::spec_view(&st.patrol).await?.pools))
}

/// Creates an API-owned pool; the router reloads.
#[utoipa::path(
    post,
    path = "/api/router/pools",
    tag = "router",
    request_body = RouterPoolInput,
    responses(
        (status = 201, body = RouterPool),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 409, description = "exists, or declared in the config file", body = ErrorBody),
        (status = 422, description = "the router spec would have problems", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_create_pool(
    State(st): State<Shared>,
    ApiJson(body): ApiJson<RouterPoolInput>,
) -> Result<(StatusCode, Json<RouterPool>), ApiError> {
    let id = body.id.clone().unwrap_or_default().trim().to_string();
    jobs::save_pool(&st.patrol, None, Some(body)).await?;
    Ok((StatusCode::CREATED, pool_view(&st, &id).await?))
}

/// Replaces an API-owned pool; the router reloads.
#[utoipa::path(
    put,
    path = "/api/router/pools/{id}",
    tag = "router",
    params(("id" = String, Path, description = "pool id")),
    request_body = RouterPoolInput,
    responses(
        (status = 200, body = RouterPool),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "declared in the config file", body = ErrorBody),
        (status = 422, description = "the router spec would have problems", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_update_pool(
    State(st): State<Shared>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<RouterPoolInput>,
) -> Result<Json<RouterPool>, ApiError> {
    jobs::save_pool(&st.patrol, Some(&id), Some(body)).await?;
    pool_view(&st, &id).await
}

/// Deletes an API-owned pool (422 while accounts or chain legs use it); the router reloads.
#[utoipa::path(
    delete,
    path = "/api/router/pools/{id}",
    tag = "router",
    params(("id" = String, Path, description = "pool id")),
    responses(
        (status = 204, description = "deleted"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "declared in the config file", body = ErrorBody),
        (status = 422, description = "still used", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_delete_pool(
    State(st): State<Shared>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    jobs::save_pool(&st.patrol, Some(&id), None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every upstream account (config then API), never its key.
#[utoipa::path(
    get,
    path = "/api/router/accounts",
    tag = "router",
    responses(
        (status = 200, body = Vec<RouterAccount>),
        (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_list_accounts(
    State(st): State<Shared>,
) -> Result<Json<Vec<RouterAccount>>, ApiError> {
    Ok(Json(jobs::spec_view(&st.patrol).await?.accounts))
}

/// Creates an API-owned upstream account (its key stored, never shown); the router reloads.
#[utoipa::path(
    post,
    path = "/api/router/accounts",
    tag = "router",
    request_body = RouterAccountInput,
    responses(
        (status = 201, body = RouterAccount),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 409, description = "exists, or declared in the config file", body = ErrorBody),
        (status = 422, description = "the router spec would have problems", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_create_account(
    State(st): State<Shared>,
    ApiJson(body): ApiJson<RouterAccountInput>,
) -> Result<(StatusCode, Json<RouterAccount>), ApiError> {
    let trim = |v: &Option<String>| v.clone().unwrap_or_default().trim().to_string();
    let (pool, id) = (trim(&body.pool), trim(&body.id));
    jobs::save_account(&st.patrol, None, Some(body)).await?;
    Ok((StatusCode::CREATED, account_view(&st, &pool, &id).await?))
}

/// Replaces an API-owned upstream account (no `apiKey`/`apiKeyEnv` = key unchanged).
#[utoipa::path(
    put,
    path = "/api/router/accounts/{pool}/{id}",
    tag = "router",
    params(
        ("pool" = String, Path, description = "pool id"),
        ("id" = String, Path, description = "account id"),
    ),
    request_body = RouterAccountInput,
    responses(
        (status = 200, body = RouterAccount),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "declared in the config file", body = ErrorBody),
        (status = 422, description = "the router spec would have problems", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_update_account(
    State(st): State<Shared>,
    ApiPath((pool, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<RouterAccountInput>,
) -> Result<Json<RouterAccount>, ApiError> {
    jobs::save_account(&st.patrol, Some((&pool, &id)), Some(body)).await?;
    account_view(&st, &pool, &id).await
}

/// Deletes an API-owned upstream account; the router reloads.
#[utoipa::path(
    delete,
    path = "/api/router/accounts/{pool}/{id}",
    tag = "router",
    params(
        ("pool" = String, Path, description = "pool id"),
        ("id" = String, Path, description = "account id"),
    ),
    responses(
        (status = 204, description = "deleted"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "declared in the config file", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_delete_account(
    State(st): State<Shared>,
    ApiPath((pool, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    jobs::save_account(&st.patrol, Some((&pool, &id)), None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every chain (config then API).
#[utoipa::path(
    get,
    path = "/api/router/chains",
    tag = "router",
    responses(
        (status = 200, body = Vec<RouterChain>),
        (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_list_chains(State(st): State<Shared>) -> Result<Json<Vec<RouterChain>>, ApiError> {
    Ok(Json(jobs::spec_view(&st.patrol).await?.chains))
}

/// Creates an API-owned chain; the router reloads.
#[utoipa::path(
    post,
    path = "/api/router/chains",
    tag = "router",
    request_body = RouterChainInput,
    responses(
        (status = 201, body = RouterChain),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 409, description = "exists, or declared in the config file", body = ErrorBody),
        (status = 422, description = "the router spec would have problems", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_create_chain(
    State(st): State<Shared>,
    ApiJson(body): ApiJson<RouterChainInput>,
) -> Result<(StatusCode, Json<RouterChain>), ApiError> {
    let name = body.name.clone().unwrap_or_default().trim().to_string();
    jobs::save_chain(&st.patrol, None, Some(body)).await?;
    Ok((StatusCode::CREATED, chain_view(&st, &name).await?))
}

/// Replaces an API-owned chain; the router reloads.
#[utoipa::path(
    put,
    path = "/api/router/chains/{name}",
    tag = "router",
    params(("name" = String, Path, description = "chain name")),
    request_body = RouterChainInput,
    responses(
        (status = 200, body = RouterChain),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "declared in the config file", body = ErrorBody),
        (status = 422, description = "the router spec would have problems", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_update_chain(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<RouterChainInput>,
) -> Result<Json<RouterChain>, ApiError> {
    jobs::save_chain(&st.patrol, Some(&name), Some(body)).await?;
    chain_view(&st, &name).await
}

/// Deletes an API-owned chain; the router reloads.
#[utoipa::path(
    delete,
    path = "/api/router/chains/{name}",
    tag = "router",
    params(("name" = String, Path, description = "chain name")),
    responses(
        (status = 204, description = "deleted"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "declared in the config file", body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_delete_chain(
    State(st): State<Shared>,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    jobs::save_chain(&st.patrol, Some(&name), None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/router/usage` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct UsageQuery {
    /// Days back, today (UTC) included: 1..=366, default 7.
    days: Option<u32>,
}

/// Usage per account and UTC day, newest day first.
#[utoipa::path(
    get,
    path = "/api/router/usage",
    tag = "router",
    params(UsageQuery),
    responses(
        (status = 200, body = Vec<RouterUsageDay>),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_usage(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<UsageQuery>,
) -> Result<Json<Vec<RouterUsageDay>>, ApiError> {
    Ok(Json(jobs::usage(&st.patrol, q.days.unwrap_or(7)).await?))
}

/// `GET /api/router/usage/minutes` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct UsageMinutesQuery {
    /// Minutes back, the current (UTC) minute included: 1..=1440, default 60.
    minutes: Option<u32>,
}

/// Usage per UTC minute and (API, requested model, pool, model, account, status, ok), newest
/// minute first.
#[utoipa::path(
    get,
    path = "/api/router/usage/minutes",
    tag = "router",
    params(UsageMinutesQuery),
    responses(
        (status = 200, body = Vec<RouterUsageMinute>),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
async fn router_usage_minutes(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<UsageMinutesQuery>,
) -> Result<Json<Vec<RouterUsageMinute>>, ApiError> {
    Ok(Json(
        jobs::usage_minutes(&st.patrol, q.minutes.unwrap_or(60)).await?,
    ))
}
