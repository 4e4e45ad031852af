//! SQLite persistence (rusqlite): opening (WAL, foreign keys, busy timeout), migrations from
//! `migrations/` tracked by `user_version`, and one file per aggregate. Store calls run on the
//! blocking pool through [`Store::run`]; one connection, never held across an `.await`, closed
//! once at shutdown by [`Store::close`].

pub mod accounts;
pub mod alerts;
pub mod key_refusals;
pub mod log;
pub mod passive;
pub mod policies;
pub mod priorities;
pub mod reset_credits;
pub mod router;
pub mod runs;
pub mod samples;
pub mod sessions;
pub mod sites;
pub mod stored;
pub mod writes;

use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use rusqlite::Connection;
use rusqlite_migration::{M, Migrations};

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("database migration failed: {0}")]
    Migration(#[from] rusqlite_migration::Error),
    #[error("stored JSON is invalid: {0}")]
    Json(#[from] serde_json::Error),
    #[error("stored time is invalid: {0}")]
    Time(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("database worker failed: {0}")]
    Worker(String),
}

/// The SQL migrations, in order (append-only).
fn migrations() -> Migrations<'static> {
    Migrations::new(vec![
        M::up(include_str!("../../migrations/0001_init.sql")),
        M::up(include_str!("../../migrations/0002_alerts.sql")),
        M::up(include_str!("../../migrations/0003_key_refusals.sql")),
        M::up(include_str!("../../migrations/0004_cpa_writes.sql")),
        M::up(include_str!("../../migrations/0005_router.sql")),
        M::up(include_str!("../../migrations/0006_account_policy.sql")),
        M::up(include_str!("../../migrations/0007_alert_digests.sql")),
        M::up(include_str!("../../migrations/0008_web_sessions.sql")),
        M::up(include_str!("../../migrations/0009_pool_samples.sql")),
        M::up(include_str!("../../migrations/0010_log_reset_at.sql")),
        M::up(include_str!("../../migrations/0011_passive_snapshots.sql")),
        M::up(include_str!("../../migrations/0012_reset_credits.sql")),
        M::up(include_str!(
            "../../migrations/0013_router_usage_minute.sql"
        )),
    ])
}

/// Tests: a bare `sites` row `site_id` (placeholder URLs, empty settings), for store tests whose
/// tables reference a site.
#[cfg(test)]
pub(crate) fn insert_test_site(c: &Connection, site_id: &str) -> rusqlite::Result<usize> {
    c.execute(
        "INSERT INTO sites (site_id, site_name, cpa_base_url, usage_url, user_agent,
                            settings_json, created_at, updated_at)
         VALUES (?1, ?1, 'http://x', 'http://u', 'ua', '{}', 'now', 'now')",
        [site_id],
    )
}

/// Handle to the database; cheap to clone. After [`Store::close`] every call fails with
/// [`StoreError::Worker`] ("the database is closed").
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Option<Connection>>>,
}

/// What [`Store::close`] did, for the shutdown log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseReport {
    /// WAL frames folded back into the database file (`PRAGMA wal_checkpoint` column 3; 0 for
    /// an in-memory database or an empty WAL).
    pub checkpointed_frames: i64,
    /// Whether the checkpoint could not finish because a reader held the WAL (column 1).
    pub busy: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

impl Store {
    /// Opens (creating if needed) the database file, enables WAL and foreign keys, sets a busy
    /// timeout of 5 s and runs pending migrations.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Worker(format!("cannot create {}: {e}", dir.display())))?;
        }
        let conn = Connection::open(path)?;
        Self::prepare(conn, true)
    }

    /// An in-memory database (tests, benchmarks).
    pub fn open_in_memory() -> Result<Self, StoreError> {
        Self::prepare(Connection::open_in_memory()?, false)
    }

    fn prepare(mut conn: Connection, wal: bool) -> Result<Self, StoreError> {
        if wal {
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrations().to_latest(&mut conn)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(Some(conn))),
        })
    }

    /// Closes the database cleanly at shutdown: `PRAGMA optimize`, `PRAGMA
    /// wal_checkpoint(PASSIVE)` then `(TRUNCATE)` (the `-wal` file is folded back into the
    /// database file and emptied), then the connection is closed (SQLite removes the `-wal` and `-shm` files when
    /// its last connection closes). Waits for a store call in progress; later calls fail.
    /// Closing twice is a no-op answering zero frames.
    ///
    /// Errors: SQLite refuses the pragmas or the close (the connection is dropped anyway).
    pub fn close(&self) -> Result<CloseReport, StoreError> {
        let mut guard = self
            .conn
            .lock()
            .map_err(|_| StoreError::Worker("connection lock poisoned".into()))?;
        let Some(conn) = guard.take() else {
            return Ok(CloseReport {
                checkpointed_frames: 0,
                busy: false,
            });
        };
        conn.execute_batch("PRAGMA optimize;")?;
        // PASSIVE copies the frames and counts them (-1 when not in WAL mode); TRUNCATE then
        // empties the -wal file (it answers 0 frames once truncated).
        let checkpoint = |mode: &str| -> Result<(i64, i64), StoreError> {
            Ok(
                conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
                    Ok((r.get(0)?, r.get(2)?))
                })?,
            )
        };
        let (_, frames) = checkpoint("PASSIVE")?;
        let (busy, _) = checkpoint("TRUNCATE")?;
        conn.close().map_err(|(_, e)| StoreError::Sql(e))?;
        Ok(CloseReport {
            checkpointed_frames: frames.max(0),
            busy: busy != 0,
        })
    }

    /// Runs `f` with the connection on the blocking pool.
    pub async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn
                .lock()
                .map_err(|_| StoreError::Worker("connection lock poisoned".into()))?;
            f(guard.as_mut().ok_or_else(closed)?)
        })
        .await
        .map_err(|e| StoreError::Worker(e.to_string()))?
    }

    /// Runs `f` on the current thread (CLI start-up and tests outside a runtime).
    pub fn run_blocking<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut guard = self
            .conn
            .lock()
            .map_err(|_| StoreError::Worker("connection lock poisoned".into()))?;
        f(guard.as_mut().ok_or_else(closed)?)
    }

    /// Whether the database answers (for `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.run(|c| Ok(c.query_row("SELECT 1", [], |_| Ok(()))?))
            .await
    }
}

fn closed() -> StoreError {
    StoreError::Worker("the database is closed (shutting down)".into())
}

/// Rows `(name, json)` of one site read into a map by name, each JSON column parsed as `T`
/// (`sql` selects exactly those two columns and takes the site id as `?1`). Errors: SQLite, or
/// a stored JSON that no longer parses.
pub(crate) fn json_by_name<T: serde::de::DeserializeOwned>(
    c: &Connection,
    sql: &str,
    site_id: &str,
) -> Result<std::collections::HashMap<String, T>, StoreError> {
    let mut stmt = c.prepare(sql)?;
    let rows = stmt.query_map([site_id], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut out = std::collections::HashMap::new();
    for row in rows {
        let (name, json) = row?;
        out.insert(name, serde_json::from_str(&json)?);
    }
    Ok(out)
}

/// Formats an instant for storage (RFC 3339, UTC, microseconds).
pub(crate) fn ts(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Parses a stored instant.
pub(crate) fn parse_ts(s: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|e| StoreError::Time(format!("{s:?}: {e}")))
}

/// Parses an optional stored instant.
pub(crate) fn parse_opt_ts(s: Option<String>) -> Result<Option<DateTime<Utc>>, StoreError> {
    s.as_deref().map(parse_ts).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_valid() {
        migrations().validate().unwrap();
    }

    #[test]
    fn migrating_twice_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qp.db");
        drop(Store::open(&path).unwrap());
        let store = Store::open(&path).unwrap();
        let v: i64 = store
            .run_blocking(|c| Ok(c.query_row("PRAGMA user_version", [], |r| r.get(0))?))
            .unwrap();
        // Every file of migrations/ is registered, and all of them ran.
        let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
            })
            .count();
        assert_eq!(v, i64::try_from(files).unwrap());
        let mode: String = store
            .run_blocking(|c| Ok(c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(mode, "wal");
        // The router's tables (0005) are there after the second open too.
        let tables: Vec<String> = store
            .run_blocking(|c| {
                let mut st = c.prepare(
                    "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'router_%'
                     ORDER BY name",
                )?;
                Ok(st.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?)
            })
            .unwrap();
        assert_eq!(
            tables,
            [
                "router_accounts",
                "router_chains",
                "router_keys",
                "router_pools",
                "router_usage",
                "router_usage_daily",
                "router_usage_minute"
            ]
        );
    }

    #[test]
    fn close_folds_the_wal_back_and_later_calls_fail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qp.db");
        let store = Store::open(&path).unwrap();
        store
            .run_blocking(|c| {
                c.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1), (2);")?;
                Ok(())
            })
            .unwrap();
        let wal = dir.path().join("qp.db-wal");
        assert!(wal.metadata().unwrap().len() > 0, "writes sit in the WAL");
        let report = store.close().unwrap();
        assert!(report.checkpointed_frames > 0, "{report:?}");
        assert!(!report.busy);
        assert!(
            wal.metadata().map(|m| m.len()).unwrap_or(0) == 0,
            "the -wal file is folded back"
        );
        let err = store.run_blocking(|_| Ok(())).unwrap_err();
        assert!(err.to_string().contains("closed"), "{err}");
        assert_eq!(store.close().unwrap().checkpointed_frames, 0);
        let again = Store::open(&path).unwrap();
        let n: i64 = again
            .run_blocking(|c| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(n, 2);
    }
}
