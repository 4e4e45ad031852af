//! Sites and their settings (docs/rules/api.md §2): list, create, delete sites; read and
//! partially update one site's settings. The management key is write-only: answers carry
//! `hasManagementKey`, never the key.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiJson, ApiPath, ApiQuery};
use super::{ApiError, ErrorBody, Shared, SiteQuery};
use crate::core::site::Site;
use crate::jobs::queries::{self, CpaContact, SettingsResponse};
use crate::jobs::sites::{self, SiteInput};

pub(super) fn routes() -> OpenApiRouter<Shared> {
    OpenApiRouter::new()
        .routes(routes!(list_sites, create_site))
        .routes(routes!(delete_site))
        .routes(routes!(retry_connection))
        .routes(routes!(get_settings, put_settings))
}

/// One site in `GET /api/settings/sites`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteSummary {
    pub site_id: String,
    pub site_name: String,
    pub site_enabled: bool,
    pub cpa_base_url: String,
    pub has_management_key: bool,
    pub provider: String,
    /// The `X-CPA-VERSION` CPA last reported (`v7.2.140`, `7.2.140`, `dev`); `null` before
    /// the first answer (docs/rules/cpa.md §1.2).
    pub cpa_version: Option<String>,
    /// Why this CPA's management API cannot be used, when its last failure said so: an 8.x
    /// that dropped `/v0/management`, or management off / a node managed by a control plane
    /// (docs/rules/cpa.md §11); `null` otherwise.
    pub cpa_unsupported: Option<String>,
}

impl SiteSummary {
    /// The summary of `s` with what is known of its CPA.
    fn with_contact(s: &Site, contact: Option<&CpaContact>) -> Self {
        Self {
            cpa_version: contact.and_then(|c| c.cpa_version.clone()),
            cpa_unsupported: contact.and_then(|c| c.cpa_unsupported.clone()),
            ..Self::from(s)
        }
    }
}

impl From<&Site> for SiteSummary {
    fn from(s: &Site) -> Self {
        Self {
            site_id: s.site_id.clone(),
            site_name: s.site_name.clone(),
            site_enabled: s.site_enabled,
            cpa_base_url: s.cpa_base_url.clone(),
            has_management_key: s.has_management_key(),
            provider: s.provider.clone(),
            cpa_version: None,
            cpa_unsupported: None,
        }
    }
}

/// `GET /api/settings/sites`: `{selectedSiteId, sites}`, sites by id.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SitesResponse {
    /// `?siteId=` when given, else the default site; `null` when there is no site.
    pub selected_site_id: Option<String>,
    pub sites: Vec<SiteSummary>,
}

/// Every site, and the one `?siteId=` selects.
#[utoipa::path(
    get,
    path = "/api/settings/sites",
    tag = "settings",
    params(SiteQuery),
    responses(
        (status = 200, body = SitesResponse),
        (status = 401, body = ErrorBody),
        (status = 404, description = "unknown siteId", body = ErrorBody),
    )
)]
async fn list_sites(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<SitesResponse>, ApiError> {
    let all = queries::sites(&st.patrol).await?;
    let selected_site_id = if all.is_empty() && q.site_id.as_deref().is_none_or(str::is_empty) {
        None
    } else {
        Some(st.site(q.site_id.as_deref()).await?.site_id)
    };
    let contacts = queries::cpa_contacts(&st.patrol).await?;
    let contact = |id: &str| contacts.iter().find(|c| c.site_id == id);
    Ok(Json(SitesResponse {
        selected_site_id,
        sites: all
            .iter()
            .map(|s| SiteSummary::with_contact(s, contact(&s.site_id)))
            .collect(),
    }))
}

/// Creates a site. `siteName`, `cpaBaseUrl` required; the id is normalised from `siteId` or
/// `siteName` (lowercase, non-alphanumerics → `-`) and collisions get `-2`, `-3`, ….
#[utoipa::path(
    post,
    path = "/api/settings/sites",
    tag = "settings",
    request_body = SiteInput,
    responses(
        (status = 201, body = SettingsResponse),
        (status = 400, description = "every problem listed", body = ErrorBody),
        (status = 401, body = ErrorBody),
    )
)]
async fn create_site(
    State(st): State<Shared>,
    ApiJson(input): ApiJson<SiteInput>,
) -> Result<(StatusCode, Json<SettingsResponse>), ApiError> {
    let site = sites::create_site(&st.patrol, input).await?;
    Ok((StatusCode::CREATED, Json(SettingsResponse::from(&site))))
}

/// Removes a site and all its data; 409 while a round runs.
#[utoipa::path(
    delete,
    path = "/api/settings/sites/{siteId}",
    tag = "settings",
    params(("siteId" = String, Path, description = "site id")),
    responses(
        (status = 204, description = "deleted"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "busy", body = ErrorBody),
    )
)]
async fn delete_site(
    State(st): State<Shared>,
    ApiPath(site_id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    sites::delete_site(&st.patrol, &site_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One try of a management key CPA refused (CPA bans an IP after 5 refused keys, so a refused
/// key is otherwise tried automatically only once per 3 h): exactly one listing call. 200 when
/// CPA accepted the key (automatic work resumes); 502 `management_key_refused` (with CPA's
/// status) when it refused again; 409 `busy` while a round runs.
#[utoipa::path(
    post,
    path = "/api/settings/sites/{siteId}/retry-connection",
    tag = "settings",
    params(("siteId" = String, Path, description = "site id")),
    responses(
        (status = 200, body = crate::jobs::connection::RetryConnectionResult),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "busy", body = ErrorBody),
        (status = 502, description = "refused again (`management_key_refused`), or CPA failed", body = ErrorBody),
    )
)]
async fn retry_connection(
    State(st): State<Shared>,
    ApiPath(site_id): ApiPath<String>,
) -> Result<Json<crate::jobs::connection::RetryConnectionResult>, ApiError> {
    Ok(Json(
        crate::jobs::connection::retry_connection(&st.patrol, &site_id).await?,
    ))
}

/// Settings of the selected site (never the key).
#[utoipa::path(
    get,
    path = "/api/settings",
    tag = "settings",
    params(SiteQuery),
    responses(
        (status = 200, body = SettingsResponse),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn get_settings(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
) -> Result<Json<SettingsResponse>, ApiError> {
    let site = st.site(q.site_id.as_deref()).await?;
    Ok(Json(SettingsResponse::from(&site)))
}

/// Partial update of the site in `?siteId=` (else body `siteId`, else the default site):
/// omitted fields stay, a blank `managementKey` keeps the key, out-of-range values ⇒ 400 listing
/// every problem.
#[utoipa::path(
    put,
    path = "/api/settings",
    tag = "settings",
    params(SiteQuery),
    request_body = SiteInput,
    responses(
        (status = 200, body = SettingsResponse),
        (status = 400, description = "every problem listed", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn put_settings(
    State(st): State<Shared>,
    ApiQuery(q): ApiQuery<SiteQuery>,
    ApiJson(input): ApiJson<SiteInput>,
) -> Result<Json<SettingsResponse>, ApiError> {
    let target = q
        .site_id
        .as_deref()
        .filter(|s| !s.is_empty())
        .or(input.site_id.as_deref());
    let site = st.site(target).await?;
    let updated = sites::update_site(&st.patrol, &site.site_id, input).await?;
    Ok(Json(SettingsResponse::from(&updated)))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    #[tokio::test]
    async fn sites_are_listed_with_the_default_selected_and_no_key() {
        let t = app().await;
        let r = t.get("/api/settings/sites").await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(
            r.json(),
            json!({
                "selectedSiteId": "main",
                "sites": [{
                    "siteId": "main", "siteName": "Main", "siteEnabled": true,
                    "cpaBaseUrl": DEAD_CPA, "hasManagementKey": true, "provider": "codex",
                    "cpaVersion": null, "cpaUnsupported": null
                }]
            })
        );
        let empty = spawn(Setup {
            site: false,
            ..Setup::default()
        })
        .await;
        assert_eq!(
            empty.get("/api/settings/sites").await.json(),
            json!({"selectedSiteId": null, "sites": []})
        );
    }

    #[tokio::test]
    async fn created_sites_get_normalised_ids_and_collisions_get_suffixes() {
        let t = app().await;
        let body = json!({"siteName": "Tokyo CPA / East", "cpaBaseUrl": "http://127.0.0.1:9/", "managementKey": KEY});
        let r = t.post("/api/settings/sites", Some(body.clone())).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        let created = r.json();
        assert_eq!(created["siteId"], "tokyo-cpa-east");
        assert_eq!(created["cpaBaseUrl"], DEAD_CPA);
        assert_eq!(created["hasManagementKey"], true);
        assert_eq!(created["pollIntervalMinutes"], 10);
        assert!(created.get("managementKey").is_none());

        let again = t.post("/api/settings/sites", Some(body.clone())).await;
        assert_eq!(again.json()["siteId"], "tokyo-cpa-east-2");
        let third = t.post("/api/settings/sites", Some(body)).await;
        assert_eq!(third.json()["siteId"], "tokyo-cpa-east-3");

        let by_id = t
            .post(
                "/api/settings/sites",
                Some(json!({"siteId": "MAIN", "siteName": "Other", "cpaBaseUrl": DEAD_CPA})),
            )
            .await;
        assert_eq!(by_id.json()["siteId"], "main-2");
        assert_eq!(by_id.json()["hasManagementKey"], false);

        let ids: Vec<Value> = t.get("/api/settings/sites").await.json()["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["siteId"].clone())
            .collect();
        assert_eq!(
            ids,
            vec![
                json!("main"),
                json!("main-2"),
                json!("tokyo-cpa-east"),
                json!("tokyo-cpa-east-2"),
                json!("tokyo-cpa-east-3")
            ]
        );
    }

    #[tokio::test]
    async fn creating_a_site_without_name_and_url_lists_both_problems() {
        let t = app().await;
        let r = t.post("/api/settings/sites", Some(json!({}))).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid");
        assert_eq!(
            r.json()["problems"],
            json!(["siteName is required", "cpaBaseUrl is required"])
        );
    }

    #[tokio::test]
    async fn deleting_a_site_removes_it_and_unknown_ids_are_404() {
        let t = app().await;
        t.post(
            "/api/settings/sites",
            Some(json!({"siteName": "Spare", "cpaBaseUrl": DEAD_CPA})),
        )
        .await;
        let r = t.delete("/api/settings/sites/spare").await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        assert_error(
            &t.get("/api/settings?siteId=spare").await,
            StatusCode::NOT_FOUND,
            "unknown_site",
        );
        assert_error(
            &t.delete("/api/settings/sites/spare").await,
            StatusCode::NOT_FOUND,
            "unknown_site",
        );
    }

    #[tokio::test]
    async fn deleting_a_busy_site_is_a_409() {
        let t = app().await;
        let rt = t.patrol.runtime("main");
        let _round = rt.try_begin().expect("the site is free");
        assert_error(
            &t.delete("/api/settings/sites/main").await,
            StatusCode::CONFLICT,
            "busy",
        );
    }

    #[tokio::test]
    async fn settings_answer_every_field_but_the_key() {
        use std::collections::BTreeSet;
        let keys = |v: serde_json::Value| -> BTreeSet<String> {
            v.as_object().expect("an object").keys().cloned().collect()
        };
        // Every field a site can be given (connection fields and every patrol setting, from the
        // types themselves, so a field added later is expected too), the key swapped for
        // `hasManagementKey`.
        let mut expected =
            keys(serde_json::to_value(crate::jobs::sites::SiteInput::default()).unwrap());
        expected.extend(keys(
            serde_json::to_value(crate::core::settings::PatrolSettings::default()).unwrap(),
        ));
        assert!(expected.remove("managementKey"), "the input has a key");
        expected.insert("hasManagementKey".into());
        assert!(expected.contains("usageQueueEnabled") && expected.contains("userAgent"));

        let t = app().await;
        let r = t.get("/api/settings").await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(keys(r.json()), expected);
        assert_eq!(r.json()["hasManagementKey"], true);
        assert!(!r.text.contains(KEY), "{}", r.text);
    }

    #[tokio::test]
    async fn a_partial_settings_update_keeps_omitted_fields() {
        let t = app().await;
        let before = t.get("/api/settings").await.json();
        let r = t
            .put(
                "/api/settings?siteId=main",
                json!({"pollIntervalMinutes": 30, "autoActionMode": "none", "managementKey": ""}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let after = r.json();
        assert_eq!(after["pollIntervalMinutes"], 30);
        assert_eq!(after["autoActionMode"], "none");
        assert_eq!(after["hasManagementKey"], true, "a blank key keeps the key");
        for (k, v) in before.as_object().unwrap() {
            if k != "pollIntervalMinutes" && k != "autoActionMode" {
                assert_eq!(&after[k], v, "{k} changed");
            }
        }
        assert_eq!(t.get("/api/settings").await.json(), after, "persisted");
    }

    #[tokio::test]
    async fn a_settings_update_can_name_its_site_in_the_body() {
        let t = app().await;
        t.post(
            "/api/settings/sites",
            Some(json!({"siteName": "Second", "cpaBaseUrl": DEAD_CPA})),
        )
        .await;
        let r = t
            .put(
                "/api/settings",
                json!({"siteId": "second", "usedPercentThreshold": 80}),
            )
            .await;
        assert_eq!(r.json()["siteId"], "second");
        assert_eq!(r.json()["usedPercentThreshold"], 80);
        assert_eq!(
            t.get("/api/settings").await.json()["usedPercentThreshold"],
            95,
            "the default site is untouched"
        );
    }

    #[tokio::test]
    async fn a_settings_update_lists_every_problem_and_changes_nothing() {
        let t = app().await;
        let before = t.get("/api/settings").await.json();
        let r = t
            .put(
                "/api/settings",
                json!({"pollIntervalMinutes": 1, "usedPercentThreshold": 0}),
            )
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid");
        let problems = r.json()["problems"].clone();
        assert_eq!(problems.as_array().unwrap().len(), 2, "{problems}");
        let error = r.json()["error"].as_str().unwrap().to_string();
        assert!(error.contains("pollIntervalMinutes"), "{error}");
        assert!(error.contains("usedPercentThreshold"), "{error}");
        assert_eq!(t.get("/api/settings").await.json(), before);
    }

    #[tokio::test]
    async fn an_unknown_auto_action_mode_is_a_400() {
        let t = app().await;
        let r = t
            .put("/api/settings", json!({"autoActionMode": "explode"}))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid");
        assert!(
            r.json()["error"]
                .as_str()
                .unwrap()
                .contains("autoActionMode")
        );
    }

    #[tokio::test]
    async fn malformed_json_is_a_400_with_the_parser_message() {
        let t = app().await;
        let bearer = format!("Bearer {TOKEN}");
        let r = t
            .send(
                Method::PUT,
                "/api/settings",
                Some(&bearer),
                Some(Body::from("{not json")),
                &[("content-type", "application/json")],
            )
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");

        let r = t
            .put("/api/settings", json!({"pollIntervalMinutes": "ten"}))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");
        assert!(
            r.json()["error"].as_str().unwrap().contains("invalid type"),
            "{}",
            r.text
        );

        let r = t
            .send(
                Method::PUT,
                "/api/settings",
                Some(&bearer),
                Some(Body::from("{}")),
                &[],
            )
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "bad_request");
    }
}
