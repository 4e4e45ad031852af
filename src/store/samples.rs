//! The pool history of each site (migration 0009): one [`PoolSample`] per round, kept 8 days,
//! read by the status page's 7-day chart.

use chrono::{DateTime, Duration, Utc};
use rusqlite::{Connection, params};

use super::{StoreError, parse_ts, ts};
use crate::core::pool::PoolSample;

/// How long samples are kept: the chart's 7 days and a day of margin.
pub const KEEP: Duration = Duration::days(8);

/// Appends `s` for `site_id` and deletes the site's samples older than [`KEEP`] before `s.at`.
pub fn insert(c: &Connection, site_id: &str, s: &PoolSample) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO pool_samples (site_id, at, total, usable, active, exhausted, invalid,
                                   remaining_percent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            site_id,
            ts(s.at),
            s.total,
            s.usable,
            s.active,
            s.exhausted,
            s.invalid,
            s.remaining_percent
        ],
    )?;
    c.execute(
        "DELETE FROM pool_samples WHERE site_id = ?1 AND at < ?2",
        params![site_id, ts(s.at - KEEP)],
    )?;
    Ok(())
}

/// The samples of `site_id` taken at or after `since`, oldest first.
pub fn since(
    c: &Connection,
    site_id: &str,
    since: DateTime<Utc>,
) -> Result<Vec<PoolSample>, StoreError> {
    let mut st = c.prepare_cached(
        "SELECT at, total, usable, active, exhausted, invalid, remaining_percent
         FROM pool_samples WHERE site_id = ?1 AND at >= ?2 ORDER BY at",
    )?;
    let rows = st.query_map(params![site_id, ts(since)], |r| {
        Ok((
            r.get::<_, String>(0)?,
            PoolSample {
                at: DateTime::<Utc>::MIN_UTC,
                total: r.get(1)?,
                usable: r.get(2)?,
                active: r.get(3)?,
                exhausted: r.get(4)?,
                invalid: r.get(5)?,
                remaining_percent: r.get(6)?,
            },
        ))
    })?;
    rows.map(|row| {
        let (at, s) = row?;
        Ok(PoolSample {
            at: parse_ts(&at)?,
            ..s
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use chrono::TimeZone;

    fn sample(at: DateTime<Utc>, usable: u32) -> PoolSample {
        PoolSample {
            at,
            total: 10,
            usable,
            active: usable.min(3),
            exhausted: 10 - usable,
            invalid: 0,
            remaining_percent: f64::from(usable) * 50.0,
        }
    }

    #[test]
    fn samples_read_back_in_order_and_older_than_eight_days_are_deleted() {
        let store = Store::open_in_memory().unwrap();
        let t0 = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        store
            .run_blocking(move |c| {
                crate::store::insert_test_site(c, "s1")?;
                insert(c, "s1", &sample(t0, 9))?;
                insert(c, "s1", &sample(t0 + Duration::days(1), 7))?;
                assert_eq!(since(c, "s1", t0)?.len(), 2);
                // Nine days later the first two are out of the kept range.
                insert(
                    c,
                    "s1",
                    &sample(t0 + Duration::days(9) + Duration::hours(1), 4),
                )?;
                let kept = since(c, "s1", t0)?;
                assert_eq!(kept.iter().map(|s| s.usable).collect::<Vec<_>>(), vec![4]);
                assert_eq!(kept[0].remaining_percent, 200.0);
                assert!(since(c, "s1", t0 + Duration::days(10))?.is_empty());
                Ok(())
            })
            .unwrap();
    }
}
