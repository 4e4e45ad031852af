//! Inspection runs (table `inspection_runs`): one row per round with its full result.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::{StoreError, ts};
use crate::core::report::{InspectionRunResult, RunStatus, RunSummary};

/// Inserts or replaces a run.
pub fn save(c: &Connection, r: &InspectionRunResult) -> Result<(), StoreError> {
    let json = serde_json::to_string(r)?;
    save_json(
        c,
        &r.run_id,
        &r.site_id,
        &r.source,
        r.started_at,
        r.finished_at,
        r.status,
        &json,
    )
}

/// Inserts or replaces a run already serialised to `json` (large rounds are not copied).
#[allow(clippy::too_many_arguments)]
pub fn save_json(
    c: &Connection,
    run_id: &str,
    site_id: &str,
    source: &str,
    started_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
    status: RunStatus,
    json: &str,
) -> Result<(), StoreError> {
    let status = status.as_str();
    c.execute(
        "INSERT INTO inspection_runs (run_id, site_id, source, started_at, finished_at, status, result_json) VALUES (?1,?2,?3,?4,?5,?6,?7) \
         ON CONFLICT(run_id) DO UPDATE SET finished_at=excluded.finished_at, status=excluded.status, result_json=excluded.result_json",
        params![run_id, site_id, source, ts(started_at), finished_at.map(ts), status, json],
    )?;
    Ok(())
}

/// The newest full round (`auto` or `manual` source) of a site.
pub fn last(c: &Connection, site_id: &str) -> Result<Option<InspectionRunResult>, StoreError> {
    let json: Option<String> = c
        .query_row(
            "SELECT result_json FROM inspection_runs WHERE site_id=?1 AND source IN ('auto','manual') ORDER BY started_at DESC LIMIT 1",
            [site_id],
            |r| r.get(0),
        )
        .optional()?;
    json.map(|j| serde_json::from_str(&j))
        .transpose()
        .map_err(Into::into)
}

/// Past runs of a site, newest first.
pub fn list(
    c: &Connection,
    site_id: &str,
    limit: u32,
) -> Result<Vec<InspectionRunResult>, StoreError> {
    let mut stmt = c.prepare("SELECT result_json FROM inspection_runs WHERE site_id=?1 ORDER BY started_at DESC LIMIT ?2")?;
    let rows = stmt.query_map(params![site_id, limit], |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for j in rows {
        out.push(serde_json::from_str(&j?)?);
    }
    Ok(out)
}

/// Past runs of a site as [`RunSummary`]s (counts, no decisions), newest first.
pub fn summaries(c: &Connection, site_id: &str, limit: u32) -> Result<Vec<RunSummary>, StoreError> {
    let mut stmt = c.prepare_cached(
        "SELECT result_json FROM inspection_runs WHERE site_id=?1 AND result_json IS NOT NULL ORDER BY started_at DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![site_id, limit], |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for j in rows {
        out.push(serde_json::from_str(&j?)?);
    }
    Ok(out)
}

/// Runs of a site that started at or after `since`, oldest first (the daily digest's 24 h).
pub fn since(
    c: &Connection,
    site_id: &str,
    since: DateTime<Utc>,
) -> Result<Vec<InspectionRunResult>, StoreError> {
    let mut stmt = c.prepare(
        "SELECT result_json FROM inspection_runs WHERE site_id=?1 AND started_at >= ?2 AND result_json IS NOT NULL ORDER BY started_at",
    )?;
    let rows = stmt.query_map(params![site_id, ts(since)], |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for j in rows {
        out.push(serde_json::from_str(&j?)?);
    }
    Ok(out)
}

/// Deletes runs older than `keep_days`, keeping each site's newest `keep_last`; returns how many.
pub fn prune(
    c: &Connection,
    now: DateTime<Utc>,
    keep_days: i64,
    keep_last: u32,
) -> Result<usize, StoreError> {
    let cutoff = ts(now - chrono::Duration::days(keep_days));
    Ok(c.execute(
        "DELETE FROM inspection_runs WHERE started_at < ?1 AND run_id NOT IN ( \
           SELECT run_id FROM (SELECT run_id, ROW_NUMBER() OVER (PARTITION BY site_id ORDER BY started_at DESC) AS rn FROM inspection_runs) WHERE rn <= ?2)",
        params![cutoff, keep_last],
    )?)
}
