//! The operation log (table `operation_log`): append, query with filters, prune by age
//! (docs/rules/patrol.md §7). A flip's quota reset is its own column (`reset_at`, migration 0010).

use chrono::{DateTime, Duration, Utc};
use rusqlite::{Connection, params_from_iter, types::Value};

use super::{StoreError, parse_ts, ts};
use crate::core::oplog::{Category, Level, LogEntry, LogQuery, NewLogEntry, Source};

/// Appends entries at `at`.
pub fn append(
    c: &mut Connection,
    at: DateTime<Utc>,
    entries: &[NewLogEntry],
) -> Result<(), StoreError> {
    let tx = c.transaction()?;
    {
        let mut stmt = tx.prepare(
            "INSERT INTO operation_log (at, site_id, category, operation_type, source, level, message, account_name, reset_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)",
        )?;
        let at = ts(at);
        for e in entries {
            stmt.execute(rusqlite::params![
                at,
                e.site_id,
                e.category.as_str(),
                e.operation_type,
                e.source.as_str(),
                e.level.as_str(),
                e.message,
                e.account_name,
                e.reset_at.map(ts)
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Entries matching `q`, newest first.
pub fn query(c: &Connection, q: &LogQuery) -> Result<Vec<LogEntry>, StoreError> {
    let mut sql = String::from(
        "SELECT id, at, site_id, category, operation_type, source, level, message, account_name, reset_at FROM operation_log WHERE 1=1",
    );
    let mut args: Vec<Value> = Vec::new();
    if let Some(s) = &q.site_id {
        sql.push_str(" AND site_id = ?");
        args.push(Value::Text(s.clone()));
    }
    if let Some(cat) = q.category {
        sql.push_str(" AND category = ?");
        args.push(Value::Text(cat.as_str().into()));
    }
    if let Some(level) = q.level {
        let allowed: Vec<&str> = [Level::Info, Level::Warning, Level::Error]
            .into_iter()
            .filter(|l| *l >= level)
            .map(Level::as_str)
            .collect();
        sql.push_str(&format!(
            " AND level IN ({})",
            vec!["?"; allowed.len()].join(",")
        ));
        args.extend(allowed.into_iter().map(|l| Value::Text(l.into())));
    }
    if let Some(a) = &q.account {
        sql.push_str(" AND account_name = ?");
        args.push(Value::Text(a.clone()));
    }
    if let Some(since) = q.since {
        sql.push_str(" AND at >= ?");
        args.push(Value::Text(ts(since)));
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    args.push(Value::Integer(i64::from(q.limit.max(1))));
    let mut stmt = c.prepare(&sql)?;
    let rows = stmt.query_map(params_from_iter(args), |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
            r.get::<_, String>(5)?,
            r.get::<_, String>(6)?,
            r.get::<_, String>(7)?,
            r.get::<_, Option<String>>(8)?,
            r.get::<_, Option<String>>(9)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, at, site_id, cat, op, src, lvl, message, account_name, reset_at) = row?;
        out.push(LogEntry {
            id,
            at: parse_ts(&at)?,
            site_id,
            category: Category::parse(&cat).unwrap_or(Category::System),
            operation_type: op,
            source: Source::parse(&src).unwrap_or(Source::System),
            level: Level::parse(&lvl).unwrap_or(Level::Info),
            message,
            account_name,
            reset_at: reset_at.as_deref().map(parse_ts).transpose()?,
        });
    }
    Ok(out)
}

/// Deletes entries older than `keep_days`; returns how many.
pub fn prune(c: &Connection, now: DateTime<Utc>, keep_days: i64) -> Result<usize, StoreError> {
    Ok(c.execute(
        "DELETE FROM operation_log WHERE at < ?1",
        [ts(now - Duration::days(keep_days))],
    )?)
}

/// Deletes every entry of a site (when the site itself is deleted).
pub fn delete_site(c: &Connection, site_id: &str) -> Result<usize, StoreError> {
    Ok(c.execute("DELETE FROM operation_log WHERE site_id = ?1", [site_id])?)
}
