//! Sign-in sessions of the status page (migration 0008). Holds the SHA-256 of each session id
//! and a digest of the admin token it was opened with, never the id or the token.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::{StoreError, parse_ts, ts};

/// Stores a session: `id_hash` (hex SHA-256 of the cookie's id), `token_digest` (digest of the
/// admin token), valid until `expires_at`. Deletes every expired session first.
pub fn create(
    c: &Connection,
    id_hash: &str,
    token_digest: &str,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute("DELETE FROM web_sessions WHERE expires_at <= ?1", [ts(now)])?;
    c.execute(
        "INSERT INTO web_sessions (id_hash, token_digest, created_at, expires_at)
         VALUES (?1, ?2, ?3, ?4)",
        params![id_hash, token_digest, ts(now), ts(expires_at)],
    )?;
    Ok(())
}

/// The expiry of the session `id_hash` when it exists, is not expired at `now` and was opened
/// with the token of digest `token_digest`; `None` otherwise.
pub fn valid_until(
    c: &Connection,
    id_hash: &str,
    token_digest: &str,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let row: Option<(String, String)> = c
        .prepare_cached("SELECT token_digest, expires_at FROM web_sessions WHERE id_hash = ?1")?
        .query_row([id_hash], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((digest, expires_at)) = row else {
        return Ok(None);
    };
    let expires_at = parse_ts(&expires_at)?;
    Ok((digest == token_digest && expires_at > now).then_some(expires_at))
}

/// Deletes the session `id_hash` (sign-out); `true` when it existed.
pub fn delete(c: &Connection, id_hash: &str) -> Result<bool, StoreError> {
    Ok(c.execute("DELETE FROM web_sessions WHERE id_hash = ?1", [id_hash])? > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use chrono::{Duration, TimeZone};

    #[test]
    fn a_session_is_valid_until_it_expires_is_signed_out_or_the_token_changes() {
        let store = Store::open_in_memory().unwrap();
        let now = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let until = now + Duration::hours(2);
        store
            .run_blocking(move |c| {
                create(c, "h1", "tok-a", now, until)?;
                assert_eq!(valid_until(c, "h1", "tok-a", now)?, Some(until));
                assert_eq!(valid_until(c, "h1", "tok-b", now)?, None, "token changed");
                assert_eq!(valid_until(c, "h1", "tok-a", until)?, None, "expired");
                assert_eq!(valid_until(c, "h2", "tok-a", now)?, None, "unknown");
                // A new sign-in after the expiry deletes the expired session.
                create(c, "h2", "tok-a", until, until + Duration::hours(2))?;
                assert!(!delete(c, "h1")?);
                assert!(delete(c, "h2")?);
                assert_eq!(valid_until(c, "h2", "tok-a", until)?, None);
                Ok(())
            })
            .unwrap();
    }
}
