//! Accounts of a site as last listed by CPA, their probe state (last good snapshot + errors),
//! snapshot history, disable reasons with owner, exceptions and handled quota resets.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Duration, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::stored::{StoredAccount, StoredProbeState, StoredSnapshot};
use super::{StoreError, parse_ts, ts};
use crate::core::account::{
    Account, DisableReason, DisableRecord, ProbeState, QuotaSnapshot, ReasonOwner,
};

/// Accounts added and removed by a listing reload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListingChange {
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

/// Replaces the site's account list with `accounts` (as just listed by CPA). Accounts that
/// vanished lose their probe state, reason, priority entry, handled resets, passive evidence and
/// reset-credit list; their snapshot history, exception entry and redemption guards are kept
/// (a guard must outlive a re-listing: a credit is never redeemed twice for one window).
pub fn replace_listing(
    c: &mut Connection,
    site_id: &str,
    accounts: &[Account],
    now: DateTime<Utc>,
) -> Result<ListingChange, StoreError> {
    let tx = c.transaction()?;
    let existing: HashSet<String> = {
        let mut stmt = tx.prepare("SELECT name FROM accounts WHERE site_id=?1")?;
        stmt.query_map([site_id], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    let listed: HashSet<&str> = accounts.iter().map(|a| a.name.as_str()).collect();
    let mut change = ListingChange::default();
    {
        let mut up = tx.prepare(
            "INSERT INTO accounts (site_id, name, account_json, first_seen_at, last_seen_at) VALUES (?1,?2,?3,?4,?4) \
             ON CONFLICT(site_id, name) DO UPDATE SET account_json=excluded.account_json, last_seen_at=excluded.last_seen_at",
        )?;
        let now_s = ts(now);
        for a in accounts {
            if !existing.contains(&a.name) {
                change.added.push(a.name.clone());
            }
            up.execute(params![
                site_id,
                a.name,
                serde_json::to_string(&StoredAccount::from(a))?,
                now_s
            ])?;
        }
    }
    for name in existing.iter().filter(|n| !listed.contains(n.as_str())) {
        for table in [
            "accounts",
            "probe_states",
            "disable_reasons",
            "priorities",
            "handled_resets",
            "passive_snapshots",
            "reset_credit_lists",
        ] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE site_id=?1 AND name=?2"),
                params![site_id, name],
            )?;
        }
        change.removed.push(name.clone());
    }
    tx.commit()?;
    change.removed.sort();
    Ok(change)
}

/// The site's accounts, ordered by lower-cased name (CPA's listing order).
pub fn list(c: &Connection, site_id: &str) -> Result<Vec<Account>, StoreError> {
    let mut stmt = c.prepare("SELECT account_json FROM accounts WHERE site_id=?1")?;
    let mut out = stmt
        .query_map([site_id], |r| r.get::<_, String>(0))?
        .map(|j| Ok(Account::from(serde_json::from_str::<StoredAccount>(&j?)?)))
        .collect::<Result<Vec<_>, StoreError>>()?;
    out.sort_by_key(|a| a.name.to_lowercase());
    Ok(out)
}

/// Whether the site has the account `name` stored (without reading every account).
pub fn exists(c: &Connection, site_id: &str, name: &str) -> Result<bool, StoreError> {
    Ok(c.query_row(
        "SELECT EXISTS(SELECT 1 FROM accounts WHERE site_id=?1 AND name=?2)",
        [site_id, name],
        |r| r.get(0),
    )?)
}

/// How many accounts the site has stored.
pub fn count(c: &Connection, site_id: &str) -> Result<usize, StoreError> {
    Ok(c.query_row(
        "SELECT COUNT(*) FROM accounts WHERE site_id=?1",
        [site_id],
        |r| r.get(0),
    )?)
}

/// Updates one account's stored CPA facts (after an action).
pub fn save_account(c: &Connection, site_id: &str, a: &Account) -> Result<(), StoreError> {
    c.execute(
        "UPDATE accounts SET account_json=?3 WHERE site_id=?1 AND name=?2",
        params![
            site_id,
            a.name,
            serde_json::to_string(&StoredAccount::from(a))?
        ],
    )?;
    Ok(())
}

/// Probe states of every account of the site, by name.
pub fn load_states(
    c: &Connection,
    site_id: &str,
) -> Result<HashMap<String, ProbeState>, StoreError> {
    let stored: HashMap<String, StoredProbeState> = super::json_by_name(
        c,
        "SELECT name, state_json FROM probe_states WHERE site_id=?1",
        site_id,
    )?;
    Ok(stored
        .into_iter()
        .map(|(name, s)| (name, ProbeState::from(s)))
        .collect())
}

/// Stores one account's probe state.
pub fn save_state(
    c: &Connection,
    site_id: &str,
    name: &str,
    state: &ProbeState,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO probe_states (site_id, name, state_json, updated_at) VALUES (?1,?2,?3,?4) \
         ON CONFLICT(site_id, name) DO UPDATE SET state_json=excluded.state_json, updated_at=excluded.updated_at",
        params![
            site_id,
            name,
            serde_json::to_string(&StoredProbeState::from(state))?,
            ts(now)
        ],
    )?;
    Ok(())
}

/// One past probe of an account (`GET /api/quotas/{name}/history`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub at: DateTime<Utc>,
    pub status_code: u16,
    pub success: bool,
    #[schema(value_type = Object)]
    pub snapshot: Option<QuotaSnapshot>,
    pub error: Option<String>,
}

/// One probe result to append to the history (borrowed, so a round need not copy snapshots).
#[derive(Debug, Clone, Copy)]
pub struct HistoryRow<'a> {
    pub at: DateTime<Utc>,
    pub status_code: u16,
    pub success: bool,
    pub snapshot: Option<&'a QuotaSnapshot>,
    pub error: Option<&'a str>,
}

/// Appends a probe result to the history.
pub fn append_history(
    c: &Connection,
    site_id: &str,
    name: &str,
    e: HistoryRow<'_>,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO snapshot_history (site_id, name, at, status_code, success, snapshot_json, error) VALUES (?1,?2,?3,?4,?5,?6,?7)",
        params![site_id, name, ts(e.at), e.status_code, e.success, e.snapshot.map(|s| serde_json::to_string(&StoredSnapshot::from(s))).transpose()?, e.error],
    )?;
    Ok(())
}

/// One window of a stored snapshot, as the forecast reads it (the rest of the JSON is skipped).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowReading {
    pub id: String,
    pub used_percent: Option<f64>,
    pub reset_at: Option<DateTime<Utc>>,
}

#[derive(Deserialize)]
struct WindowsOnly {
    windows: Vec<WindowReading>,
}

/// One successful probe of an account as the forecast reads it.
#[derive(Debug, Clone)]
pub struct ProbeReading {
    pub name: String,
    pub at: DateTime<Utc>,
    pub windows: Vec<WindowReading>,
}

/// The successful probes of a site's accounts at or after `since`, at most `per_account` of
/// each (the newest), any order (`core::forecast` sorts), each handed to `each` as it is read:
/// at 10,000 accounts and 48 probes each that is up to 480,000 readings, which the caller folds
/// into its samples instead of holding them all first
/// (docs/benchmarks.md "round (`benches/round.rs`)"). Rows whose snapshot JSON does not parse
/// are skipped (an old or damaged row must not hide the others).
pub fn window_readings(
    c: &Connection,
    site_id: &str,
    since: DateTime<Utc>,
    per_account: u32,
    mut each: impl FnMut(ProbeReading),
) -> Result<(), StoreError> {
    let mut stmt = c.prepare(
        "SELECT name, at, snapshot_json FROM ( \
           SELECT name, at, snapshot_json, ROW_NUMBER() OVER (PARTITION BY name ORDER BY id DESC) AS rn \
           FROM snapshot_history \
           WHERE site_id=?1 AND success=1 AND snapshot_json IS NOT NULL AND at >= ?2) \
         WHERE rn <= ?3",
    )?;
    let rows = stmt.query_map(params![site_id, ts(since), per_account], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    for row in rows {
        let (name, at, json) = row?;
        if let Ok(w) = serde_json::from_str::<WindowsOnly>(&json) {
            each(ProbeReading {
                name,
                at: parse_ts(&at)?,
                windows: w.windows,
            });
        }
    }
    Ok(())
}

/// An account's history, newest first.
pub fn history(
    c: &Connection,
    site_id: &str,
    name: &str,
    limit: u32,
) -> Result<Vec<HistoryEntry>, StoreError> {
    let mut stmt = c.prepare(
        "SELECT at, status_code, success, snapshot_json, error FROM snapshot_history WHERE site_id=?1 AND name=?2 ORDER BY id DESC LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![site_id, name, limit], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, u16>(1)?,
            r.get::<_, bool>(2)?,
            r.get::<_, Option<String>>(3)?,
            r.get::<_, Option<String>>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (at, status_code, success, snap, error) = row?;
        out.push(HistoryEntry {
            at: parse_ts(&at)?,
            status_code,
            success,
            snapshot: snap
                .map(|s| serde_json::from_str::<StoredSnapshot>(&s).map(QuotaSnapshot::from))
                .transpose()?,
            error,
        });
    }
    Ok(out)
}

/// Drops history older than `keep_days`, but always keeps each account's newest `keep_last`
/// entries (docs/rules/patrol.md §3: at least the last 100 probes or 30 days). Returns rows deleted.
pub fn prune_history(
    c: &Connection,
    now: DateTime<Utc>,
    keep_days: i64,
    keep_last: u32,
) -> Result<usize, StoreError> {
    let cutoff = ts(now - Duration::days(keep_days));
    Ok(c.execute(
        "DELETE FROM snapshot_history WHERE at < ?1 AND id NOT IN ( \
           SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY site_id, name ORDER BY id DESC) AS rn FROM snapshot_history) WHERE rn <= ?2)",
        params![cutoff, keep_last],
    )?)
}

/// Disable reasons of the site's accounts, by name.
pub fn load_reasons(
    c: &Connection,
    site_id: &str,
) -> Result<HashMap<String, DisableRecord>, StoreError> {
    let mut stmt =
        c.prepare("SELECT name, reason, owner, set_at FROM disable_reasons WHERE site_id=?1")?;
    let rows = stmt.query_map([site_id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
        ))
    })?;
    let mut out = HashMap::new();
    for row in rows {
        let (name, reason, owner, at) = row?;
        let (Some(reason), Some(owner)) =
            (DisableReason::parse(&reason), ReasonOwner::parse(&owner))
        else {
            return Err(StoreError::Conflict(format!(
                "unknown disable reason {reason:?}/{owner:?} stored for {name}"
            )));
        };
        out.insert(
            name,
            DisableRecord {
                reason,
                owner,
                set_at: parse_ts(&at)?,
            },
        );
    }
    Ok(out)
}

/// Stores a disable reason (replacing any previous one).
pub fn set_reason(
    c: &Connection,
    site_id: &str,
    name: &str,
    reason: DisableReason,
    owner: ReasonOwner,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO disable_reasons (site_id, name, reason, owner, set_at) VALUES (?1,?2,?3,?4,?5) \
         ON CONFLICT(site_id, name) DO UPDATE SET reason=excluded.reason, owner=excluded.owner, set_at=excluded.set_at",
        params![site_id, name, reason.as_str(), owner.as_str(), ts(at)],
    )?;
    Ok(())
}

/// Removes an account's disable reason.
pub fn clear_reason(c: &Connection, site_id: &str, name: &str) -> Result<(), StoreError> {
    c.execute(
        "DELETE FROM disable_reasons WHERE site_id=?1 AND name=?2",
        params![site_id, name],
    )?;
    Ok(())
}

/// The site's exception accounts, sorted.
pub fn exceptions(c: &Connection, site_id: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = c.prepare("SELECT name FROM exceptions WHERE site_id=?1 ORDER BY name")?;
    Ok(stmt
        .query_map([site_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?)
}

/// Replaces the exception list.
pub fn replace_exceptions(
    c: &mut Connection,
    site_id: &str,
    names: &[String],
) -> Result<(), StoreError> {
    let tx = c.transaction()?;
    tx.execute("DELETE FROM exceptions WHERE site_id=?1", [site_id])?;
    for n in names {
        tx.execute(
            "INSERT OR IGNORE INTO exceptions (site_id, name) VALUES (?1,?2)",
            params![site_id, n],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// Whether the reset at `reset_at` of this account was already handled.
pub fn is_reset_handled(
    c: &Connection,
    site_id: &str,
    name: &str,
    reset_at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    Ok(c.query_row(
        "SELECT 1 FROM handled_resets WHERE site_id=?1 AND name=?2 AND reset_at=?3",
        params![site_id, name, ts(reset_at)],
        |_| Ok(()),
    )
    .optional()?
    .is_some())
}

/// Marks a reset as handled (idempotent).
pub fn mark_reset_handled(
    c: &Connection,
    site_id: &str,
    name: &str,
    reset_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT OR IGNORE INTO handled_resets (site_id, name, reset_at, handled_at) VALUES (?1,?2,?3,?4)",
        params![site_id, name, ts(reset_at), ts(now)],
    )?;
    Ok(())
}

/// All handled resets of a site as (name, reset_at).
pub fn handled_resets(
    c: &Connection,
    site_id: &str,
) -> Result<HashSet<(String, DateTime<Utc>)>, StoreError> {
    let mut stmt = c.prepare("SELECT name, reset_at FROM handled_resets WHERE site_id=?1")?;
    let rows = stmt.query_map([site_id], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut out = HashSet::new();
    for row in rows {
        let (n, at) = row?;
        out.insert((n, parse_ts(&at)?));
    }
    Ok(out)
}
