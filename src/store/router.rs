//! The router's stored state (migration 0005, docs/rules/router.md §4–§5): the API-owned part of the
//! router spec (pools, upstream accounts with their key, chains), the router's client keys
//! (hash and last 4 characters only, never the key) and usage (migration 0013: per-minute
//! aggregates and per-account per-day aggregates written in one transaction, plus one raw row
//! per client request when `[router] usage_request_rows` is on; minute and raw rows kept
//! [`RAW_USAGE_DAYS`]). Plain reads and writes: validation of the spec lives in
//! `core::router::RouterSpec::problems`, ownership rules in `jobs::router`.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use secrecy::{ExposeSecret, SecretString};

use super::{StoreError, parse_opt_ts, parse_ts, ts};
use crate::core::router::{
    Api, ChainSpec, Leg, PoolSpec, SpecSource, UpstreamAccount, UsageRecord,
};
use crate::core::usage::{MinuteKey, UsageSums, UsageTally};

/// Minute and raw usage rows older than this many days (before the newest written) are deleted
/// when usage is written; the daily aggregate is kept.
pub const RAW_USAGE_DAYS: i64 = 30;

/// Every API-owned pool, by id.
pub fn pools(c: &Connection) -> Result<Vec<PoolSpec>, StoreError> {
    let mut st = c.prepare("SELECT pool_id, models_json FROM router_pools ORDER BY pool_id")?;
    let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (id, models) = row?;
        out.push(PoolSpec {
            id,
            models: serde_json::from_str(&models)?,
            source: SpecSource::Api,
        });
    }
    Ok(out)
}

/// Creates or replaces the pool `p.id` (its creation time is kept).
pub fn save_pool(c: &Connection, p: &PoolSpec, now: DateTime<Utc>) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO router_pools (pool_id, models_json, created_at, updated_at) VALUES (?1,?2,?3,?3)
         ON CONFLICT(pool_id) DO UPDATE SET models_json=excluded.models_json, updated_at=excluded.updated_at",
        params![p.id, serde_json::to_string(&p.models)?, ts(now)],
    )?;
    Ok(())
}

/// Deletes the pool `id`; `false` when there was none.
pub fn delete_pool(c: &Connection, id: &str) -> Result<bool, StoreError> {
    Ok(c.execute("DELETE FROM router_pools WHERE pool_id=?1", [id])? > 0)
}

/// Every API-owned upstream account, by pool then id. `api_key` is the stored key (not the
/// environment variable's value: `jobs::router` resolves `api_key_env`).
pub fn accounts(c: &Connection) -> Result<Vec<UpstreamAccount>, StoreError> {
    let mut st = c.prepare(
        "SELECT pool_id, account_id, base_url, api_key, api_key_env, tier, weight, models_json,
                site_id, enabled
         FROM router_accounts ORDER BY pool_id, account_id",
    )?;
    let rows = st.query_map([], |r| {
        Ok((
            UpstreamAccount {
                pool: r.get(0)?,
                id: r.get(1)?,
                base_url: r.get(2)?,
                api_key: r.get::<_, Option<String>>(3)?.map(SecretString::from),
                api_key_env: r.get(4)?,
                tier: r.get(5)?,
                weight: r.get(6)?,
                models: Vec::new(),
                site: r.get(8)?,
                enabled: r.get(9)?,
                source: SpecSource::Api,
            },
            r.get::<_, String>(7)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (mut a, models) = row?;
        a.models = serde_json::from_str(&models)?;
        out.push(a);
    }
    Ok(out)
}

/// Creates or replaces the account (`a.pool`, `a.id`), key included (`None` = no stored key).
pub fn save_account(
    c: &Connection,
    a: &UpstreamAccount,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO router_accounts (pool_id, account_id, base_url, api_key, api_key_env, tier,
                                      weight, models_json, site_id, enabled, created_at, updated_at)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?11)
         ON CONFLICT(pool_id, account_id) DO UPDATE SET
            base_url=excluded.base_url, api_key=excluded.api_key, api_key_env=excluded.api_key_env,
            tier=excluded.tier, weight=excluded.weight, models_json=excluded.models_json,
            site_id=excluded.site_id, enabled=excluded.enabled, updated_at=excluded.updated_at",
        params![
            a.pool,
            a.id,
            a.base_url,
            a.api_key.as_ref().map(|k| k.expose_secret().to_string()),
            a.api_key_env,
            a.tier,
            a.weight,
            serde_json::to_string(&a.models)?,
            a.site,
            a.enabled,
            ts(now)
        ],
    )?;
    Ok(())
}

/// Deletes the account; `false` when there was none.
pub fn delete_account(c: &Connection, pool: &str, id: &str) -> Result<bool, StoreError> {
    Ok(c.execute(
        "DELETE FROM router_accounts WHERE pool_id=?1 AND account_id=?2",
        params![pool, id],
    )? > 0)
}

/// Every API-owned chain, by name.
pub fn chains(c: &Connection) -> Result<Vec<ChainSpec>, StoreError> {
    let mut st = c.prepare("SELECT name, legs_json FROM router_chains ORDER BY name")?;
    let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (name, legs) = row?;
        let legs: Vec<Leg> = serde_json::from_str(&legs)?;
        out.push(ChainSpec {
            name,
            legs,
            source: SpecSource::Api,
        });
    }
    Ok(out)
}

/// Creates or replaces the chain `ch.name`.
pub fn save_chain(c: &Connection, ch: &ChainSpec, now: DateTime<Utc>) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO router_chains (name, legs_json, created_at, updated_at) VALUES (?1,?2,?3,?3)
         ON CONFLICT(name) DO UPDATE SET legs_json=excluded.legs_json, updated_at=excluded.updated_at",
        params![ch.name, serde_json::to_string(&ch.legs)?, ts(now)],
    )?;
    Ok(())
}

/// Deletes the chain `name`; `false` when there was none.
pub fn delete_chain(c: &Connection, name: &str) -> Result<bool, StoreError> {
    Ok(c.execute("DELETE FROM router_chains WHERE name=?1", [name])? > 0)
}

/// A router client key as stored: never the key, only its hash (not read back) and its last 4
/// characters for display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientKey {
    pub id: String,
    pub name: String,
    pub last4: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Stores a new client key by its hash (`core::router::key_hash`). Errors: a key with the same
/// hash exists ([`StoreError::Conflict`]).
pub fn insert_key(c: &Connection, key: &ClientKey, hash: &str) -> Result<(), StoreError> {
    let done = c.execute(
        "INSERT INTO router_keys (key_id, name, key_hash, last4, created_at) VALUES (?1,?2,?3,?4,?5)
         ON CONFLICT DO NOTHING",
        params![key.id, key.name, hash, key.last4, ts(key.created_at)],
    )?;
    if done == 0 {
        return Err(StoreError::Conflict(
            "this router key exists already".into(),
        ));
    }
    Ok(())
}

/// Every client key, revoked ones included, oldest first.
pub fn keys(c: &Connection) -> Result<Vec<ClientKey>, StoreError> {
    let mut st = c.prepare(
        "SELECT key_id, name, last4, created_at, revoked_at FROM router_keys
         ORDER BY created_at, key_id",
    )?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Option<String>>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, name, last4, created, revoked) = row?;
        out.push(ClientKey {
            id,
            name,
            last4,
            created_at: parse_ts(&created)?,
            revoked_at: parse_opt_ts(revoked)?,
        });
    }
    Ok(out)
}

/// The hashes of every key not revoked (what the router accepts).
pub fn active_key_hashes(c: &Connection) -> Result<HashSet<String>, StoreError> {
    let mut st = c.prepare("SELECT key_hash FROM router_keys WHERE revoked_at IS NULL")?;
    Ok(st.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?)
}

/// Revokes key `id` at `now` (a second revoke keeps the first time). `None` = no such key,
/// else whether it was active before.
pub fn revoke_key(
    c: &Connection,
    id: &str,
    now: DateTime<Utc>,
) -> Result<Option<bool>, StoreError> {
    let revoked: Option<Option<String>> = c
        .query_row(
            "SELECT revoked_at FROM router_keys WHERE key_id=?1",
            [id],
            |r| r.get(0),
        )
        .optional()?;
    let Some(revoked) = revoked else {
        return Ok(None);
    };
    if revoked.is_some() {
        return Ok(Some(false));
    }
    c.execute(
        "UPDATE router_keys SET revoked_at=?2 WHERE key_id=?1",
        params![id, ts(now)],
    )?;
    Ok(Some(true))
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn api_name(api: Api) -> &'static str {
    match api {
        Api::ChatCompletions => "chatCompletions",
        Api::Responses => "responses",
        Api::ResponsesCompact => "responsesCompact",
    }
}

/// The [`Api`] a stored name spells ([`api_name`] back).
fn api_from_name(name: &str) -> Result<Api, StoreError> {
    [Api::ChatCompletions, Api::Responses, Api::ResponsesCompact]
        .into_iter()
        .find(|a| api_name(*a) == name)
        .ok_or_else(|| StoreError::Conflict(format!("stored router api {name:?} is unknown")))
}

/// Stores what the usage writer gathered, in one transaction: each per-minute aggregate of
/// `tally` added to its `router_usage_minute` row, each (UTC day, pool, account) sum added to
/// its `router_usage_daily` row (one upsert each), one `router_usage` row per record of `raw`
/// (empty unless `[router] usage_request_rows`), and minute and raw rows older than
/// [`RAW_USAGE_DAYS`] before the newest minute or record written deleted. Returns the rows
/// deleted. Nothing to write writes nothing. Errors roll the whole transaction back.
pub fn write_usage(
    c: &mut Connection,
    tally: &UsageTally,
    raw: &[UsageRecord],
) -> Result<usize, StoreError> {
    let newest = tally
        .newest_minute()
        .into_iter()
        .chain(raw.iter().map(|r| r.at))
        .max();
    let Some(newest) = newest else {
        return Ok(0);
    };
    let tx = c.transaction()?;
    write_minutes(&tx, tally)?;
    write_days(&tx, tally)?;
    write_raw(&tx, raw)?;
    let cutoff = ts(newest - chrono::Duration::days(RAW_USAGE_DAYS));
    let mut deleted = tx.execute("DELETE FROM router_usage WHERE at < ?1", [&cutoff])?;
    deleted += tx.execute(
        "DELETE FROM router_usage_minute WHERE minute < ?1",
        [&cutoff],
    )?;
    tx.commit()?;
    Ok(deleted)
}

fn sums_params(s: &UsageSums) -> [i64; 7] {
    [
        int(s.prompt_tokens),
        int(s.completion_tokens),
        int(s.cached_tokens),
        int(s.attempts),
        int(s.duration_ms_sum),
        int(s.ttfb_ms_sum),
        int(s.ttfb_count),
    ]
}

/// The upsert's additions both aggregate tables share (`excluded` = the row being added).
const ADD_SUMS: &str = "requests=requests+excluded.requests,
    prompt_tokens=prompt_tokens+excluded.prompt_tokens,
    completion_tokens=completion_tokens+excluded.completion_tokens,
    cached_tokens=cached_tokens+excluded.cached_tokens,
    attempts=attempts+excluded.attempts,
    duration_ms_sum=duration_ms_sum+excluded.duration_ms_sum,
    ttfb_ms_sum=ttfb_ms_sum+excluded.ttfb_ms_sum,
    ttfb_count=ttfb_count+excluded.ttfb_count";

fn write_minutes(tx: &rusqlite::Transaction<'_>, tally: &UsageTally) -> Result<(), StoreError> {
    let mut st = tx.prepare_cached(&format!(
        "INSERT INTO router_usage_minute (minute, api, requested_model, pool_id, model,
             account_id, status, ok, requests, prompt_tokens, completion_tokens, cached_tokens,
             attempts, duration_ms_sum, ttfb_ms_sum, ttfb_count, duration_ms_max)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)
         ON CONFLICT(minute, pool_id, account_id, api, requested_model, model, status, ok)
         DO UPDATE SET {ADD_SUMS},
            duration_ms_max=max(duration_ms_max, excluded.duration_ms_max)"
    ))?;
    for (k, s) in tally.minutes() {
        let [p, c, ca, at, d, tf, tc] = sums_params(s);
        st.execute(params![
            ts(k.minute),
            api_name(k.api),
            k.requested_model,
            k.pool.as_deref().unwrap_or(""),
            k.model.as_deref().unwrap_or(""),
            k.account.as_deref().unwrap_or(""),
            k.status,
            k.ok,
            int(s.requests),
            p,
            c,
            ca,
            at,
            d,
            tf,
            tc,
            int(s.duration_ms_max),
        ])?;
    }
    Ok(())
}

fn write_days(tx: &rusqlite::Transaction<'_>, tally: &UsageTally) -> Result<(), StoreError> {
    let mut st = tx.prepare_cached(&format!(
        "INSERT INTO router_usage_daily (day, pool_id, account_id, requests, ok, prompt_tokens,
             completion_tokens, cached_tokens, attempts, duration_ms_sum, ttfb_ms_sum, ttfb_count)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)
         ON CONFLICT(day, pool_id, account_id) DO UPDATE SET {ADD_SUMS}, ok=ok+excluded.ok"
    ))?;
    for ((day, pool, account), s) in tally.days() {
        let [p, c, ca, at, d, tf, tc] = sums_params(&s);
        st.execute(params![
            day,
            pool.unwrap_or_default(),
            account.unwrap_or_default(),
            int(s.requests),
            int(s.ok),
            p,
            c,
            ca,
            at,
            d,
            tf,
            tc,
        ])?;
    }
    Ok(())
}

fn write_raw(tx: &rusqlite::Transaction<'_>, raw: &[UsageRecord]) -> Result<(), StoreError> {
    if raw.is_empty() {
        return Ok(());
    }
    let mut st = tx.prepare_cached(
        "INSERT INTO router_usage (at, api, requested_model, pool_id, model, account_id,
             session_key_hash, ok, status, prompt_tokens, completion_tokens, cached_tokens,
             attempts, duration_ms, ttfb_ms)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15)",
    )?;
    for r in raw {
        st.execute(params![
            ts(r.at),
            api_name(r.api),
            r.requested_model,
            r.pool,
            r.model,
            r.account,
            r.session_key_hash,
            r.ok,
            r.status,
            int(r.prompt_tokens),
            int(r.completion_tokens),
            int(r.cached_tokens),
            r.attempts,
            int(r.duration_ms),
            r.ttfb_ms.map(int),
        ])?;
    }
    Ok(())
}

/// The daily aggregate of one (day, pool, account); `pool`/`account` `None` = requests that
/// reached no account. Its sums have no maximum duration (`duration_ms_max` 0): the daily
/// table does not keep one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyUsage {
    /// UTC day, `YYYY-MM-DD`.
    pub day: String,
    pub pool: Option<String>,
    pub account: Option<String>,
    pub sums: UsageSums,
}

/// [`UsageSums`] from the ten columns both usage reads select from `at` on, in this order:
/// requests, ok (a count), prompt, completion and cached tokens, attempts, duration sum,
/// duration max, ttfb sum, ttfb count.
fn sums_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<UsageSums> {
    let n = |i: usize| {
        r.get::<_, i64>(at + i)
            .map(|v| u64::try_from(v).unwrap_or(0))
    };
    Ok(UsageSums {
        requests: n(0)?,
        ok: n(1)?,
        prompt_tokens: n(2)?,
        completion_tokens: n(3)?,
        cached_tokens: n(4)?,
        attempts: n(5)?,
        duration_ms_sum: n(6)?,
        duration_ms_max: n(7)?,
        ttfb_ms_sum: n(8)?,
        ttfb_count: n(9)?,
    })
}

/// A stored "none" (`''`) read back as `None`.
fn opt_text(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<String>> {
    r.get::<_, String>(i).map(|s| (!s.is_empty()).then_some(s))
}

/// The daily aggregates of days `>= since_day` (`YYYY-MM-DD`), newest day first, then by pool
/// and account.
pub fn daily_usage(c: &Connection, since_day: &str) -> Result<Vec<DailyUsage>, StoreError> {
    let mut st = c.prepare(
        "SELECT day, pool_id, account_id, requests, ok, prompt_tokens, completion_tokens,
                cached_tokens, attempts, duration_ms_sum, 0, ttfb_ms_sum, ttfb_count
         FROM router_usage_daily WHERE day >= ?1 ORDER BY day DESC, pool_id, account_id",
    )?;
    let rows = st.query_map([since_day], |r| {
        Ok(DailyUsage {
            day: r.get(0)?,
            pool: opt_text(r, 1)?,
            account: opt_text(r, 2)?,
            sums: sums_at(r, 3)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One stored per-minute aggregate: its key and its sums (`core::usage`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinuteUsage {
    pub key: MinuteKey,
    pub sums: UsageSums,
}

/// The per-minute aggregates of minutes `>= since` (truncated to its minute), newest minute
/// first, then by pool, account, API, requested model, model, status.
pub fn minute_usage(c: &Connection, since: DateTime<Utc>) -> Result<Vec<MinuteUsage>, StoreError> {
    let mut st = c.prepare(
        "SELECT minute, api, requested_model, pool_id, model, account_id, status, ok,
                requests, CASE WHEN ok THEN requests ELSE 0 END, prompt_tokens,
                completion_tokens, cached_tokens, attempts, duration_ms_sum, duration_ms_max,
                ttfb_ms_sum, ttfb_count
         FROM router_usage_minute WHERE minute >= ?1
         ORDER BY minute DESC, pool_id, account_id, api, requested_model, model, status, ok",
    )?;
    let rows = st.query_map([ts(crate::core::usage::minute_of(since))], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            opt_text(r, 3)?,
            opt_text(r, 4)?,
            opt_text(r, 5)?,
            r.get::<_, u16>(6)?,
            r.get::<_, bool>(7)?,
            sums_at(r, 8)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (minute, api, requested_model, pool, model, account, status, ok, sums) = row?;
        let key = MinuteKey {
            minute: parse_ts(&minute)?,
            api: api_from_name(&api)?,
            requested_model,
            pool,
            model,
            account,
            status,
            ok,
        };
        out.push(MinuteUsage { key, sums });
    }
    Ok(out)
}

/// Raw usage rows stored (tests, diagnostics).
pub fn raw_usage_count(c: &Connection) -> Result<u64, StoreError> {
    let n: i64 = c.query_row("SELECT count(*) FROM router_usage", [], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::router::key_hash;
    use crate::store::Store;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn record(at: DateTime<Utc>, account: Option<&str>, ok: bool) -> UsageRecord {
        UsageRecord {
            at,
            api: Api::ChatCompletions,
            requested_model: "codex-auto".into(),
            pool: account.map(|_| "codex".into()),
            model: account.map(|_| "gpt-5".into()),
            account: account.map(Into::into),
            session_key_hash: Some(key_hash("session-1")),
            ok,
            status: if ok { 200 } else { 429 },
            prompt_tokens: 100,
            completion_tokens: 20,
            cached_tokens: 80,
            attempts: 2,
            duration_ms: 300,
            ttfb_ms: ok.then_some(40),
        }
    }

    fn tally(records: &[UsageRecord]) -> UsageTally {
        let mut t = UsageTally::default();
        for r in records {
            t.add(r.clone());
        }
        t
    }

    #[test]
    fn a_tally_sums_into_the_minute_and_daily_aggregates_and_raw_rows_only_when_given() {
        let store = Store::open_in_memory().unwrap();
        let next_day = t0() + chrono::Duration::days(1);
        let batch = vec![
            record(t0(), Some("a"), true),
            record(t0() + chrono::Duration::minutes(5), Some("a"), false),
            record(t0(), Some("b"), true),
            record(t0(), None, false),
            record(next_day, Some("a"), true),
        ];
        store
            .run_blocking(|c| {
                assert_eq!(write_usage(c, &tally(&batch), &[])?, 0);
                assert_eq!(raw_usage_count(c)?, 0, "no raw rows unless given");
                assert_eq!(
                    write_usage(c, &tally(&batch[..1]), &batch[..1])?,
                    0,
                    "a second write adds up"
                );
                assert_eq!(raw_usage_count(c)?, 1);
                let days = daily_usage(c, "2026-05-21")?;
                assert_eq!(days.len(), 4, "{days:?}");
                assert_eq!(days[0].day, "2026-05-22");
                let a = days
                    .iter()
                    .find(|d| d.day == "2026-05-21" && d.account.as_deref() == Some("a"))
                    .unwrap();
                assert_eq!(a.pool.as_deref(), Some("codex"));
                assert_eq!((a.sums.requests, a.sums.ok), (3, 2));
                assert_eq!(a.sums.prompt_tokens, 300);
                assert_eq!(a.sums.completion_tokens, 60);
                assert_eq!(a.sums.cached_tokens, 240);
                assert_eq!(a.sums.attempts, 6);
                assert_eq!(a.sums.duration_ms_sum, 900);
                assert_eq!((a.sums.ttfb_ms_sum, a.sums.ttfb_count), (80, 2));
                let none = days.iter().find(|d| d.account.is_none()).unwrap();
                assert_eq!((none.pool.clone(), none.sums.requests), (None, 1));
                assert_eq!(daily_usage(c, "2026-05-22")?.len(), 1);

                let minutes = minute_usage(c, t0())?;
                assert_eq!(minutes.len(), 5, "{minutes:?}");
                assert_eq!(minutes[0].key.minute, next_day, "newest first");
                let first = minutes
                    .iter()
                    .find(|m| m.key.minute == t0() && m.key.account.as_deref() == Some("a"))
                    .unwrap();
                assert_eq!(first.key.api, Api::ChatCompletions);
                assert_eq!(first.key.requested_model, "codex-auto");
                assert_eq!(first.key.model.as_deref(), Some("gpt-5"));
                assert_eq!((first.key.status, first.key.ok), (200, true));
                assert_eq!(
                    (first.sums.requests, first.sums.ok, first.sums.prompt_tokens),
                    (2, 2, 200)
                );
                assert_eq!(first.sums.duration_ms_max, 300);
                let failed = minutes
                    .iter()
                    .find(|m| m.key.account.as_deref() == Some("a") && !m.key.ok)
                    .unwrap();
                assert_eq!((failed.key.status, failed.sums.ok), (429, 0));
                let none = minutes.iter().find(|m| m.key.account.is_none()).unwrap();
                assert_eq!(
                    (none.key.pool.clone(), none.key.model.clone()),
                    (None, None)
                );
                assert_eq!(minute_usage(c, next_day)?.len(), 1);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn minute_and_raw_usage_older_than_30_days_is_deleted_when_writing_and_the_daily_stays() {
        let store = Store::open_in_memory().unwrap();
        store
            .run_blocking(|c| {
                let old = [record(t0(), Some("a"), true)];
                write_usage(c, &tally(&old), &old)?;
                let later = [record(
                    t0() + chrono::Duration::days(RAW_USAGE_DAYS),
                    Some("a"),
                    true,
                )];
                assert_eq!(
                    write_usage(c, &tally(&later), &later)?,
                    0,
                    "30 days is kept"
                );
                let later = [record(
                    t0() + chrono::Duration::days(RAW_USAGE_DAYS) + chrono::Duration::minutes(1),
                    Some("a"),
                    true,
                )];
                assert_eq!(
                    write_usage(c, &tally(&later), &later)?,
                    2,
                    "the first minute row and the first raw row"
                );
                assert_eq!(raw_usage_count(c)?, 2);
                assert_eq!(minute_usage(c, t0())?.len(), 2);
                assert_eq!(daily_usage(c, "2026-01-01")?.len(), 2);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn nothing_to_write_writes_nothing() {
        let store = Store::open_in_memory().unwrap();
        store
            .run_blocking(|c| {
                assert_eq!(write_usage(c, &UsageTally::default(), &[])?, 0);
                assert!(minute_usage(c, t0())?.is_empty());
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_key_is_stored_by_hash_and_a_revoked_key_is_not_loaded() {
        let store = Store::open_in_memory().unwrap();
        let secret = "qpr-0123456789abcdef-secret-tail";
        let key = |id: &str| ClientKey {
            id: id.into(),
            name: "ci".into(),
            last4: "tail".into(),
            created_at: t0(),
            revoked_at: None,
        };
        store
            .run_blocking(|c| {
                insert_key(c, &key("k1"), &key_hash(secret))?;
                insert_key(c, &key("k2"), &key_hash("qpr-other"))?;
                let dup = insert_key(c, &key("k3"), &key_hash(secret)).unwrap_err();
                assert!(matches!(dup, StoreError::Conflict(_)));
                let stored: Vec<String> = c
                    .prepare("SELECT key_id || name || key_hash || last4 FROM router_keys")?
                    .query_map([], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                assert!(stored.iter().all(|s| !s.contains(secret)), "{stored:?}");
                assert_eq!(
                    active_key_hashes(c)?,
                    HashSet::from([key_hash(secret), key_hash("qpr-other")])
                );
                assert_eq!(revoke_key(c, "k1", t0())?, Some(true));
                assert_eq!(revoke_key(c, "k1", t0())?, Some(false));
                assert_eq!(revoke_key(c, "nope", t0())?, None);
                assert_eq!(
                    active_key_hashes(c)?,
                    HashSet::from([key_hash("qpr-other")])
                );
                let listed = keys(c)?;
                assert_eq!(listed.len(), 2);
                assert_eq!(listed[0].revoked_at, Some(t0()));
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn pools_accounts_and_chains_round_trip() {
        let store = Store::open_in_memory().unwrap();
        let pool = PoolSpec {
            id: "codex".into(),
            models: vec!["gpt-5".into()],
            source: SpecSource::Api,
        };
        let account = UpstreamAccount {
            id: "a".into(),
            pool: "codex".into(),
            base_url: "http://127.0.0.1:1/v1".into(),
            api_key: Some(SecretString::from("sk-up-SECRET")),
            api_key_env: None,
            tier: 2,
            weight: Some(3),
            models: vec!["gpt-5".into()],
            site: Some("main".into()),
            enabled: false,
            source: SpecSource::Api,
        };
        let chain = ChainSpec {
            name: "auto".into(),
            legs: vec![Leg {
                pool: "codex".into(),
                model: "gpt-5".into(),
            }],
            source: SpecSource::Api,
        };
        store
            .run_blocking(|c| {
                save_pool(c, &pool, t0())?;
                save_account(c, &account, t0())?;
                save_chain(c, &chain, t0())?;
                assert_eq!(pools(c)?, vec![pool.clone()]);
                assert_eq!(chains(c)?, vec![chain.clone()]);
                let got = accounts(c)?;
                assert_eq!(got.len(), 1);
                let g = &got[0];
                assert_eq!(
                    (g.id.as_str(), g.pool.as_str(), g.tier, g.weight, g.enabled),
                    ("a", "codex", 2, Some(3), false)
                );
                assert_eq!(g.site.as_deref(), Some("main"));
                assert_eq!(g.models, ["gpt-5"]);
                assert_eq!(g.api_key.as_ref().unwrap().expose_secret(), "sk-up-SECRET");
                let renamed = PoolSpec {
                    models: vec!["gpt-5".into(), "gpt-5-mini".into()],
                    ..pool.clone()
                };
                save_pool(c, &renamed, t0())?;
                assert_eq!(pools(c)?[0].models.len(), 2);
                assert!(delete_account(c, "codex", "a")?);
                assert!(!delete_account(c, "codex", "a")?);
                assert!(delete_chain(c, "auto")?);
                assert!(delete_pool(c, "codex")?);
                assert!(pools(c)?.is_empty() && accounts(c)?.is_empty() && chains(c)?.is_empty());
                Ok(())
            })
            .unwrap();
    }
}
