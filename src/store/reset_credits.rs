//! Banked reset credits (migration 0012, docs/reset-credits.md): the last credit list read per
//! account (`reset_credit_lists`) and the redemption guards (`reset_credit_guards`), one per
//! ChatGPT account and limited window, written before the consume call (docs/rules/cpa.md §10).

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::{StoreError, parse_opt_ts, parse_ts, ts};
use crate::core::reset_credits::RedeemGuard;

/// The last list read of one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedCredits {
    pub name: String,
    pub listed_at: DateTime<Utc>,
    /// `available_count` of the list (authoritative).
    pub available_count: u32,
    /// The soonest expiry among the available, unexpired credits listed; `None` when the list
    /// named none.
    pub soonest_expires_at: Option<DateTime<Utc>>,
}

/// Records the list read of `l.name` in `site_id`, replacing the previous one.
pub fn save_list(c: &Connection, site_id: &str, l: &ListedCredits) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO reset_credit_lists (site_id, name, listed_at, available_count,
                                         soonest_expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (site_id, name) DO UPDATE SET listed_at = excluded.listed_at,
             available_count = excluded.available_count,
             soonest_expires_at = excluded.soonest_expires_at",
        params![
            site_id,
            l.name,
            ts(l.listed_at),
            l.available_count,
            l.soonest_expires_at.map(ts)
        ],
    )?;
    Ok(())
}

/// Every list read of `site_id`, by account name.
pub fn lists(c: &Connection, site_id: &str) -> Result<Vec<ListedCredits>, StoreError> {
    let mut st = c.prepare_cached(
        "SELECT name, listed_at, available_count, soonest_expires_at
         FROM reset_credit_lists WHERE site_id = ?1 ORDER BY name",
    )?;
    let rows = st.query_map(params![site_id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, u32>(2)?,
            r.get::<_, Option<String>>(3)?,
        ))
    })?;
    rows.map(|row| {
        let (name, listed_at, available_count, soonest) = row?;
        Ok(ListedCredits {
            name,
            listed_at: parse_ts(&listed_at)?,
            available_count,
            soonest_expires_at: parse_opt_ts(soonest)?,
        })
    })
    .collect()
}

/// A guard row as stored: the core guard and where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardRow {
    pub guard: RedeemGuard,
    pub site_id: String,
    /// The account's name in that site when the guard was written.
    pub name: String,
    /// The credit named in the consume call, when the list named one.
    pub credit_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Consume calls sent under this guard so far.
    pub tries: u32,
    /// Why it settled (or why the last try was ambiguous).
    pub detail: Option<String>,
    pub settled_at: Option<DateTime<Utc>>,
}

/// Writes a new guard before the first consume call. Fails with [`StoreError::Conflict`] when
/// the account already has a guard for that window (a second attempt is never started).
pub fn insert_guard(c: &Connection, g: &GuardRow) -> Result<(), StoreError> {
    let n = c.execute(
        "INSERT OR IGNORE INTO reset_credit_guards (chatgpt_account_id, window_reset_at, site_id,
             name, redeem_request_id, credit_id, created_at, tries, outcome, detail, settled_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            g.guard.chatgpt_account_id,
            ts(g.guard.window_reset_at),
            g.site_id,
            g.name,
            g.guard.redeem_request_id,
            g.credit_id,
            ts(g.created_at),
            g.tries,
            g.guard.settled,
            g.detail,
            g.settled_at.map(ts)
        ],
    )?;
    if n == 0 {
        return Err(StoreError::Conflict(
            "a reset-credit guard already exists for this account and window".into(),
        ));
    }
    Ok(())
}

/// Counts one more consume call under the guard (before it is sent).
pub fn count_try(
    c: &Connection,
    chatgpt_account_id: &str,
    window_reset_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "UPDATE reset_credit_guards SET tries = tries + 1
         WHERE chatgpt_account_id = ?1 AND window_reset_at = ?2",
        params![chatgpt_account_id, ts(window_reset_at)],
    )?;
    Ok(())
}

/// Settles the guard with `outcome` (`reset`, `already_redeemed`, `nothing_to_reset`,
/// `no_credit`, `refused`); a settled guard is never changed again.
pub fn settle_guard(
    c: &Connection,
    chatgpt_account_id: &str,
    window_reset_at: DateTime<Utc>,
    outcome: &str,
    detail: Option<&str>,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "UPDATE reset_credit_guards SET outcome = ?3, detail = ?4, settled_at = ?5
         WHERE chatgpt_account_id = ?1 AND window_reset_at = ?2 AND outcome IS NULL",
        params![
            chatgpt_account_id,
            ts(window_reset_at),
            outcome,
            detail,
            ts(at)
        ],
    )?;
    Ok(())
}

/// Notes why the last try of an unsettled guard was ambiguous (the guard stays open).
pub fn note_ambiguous(
    c: &Connection,
    chatgpt_account_id: &str,
    window_reset_at: DateTime<Utc>,
    detail: &str,
) -> Result<(), StoreError> {
    c.execute(
        "UPDATE reset_credit_guards SET detail = ?3
         WHERE chatgpt_account_id = ?1 AND window_reset_at = ?2 AND outcome IS NULL",
        params![chatgpt_account_id, ts(window_reset_at), detail],
    )?;
    Ok(())
}

/// The guard of one account and window, if any.
pub fn guard(
    c: &Connection,
    chatgpt_account_id: &str,
    window_reset_at: DateTime<Utc>,
) -> Result<Option<GuardRow>, StoreError> {
    let mut st = c.prepare_cached(&format!(
        "{SELECT_GUARD} WHERE chatgpt_account_id = ?1 AND window_reset_at = ?2"
    ))?;
    let raw = st
        .query_row(params![chatgpt_account_id, ts(window_reset_at)], raw_guard)
        .optional()?;
    raw.map(guard_row).transpose()
}

/// Every guard of the given ChatGPT accounts (any site: one account upstream is one account),
/// oldest first.
pub fn guards_of(
    c: &Connection,
    chatgpt_account_ids: &[&str],
) -> Result<Vec<GuardRow>, StoreError> {
    let mut st = c.prepare_cached(&format!(
        "{SELECT_GUARD} WHERE chatgpt_account_id = ?1 ORDER BY created_at"
    ))?;
    let mut out = Vec::new();
    for id in chatgpt_account_ids {
        for raw in st.query_map(params![id], raw_guard)? {
            out.push(guard_row(raw?)?);
        }
    }
    Ok(out)
}

/// Every guard written in `site_id`, newest first (for the API and the digest).
pub fn guards_in_site(c: &Connection, site_id: &str) -> Result<Vec<GuardRow>, StoreError> {
    let mut st = c.prepare_cached(&format!(
        "{SELECT_GUARD} WHERE site_id = ?1 ORDER BY created_at DESC"
    ))?;
    let rows = st.query_map(params![site_id], raw_guard)?;
    rows.map(|r| guard_row(r?)).collect()
}

const SELECT_GUARD: &str = "SELECT chatgpt_account_id, window_reset_at, site_id, name,
        redeem_request_id, credit_id, created_at, tries, outcome, detail, settled_at
    FROM reset_credit_guards";

type RawGuard = (
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    String,
    u32,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn raw_guard(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawGuard> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
    ))
}

fn guard_row(raw: RawGuard) -> Result<GuardRow, StoreError> {
    let (id, window, site_id, name, request_id, credit_id, created, tries, outcome, detail, at) =
        raw;
    Ok(GuardRow {
        guard: RedeemGuard {
            chatgpt_account_id: id,
            window_reset_at: parse_ts(&window)?,
            redeem_request_id: request_id,
            settled: outcome,
        },
        site_id,
        name,
        credit_id,
        created_at: parse_ts(&created)?,
        tries,
        detail,
        settled_at: parse_opt_ts(at)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use chrono::{Duration, TimeZone};

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 26, 12, 0, 0).unwrap()
    }

    fn row(request_id: &str) -> GuardRow {
        GuardRow {
            guard: RedeemGuard {
                chatgpt_account_id: "acct-1".into(),
                window_reset_at: t0() + Duration::days(3),
                redeem_request_id: request_id.into(),
                settled: None,
            },
            site_id: "main".into(),
            name: "a.json".into(),
            credit_id: Some("RateLimitResetCredit_1".into()),
            created_at: t0(),
            tries: 0,
            detail: None,
            settled_at: None,
        }
    }

    #[test]
    fn a_second_guard_for_the_same_window_is_refused_and_settling_is_final() {
        let store = Store::open_in_memory().unwrap();
        store
            .run_blocking(|c| {
                crate::store::insert_test_site(c, "main")?;
                insert_guard(c, &row("req-1"))?;
                assert!(matches!(
                    insert_guard(c, &row("req-2")),
                    Err(StoreError::Conflict(_))
                ));
                let w = t0() + Duration::days(3);
                count_try(c, "acct-1", w)?;
                let open = guard(c, "acct-1", w)?.unwrap();
                assert_eq!(open.guard.redeem_request_id, "req-1");
                assert_eq!((open.tries, open.guard.settled.clone()), (1, None));
                settle_guard(c, "acct-1", w, "reset", None, t0())?;
                settle_guard(c, "acct-1", w, "no_credit", None, t0())?;
                let done = guards_of(c, &["acct-1"])?;
                assert_eq!(done.len(), 1);
                assert_eq!(done[0].guard.settled.as_deref(), Some("reset"));
                assert_eq!(guards_in_site(c, "main")?.len(), 1);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn an_account_that_leaves_the_listing_loses_its_list_and_keeps_its_guards() {
        let store = Store::open_in_memory().unwrap();
        store
            .run_blocking(|c| {
                crate::store::insert_test_site(c, "main")?;
                let a = crate::core::account::Account {
                    name: "a.json".into(),
                    ..Default::default()
                };
                crate::store::accounts::replace_listing(c, "main", &[a], t0())?;
                save_list(
                    c,
                    "main",
                    &ListedCredits {
                        name: "a.json".into(),
                        listed_at: t0(),
                        available_count: 1,
                        soonest_expires_at: None,
                    },
                )?;
                insert_guard(c, &row("req-1"))?;
                crate::store::accounts::replace_listing(c, "main", &[], t0())?;
                assert_eq!(lists(c, "main")?, vec![], "no list left for a gone account");
                assert_eq!(guards_in_site(c, "main")?.len(), 1, "the guard stays");
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_list_read_replaces_the_previous_one() {
        let store = Store::open_in_memory().unwrap();
        store
            .run_blocking(|c| {
                crate::store::insert_test_site(c, "main")?;
                let mut l = ListedCredits {
                    name: "a.json".into(),
                    listed_at: t0(),
                    available_count: 2,
                    soonest_expires_at: Some(t0() + Duration::days(9)),
                };
                save_list(c, "main", &l)?;
                l.available_count = 1;
                l.soonest_expires_at = None;
                save_list(c, "main", &l)?;
                assert_eq!(lists(c, "main")?, vec![l.clone()]);
                Ok(())
            })
            .unwrap();
    }
}
