//! The daily digest (docs/rules/alerts.md §4, docs/rules/alerts.md §1 `daily_digest`): *when* it is due —
//! once per local day at `[alerts] daily_digest_at` in `alerts.timezone`, across restarts (the
//! caller stores the last digest's local date) and DST changes — and *what* it says about a
//! site: usable / exhausted / invalid counts, the accounts the patrol changed in the last 24 h
//! and the actions it took. Pure: `now`, the stored date and the rounds come from callers; the
//! projected dry time travels beside it in `AlertDetails` (from the site forecast).

use chrono::{DateTime, Duration, NaiveDate, NaiveTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::alerting::pool::{MAX_TABLE_ROWS, PoolView};
use super::inspect::Action;
use super::report::InspectionRunResult;

/// How far back a digest looks (docs/rules/alerts.md §1: "the last 24 h").
pub const DIGEST_SPAN_HOURS: i64 = 24;

/// The local date whose digest is due at `now`, or `None`.
///
/// Due when the local time in `tz` is at or past `at` and no digest went out for that local
/// date yet (`last` is the date of the last one, persisted by the caller, so a restart does
/// not resend). DST: a time that does not exist on a spring-forward day (02:30 in
/// Europe/Berlin on 2026-03-29) is due at the first instant after it (03:00 CEST); a time that
/// exists twice on a fall-back day (02:30 on 2026-10-25) is due at its first occurrence and not
/// again. A process that was down at `at` sends the day's digest when it starts, later that
/// same day; a day it was down for entirely gets none. A stored date in the future (clock
/// or zone changed) holds digests back until that date has passed.
pub fn due(
    last: Option<NaiveDate>,
    at: NaiveTime,
    tz: Tz,
    now: DateTime<Utc>,
) -> Option<NaiveDate> {
    let local = now.with_timezone(&tz).naive_local();
    let today = local.date();
    (local.time() >= at && last.is_none_or(|d| d < today)).then_some(today)
}

/// One thing the patrol did to an account (a CPA write it attempted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct StateChange {
    /// When the round that acted finished (or started, if unfinished).
    pub at: DateTime<Utc>,
    /// Display name (e-mail, label or file name).
    pub account: String,
    pub action: Action,
    pub success: bool,
    /// The decision's reason (e.g. "weekly 96% >= threshold 95%"); `None` for priority-routing
    /// writes, whose reason is the routing itself.
    pub reason: Option<String>,
}

/// The actions of the last 24 h, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct ActionCounts {
    pub disabled: usize,
    pub enabled: usize,
    pub deleted: usize,
    /// Attempted writes CPA did not take.
    pub failed: usize,
}

/// The digest of one site (stored with the `daily_digest` event, rendered at delivery).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Digest {
    /// The local date (in `alerts.timezone`) the digest is for.
    pub local_date: NaiveDate,
    /// Start of the span it covers (`now` − 24 h).
    pub since: DateTime<Utc>,
    pub total_accounts: usize,
    pub usable_accounts: usize,
    pub exhausted_accounts: usize,
    /// Answered 401 or 402-deactivated at their last probe.
    pub invalid_accounts: usize,
    /// Oldest first; at most 100 ([`MAX_TABLE_ROWS`]).
    pub changes: Vec<StateChange>,
    pub omitted_changes: usize,
    pub actions: ActionCounts,
    /// The site's banked reset credits when its `resetCreditsMode` is not `off`
    /// (docs/reset-credits.md); absent otherwise and in digests stored before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_credits: Option<DigestCredits>,
}

/// The banked reset credits of a site in its digest (docs/rules/cpa.md §10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DigestCredits {
    /// `observe` or `redeem`.
    pub mode: String,
    /// Credits banked over the accounts whose count is known.
    pub available: u32,
    /// Of those, credits that would reset a window now.
    pub applicable: u32,
    /// Accounts whose count is known.
    pub accounts_known: u32,
    /// The soonest expiry over the site's list reads.
    pub soonest_expires_at: Option<DateTime<Utc>>,
    /// Credits redeemed in the last 24 h (`reset` or `already_redeemed`).
    pub redeemed: u32,
}

/// The digest of a site for `local_date`: counts from `pool` (the pool view of now), changes
/// and action counts from the acting rounds (not dry runs) of `runs` that started in the last
/// [`DIGEST_SPAN_HOURS`] before `now`, including priority-routing writes. `Keep` is no change.
pub fn digest(
    local_date: NaiveDate,
    pool: &PoolView,
    runs: &[InspectionRunResult],
    now: DateTime<Utc>,
) -> Digest {
    let since = now - Duration::hours(DIGEST_SPAN_HOURS);
    let mut changes = Vec::new();
    let mut actions = ActionCounts::default();
    for run in runs
        .iter()
        .filter(|r| !r.dry_run && r.started_at >= since && r.started_at <= now)
    {
        let at = run.finished_at.unwrap_or(run.started_at);
        let decided = run.action_outcomes.iter().map(|o| (o, true));
        let routed = run.priority_routing_outcomes.iter().map(|o| (o, false));
        for (o, by_decision) in decided.chain(routed) {
            if o.action == Action::Keep {
                continue;
            }
            let decision = run
                .decisions
                .iter()
                .find(|d| d.account_name == o.account_name);
            match (o.success, o.action) {
                (false, _) => actions.failed += 1,
                (true, Action::Disable) => actions.disabled += 1,
                (true, Action::Enable) => actions.enabled += 1,
                (true, Action::Delete) => actions.deleted += 1,
                (true, Action::Keep) => {}
            }
            changes.push(StateChange {
                at,
                account: decision
                    .map_or_else(|| o.account_name.clone(), |d| d.display_account.clone()),
                action: o.action,
                success: o.success,
                reason: decision.filter(|_| by_decision).map(|d| d.reason.clone()),
            });
        }
    }
    changes.sort_by(|a, b| (a.at, &a.account).cmp(&(b.at, &b.account)));
    let omitted = changes.len().saturating_sub(MAX_TABLE_ROWS);
    changes.truncate(MAX_TABLE_ROWS);
    Digest {
        local_date,
        since,
        total_accounts: pool.total,
        usable_accounts: pool.usable,
        exhausted_accounts: pool.exhausted,
        invalid_accounts: pool.invalid,
        changes,
        omitted_changes: omitted,
        actions,
        reset_credits: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ActionOutcome, DecisionRecord, RunStatus};
    use chrono::TimeZone;
    use chrono_tz::Europe::Berlin;

    fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, min, 0).unwrap()
    }

    fn hm(h: u32, m: u32) -> NaiveTime {
        NaiveTime::from_hms_opt(h, m, 0).unwrap()
    }

    fn date(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    /// Drives `due` minute by minute over `[from, to)` like the scheduler ticks; the stored
    /// date is the only state (what the store keeps across restarts). Answers the instants a
    /// digest went out.
    fn sent_between(at: NaiveTime, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let mut stored: Option<NaiveDate> = None;
        let mut sent = Vec::new();
        let mut now = from;
        while now < to {
            if let Some(d) = due(stored, at, Berlin, now) {
                stored = Some(d);
                sent.push(now);
            }
            now += Duration::minutes(1);
        }
        sent
    }

    #[test]
    fn once_per_local_day_at_the_configured_local_time() {
        // 08:00 in Berlin in May is 06:00 UTC (CEST).
        let sent = sent_between(hm(8, 0), utc(2026, 5, 20, 0, 0), utc(2026, 5, 23, 0, 0));
        assert_eq!(
            sent,
            vec![
                utc(2026, 5, 20, 6, 0),
                utc(2026, 5, 21, 6, 0),
                utc(2026, 5, 22, 6, 0)
            ]
        );
    }

    #[test]
    fn a_restart_after_the_digest_does_not_resend_it() {
        let sent = sent_between(hm(8, 0), utc(2026, 5, 20, 0, 0), utc(2026, 5, 21, 0, 0));
        assert_eq!(sent, vec![utc(2026, 5, 20, 6, 0)]);
        // The stored date alone decides: a new process that reads it sends nothing that day.
        assert_eq!(
            due(
                Some(date(2026, 5, 20)),
                hm(8, 0),
                Berlin,
                utc(2026, 5, 20, 21, 59)
            ),
            None
        );
        // ...and the next local day's digest (00:00 CEST = 22:00 UTC the day before) is due.
        assert_eq!(
            due(
                Some(date(2026, 5, 20)),
                hm(0, 0),
                Berlin,
                utc(2026, 5, 20, 22, 0)
            ),
            Some(date(2026, 5, 21))
        );
    }

    #[test]
    fn a_time_skipped_by_spring_forward_is_due_at_the_first_instant_after_it() {
        // 2026-03-29: Berlin jumps from 02:00 CET to 03:00 CEST (01:00 UTC); 02:30 never exists.
        let sent = sent_between(hm(2, 30), utc(2026, 3, 28, 0, 0), utc(2026, 3, 31, 0, 0));
        assert_eq!(
            sent,
            vec![
                utc(2026, 3, 28, 1, 30), // 02:30 CET
                utc(2026, 3, 29, 1, 0),  // 03:00 CEST, the first instant past 02:30
                utc(2026, 3, 30, 0, 30), // 02:30 CEST
            ]
        );
    }

    #[test]
    fn a_time_repeated_by_fall_back_is_due_once() {
        // 2026-10-25: Berlin goes from 03:00 CEST back to 02:00 CET (01:00 UTC); 02:30 happens
        // at 00:30 UTC and again at 01:30 UTC.
        let sent = sent_between(hm(2, 30), utc(2026, 10, 24, 0, 0), utc(2026, 10, 27, 0, 0));
        assert_eq!(
            sent,
            vec![
                utc(2026, 10, 24, 0, 30), // 02:30 CEST
                utc(2026, 10, 25, 0, 30), // the first 02:30 (CEST), not the second (CET)
                utc(2026, 10, 26, 1, 30), // 02:30 CET
            ]
        );
    }

    #[test]
    fn a_process_down_at_the_time_catches_up_the_same_day_only() {
        assert_eq!(
            due(None, hm(8, 0), Berlin, utc(2026, 5, 20, 20, 0)),
            Some(date(2026, 5, 20))
        );
        assert_eq!(
            due(
                Some(date(2026, 5, 18)),
                hm(8, 0),
                Berlin,
                utc(2026, 5, 20, 5, 59)
            ),
            None,
            "before the time: yesterday's is not sent late"
        );
        assert_eq!(
            due(
                Some(date(2026, 5, 25)),
                hm(8, 0),
                Berlin,
                utc(2026, 5, 20, 12, 0)
            ),
            None,
            "a stored date in the future holds back"
        );
    }

    fn decision(name: &str, action: Action, reason: &str) -> DecisionRecord {
        DecisionRecord {
            account_name: format!("codex-{name}.json"),
            display_account: name.into(),
            plan_type: Some("plus".into()),
            action,
            rule: 3,
            reason: reason.into(),
            disable_reason: None,
            status_code: Some(200),
            used_percent: Some(96.0),
            used_window: None,
            five_hour_used_percent: None,
            threshold: None,
            is_quota_reached: true,
            from_cache: false,
            spared_by_passive: false,
            evaluated: true,
            error: None,
            next_real_refresh_at: None,
        }
    }

    fn run(at: DateTime<Utc>, outcomes: &[(&str, Action, bool)], dry: bool) -> InspectionRunResult {
        InspectionRunResult {
            run_id: format!("run-{at}"),
            site_id: "main".into(),
            source: "auto".into(),
            dry_run: dry,
            decisions: outcomes
                .iter()
                .map(|(n, a, _)| decision(n, *a, "weekly 96% >= threshold 95%"))
                .collect(),
            action_outcomes: outcomes
                .iter()
                .map(|(n, a, ok)| ActionOutcome {
                    action: *a,
                    account_name: format!("codex-{n}.json"),
                    success: *ok,
                    error: None,
                })
                .collect(),
            priority_routing_outcomes: vec![],
            total_accounts: 3,
            probed_count: 3,
            reused_count: 0,
            failed_count: 0,
            delete_count: 0,
            disable_count: 0,
            enable_count: 0,
            keep_count: 0,
            started_at: at,
            finished_at: Some(at + Duration::minutes(1)),
            status: RunStatus::Completed,
            error: None,
            reset_credit: None,
        }
    }

    #[test]
    fn the_digest_counts_the_pool_and_lists_the_last_24_hours_of_changes() {
        let now = utc(2026, 5, 21, 6, 0);
        let pool = PoolView {
            total: 5,
            usable: 2,
            all_exhausted: false,
            earliest_reset_at: None,
            accounts: vec![],
            omitted_accounts: 0,
            exhausted: 2,
            invalid: 1,
        };
        let runs = vec![
            run(
                now - Duration::hours(1),
                &[("bob", Action::Enable, true)],
                false,
            ),
            run(
                now - Duration::hours(5),
                &[
                    ("alice", Action::Disable, true),
                    ("carol", Action::Delete, false),
                    ("dave", Action::Keep, true),
                ],
                false,
            ),
            run(
                now - Duration::hours(3),
                &[("erin", Action::Disable, true)],
                true,
            ),
            run(
                now - Duration::hours(25),
                &[("old", Action::Disable, true)],
                false,
            ),
        ];
        let d = digest(date(2026, 5, 21), &pool, &runs, now);
        assert_eq!(
            (
                d.total_accounts,
                d.usable_accounts,
                d.exhausted_accounts,
                d.invalid_accounts
            ),
            (5, 2, 2, 1)
        );
        let names: Vec<&str> = d.changes.iter().map(|c| c.account.as_str()).collect();
        assert_eq!(
            names,
            vec!["alice", "carol", "bob"],
            "oldest first; keep, dry runs and older rounds left out"
        );
        assert_eq!(
            d.actions,
            ActionCounts {
                disabled: 1,
                enabled: 1,
                deleted: 0,
                failed: 1
            }
        );
        assert_eq!(
            d.changes[0].reason.as_deref(),
            Some("weekly 96% >= threshold 95%")
        );
        assert_eq!(d.since, now - Duration::hours(24));
    }
}
