//! Refused management keys, one row per site (migration 0003): what `core::key_refusal`
//! decides on. Holds a fingerprint of the key, never the key.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{StoreError, parse_ts, ts};
use crate::core::key_refusal::{self, KeyGate, KeyRefusal};

/// The stored refusal of `site_id`'s key, if any.
pub fn get(c: &Connection, site_id: &str) -> Result<Option<KeyRefusal>, StoreError> {
    let row = c
        .query_row(
            "SELECT key_fingerprint, first_refused_at, refused_at, tried_at, attempts,
                    window_attempts, status, message, retry_requested
             FROM key_refusals WHERE site_id = ?1",
            [site_id],
            |r| {
                let times = [
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ];
                let refusal = KeyRefusal {
                    fingerprint: r.get(0)?,
                    first_refused_at: DateTime::<Utc>::MIN_UTC,
                    refused_at: DateTime::<Utc>::MIN_UTC,
                    tried_at: DateTime::<Utc>::MIN_UTC,
                    attempts: r.get(4)?,
                    window_attempts: r.get(5)?,
                    status: r.get(6)?,
                    message: r.get(7)?,
                    retry_requested: r.get(8)?,
                };
                Ok((times, refusal))
            },
        )
        .optional()?;
    row.map(|([first, last, tried], r)| {
        Ok(KeyRefusal {
            first_refused_at: parse_ts(&first)?,
            refused_at: parse_ts(&last)?,
            tried_at: parse_ts(&tried)?,
            ..r
        })
    })
    .transpose()
}

/// Stores (replaces) the refusal of `site_id`'s key.
pub fn save(c: &Connection, site_id: &str, r: &KeyRefusal) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO key_refusals (site_id, key_fingerprint, first_refused_at, refused_at,
                                   tried_at, attempts, window_attempts, status, message,
                                   retry_requested)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT(site_id) DO UPDATE SET
            key_fingerprint = excluded.key_fingerprint,
            first_refused_at = excluded.first_refused_at,
            refused_at = excluded.refused_at,
            tried_at = excluded.tried_at,
            attempts = excluded.attempts,
            window_attempts = excluded.window_attempts,
            status = excluded.status,
            message = excluded.message,
            retry_requested = excluded.retry_requested",
        params![
            site_id,
            r.fingerprint,
            ts(r.first_refused_at),
            ts(r.refused_at),
            ts(r.tried_at),
            r.attempts,
            r.window_attempts,
            r.status,
            r.message,
            r.retry_requested
        ],
    )?;
    Ok(())
}

/// Decides whether the key with fingerprint `fp` may be used at `now`
/// (`core::key_refusal::gate`) and acts on it, in one IMMEDIATE transaction so that two
/// processes on the same file (`serve` and a cron `inspect`) never both spend one try: a new
/// key clears the stored refusal; a due try is claimed (`tried_at = now`, the operator's
/// request consumed) before any call is made. Returns the gate and the refusal as it was.
pub fn gate_and_claim(
    c: &mut Connection,
    site_id: &str,
    fp: &str,
    now: DateTime<Utc>,
) -> Result<(KeyGate, Option<KeyRefusal>), StoreError> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let stored = get(&tx, site_id)?;
    let gate = key_refusal::gate(stored.as_ref(), fp, now);
    match (&gate, &stored) {
        (KeyGate::NewKey, _) => {
            clear(&tx, site_id)?;
        }
        (KeyGate::TryOnce { .. }, Some(r)) => {
            let claimed = KeyRefusal {
                tried_at: now,
                retry_requested: false,
                ..r.clone()
            };
            save(&tx, site_id, &claimed)?;
        }
        _ => {}
    }
    tx.commit()?;
    Ok((gate, stored))
}

/// Forgets the refusal (the key worked, or a new key replaced it). Returns whether one existed.
pub fn clear(c: &Connection, site_id: &str) -> Result<bool, StoreError> {
    Ok(c.execute("DELETE FROM key_refusals WHERE site_id = ?1", [site_id])? > 0)
}

/// Marks the refusal for one operator-requested try; `false` when there is none.
pub fn request_retry(c: &Connection, site_id: &str) -> Result<bool, StoreError> {
    Ok(c.execute(
        "UPDATE key_refusals SET retry_requested = 1 WHERE site_id = ?1",
        [site_id],
    )? > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::key_refusal::fingerprint;
    use crate::store::Store;
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_refusal_round_trips_and_is_cleared_with_its_site() {
        let store = Store::open_in_memory().unwrap();
        let now = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        store
            .run_blocking(|c| {
                crate::store::insert_test_site(c, "s")?;
                let r = KeyRefusal::first(&fingerprint("k"), 401, "invalid management key", now);
                save(c, "s", &r)?;
                assert_eq!(get(c, "s")?, Some(r.clone()));
                assert!(request_retry(c, "s")?);
                assert!(get(c, "s")?.unwrap().retry_requested);
                let again = r.again(403, "IP banned", now);
                assert_eq!(again.window_attempts, 2);
                save(c, "s", &again)?;
                assert_eq!(get(c, "s")?.unwrap().attempts, 2);
                c.execute("DELETE FROM sites WHERE site_id = 's'", [])?;
                assert_eq!(get(c, "s")?, None);
                assert!(!clear(c, "s")?);
                assert!(!request_retry(c, "s")?);
                Ok(())
            })
            .unwrap();
    }
}
