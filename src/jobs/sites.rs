//! Site administration: create, update (partial), delete, and the TOML bootstrap. Every change
//! is validated as a whole (all problems reported together) and logged without secrets.

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use super::{JobError, Patrol};
use crate::core::oplog::{Category, NewLogEntry, Source};
use crate::core::settings::{PatrolSettings, SettingsPatch};
use crate::core::site::{DEFAULT_USAGE_URL, DEFAULT_USER_AGENT, Site, normalize_site_id};
use crate::store;

/// Body of `POST /api/settings/sites` and `PUT /api/settings` (api.md): connection fields plus
/// any patrol settings. On update, omitted fields stay unchanged and a blank `managementKey`
/// keeps the stored key.
#[derive(Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteInput {
    pub site_id: Option<String>,
    pub site_name: Option<String>,
    pub site_enabled: Option<bool>,
    pub cpa_base_url: Option<String>,
    /// Write-only; never returned.
    pub management_key: Option<String>,
    pub provider: Option<String>,
    pub usage_url: Option<String>,
    pub user_agent: Option<String>,
    #[serde(flatten)]
    pub settings: SettingsPatch,
    /// Keys that are neither connection fields nor settings (typos): rejected with a 400.
    #[serde(flatten, skip_serializing)]
    #[schema(ignore)]
    pub unknown: std::collections::BTreeMap<String, serde_json::Value>,
}

impl std::fmt::Debug for SiteInput {
    /// Everything but the management key, which prints as `[redacted]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiteInput")
            .field("site_id", &self.site_id)
            .field("site_name", &self.site_name)
            .field("site_enabled", &self.site_enabled)
            .field("cpa_base_url", &self.cpa_base_url)
            .field(
                "management_key",
                &self.management_key.as_ref().map(|_| "[redacted]"),
            )
            .field("provider", &self.provider)
            .field("usage_url", &self.usage_url)
            .field("user_agent", &self.user_agent)
            .field("settings", &self.settings)
            .finish()
    }
}

fn check_url(field: &str, url: &str, problems: &mut Vec<String>) {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
        _ => problems.push(format!(
            "{field} must be an absolute http(s) URL (got {url:?})"
        )),
    }
}

fn apply(site: &mut Site, input: &SiteInput, allow_short: bool) -> Result<(), JobError> {
    let mut problems: Vec<String> = input
        .unknown
        .keys()
        .map(|k| format!("unknown field {k:?}"))
        .collect();
    if let Some(n) = input
        .site_name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        site.site_name = n.to_string();
    }
    if let Some(e) = input.site_enabled {
        site.site_enabled = e;
    }
    if let Some(u) = input
        .cpa_base_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        check_url("cpaBaseUrl", u, &mut problems);
        site.cpa_base_url = u.trim_end_matches('/').to_string();
    }
    if let Some(k) = input
        .management_key
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty())
    {
        site.management_key = Some(SecretString::from(k.to_string()));
    }
    if let Some(pv) = input
        .provider
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        if !pv.eq_ignore_ascii_case("codex") {
            problems.push(format!("provider {pv:?} is not supported (only codex)"));
        }
        site.provider = pv.to_ascii_lowercase();
    }
    if let Some(u) = input
        .usage_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        check_url("usageUrl", u, &mut problems);
        site.usage_url = u.to_string();
    }
    if let Some(ua) = input
        .user_agent
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        site.user_agent = ua.to_string();
    }
    match input.settings.apply(&site.settings, allow_short) {
        Ok(s) => site.settings = s,
        Err(p) => problems.extend(p),
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(JobError::Invalid(problems))
    }
}

/// Creates a site. `siteName` and `cpaBaseUrl` are required; the id is normalised from `siteId`
/// or `siteName` and made unique with `-2`, `-3`, ….
pub async fn create_site(p: &Patrol, input: SiteInput) -> Result<Site, JobError> {
    let mut problems = Vec::new();
    if input
        .site_name
        .as_deref()
        .is_none_or(|s| s.trim().is_empty())
    {
        problems.push("siteName is required".to_string());
    }
    if input
        .cpa_base_url
        .as_deref()
        .is_none_or(|s| s.trim().is_empty())
    {
        problems.push("cpaBaseUrl is required".to_string());
    }
    if !problems.is_empty() {
        return Err(JobError::Invalid(problems));
    }
    let base = normalize_site_id(
        input
            .site_id
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .or(input.site_name.as_deref())
            .unwrap_or("site"),
    );
    let mut site = Site {
        site_id: base.clone(),
        site_name: String::new(),
        site_enabled: true,
        cpa_base_url: String::new(),
        management_key: None,
        management_key_env: None,
        provider: "codex".into(),
        usage_url: DEFAULT_USAGE_URL.into(),
        user_agent: DEFAULT_USER_AGENT.into(),
        settings: PatrolSettings::default(),
        account_policies: Default::default(),
    };
    apply(&mut site, &input, p.options.allow_short_intervals)?;
    let now = p.now();
    let created = p
        .store
        .run(move |c| {
            site.site_id = store::sites::unique_id(c, &base)?;
            store::sites::insert(c, &site, now)?;
            Ok(site)
        })
        .await?;
    p.log(vec![NewLogEntry::info(
        &created.site_id,
        Category::System,
        "siteCreated",
        Source::Manual,
        format!(
            "site {} created ({})",
            created.site_id, created.cpa_base_url
        ),
    )])
    .await;
    super::pool::publish(
        p,
        &created.site_id,
        crate::core::pool::PublishCause::Startup,
    )
    .await;
    Ok(created)
}

/// Applies a partial update to a site.
pub async fn update_site(p: &Patrol, site_id: &str, input: SiteInput) -> Result<Site, JobError> {
    let mut site = p.site(site_id).await?;
    let old = site.clone();
    let before = site.settings.clone();
    apply(&mut site, &input, p.options.allow_short_intervals)?;
    let now = p.now();
    let s = site.clone();
    p.store
        .run(move |c| store::sites::update(c, &s, now))
        .await?;
    // New connection data deserves a fresh try of a failing CPA; a refused key is not lifted
    // here: it is cleared only when the effective key itself changed (`connection`), so a save
    // that keeps the key never spends one of CPA's 5 attempts.
    if connection_changed(&old, &site) {
        p.runtime(site_id).note_cpa_success();
    }
    let changed = changed_fields(&before, &site.settings);
    p.log(vec![NewLogEntry::info(
        site_id,
        Category::System,
        "settingsChanged",
        Source::Manual,
        format!(
            "settings saved; changed: {}",
            if changed.is_empty() {
                "connection fields only".into()
            } else {
                changed.join(", ")
            }
        ),
    )])
    .await;
    // The threshold and the routing switch change how the snapshot judges and orders.
    super::pool::publish(p, site_id, crate::core::pool::PublishCause::SettingsChange).await;
    Ok(site)
}

/// Whether the CPA URL or the effective management key differs between `a` and `b`.
fn connection_changed(a: &Site, b: &Site) -> bool {
    let fp = |s: &Site| super::connection::key_fingerprint(s).ok();
    a.cpa_base_url != b.cpa_base_url || fp(a) != fp(b)
}

fn changed_fields(a: &PatrolSettings, b: &PatrolSettings) -> Vec<String> {
    let (Ok(serde_json::Value::Object(x)), Ok(serde_json::Value::Object(y))) =
        (serde_json::to_value(a), serde_json::to_value(b))
    else {
        return vec![];
    };
    x.iter()
        .filter(|(k, v)| y.get(*k) != Some(v))
        .map(|(k, v)| format!("{k} {v} -> {}", y.get(k).cloned().unwrap_or_default()))
        .collect()
}

/// Switches auto polling on or off (persisted).
pub async fn set_auto_polling(p: &Patrol, site_id: &str, on: bool) -> Result<Site, JobError> {
    let input = SiteInput {
        settings: SettingsPatch {
            auto_polling_enabled: Some(on),
            ..Default::default()
        },
        ..Default::default()
    };
    let site = update_site(p, site_id, input).await?;
    if let Ok(mut next) = p.runtime(site_id).next_scheduled_at.lock() {
        *next = None;
    }
    Ok(site)
}

/// Deletes a site and all its data; `Busy` while a round runs.
pub async fn delete_site(p: &Patrol, site_id: &str) -> Result<(), JobError> {
    p.site(site_id).await?;
    let rt = p.runtime(site_id);
    let _guard = rt.begin(site_id)?;
    let sid = site_id.to_string();
    p.store
        .run(move |c| {
            // The site's operation log goes with it (the log has no foreign key: system
            // entries outlive sites); a new site with the same id starts clean.
            store::log::delete_site(c, &sid)?;
            store::sites::delete(c, &sid)
        })
        .await?;
    drop(_guard);
    p.forget_runtime(site_id);
    p.log(vec![NewLogEntry::info(
        site_id,
        Category::System,
        "siteDeleted",
        Source::Manual,
        format!("site {site_id} and all its data deleted"),
    )])
    .await;
    Ok(())
}

/// Creates `site` if no site with its id exists (config bootstrap); existing sites are left as
/// the database has them, except the key variable, which follows the config.
///
/// When the file and the database disagree, a warning names every difference (the database
/// wins: edit through `PUT /api/settings`, or delete the site to re-create it from the file).
pub async fn bootstrap_site(p: &Patrol, site: Site) -> Result<bool, JobError> {
    let now = p.now();
    let id = site.site_id.clone();
    let (created, differences) = p
        .store
        .run(move |c| match store::sites::get(c, &site.site_id)? {
            None => {
                store::sites::insert(c, &site, now)?;
                Ok((true, vec![]))
            }
            Some(mut existing) => {
                let mut diff = Vec::new();
                let mut note = |field: &str, file: String, db: String| {
                    if file != db {
                        diff.push(format!("{field}: file {file:?}, database {db:?}"));
                    }
                };
                note(
                    "cpaBaseUrl",
                    site.cpa_base_url.clone(),
                    existing.cpa_base_url.clone(),
                );
                note(
                    "siteName",
                    site.site_name.clone(),
                    existing.site_name.clone(),
                );
                note(
                    "siteEnabled",
                    site.site_enabled.to_string(),
                    existing.site_enabled.to_string(),
                );
                note(
                    "usageUrl",
                    site.usage_url.clone(),
                    existing.usage_url.clone(),
                );
                note(
                    "userAgent",
                    site.user_agent.clone(),
                    existing.user_agent.clone(),
                );
                diff.extend(
                    changed_fields(&existing.settings, &site.settings)
                        .into_iter()
                        .map(|d| format!("settings {d} (database -> file)")),
                );
                if existing.management_key_env != site.management_key_env {
                    existing.management_key_env = site.management_key_env.clone();
                    store::sites::update(c, &existing, now)?;
                }
                Ok((false, diff))
            }
        })
        .await?;
    if !differences.is_empty() {
        let msg = format!(
            "the config file and the database disagree about site {id} ({}); the database wins: change it with PUT /api/settings, or delete the site to re-create it from the file",
            differences.join("; ")
        );
        p.log(vec![
            NewLogEntry::info(&id, Category::System, "configDiffers", Source::System, msg)
                .at_level(crate::core::oplog::Level::Warning),
        ])
        .await;
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_input_takes_connection_and_settings_fields_and_rejects_typos() {
        let ok: SiteInput =
            serde_json::from_str(r#"{"siteName":"x","siteId":"a","usedPercentThreshold":90}"#)
                .unwrap();
        assert_eq!(ok.settings.used_percent_threshold, Some(90));
        assert_eq!(ok.site_name.as_deref(), Some("x"));
        assert!(ok.unknown.is_empty(), "{:?}", ok.unknown);
        let typo: SiteInput = serde_json::from_str(r#"{"autoEnableRecoverd":true}"#).unwrap();
        assert_eq!(
            typo.unknown.keys().collect::<Vec<_>>(),
            vec!["autoEnableRecoverd"]
        );
    }

    #[test]
    fn the_management_key_never_prints() {
        let input = SiteInput {
            management_key: Some("mk-SECRET".into()),
            ..Default::default()
        };
        assert!(!format!("{input:?}").contains("mk-SECRET"));
    }
}
