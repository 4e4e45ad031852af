//! quota-patrol's last writes to CPA fields (table `cpa_writes`) and the CPA cooldown episodes
//! `reset-quota` was called for (table `cpa_cooldown_resets`); migration 0004. Rules live in
//! `core::writes`.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use super::{StoreError, parse_ts, ts};
use crate::core::writes::{LastWrite, WriteKind};

/// Records the value just written to `kind` of `name` (replacing the previous one).
pub fn record(
    c: &Connection,
    site_id: &str,
    name: &str,
    kind: WriteKind,
    value: i64,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO cpa_writes (site_id, name, kind, value, written_at) VALUES (?1,?2,?3,?4,?5) \
         ON CONFLICT(site_id, name, kind) DO UPDATE SET value=excluded.value, written_at=excluded.written_at",
        params![site_id, name, kind.as_str(), value, ts(at)],
    )?;
    Ok(())
}

/// Forgets the last write of `kind` of `name` (the value was adopted from CPA).
pub fn forget(
    c: &Connection,
    site_id: &str,
    name: &str,
    kind: WriteKind,
) -> Result<(), StoreError> {
    c.execute(
        "DELETE FROM cpa_writes WHERE site_id=?1 AND name=?2 AND kind=?3",
        params![site_id, name, kind.as_str()],
    )?;
    Ok(())
}

/// Every recorded last write of the site, ordered by name and kind.
pub fn load(c: &Connection, site_id: &str) -> Result<Vec<LastWrite>, StoreError> {
    let mut st = c.prepare(
        "SELECT name, kind, value, written_at FROM cpa_writes WHERE site_id=?1 ORDER BY name, kind",
    )?;
    let rows = st.query_map(params![site_id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, String>(3)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (name, kind, value, at) = row?;
        let Some(kind) = WriteKind::parse(&kind) else {
            continue;
        };
        out.push(LastWrite {
            account_name: name,
            kind,
            value,
            written_at: parse_ts(&at)?,
        });
    }
    Ok(out)
}

/// Drops last writes and cooldown records of accounts not in `names` (gone from CPA).
pub fn prune(c: &Connection, site_id: &str, names: &[&str]) -> Result<(), StoreError> {
    let keep: std::collections::HashSet<&str> = names.iter().copied().collect();
    for table in ["cpa_writes", "cpa_cooldown_resets"] {
        let stored: Vec<String> = {
            let mut st = c.prepare(&format!(
                "SELECT DISTINCT name FROM {table} WHERE site_id=?1"
            ))?;
            st.query_map(params![site_id], |r| r.get(0))?
                .collect::<Result<_, _>>()?
        };
        for name in stored.iter().filter(|n| !keep.contains(n.as_str())) {
            c.execute(
                &format!("DELETE FROM {table} WHERE site_id=?1 AND name=?2"),
                params![site_id, name],
            )?;
        }
    }
    Ok(())
}

/// The cooldown episode `reset-quota` was last called for, per account name.
pub fn cooldown_resets(
    c: &Connection,
    site_id: &str,
) -> Result<std::collections::HashMap<String, String>, StoreError> {
    let mut st = c.prepare("SELECT name, episode FROM cpa_cooldown_resets WHERE site_id=?1")?;
    let rows = st.query_map(params![site_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Records that `reset-quota` was called for `episode` of `name`.
pub fn record_cooldown_reset(
    c: &Connection,
    site_id: &str,
    name: &str,
    episode: &str,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO cpa_cooldown_resets (site_id, name, episode, reset_at) VALUES (?1,?2,?3,?4) \
         ON CONFLICT(site_id, name) DO UPDATE SET episode=excluded.episode, reset_at=excluded.reset_at",
        params![site_id, name, episode, ts(at)],
    )?;
    Ok(())
}

/// Forgets the cooldown record of `name` (its episode is over).
pub fn clear_cooldown_reset(c: &Connection, site_id: &str, name: &str) -> Result<(), StoreError> {
    c.execute(
        "DELETE FROM cpa_cooldown_resets WHERE site_id=?1 AND name=?2",
        params![site_id, name],
    )?;
    Ok(())
}
