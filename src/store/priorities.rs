//! The per-site priority list (table `priorities`), docs/rules/patrol.md §6.

use rusqlite::{Connection, params};

use super::StoreError;
use crate::core::priority::PriorityEntry;

/// The site's list, by priority.
pub fn load(c: &Connection, site_id: &str) -> Result<Vec<PriorityEntry>, StoreError> {
    let mut stmt = c.prepare("SELECT name, position, pending_first_inspection FROM priorities WHERE site_id=?1 ORDER BY position, name")?;
    let rows = stmt.query_map([site_id], |r| {
        Ok(PriorityEntry {
            name: r.get(0)?,
            priority: r.get(1)?,
            pending_first_inspection: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Replaces the site's list (one transaction).
pub fn replace(
    c: &mut Connection,
    site_id: &str,
    list: &[PriorityEntry],
) -> Result<(), StoreError> {
    let tx = c.transaction()?;
    tx.execute("DELETE FROM priorities WHERE site_id=?1", [site_id])?;
    {
        let mut stmt = tx.prepare(
            "INSERT INTO priorities (site_id, name, position, pending_first_inspection) VALUES (?1,?2,?3,?4)",
        )?;
        for e in list {
            stmt.execute(params![
                site_id,
                e.name,
                e.priority,
                e.pending_first_inspection
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}
