//! What alerting reads of a site: the pool view after a round (who counts, who is usable, the
//! accounts table of a message, docs/rules/alerts.md §1 "all_exhausted") and the site forecast as
//! alerting reads it. Pure: the caller filters the accounts and reads their availability.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::account::QuotaSnapshot;
use crate::availability::{self, Availability};
use crate::quota::WindowKind;

/// One account as alerting sees it. The caller decides which accounts count: without priority
/// routing the non-exception accounts of the site (enabled or not); with it, the priority list.
#[derive(Debug, Clone, Copy)]
pub struct AccountView<'a> {
    pub name: &'a str,
    pub display_name: &'a str,
    pub plan: Option<&'a str>,
    /// Not capacity of the pool whatever its availability: disabled in CPA (whatever the
    /// reason) or, under priority routing, not routable.
    pub disabled: bool,
    /// The account's availability by the one rule (`core::availability::availability`).
    pub availability: Availability,
    /// Last good snapshot: only the percentages and the long window's reset of the table.
    pub snapshot: Option<&'a QuotaSnapshot>,
}

/// One row of the accounts table of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AccountLine {
    pub name: String,
    pub display_name: String,
    pub plan: Option<String>,
    pub disabled: bool,
    pub usable: bool,
    /// Over its threshold or limit reached by its last snapshot, or a plain 402
    /// (`Availability::Exhausted`).
    pub exhausted: bool,
    /// Main weekly (or monthly) used percent.
    pub weekly_used_percent: Option<f64>,
    /// The real kind of that window (`weekly`, or `monthly` for a monthly-only account; issue
    /// 10 item 1); `null` without one (and in records stored before it).
    #[serde(default)]
    pub long_window: Option<WindowKind>,
    pub five_hour_used_percent: Option<f64>,
    /// Exhausted: when it can serve again; otherwise when its long window resets.
    pub reset_at: Option<DateTime<Utc>>,
}

/// Rows kept in a message's table; the rest are counted in `omitted_accounts`.
pub const MAX_TABLE_ROWS: usize = 100;

/// The pool of a site after a round (docs/rules/alerts.md §1 "all_exhausted").
#[derive(Debug, Clone, PartialEq)]
pub struct PoolView {
    /// Accounts that count.
    pub total: usize,
    /// Capacity accounts (not `disabled`) that are `Availability::Usable`.
    pub usable: usize,
    /// At least one account counts, none is usable, and no capacity account is merely
    /// `Failing` (a failed probe is no evidence of exhaustion: an upstream outage that fails
    /// every probe must not be told as "all exhausted").
    pub all_exhausted: bool,
    /// Earliest known `until` over the exhausted accounts
    /// ([`availability::earliest_recovery`]; `None` when unknown). When none is usable this is
    /// the site's [`availability::pool_usable_until`].
    pub earliest_reset_at: Option<DateTime<Utc>>,
    /// Soonest reset first, then by name; at most [`MAX_TABLE_ROWS`].
    pub accounts: Vec<AccountLine>,
    pub omitted_accounts: usize,
    /// Accounts that count and are `Availability::Exhausted` (the digest's counts).
    pub exhausted: usize,
    /// Accounts that count and answered 401 or 402-deactivated (`Invalid`, `Deactivated`).
    pub invalid: usize,
}

/// The pool view over `accounts` (already filtered by the caller, availability already read):
/// usable = capacity (not `disabled`) and `Availability::Usable`; exhausted and the reset a
/// line shows come from the availability (docs/rules/patrol.md §6.3, docs/rules/alerts.md §1).
pub fn pool_view(accounts: &[AccountView<'_>]) -> PoolView {
    let usable = accounts
        .iter()
        .filter(|a| !a.disabled && a.availability.is_usable())
        .count();
    let mut lines: Vec<AccountLine> = accounts
        .iter()
        .map(|a| AccountLine {
            name: a.name.to_string(),
            display_name: a.display_name.to_string(),
            plan: a
                .plan
                .map(str::to_string)
                .or_else(|| a.snapshot.and_then(|s| s.plan_type.clone())),
            disabled: a.disabled,
            usable: !a.disabled && a.availability.is_usable(),
            exhausted: a.availability.is_exhausted(),
            weekly_used_percent: a.snapshot.and_then(QuotaSnapshot::weekly_used),
            long_window: a
                .snapshot
                .and_then(QuotaSnapshot::long_window)
                .map(|w| w.kind),
            five_hour_used_percent: a.snapshot.and_then(QuotaSnapshot::five_hour_used),
            reset_at: if a.availability.is_exhausted() {
                a.availability.until()
            } else {
                a.snapshot
                    .and_then(QuotaSnapshot::long_window)
                    .and_then(|w| w.reset_at)
            },
        })
        .collect();
    lines.sort_by(|a, b| {
        (a.reset_at.is_none(), a.reset_at, &a.display_name, &a.name).cmp(&(
            b.reset_at.is_none(),
            b.reset_at,
            &b.display_name,
            &b.name,
        ))
    });
    let omitted = lines.len().saturating_sub(MAX_TABLE_ROWS);
    lines.truncate(MAX_TABLE_ROWS);
    let unknown = accounts
        .iter()
        .any(|a| !a.disabled && matches!(a.availability, Availability::Failing { .. }));
    PoolView {
        total: accounts.len(),
        usable,
        all_exhausted: !accounts.is_empty() && usable == 0 && !unknown,
        earliest_reset_at: availability::earliest_recovery(accounts.iter().map(|a| a.availability)),
        accounts: lines,
        omitted_accounts: omitted,
        exhausted: accounts
            .iter()
            .filter(|a| a.availability.is_exhausted())
            .count(),
        invalid: accounts
            .iter()
            .filter(|a| {
                matches!(
                    a.availability,
                    Availability::Invalid | Availability::Deactivated
                )
            })
            .count(),
    }
}

/// The site forecast as alerting reads it (from `core::forecast::SiteForecast`, docs/rules/patrol.md §9 item
/// 2): when the usable capacity runs out at the summed burn, and the earliest reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ForecastView {
    /// `None`: not projected to run dry (no burn, or no burn known yet).
    pub projected_dry_at: Option<DateTime<Utc>>,
    /// Earliest reset of a window among the site's accounts.
    pub earliest_reset_at: Option<DateTime<Utc>>,
    /// Summed burn of the accounts in use, percent per hour.
    pub burn_per_hour: f64,
    /// Usable capacity left, percent summed over the usable accounts.
    pub remaining_percent: f64,
}

impl ForecastView {
    /// How long before the earliest reset the site runs dry: `None` when it is not projected
    /// to, when no reset is known, or when the reset comes first.
    pub fn lead(&self) -> Option<Duration> {
        match (self.projected_dry_at, self.earliest_reset_at) {
            (Some(dry), Some(reset)) if dry < reset => Some(reset - dry),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::{MAIN_GROUP, QuotaWindow};
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn window(kind: WindowKind, used: f64, reset_at: DateTime<Utc>) -> QuotaWindow {
        let secs = match kind {
            WindowKind::FiveHour => 18_000,
            _ => 604_800,
        };
        QuotaWindow {
            id: format!("{kind:?}"),
            label: format!("{kind:?}"),
            group: MAIN_GROUP.into(),
            kind,
            used_percent: Some(used),
            limit_window_seconds: Some(secs),
            reset_at: Some(reset_at),
            reset_after_seconds: None,
        }
    }

    fn snap(plan: &str, five: f64, weekly: f64, weekly_reset: DateTime<Utc>) -> QuotaSnapshot {
        QuotaSnapshot {
            plan_type: Some(plan.into()),
            windows: vec![
                window(WindowKind::FiveHour, five, t0() + Duration::hours(2)),
                window(WindowKind::Weekly, weekly, weekly_reset),
            ],
            credits: None,
            main_limit_reached: false,
            status_code: 200,
            checked_at: t0(),
            refreshed_at: t0(),
            from_cache: false,
            cache_reason: None,
            reset_credits: None,
        }
    }

    /// An account whose availability is its snapshot's reading at T = 95 (no reason, fine
    /// last probe).
    fn view<'a>(name: &'a str, disabled: bool, s: Option<&'a QuotaSnapshot>) -> AccountView<'a> {
        AccountView {
            name,
            display_name: name,
            plan: None,
            disabled,
            availability: s.map_or(Availability::NoData, |s| {
                availability::snapshot_availability(
                    s,
                    &crate::policy::QuotaPolicy::uniform(95),
                    t0(),
                )
            }),
            snapshot: s,
        }
    }

    #[test]
    fn the_pool_counts_usable_enabled_accounts_and_the_earliest_reset_of_the_exhausted() {
        let soon = t0() + Duration::hours(3);
        let later = t0() + Duration::days(2);
        let ok = snap("plus", 10.0, 40.0, t0() + Duration::days(4));
        let spent_soon = snap("plus", 10.0, 99.0, soon);
        let spent_later = snap("plus", 10.0, 100.0, later);
        let v = pool_view(&[
            view("spent-later", false, Some(&spent_later)),
            view("spent-soon", true, Some(&spent_soon)),
            view("ok-but-disabled", true, Some(&ok)),
            view("never-probed", false, None),
        ]);
        assert_eq!((v.total, v.usable, v.all_exhausted), (4, 0, true));
        assert_eq!(v.earliest_reset_at, Some(soon));
        let order: Vec<&str> = v.accounts.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            order,
            vec![
                "spent-soon",
                "spent-later",
                "ok-but-disabled",
                "never-probed"
            ],
            "soonest reset first, unknown last"
        );
        assert_eq!(v.accounts[0].weekly_used_percent, Some(99.0));
        assert_eq!(v.accounts[0].plan.as_deref(), Some("plus"));

        let with_one = pool_view(&[
            view("spent", false, Some(&spent_soon)),
            view("ok", false, Some(&ok)),
        ]);
        assert_eq!((with_one.usable, with_one.all_exhausted), (1, false));
        assert!(!pool_view(&[]).all_exhausted, "no account, no alarm");
    }

    #[test]
    fn a_failing_probe_is_no_evidence_of_exhaustion_for_the_alarm() {
        let spent = snap("plus", 10.0, 99.0, t0() + Duration::hours(3));
        let mut failing = view("upstream-5xx", false, None);
        failing.availability = Availability::Failing { since: Some(t0()) };
        let v = pool_view(&[view("spent", false, Some(&spent)), failing]);
        assert_eq!((v.usable, v.all_exhausted), (0, false));
        failing.disabled = true;
        let v = pool_view(&[view("spent", false, Some(&spent)), failing]);
        assert!(v.all_exhausted, "a disabled failing account is no capacity");
    }

    #[test]
    fn the_table_is_capped_and_counts_what_it_left_out() {
        let s = snap("plus", 10.0, 99.0, t0() + Duration::hours(3));
        let names: Vec<String> = (0..MAX_TABLE_ROWS + 5)
            .map(|i| format!("a{i:03}"))
            .collect();
        let views: Vec<AccountView<'_>> = names.iter().map(|n| view(n, false, Some(&s))).collect();
        let v = pool_view(&views);
        assert_eq!(v.accounts.len(), MAX_TABLE_ROWS);
        assert_eq!(v.omitted_accounts, 5);
        assert_eq!(v.total, MAX_TABLE_ROWS + 5);
    }
}
