//! Passive quota evidence per account (table `passive_snapshots`, docs/rules/patrol.md §4.7):
//! the newest usable reading of CPA's listed `quota` signals, stored in the snapshot form of a
//! probe (`StoredSnapshot`) with `refreshedAt` = CPA's `observed_at`. Never mixed into the probe
//! state or the probe history: the API, the table, the status page and the forecast read it
//! beside them as evidence of the second kind.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use super::stored::StoredSnapshot;
use super::{StoreError, ts};
use crate::core::account::QuotaSnapshot;

/// Stores each `(account, snapshot)` read from a listing, keeping the stored one when it was
/// observed at the same time or later (a listing never takes evidence back in time). One
/// transaction for all rows: a listing of 10,000 accounts is one commit, not 10,000.
pub fn save(
    c: &mut Connection,
    site_id: &str,
    rows: &[(String, QuotaSnapshot)],
    read_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let tx = c.transaction()?;
    let mut up = tx.prepare_cached(
        "INSERT INTO passive_snapshots (site_id, name, observed_at, snapshot_json, read_at) \
         VALUES (?1,?2,?3,?4,?5) \
         ON CONFLICT(site_id, name) DO UPDATE SET observed_at=excluded.observed_at, \
           snapshot_json=excluded.snapshot_json, read_at=excluded.read_at \
         WHERE excluded.observed_at > passive_snapshots.observed_at",
    )?;
    let read_s = ts(read_at);
    for (name, snap) in rows {
        up.execute(params![
            site_id,
            name,
            ts(snap.refreshed_at),
            serde_json::to_string(&StoredSnapshot::from(snap))?,
            read_s
        ])?;
    }
    drop(up);
    tx.commit()?;
    Ok(())
}

/// The site's stored passive snapshots, by account name.
pub fn load(c: &Connection, site_id: &str) -> Result<HashMap<String, QuotaSnapshot>, StoreError> {
    let stored: HashMap<String, StoredSnapshot> = super::json_by_name(
        c,
        "SELECT name, snapshot_json FROM passive_snapshots WHERE site_id=?1",
        site_id,
    )?;
    Ok(stored
        .into_iter()
        .map(|(name, s)| (name, QuotaSnapshot::from(s)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use chrono::{Duration, TimeZone};

    fn snap(at: DateTime<Utc>, used: f64) -> QuotaSnapshot {
        let body = serde_json::json!({"plan_type": "plus", "rate_limit": {"primary_window": {
            "used_percent": used, "limit_window_seconds": 604800, "reset_after_seconds": 3600}}});
        let report =
            crate::core::quota::report_from_object(body.as_object().unwrap(), at).expect("usage");
        QuotaSnapshot::from_report(&report, at)
    }

    #[test]
    fn newer_evidence_replaces_older_and_older_never_replaces_newer() {
        let store = Store::open_in_memory().unwrap();
        let t0 = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let got = store
            .run_blocking(move |c| {
                crate::store::insert_test_site(c, "s")?;
                save(c, "s", &[("a".into(), snap(t0, 10.0))], t0)?;
                let later = t0 + Duration::minutes(5);
                save(c, "s", &[("a".into(), snap(later, 20.0))], later)?;
                let older = t0 + Duration::minutes(1);
                save(c, "s", &[("a".into(), snap(older, 90.0))], later)?;
                load(c, "s")
            })
            .unwrap();
        let a = &got["a"];
        assert_eq!(a.refreshed_at, t0 + Duration::minutes(5));
        assert_eq!(a.weekly_used(), Some(20.0));
    }
}
