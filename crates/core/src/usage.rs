//! The router's usage tally (docs/rules/router.md §5 "Usage", docs/decisions.md §20): the
//! usage records of client requests summed per UTC minute and per (API, requested model, pool,
//! upstream model, account, status, ok), and from those minutes per UTC day and (pool,
//! account). Sums are exact: every record adds to exactly one minute, and the daily figures are
//! the minutes' sums. Plain data; the daemon's usage writer fills a tally and stores it.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};

use crate::router::{Api, UsageRecord};

/// What one per-minute aggregate is kept apart by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MinuteKey {
    /// The UTC minute the requests arrived in (seconds and below zero; RFC 3339 in JSON).
    pub minute: DateTime<Utc>,
    pub api: Api,
    /// The model name the clients asked for (a chain name or a pool model).
    pub requested_model: String,
    /// The leg that answered last (`None`/`null`: the requests reached no account).
    pub pool: Option<String>,
    pub model: Option<String>,
    pub account: Option<String>,
    /// The HTTP status the clients got.
    pub status: u16,
    /// The clients got a complete upstream answer.
    pub ok: bool,
}

/// Sums over the requests of one aggregate. Tokens as the upstream reported them
/// (`cached_tokens` inside `prompt_tokens`); durations in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageSums {
    /// Client requests (one each, whatever the attempts).
    pub requests: u64,
    /// Requests the clients got a complete answer for.
    pub ok: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// Upstream requests made (retries and fail-overs included).
    pub attempts: u64,
    /// Sum of the requests' durations (arrival to last byte), ms.
    pub duration_ms_sum: u64,
    /// The longest of them, ms.
    pub duration_ms_max: u64,
    /// Sum of the first-byte times of the `ttfb_count` requests that had a first byte, ms.
    pub ttfb_ms_sum: u64,
    pub ttfb_count: u64,
}

impl UsageSums {
    /// The sums of one record.
    pub fn of(r: &UsageRecord) -> Self {
        Self {
            requests: 1,
            ok: u64::from(r.ok),
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            cached_tokens: r.cached_tokens,
            attempts: u64::from(r.attempts),
            duration_ms_sum: r.duration_ms,
            duration_ms_max: r.duration_ms,
            ttfb_ms_sum: r.ttfb_ms.unwrap_or(0),
            ttfb_count: u64::from(r.ttfb_ms.is_some()),
        }
    }

    /// Adds `other` (saturating; the maximum is the larger of the two).
    pub fn add(&mut self, other: &Self) {
        self.requests = self.requests.saturating_add(other.requests);
        self.ok = self.ok.saturating_add(other.ok);
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.attempts = self.attempts.saturating_add(other.attempts);
        self.duration_ms_sum = self.duration_ms_sum.saturating_add(other.duration_ms_sum);
        self.duration_ms_max = self.duration_ms_max.max(other.duration_ms_max);
        self.ttfb_ms_sum = self.ttfb_ms_sum.saturating_add(other.ttfb_ms_sum);
        self.ttfb_count = self.ttfb_count.saturating_add(other.ttfb_count);
    }
}

/// The day part of a daily aggregate: UTC day `YYYY-MM-DD`, pool and account (`None`: no
/// account).
pub type DayKey = (String, Option<String>, Option<String>);

/// Usage records summed per minute, not yet stored. Its size is bounded by the distinct keys
/// seen since the last store, not by the requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageTally {
    minutes: HashMap<MinuteKey, UsageSums>,
    records: u64,
}

impl UsageTally {
    /// Adds one record to its minute (the record's strings move into a new key; an existing
    /// key drops them).
    pub fn add(&mut self, r: UsageRecord) {
        let sums = UsageSums::of(&r);
        let key = MinuteKey {
            minute: minute_of(r.at),
            api: r.api,
            requested_model: r.requested_model,
            pool: r.pool,
            model: r.model,
            account: r.account,
            status: r.status,
            ok: r.ok,
        };
        self.minutes.entry(key).or_default().add(&sums);
        self.records += 1;
    }

    /// Adds everything `other` holds.
    pub fn merge(&mut self, other: UsageTally) {
        for (k, s) in other.minutes {
            self.minutes.entry(k).or_default().add(&s);
        }
        self.records += other.records;
    }

    /// Records added since the tally was made (or last taken).
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Whether no record was added.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The per-minute aggregates, in key order (minute first).
    pub fn minutes(&self) -> BTreeMap<&MinuteKey, &UsageSums> {
        self.minutes.iter().collect()
    }

    /// The minutes summed per UTC day and (pool, account), in key order.
    pub fn days(&self) -> BTreeMap<DayKey, UsageSums> {
        let mut days: BTreeMap<DayKey, UsageSums> = BTreeMap::new();
        for (k, s) in &self.minutes {
            let key = (
                k.minute.date_naive().to_string(),
                k.pool.clone(),
                k.account.clone(),
            );
            days.entry(key).or_default().add(s);
        }
        days
    }

    /// The newest minute held (`None` when empty).
    pub fn newest_minute(&self) -> Option<DateTime<Utc>> {
        self.minutes.keys().map(|k| k.minute).max()
    }
}

/// `at` truncated to its UTC minute.
pub fn minute_of(at: DateTime<Utc>) -> DateTime<Utc> {
    at.duration_trunc(TimeDelta::minutes(1)).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn record(at: DateTime<Utc>, account: Option<&str>, ok: bool, prompt: u64) -> UsageRecord {
        UsageRecord {
            at,
            api: Api::ChatCompletions,
            requested_model: "gpt-5".into(),
            pool: account.map(|_| "p".into()),
            model: account.map(|_| "gpt-5".into()),
            account: account.map(Into::into),
            session_key_hash: Some("h".into()),
            ok,
            status: if ok { 200 } else { 502 },
            prompt_tokens: prompt,
            completion_tokens: 2,
            cached_tokens: 1,
            attempts: if ok { 1 } else { 3 },
            duration_ms: prompt * 10,
            ttfb_ms: ok.then_some(5),
        }
    }

    fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, h, m, s).unwrap()
    }

    #[test]
    fn records_of_one_minute_and_key_add_up_and_other_minutes_keys_stay_apart() {
        let mut tally = UsageTally::default();
        tally.add(record(t(3, 0, 1), Some("a"), true, 10));
        tally.add(record(t(3, 0, 59), Some("a"), true, 20));
        tally.add(record(t(3, 1, 0), Some("a"), true, 5));
        tally.add(record(t(3, 0, 30), Some("a"), false, 7));
        tally.add(record(t(3, 0, 30), None, false, 0));
        assert_eq!(tally.records(), 5);
        let minutes = tally.minutes();
        assert_eq!(minutes.len(), 4, "{minutes:?}");
        let first = minutes
            .iter()
            .find(|(k, _)| k.minute == t(3, 0, 0) && k.ok && k.account.as_deref() == Some("a"))
            .map(|(_, s)| **s)
            .unwrap();
        assert_eq!(
            first,
            UsageSums {
                requests: 2,
                ok: 2,
                prompt_tokens: 30,
                completion_tokens: 4,
                cached_tokens: 2,
                attempts: 2,
                duration_ms_sum: 300,
                duration_ms_max: 200,
                ttfb_ms_sum: 10,
                ttfb_count: 2,
            }
        );
        let failed = minutes
            .iter()
            .find(|(k, _)| !k.ok && k.account.is_some())
            .map(|(k, s)| (k.status, s.requests, s.ok, s.attempts, s.ttfb_count))
            .unwrap();
        assert_eq!(failed, (502, 1, 0, 3, 0));
    }

    #[test]
    fn the_days_are_the_sums_of_their_minutes_per_pool_and_account() {
        let mut tally = UsageTally::default();
        let mut other = UsageTally::default();
        tally.add(record(t(23, 59, 59), Some("a"), true, 10));
        tally.add(record(t(3, 0, 0), Some("a"), false, 4));
        other.add(record(t(3, 7, 0), Some("a"), true, 6));
        other.add(record(t(3, 7, 0), None, false, 0));
        tally.merge(other);
        assert_eq!(tally.records(), 4);
        let days = tally.days();
        let a = days
            .get(&("2026-05-21".into(), Some("p".into()), Some("a".into())))
            .unwrap();
        assert_eq!(
            (a.requests, a.ok, a.prompt_tokens, a.attempts),
            (3, 2, 20, 5)
        );
        assert_eq!(a.duration_ms_max, 100);
        let none = days.get(&("2026-05-21".into(), None, None)).unwrap();
        assert_eq!(none.requests, 1);
        assert_eq!(tally.newest_minute(), Some(t(23, 59, 0)));
    }

    #[test]
    fn an_empty_tally_has_no_days_and_no_newest_minute() {
        let tally = UsageTally::default();
        assert!(tally.is_empty());
        assert!(tally.days().is_empty());
        assert_eq!(tally.newest_minute(), None);
    }
}
