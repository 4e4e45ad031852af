//! Per-account quota policy overrides (table `account_policies`, migration 0006; docs/rules/patrol.md §9
//! item 1). Stores and reads [`AccountPolicy`] values only; resolving them against the site
//! settings is `core::policy`'s.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::{StoreError, ts};
use crate::core::policy::AccountPolicy;

/// Every stored override of the site, by account name.
pub fn load(c: &Connection, site_id: &str) -> Result<HashMap<String, AccountPolicy>, StoreError> {
    super::json_by_name(
        c,
        "SELECT name, policy_json FROM account_policies WHERE site_id=?1",
        site_id,
    )
}

/// The stored override of one account; `None` = follows the site.
pub fn get(c: &Connection, site_id: &str, name: &str) -> Result<Option<AccountPolicy>, StoreError> {
    let json: Option<String> = c
        .query_row(
            "SELECT policy_json FROM account_policies WHERE site_id=?1 AND name=?2",
            params![site_id, name],
            |r| r.get(0),
        )
        .optional()?;
    Ok(json.map(|j| serde_json::from_str(&j)).transpose()?)
}

/// Stores (replacing) an account's override; an empty policy removes the row instead.
pub fn put(
    c: &Connection,
    site_id: &str,
    name: &str,
    policy: &AccountPolicy,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    if policy.is_empty() {
        delete(c, site_id, name)?;
        return Ok(());
    }
    c.execute(
        "INSERT INTO account_policies (site_id, name, policy_json, updated_at) VALUES (?1,?2,?3,?4) \
         ON CONFLICT(site_id, name) DO UPDATE SET policy_json=excluded.policy_json, updated_at=excluded.updated_at",
        params![site_id, name, serde_json::to_string(policy)?, ts(at)],
    )?;
    Ok(())
}

/// Removes an account's override; answers whether there was one.
pub fn delete(c: &Connection, site_id: &str, name: &str) -> Result<bool, StoreError> {
    let n = c.execute(
        "DELETE FROM account_policies WHERE site_id=?1 AND name=?2",
        params![site_id, name],
    )?;
    Ok(n > 0)
}
