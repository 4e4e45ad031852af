//! Sites and their settings (table `sites`), plus per-site runtime facts that must survive a
//! restart (last run times, last successful CPA contact, CPA version).

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use secrecy::{ExposeSecret, SecretString};

use super::{StoreError, parse_opt_ts, ts};
use crate::core::settings::PatrolSettings;
use crate::core::site::Site;

const COLUMNS: &str = "site_id, site_name, site_enabled, cpa_base_url, management_key, management_key_env, provider, usage_url, user_agent, settings_json";

fn from_row(r: &Row<'_>) -> rusqlite::Result<(Site, String)> {
    let settings_json: String = r.get(9)?;
    let key: Option<String> = r.get(4)?;
    Ok((
        Site {
            site_id: r.get(0)?,
            site_name: r.get(1)?,
            site_enabled: r.get(2)?,
            cpa_base_url: r.get(3)?,
            management_key: key.map(SecretString::from),
            management_key_env: r.get(5)?,
            provider: r.get(6)?,
            usage_url: r.get(7)?,
            user_agent: r.get(8)?,
            settings: PatrolSettings::default(),
            account_policies: Default::default(),
        },
        settings_json,
    ))
}

fn finish((mut site, json): (Site, String)) -> Result<Site, StoreError> {
    let settings: PatrolSettings = serde_json::from_str(&json)?;
    site.settings = settings.clamped();
    Ok(site)
}

/// The 11 bound values of an insert or update: the columns of [`COLUMNS`] plus the time.
fn row(site: &Site, now: DateTime<Utc>) -> Result<[rusqlite::types::Value; 11], StoreError> {
    use rusqlite::types::Value;
    let text = |s: &str| Value::Text(s.to_string());
    Ok([
        text(&site.site_id),
        text(&site.site_name),
        Value::Integer(i64::from(site.site_enabled)),
        text(&site.cpa_base_url),
        site.management_key
            .as_ref()
            .map_or(Value::Null, |k| text(k.expose_secret())),
        site.management_key_env.as_deref().map_or(Value::Null, text),
        text(&site.provider),
        text(&site.usage_url),
        text(&site.user_agent),
        Value::Text(serde_json::to_string(&site.settings)?),
        Value::Text(ts(now)),
    ])
}

/// Every site, ordered by id.
pub fn list(c: &Connection) -> Result<Vec<Site>, StoreError> {
    let mut stmt = c.prepare(&format!("SELECT {COLUMNS} FROM sites ORDER BY site_id"))?;
    let rows = stmt
        .query_map([], from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|r| with_policies(c, finish(r)?))
        .collect()
}

/// Adds the site's per-account policy overrides (migration 0006).
fn with_policies(c: &Connection, mut site: Site) -> Result<Site, StoreError> {
    site.account_policies = super::policies::load(c, &site.site_id)?;
    Ok(site)
}

/// One site by id.
pub fn get(c: &Connection, site_id: &str) -> Result<Option<Site>, StoreError> {
    let row = c
        .query_row(
            &format!("SELECT {COLUMNS} FROM sites WHERE site_id = ?1"),
            [site_id],
            from_row,
        )
        .optional()?;
    row.map(|r| with_policies(c, finish(r)?)).transpose()
}

/// `base`, or `base-2`, `base-3`, … whichever is free.
pub fn unique_id(c: &Connection, base: &str) -> Result<String, StoreError> {
    let mut candidate = base.to_string();
    let mut n = 2;
    while get(c, &candidate)?.is_some() {
        candidate = format!("{base}-{n}");
        n += 1;
    }
    Ok(candidate)
}

/// Inserts a new site; `Conflict` if the id exists.
pub fn insert(c: &Connection, site: &Site, now: DateTime<Utc>) -> Result<(), StoreError> {
    if get(c, &site.site_id)?.is_some() {
        return Err(StoreError::Conflict(format!(
            "site {} already exists",
            site.site_id
        )));
    }
    c.execute(
        &format!("INSERT INTO sites ({COLUMNS}, created_at, updated_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?11)"),
        params_from_iter(row(site, now)?),
    )?;
    Ok(())
}

/// Replaces a site's fields; `NotFound` if absent.
pub fn update(c: &Connection, site: &Site, now: DateTime<Utc>) -> Result<(), StoreError> {
    let n = c.execute(
        "UPDATE sites SET site_name=?2, site_enabled=?3, cpa_base_url=?4, management_key=?5, management_key_env=?6, \
         provider=?7, usage_url=?8, user_agent=?9, settings_json=?10, updated_at=?11 WHERE site_id=?1",
        params_from_iter(row(site, now)?),
    )?;
    if n == 0 {
        return Err(StoreError::NotFound(format!("site {}", site.site_id)));
    }
    Ok(())
}

/// Deletes a site and, through foreign keys, all its data.
pub fn delete(c: &Connection, site_id: &str) -> Result<bool, StoreError> {
    Ok(c.execute("DELETE FROM sites WHERE site_id = ?1", [site_id])? > 0)
}

/// Runtime facts of a site kept across restarts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SiteRuntime {
    pub last_run_started_at: Option<DateTime<Utc>>,
    pub last_run_finished_at: Option<DateTime<Utc>>,
    pub last_cpa_contact_at: Option<DateTime<Utc>>,
    pub cpa_version: Option<String>,
}

/// Reads the runtime facts of a site.
pub fn runtime(c: &Connection, site_id: &str) -> Result<SiteRuntime, StoreError> {
    let row = c
        .query_row(
            "SELECT last_run_started_at, last_run_finished_at, last_cpa_contact_at, cpa_version FROM sites WHERE site_id=?1",
            [site_id],
            |r| Ok((r.get::<_, Option<String>>(0)?, r.get::<_, Option<String>>(1)?, r.get::<_, Option<String>>(2)?, r.get(3)?)),
        )
        .optional()?;
    let Some((a, b, d, v)) = row else {
        return Ok(SiteRuntime::default());
    };
    Ok(SiteRuntime {
        last_run_started_at: parse_opt_ts(a)?,
        last_run_finished_at: parse_opt_ts(b)?,
        last_cpa_contact_at: parse_opt_ts(d)?,
        cpa_version: v,
    })
}

/// Records the start and/or end of a round.
pub fn set_run_times(
    c: &Connection,
    site_id: &str,
    started: Option<DateTime<Utc>>,
    finished: Option<DateTime<Utc>>,
) -> Result<(), StoreError> {
    if let Some(s) = started {
        c.execute(
            "UPDATE sites SET last_run_started_at=?2 WHERE site_id=?1",
            params![site_id, ts(s)],
        )?;
    }
    if let Some(f) = finished {
        c.execute(
            "UPDATE sites SET last_run_finished_at=?2 WHERE site_id=?1",
            params![site_id, ts(f)],
        )?;
    }
    Ok(())
}

/// Records the version a CPA reported on an answer that was not a successful contact (an 8.x
/// answering 404 on `/v0`, docs/rules/cpa.md §11); the contact time stays.
pub fn set_cpa_version(c: &Connection, site_id: &str, version: &str) -> Result<(), StoreError> {
    c.execute(
        "UPDATE sites SET cpa_version=?2 WHERE site_id=?1",
        params![site_id, version],
    )?;
    Ok(())
}

/// Records a successful CPA contact and the version it reported.
pub fn set_cpa_contact(
    c: &Connection,
    site_id: &str,
    at: DateTime<Utc>,
    version: Option<&str>,
) -> Result<(), StoreError> {
    c.execute(
        "UPDATE sites SET last_cpa_contact_at=?2, cpa_version=COALESCE(?3, cpa_version) WHERE site_id=?1",
        params![site_id, ts(at), version],
    )?;
    Ok(())
}
