//! Alerting rules (spec/alerts.md §1–§2): the pool view of a site from plain account data, and the
//! pure transition function that turns one observation into alert events — transitions only,
//! one state per (site, event family), with the flap guard, the minimum interval and reminders —
//! plus the delivery back-off. No I/O, no clock, no randomness: `now` and ids come from callers.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::account::QuotaSnapshot;
use super::availability::{self, Availability};
use super::quota::WindowKind;

/// An alert event (spec/alerts.md §1). `Test` is the message of `POST /api/alerts/test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    AllExhausted,
    Recovered,
    BelowMinActive,
    InvalidAccounts,
    SiteUnreachable,
    SiteReachable,
    /// The forecast says the site runs dry well before its earliest reset, or too few usable
    /// accounts remain (issue 10 item 3).
    PoolLow,
    /// The `pool_low` condition cleared (with hysteresis and the flap guard).
    PoolLowCleared,
    /// The optional once-a-day summary of a site (`[alerts] daily_digest_at`).
    DailyDigest,
    Test,
}

impl EventKind {
    /// The API / database / template spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::AllExhausted => "all_exhausted",
            EventKind::Recovered => "recovered",
            EventKind::BelowMinActive => "below_min_active",
            EventKind::InvalidAccounts => "invalid_accounts",
            EventKind::SiteUnreachable => "site_unreachable",
            EventKind::SiteReachable => "site_reachable",
            EventKind::PoolLow => "pool_low",
            EventKind::PoolLowCleared => "pool_low_cleared",
            EventKind::DailyDigest => "daily_digest",
            EventKind::Test => "test",
        }
    }

    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 10] = [
        EventKind::AllExhausted,
        EventKind::Recovered,
        EventKind::BelowMinActive,
        EventKind::InvalidAccounts,
        EventKind::SiteUnreachable,
        EventKind::SiteReachable,
        EventKind::PoolLow,
        EventKind::PoolLowCleared,
        EventKind::DailyDigest,
        EventKind::Test,
    ];

    /// Parses the API / database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The family whose state the event changes (`None` for `Test` and `DailyDigest`, whose
    /// once-a-day rule keeps its own state: the last digest's local date).
    pub fn family(self) -> Option<Family> {
        match self {
            EventKind::AllExhausted | EventKind::Recovered => Some(Family::Exhaustion),
            EventKind::BelowMinActive => Some(Family::MinActive),
            EventKind::InvalidAccounts => Some(Family::InvalidAccounts),
            EventKind::SiteUnreachable | EventKind::SiteReachable => Some(Family::Reachability),
            EventKind::PoolLow | EventKind::PoolLowCleared => Some(Family::PoolLow),
            EventKind::DailyDigest | EventKind::Test => None,
        }
    }

    /// Severity of the event (spec/alerts.md §1 table).
    pub fn severity(self) -> Severity {
        match self {
            EventKind::AllExhausted | EventKind::SiteUnreachable => Severity::Critical,
            EventKind::BelowMinActive | EventKind::InvalidAccounts | EventKind::PoolLow => {
                Severity::Warning
            }
            EventKind::Recovered
            | EventKind::SiteReachable
            | EventKind::PoolLowCleared
            | EventKind::DailyDigest
            | EventKind::Test => Severity::Info,
        }
    }
}

/// A family of events sharing one persisted state (a condition and its clearing, or the
/// per-round invalid-account notice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Exhaustion,
    MinActive,
    InvalidAccounts,
    Reachability,
    /// `pool_low` / `pool_low_cleared` (issue 10 item 3).
    PoolLow,
}

impl Family {
    /// Every family, in evaluation order.
    pub const ALL: [Family; 5] = [
        Family::Exhaustion,
        Family::MinActive,
        Family::InvalidAccounts,
        Family::Reachability,
        Family::PoolLow,
    ];

    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Exhaustion => "exhaustion",
            Family::MinActive => "min_active",
            Family::InvalidAccounts => "invalid_accounts",
            Family::Reachability => "reachability",
            Family::PoolLow => "pool_low",
        }
    }

    /// Parses the database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Family::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

/// Severity of an event (`level` of the webhook and the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Warning,
    Info,
}

impl Severity {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

// ---- Pool view ------------------------------------------------------------------------------

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
#[serde(rename_all = "camelCase")]
pub struct AccountLine {
    pub name: String,
    pub display_name: String,
    pub plan: Option<String>,
    pub disabled: bool,
    pub usable: bool,
    /// `Availability::Exhausted` (quota reached by the plan rules, or a plain 402).
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

/// The pool of a site after a round (spec/alerts.md §1 "all_exhausted").
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
/// line shows come from the availability (patrol.md §6.3, alerts.md §1).
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

// ---- Transitions ----------------------------------------------------------------------------

/// Delivery rules of spec/alerts.md §2 (from `[alerts]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlertPolicy {
    /// Flap guard: the good state must hold this long (and two evaluations) before it is told.
    pub recovery_confirm: Duration,
    /// At most one raising message per (site, family) this often (clearing ones are exempt).
    pub min_interval: Duration,
    /// Reminder while exhausted or unreachable; `None` = never.
    pub repeat: Option<Duration>,
    /// CPA management failing this long ⇒ unreachable.
    pub unreachable_after: Duration,
}

impl Default for AlertPolicy {
    fn default() -> Self {
        Self {
            recovery_confirm: Duration::minutes(10),
            min_interval: Duration::minutes(30),
            repeat: None,
            unreachable_after: Duration::minutes(15),
        }
    }
}

/// CPA management reachability of a site, as the caller knows it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reachability {
    /// First failed management call of the current failure streak; `None` ⇒ the last call worked.
    pub failing_since: Option<DateTime<Utc>>,
    /// Last successful management call (persisted across restarts).
    pub last_contact_at: Option<DateTime<Utc>>,
    /// CPA refused the management key (stored refusal): unreachable at once, since it does
    /// not heal by waiting and CPA bans the host after 5 refused keys (issue 7).
    pub key_refused: bool,
    /// Why the calls fail, for the message (e.g. "management key refused at …").
    pub cause: Option<String>,
}

impl Reachability {
    /// Failing, and no success for `after` (counted from the last contact, or from the first
    /// failure when the site never answered).
    pub fn is_unreachable(&self, after: Duration, now: DateTime<Utc>) -> bool {
        if self.key_refused {
            return true;
        }
        match self.failing_since {
            None => false,
            Some(since) => now - self.last_contact_at.unwrap_or(since) >= after,
        }
    }
}

/// What one evaluation saw. Every part is optional: a completed round brings the pool and the
/// invalidated accounts, a scheduler tick or a failed round only the reachability.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub pool: Option<PoolView>,
    /// `priorityMinActiveCount` when priority routing is on.
    pub min_active: Option<u32>,
    /// Display names of accounts deleted or disabled as invalid (rule 1) in the round.
    pub invalid_accounts: Vec<String>,
    pub reachability: Option<Reachability>,
    /// The site's exhaustion forecast (`None`: not computed, e.g. it failed): `pool_low` and
    /// the projected dry time of every pool message.
    pub forecast: Option<ForecastView>,
    /// The site's `pool_low` settings; `None` = no `pool_low` evaluation.
    pub pool_low: Option<PoolLowRule>,
}

/// The site forecast as alerting reads it (from `core::forecast::SiteForecast`, issue 10 item
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

/// The site settings of `pool_low` (`earlyWarningMinutes`, `lowCapacityAccounts`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolLowRule {
    /// Raise when the site runs dry more than this before its earliest reset.
    pub early_warning: Duration,
    /// Raise when fewer usable accounts remain (capped at the accounts that count); 0 = off.
    pub low_capacity_accounts: u32,
}

/// Hysteresis of `pool_low` (spec/alerts.md §1): the forecast part clears only once the site
/// runs dry at most `earlyWarningMinutes` − 30 min before its earliest reset (or not at all).
pub const POOL_LOW_CLEAR_MARGIN_MINUTES: i64 = 30;

/// Whether `pool_low` holds (issue 10 item 3, spec/alerts.md §1 with the hysteresis of
/// [`POOL_LOW_CLEAR_MARGIN_MINUTES`]):
/// - `Some(true)`: usable < min(`lowCapacityAccounts`, counted accounts), or the site runs dry
///   more than `earlyWarningMinutes` before its earliest reset (or runs dry and no reset is
///   known: nothing says capacity comes back, as `SiteForecast::dry_before_reset` reads it);
/// - `Some(false)`: capacity at or above that limit *and* the forecast either projects no dry
///   time before the reset or one at most `earlyWarningMinutes` − 30 min before it;
/// - `None` (no change): inside the hysteresis band, no forecast known while capacity is fine,
///   no account counts, or no account is usable (that is `all_exhausted`'s news, not a forecast).
pub fn pool_low_holds(
    pool: &PoolView,
    forecast: Option<&ForecastView>,
    rule: &PoolLowRule,
) -> Option<bool> {
    if pool.total == 0 || pool.usable == 0 {
        return None;
    }
    let limit = (rule.low_capacity_accounts as usize).min(pool.total);
    if pool.usable < limit {
        return Some(true);
    }
    let f = forecast?;
    if f.projected_dry_at.is_some() && f.earliest_reset_at.is_none() {
        return Some(true);
    }
    let clear_below = rule.early_warning - Duration::minutes(POOL_LOW_CLEAR_MARGIN_MINUTES);
    match f.lead() {
        Some(lead) if lead > rule.early_warning => Some(true),
        Some(lead) if lead > clear_below => None,
        _ => Some(false),
    }
}

/// Persisted state of one (site, family).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FamilyState {
    /// The raising event went out and no clearing event since.
    pub raised: bool,
    /// When the raising event (not a reminder) went out.
    pub raised_at: Option<DateTime<Utc>>,
    /// Last raising message, first or reminder: the minimum interval and reminders count from it.
    pub last_raise_sent_at: Option<DateTime<Utc>>,
    /// First evaluation that found the condition cleared while raised (flap guard).
    pub clear_since: Option<DateTime<Utc>>,
    /// Evaluations in a row that found it cleared.
    pub clear_evaluations: u32,
    /// Invalid accounts not told yet (held back by the minimum interval).
    pub pending_accounts: Vec<String>,
}

/// The alert state of a site: one [`FamilyState`] per family.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SiteAlertState {
    pub exhaustion: FamilyState,
    pub min_active: FamilyState,
    pub invalid_accounts: FamilyState,
    pub reachability: FamilyState,
    pub pool_low: FamilyState,
}

impl SiteAlertState {
    /// The state of `family`.
    pub fn get(&self, family: Family) -> &FamilyState {
        match family {
            Family::Exhaustion => &self.exhaustion,
            Family::MinActive => &self.min_active,
            Family::InvalidAccounts => &self.invalid_accounts,
            Family::Reachability => &self.reachability,
            Family::PoolLow => &self.pool_low,
        }
    }

    /// The state of `family`, mutable.
    pub fn get_mut(&mut self, family: Family) -> &mut FamilyState {
        match family {
            Family::Exhaustion => &mut self.exhaustion,
            Family::MinActive => &mut self.min_active,
            Family::InvalidAccounts => &mut self.invalid_accounts,
            Family::Reachability => &mut self.reachability,
            Family::PoolLow => &mut self.pool_low,
        }
    }
}

/// What a message says beyond its kind: stored with the event, rendered at delivery.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AlertDetails {
    pub total_accounts: Option<usize>,
    pub usable_accounts: Option<usize>,
    pub earliest_reset_at: Option<DateTime<Utc>>,
    /// The site's accounts (soonest reset first).
    pub accounts: Vec<AccountLine>,
    /// Accounts left out of `accounts` (table size limit).
    pub omitted_accounts: usize,
    /// `invalid_accounts`: the accounts deleted or disabled as invalid.
    pub invalid_accounts: Vec<String>,
    /// `below_min_active`: the configured minimum.
    pub min_active: Option<u32>,
    /// Reachability events: last successful CPA contact and the start of the failures.
    pub last_contact_at: Option<DateTime<Utc>>,
    pub failing_since: Option<DateTime<Utc>>,
    /// Reachability events: why the management calls fail, when known.
    pub cause: Option<String>,
    /// Clearing events: when the condition was told.
    pub raised_at: Option<DateTime<Utc>>,
    /// Pool events: when the forecast projects the site to run dry (`None`: not projected, or
    /// no forecast).
    pub projected_dry_at: Option<DateTime<Utc>>,
    /// Pool events: the earliest window reset among the site's accounts, by the forecast.
    pub forecast_reset_at: Option<DateTime<Utc>>,
    /// Pool events: summed burn of the accounts in use, percent per hour.
    pub burn_per_hour: Option<f64>,
    /// `pool_low`: the site's `earlyWarningMinutes` and `lowCapacityAccounts`.
    pub early_warning_minutes: Option<i64>,
    pub low_capacity_accounts: Option<u32>,
    /// `daily_digest`: the summary of the last 24 h.
    pub digest: Option<super::digest::Digest>,
}

impl AlertDetails {
    /// The pool part of a message, with the forecast when one is known.
    pub fn from_pool(pool: &PoolView, forecast: Option<&ForecastView>) -> Self {
        Self {
            total_accounts: Some(pool.total),
            usable_accounts: Some(pool.usable),
            earliest_reset_at: pool.earliest_reset_at,
            accounts: pool.accounts.clone(),
            omitted_accounts: pool.omitted_accounts,
            projected_dry_at: forecast.and_then(|f| f.projected_dry_at),
            forecast_reset_at: forecast.and_then(|f| f.earliest_reset_at),
            burn_per_hour: forecast.map(|f| f.burn_per_hour),
            ..Default::default()
        }
    }
}

/// An event the evaluation raised; the caller gives it a transition id and queues it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: EventKind,
    /// A repeat of a raised condition (`repeatHours`), not a new transition.
    pub reminder: bool,
    pub details: AlertDetails,
}

/// Result of [`evaluate`]: the next state (persist the families in `changed`) and the events.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub state: SiteAlertState,
    pub events: Vec<NewEvent>,
    pub changed: Vec<Family>,
}

/// Derives the events of one observation from the previous state (spec/alerts.md §2):
/// - a condition (exhaustion, below minimum, unreachable) is told once when it starts, unless a
///   raising message of the family went out less than `min_interval` ago — then it is told at
///   the first evaluation after the interval if it still holds;
/// - `recovered` / `site_reachable` only after the good state held `recovery_confirm` *and* two
///   evaluations in a row; a relapse inside that span sends nothing;
/// - reminders every `repeat` while exhausted or unreachable;
/// - `below_min_active` stays quiet while the site is (being confirmed) exhausted or has no
///   usable account, and clears silently;
/// - invalid accounts are told once per round, pooled while the minimum interval holds them back.
pub fn evaluate(
    prev: &SiteAlertState,
    obs: &Observation,
    policy: &AlertPolicy,
    now: DateTime<Utc>,
) -> Evaluation {
    let mut state = prev.clone();
    let mut events = Vec::new();
    let fc = obs.forecast.as_ref();
    if let Some(pool) = &obs.pool {
        // Exhaustion: no account counting ⇒ no evidence either way.
        let exhausted = (pool.total > 0).then_some(pool.all_exhausted);
        match step(&mut state.exhaustion, exhausted, policy, now, Guard::FULL) {
            Some(Step::Raise { reminder }) => events.push(NewEvent {
                kind: EventKind::AllExhausted,
                reminder,
                details: AlertDetails::from_pool(pool, fc),
            }),
            Some(Step::Clear { raised_at }) => events.push(NewEvent {
                kind: EventKind::Recovered,
                reminder: false,
                details: AlertDetails {
                    raised_at,
                    ..AlertDetails::from_pool(pool, fc)
                },
            }),
            None => {}
        }
        let below = match obs.min_active {
            Some(m) if pool.usable < m as usize => {
                if pool.usable == 0 || state.exhaustion.raised {
                    None
                } else {
                    Some(true)
                }
            }
            _ => Some(false),
        };
        if let Some(Step::Raise { reminder }) =
            step(&mut state.min_active, below, policy, now, Guard::SILENT)
        {
            events.push(NewEvent {
                kind: EventKind::BelowMinActive,
                reminder,
                details: AlertDetails {
                    min_active: obs.min_active,
                    ..AlertDetails::from_pool(pool, fc)
                },
            });
        }
        if let Some(rule) = &obs.pool_low {
            pool_low_step(&mut state, pool, fc, rule, policy, now, &mut events);
        }
    }

    let inv = &mut state.invalid_accounts;
    for name in &obs.invalid_accounts {
        if !inv.pending_accounts.contains(name) {
            inv.pending_accounts.push(name.clone());
        }
    }
    if !inv.pending_accounts.is_empty() && interval_passed(inv, policy, now) {
        inv.last_raise_sent_at = Some(now);
        let names = std::mem::take(&mut inv.pending_accounts);
        events.push(NewEvent {
            kind: EventKind::InvalidAccounts,
            reminder: false,
            details: AlertDetails {
                invalid_accounts: names,
                ..obs
                    .pool
                    .as_ref()
                    .map(|p| AlertDetails::from_pool(p, fc))
                    .unwrap_or_default()
            },
        });
    }

    if let Some(r) = &obs.reachability {
        let st = &state.reachability;
        let holds = if r.is_unreachable(policy.unreachable_after, now) {
            Some(true)
        } else if !st.raised {
            Some(false)
        } else if r.failing_since.is_some() {
            // Still failing while told unreachable: the confirm span of a recovery restarts.
            Some(true)
        } else if r
            .last_contact_at
            .is_some_and(|c| st.raised_at.is_none_or(|t| c > t))
        {
            Some(false)
        } else {
            // No failure known but no success since it was told either (e.g. after a restart).
            None
        };
        let details = AlertDetails {
            last_contact_at: r.last_contact_at,
            failing_since: r.failing_since,
            cause: r.cause.clone(),
            ..Default::default()
        };
        match step(&mut state.reachability, holds, policy, now, Guard::FULL) {
            Some(Step::Raise { reminder }) => events.push(NewEvent {
                kind: EventKind::SiteUnreachable,
                reminder,
                details,
            }),
            Some(Step::Clear { raised_at }) => events.push(NewEvent {
                kind: EventKind::SiteReachable,
                reminder: false,
                details: AlertDetails {
                    raised_at,
                    ..details
                },
            }),
            None => {}
        }
    }

    let changed = Family::ALL
        .into_iter()
        .filter(|f| prev.get(*f) != state.get(*f))
        .collect();
    Evaluation {
        state,
        events,
        changed,
    }
}

/// The `pool_low` family: quiet while the site is (being confirmed) exhausted, like
/// `below_min_active`; a clear is told as `pool_low_cleared` after the flap guard; no reminders.
fn pool_low_step(
    state: &mut SiteAlertState,
    pool: &PoolView,
    fc: Option<&ForecastView>,
    rule: &PoolLowRule,
    policy: &AlertPolicy,
    now: DateTime<Utc>,
    events: &mut Vec<NewEvent>,
) {
    let holds = if state.exhaustion.raised {
        None
    } else {
        pool_low_holds(pool, fc, rule)
    };
    let details = AlertDetails {
        early_warning_minutes: Some(rule.early_warning.num_minutes()),
        low_capacity_accounts: Some(rule.low_capacity_accounts),
        ..AlertDetails::from_pool(pool, fc)
    };
    match step(&mut state.pool_low, holds, policy, now, Guard::TOLD) {
        Some(Step::Raise { reminder }) => events.push(NewEvent {
            kind: EventKind::PoolLow,
            reminder,
            details,
        }),
        Some(Step::Clear { raised_at }) => events.push(NewEvent {
            kind: EventKind::PoolLowCleared,
            reminder: false,
            details: AlertDetails {
                raised_at,
                ..details
            },
        }),
        None => {}
    }
}

/// How a condition family ends and repeats.
#[derive(Debug, Clone, Copy)]
struct Guard {
    /// Send a clearing event (after the flap guard); otherwise clear silently at once.
    clear_event: bool,
    reminders: bool,
}

impl Guard {
    const FULL: Guard = Guard {
        clear_event: true,
        reminders: true,
    };
    const SILENT: Guard = Guard {
        clear_event: false,
        reminders: false,
    };
    /// Told both ways (flap-guarded clear), never repeated.
    const TOLD: Guard = Guard {
        clear_event: true,
        reminders: false,
    };
}

enum Step {
    Raise { reminder: bool },
    Clear { raised_at: Option<DateTime<Utc>> },
}

fn interval_passed(st: &FamilyState, policy: &AlertPolicy, now: DateTime<Utc>) -> bool {
    st.last_raise_sent_at
        .is_none_or(|t| now - t >= policy.min_interval)
}

/// One condition family: `holds` is `Some(true)` when the condition holds, `Some(false)` when it
/// is clear, `None` when this observation says nothing about it.
fn step(
    st: &mut FamilyState,
    holds: Option<bool>,
    policy: &AlertPolicy,
    now: DateTime<Utc>,
    guard: Guard,
) -> Option<Step> {
    match holds? {
        true => {
            st.clear_since = None;
            st.clear_evaluations = 0;
            if !st.raised {
                if !interval_passed(st, policy, now) {
                    return None;
                }
                st.raised = true;
                st.raised_at = Some(now);
                st.last_raise_sent_at = Some(now);
                return Some(Step::Raise { reminder: false });
            }
            let every = policy.repeat.filter(|_| guard.reminders)?;
            let last = st.last_raise_sent_at.unwrap_or(now);
            if now - last >= every.max(policy.min_interval) {
                st.last_raise_sent_at = Some(now);
                return Some(Step::Raise { reminder: true });
            }
            None
        }
        false => {
            if !st.raised {
                return None;
            }
            if !guard.clear_event {
                st.raised = false;
                st.raised_at = None;
                return None;
            }
            st.clear_evaluations += 1;
            let since = *st.clear_since.get_or_insert(now);
            if st.clear_evaluations >= 2 && now - since >= policy.recovery_confirm {
                let raised_at = st.raised_at.take();
                st.raised = false;
                st.clear_since = None;
                st.clear_evaluations = 0;
                return Some(Step::Clear { raised_at });
            }
            None
        }
    }
}

// ---- Delivery -------------------------------------------------------------------------------

/// A queued event as channels deliver it: the transition id is the idempotency key of every
/// message of the event (e-mail `Message-ID`, webhook `X-Quota-Patrol-Delivery`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertRecord {
    /// Transition id (UUID).
    pub id: String,
    pub site_id: String,
    pub site_name: String,
    pub kind: EventKind,
    pub at: DateTime<Utc>,
    pub reminder: bool,
    pub details: AlertDetails,
}

impl AlertRecord {
    /// Severity of the event.
    pub fn level(&self) -> Severity {
        self.kind.severity()
    }
}

/// A delivery channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    Email,
    Webhook,
}

impl ChannelKind {
    /// The API / database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Email => "email",
            ChannelKind::Webhook => "webhook",
        }
    }

    /// Parses the API / database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "email" => Some(ChannelKind::Email),
            "webhook" => Some(ChannelKind::Webhook),
            _ => None,
        }
    }
}

/// Where a queued message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Waiting for its (next) attempt.
    Pending,
    Delivered,
    /// Refused for good (e.g. SMTP 5xx, webhook 4xx): not retried.
    Failed,
    /// Not delivered within [`DELIVERY_EXPIRY_HOURS`].
    Expired,
}

impl DeliveryStatus {
    /// The API / database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Expired => "expired",
        }
    }

    /// Parses the API / database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            DeliveryStatus::Pending,
            DeliveryStatus::Delivered,
            DeliveryStatus::Failed,
            DeliveryStatus::Expired,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
    }
}

/// What to do with a message after an attempt failed `failed_attempts` times in all: retry at
/// the returned instant, or `None` when the next try would fall after `expires_at`. `jitter`
/// as in [`retry_delay`].
pub fn next_attempt_at(
    failed_attempts: u32,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    jitter: f64,
) -> Option<DateTime<Utc>> {
    let at = now + retry_delay(failed_attempts, jitter);
    (at < expires_at).then_some(at)
}

/// A queued message that is not delivered within this many hours expires (spec/alerts.md §2).
pub const DELIVERY_EXPIRY_HOURS: i64 = 24;

/// Wait before the next delivery attempt after `failed_attempts` failures: 1, 2, 4 … minutes,
/// at most one hour (spec/alerts.md §2); `jitter` (0.0..=1.0, drawn by the caller from its
/// injected random source) takes off up to [`super::retry::JITTER_SPREAD`] of it.
pub fn retry_delay(failed_attempts: u32, jitter: f64) -> Duration {
    super::retry::Backoff::new(Duration::minutes(1), Duration::hours(1))
        .with_spread(super::retry::JITTER_SPREAD)
        .delay(failed_attempts, jitter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::quota::{MAIN_GROUP, QuotaWindow, WindowKind};
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn min(n: i64) -> Duration {
        Duration::minutes(n)
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
                    &crate::core::policy::QuotaPolicy::uniform(95),
                    t0(),
                )
            }),
            snapshot: s,
        }
    }

    fn pool(total: usize, usable: usize) -> PoolView {
        PoolView {
            total,
            usable,
            all_exhausted: total > 0 && usable == 0,
            earliest_reset_at: Some(t0() + Duration::hours(3)),
            accounts: vec![],
            omitted_accounts: 0,
            exhausted: total - usable,
            invalid: 0,
        }
    }

    fn round(total: usize, usable: usize) -> Observation {
        Observation {
            pool: Some(pool(total, usable)),
            ..Default::default()
        }
    }

    /// Runs `obs` at `t0 + minutes` and returns the kinds raised (reminders marked with `+`).
    struct Run {
        state: SiteAlertState,
        policy: AlertPolicy,
    }

    impl Run {
        fn new(policy: AlertPolicy) -> Self {
            Self {
                state: SiteAlertState::default(),
                policy,
            }
        }

        fn at(&mut self, minutes: i64, obs: Observation) -> Vec<String> {
            let e = evaluate(&self.state, &obs, &self.policy, t0() + min(minutes));
            self.state = e.state;
            e.events
                .iter()
                .map(|ev| format!("{}{}", ev.kind.as_str(), if ev.reminder { "+" } else { "" }))
                .collect()
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

    #[test]
    fn exhaustion_is_told_once_per_transition_not_per_round() {
        let mut r = Run::new(AlertPolicy::default());
        assert!(r.at(0, round(3, 2)).is_empty());
        assert_eq!(r.at(10, round(3, 0)), vec!["all_exhausted"]);
        assert!(r.at(20, round(3, 0)).is_empty(), "dedupe");
        assert!(r.at(30, round(3, 0)).is_empty());
        assert!(r.state.exhaustion.raised);
    }

    #[test]
    fn recovery_waits_for_the_confirm_time_and_two_evaluations_whichever_is_later() {
        let mut r = Run::new(AlertPolicy::default());
        r.at(0, round(3, 0));
        assert!(r.at(1, round(3, 1)).is_empty(), "first good evaluation");
        assert!(
            r.at(2, round(3, 1)).is_empty(),
            "two evaluations but only 1 of 10 minutes"
        );
        assert_eq!(r.at(11, round(3, 1)), vec!["recovered"]);
        assert!(r.at(12, round(3, 1)).is_empty());

        // The time alone is not enough either: one evaluation long after.
        let mut r = Run::new(AlertPolicy::default());
        r.at(0, round(3, 0));
        assert!(r.at(60, round(3, 1)).is_empty(), "one evaluation only");
        assert!(
            r.at(61, round(3, 1)).is_empty(),
            "the span counts from the first good evaluation"
        );
        assert_eq!(r.at(70, round(3, 1)), vec!["recovered"]);
    }

    #[test]
    fn a_flap_inside_the_confirm_span_sends_nothing_new() {
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, round(3, 0)), vec!["all_exhausted"]);
        assert!(r.at(3, round(3, 1)).is_empty());
        assert!(r.at(6, round(3, 0)).is_empty(), "relapse: still raised");
        assert!(r.at(9, round(3, 1)).is_empty(), "the confirm span restarts");
        assert!(r.at(15, round(3, 1)).is_empty(), "6 of 10 minutes");
        assert_eq!(r.at(19, round(3, 1)), vec!["recovered"]);
    }

    #[test]
    fn recovered_carries_when_the_exhaustion_was_told() {
        let mut state = SiteAlertState::default();
        let p = AlertPolicy::default();
        for (m, usable) in [(0, 0), (1, 1), (11, 1)] {
            let e = evaluate(&state, &round(2, usable), &p, t0() + min(m));
            state = e.state;
            if m == 11 {
                assert_eq!(e.events[0].kind, EventKind::Recovered);
                assert_eq!(e.events[0].details.raised_at, Some(t0()));
                assert_eq!(e.events[0].details.usable_accounts, Some(1));
            }
        }
    }

    #[test]
    fn a_new_exhaustion_within_the_minimum_interval_waits_for_it_and_is_dropped_if_it_ends() {
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, round(2, 0)), vec!["all_exhausted"]);
        r.at(1, round(2, 1));
        assert_eq!(
            r.at(11, round(2, 1)),
            vec!["recovered"],
            "recovered is exempt"
        );
        assert!(
            r.at(15, round(2, 0)).is_empty(),
            "15 < 30 minutes since the last"
        );
        assert!(r.at(25, round(2, 0)).is_empty());
        assert_eq!(
            r.at(31, round(2, 0)),
            vec!["all_exhausted"],
            "still exhausted after the interval"
        );

        let mut r = Run::new(AlertPolicy::default());
        r.at(0, round(2, 0));
        r.at(1, round(2, 1));
        r.at(11, round(2, 1));
        assert!(r.at(15, round(2, 0)).is_empty());
        assert!(
            r.at(20, round(2, 1)).is_empty(),
            "held back, then over: nothing to clear"
        );
        assert!(r.at(40, round(2, 1)).is_empty());
        assert!(!r.state.exhaustion.raised);
    }

    #[test]
    fn reminders_repeat_while_exhausted_only_when_configured() {
        let mut r = Run::new(AlertPolicy {
            repeat: Some(Duration::hours(2)),
            ..Default::default()
        });
        assert_eq!(r.at(0, round(1, 0)), vec!["all_exhausted"]);
        assert!(r.at(60, round(1, 0)).is_empty());
        assert_eq!(r.at(120, round(1, 0)), vec!["all_exhausted+"]);
        assert!(r.at(180, round(1, 0)).is_empty());
        assert_eq!(r.at(245, round(1, 0)), vec!["all_exhausted+"]);

        let mut never = Run::new(AlertPolicy::default());
        never.at(0, round(1, 0));
        assert!(never.at(60 * 24 * 7, round(1, 0)).is_empty());
    }

    #[test]
    fn a_site_without_counted_accounts_neither_raises_nor_clears() {
        let mut r = Run::new(AlertPolicy::default());
        assert!(r.at(0, round(0, 0)).is_empty());
        r.at(1, round(2, 0));
        assert!(r.at(20, round(0, 0)).is_empty());
        assert!(r.at(40, round(0, 0)).is_empty());
        assert!(r.state.exhaustion.raised, "no account is not a recovery");
    }

    #[test]
    fn below_min_active_is_told_when_the_pool_thins_and_stays_quiet_while_exhausted() {
        let with_min = |total, usable| Observation {
            min_active: Some(2),
            ..round(total, usable)
        };
        let mut r = Run::new(AlertPolicy::default());
        assert!(r.at(0, with_min(4, 3)).is_empty());
        assert_eq!(r.at(10, with_min(4, 1)), vec!["below_min_active"]);
        assert!(r.at(20, with_min(4, 1)).is_empty(), "dedupe");
        assert_eq!(r.at(30, with_min(4, 0)), vec!["all_exhausted"]);
        assert!(
            r.at(31, with_min(4, 1)).is_empty(),
            "exhaustion being confirmed"
        );
        assert_eq!(r.at(41, with_min(4, 1)), vec!["recovered"]);
        assert!(
            r.at(50, with_min(4, 2)).is_empty(),
            "back to the minimum clears quietly"
        );
        assert!(!r.state.min_active.raised);
        assert_eq!(r.at(60, with_min(4, 1)), vec!["below_min_active"]);
        // Without priority routing there is no minimum.
        assert!(r.at(70, round(4, 1)).is_empty());
        assert!(!r.state.min_active.raised);
    }

    #[test]
    fn a_straight_fall_to_zero_tells_exhaustion_and_the_way_back_tells_the_thin_pool() {
        let with_min = |usable| Observation {
            min_active: Some(3),
            ..round(5, usable)
        };
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, with_min(0)), vec!["all_exhausted"]);
        r.at(5, with_min(1));
        assert_eq!(
            r.at(15, with_min(1)),
            vec!["recovered", "below_min_active"],
            "recovery first, then the thin pool"
        );
    }

    #[test]
    fn invalid_accounts_are_told_per_round_and_pooled_inside_the_minimum_interval() {
        let invalid = |names: &[&str]| Observation {
            invalid_accounts: names.iter().map(|s| s.to_string()).collect(),
            ..round(3, 2)
        };
        let mut state = SiteAlertState::default();
        let p = AlertPolicy::default();
        let mut at = |m: i64, obs: Observation| {
            let e = evaluate(&state, &obs, &p, t0() + min(m));
            state = e.state;
            e.events
        };
        let first = at(0, invalid(&["a@example.com"]));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].kind, EventKind::InvalidAccounts);
        assert_eq!(first[0].details.invalid_accounts, vec!["a@example.com"]);
        assert_eq!(first[0].details.total_accounts, Some(3));
        assert!(at(5, invalid(&[])).is_empty(), "nothing new, nothing sent");
        assert!(at(10, invalid(&["b@example.com"])).is_empty(), "held back");
        assert!(at(20, invalid(&["c@example.com", "b@example.com"])).is_empty());
        let later = at(31, invalid(&[]));
        assert_eq!(
            later[0].details.invalid_accounts,
            vec!["b@example.com", "c@example.com"],
            "pooled, each once"
        );
        assert!(at(70, invalid(&[])).is_empty());
    }

    #[test]
    fn unreachable_counts_from_the_last_contact_and_reachable_is_flap_guarded() {
        let contact = t0();
        let reach = |failing_min: Option<i64>| Observation {
            reachability: Some(Reachability {
                failing_since: failing_min.map(|m| t0() + min(m)),
                last_contact_at: Some(contact),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut r = Run::new(AlertPolicy::default());
        assert!(r.at(5, reach(Some(3))).is_empty(), "5 < 15 minutes");
        assert!(r.at(14, reach(Some(3))).is_empty());
        assert_eq!(r.at(15, reach(Some(3))), vec!["site_unreachable"]);
        assert!(r.at(16, reach(Some(3))).is_empty(), "dedupe");
        // CPA answers again (the caller's contact moves on, failures end).
        let back = |m: i64| Observation {
            reachability: Some(Reachability {
                failing_since: None,
                last_contact_at: Some(t0() + min(m)),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(r.at(20, back(20)).is_empty());
        assert!(r.at(21, back(21)).is_empty());
        assert_eq!(r.at(30, back(30)), vec!["site_reachable"]);
        // Not failing at all is never unreachable, however old the last contact.
        assert!(
            !Reachability {
                failing_since: None,
                last_contact_at: Some(t0()),
                ..Default::default()
            }
            .is_unreachable(min(15), t0() + Duration::days(3))
        );
        // A site that never answered counts from its first failure.
        let never = Reachability {
            failing_since: Some(t0()),
            last_contact_at: None,
            ..Default::default()
        };
        assert!(!never.is_unreachable(min(15), t0() + min(14)));
        assert!(never.is_unreachable(min(15), t0() + min(15)));
    }

    #[test]
    fn reachable_needs_a_success_after_the_alert_and_a_relapse_restarts_the_span() {
        let obs = |failing: Option<i64>, contact: Option<i64>| Observation {
            reachability: Some(Reachability {
                failing_since: failing.map(|m| t0() + min(m)),
                last_contact_at: contact.map(|m| t0() + min(m)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(15, obs(Some(1), Some(0))), vec!["site_unreachable"]);
        // A restart forgets the failures; the old contact is no evidence of recovery.
        assert!(r.at(16, obs(None, Some(0))).is_empty());
        assert!(r.at(40, obs(None, Some(0))).is_empty());
        assert!(r.state.reachability.raised);
        assert_eq!(r.state.reachability.clear_evaluations, 0);
        // CPA answers at 41, fails again at 45: the recovery is not confirmed.
        assert!(r.at(41, obs(None, Some(41))).is_empty());
        assert!(r.at(45, obs(Some(45), Some(41))).is_empty());
        assert!(
            r.at(52, obs(None, Some(52))).is_empty(),
            "the span restarted at 52"
        );
        assert!(r.at(60, obs(None, Some(60))).is_empty());
        assert_eq!(r.at(62, obs(None, Some(62))), vec!["site_reachable"]);
    }

    #[test]
    fn an_observation_without_the_family_leaves_its_state_alone() {
        let mut r = Run::new(AlertPolicy::default());
        r.at(0, round(2, 0));
        let before = r.state.clone();
        let e = evaluate(&before, &Observation::default(), &r.policy, t0() + min(90));
        assert!(e.events.is_empty());
        assert!(e.changed.is_empty());
        assert_eq!(e.state, before);
    }

    #[test]
    fn changed_names_exactly_the_families_whose_state_moved() {
        let e = evaluate(
            &SiteAlertState::default(),
            &Observation {
                invalid_accounts: vec!["x".into()],
                ..round(1, 0)
            },
            &AlertPolicy::default(),
            t0(),
        );
        assert_eq!(e.changed, vec![Family::Exhaustion, Family::InvalidAccounts]);
    }

    /// A round whose forecast runs dry `lead` minutes before a reset at t0 + 10 h (`None`: not
    /// projected dry), with `earlyWarningMinutes` 120 and `lowCapacityAccounts` 2.
    fn burning(total: usize, usable: usize, lead: Option<i64>) -> Observation {
        let reset = t0() + Duration::hours(10);
        Observation {
            forecast: Some(ForecastView {
                projected_dry_at: lead.map(|m| reset - min(m)),
                earliest_reset_at: Some(reset),
                burn_per_hour: 12.5,
                remaining_percent: 80.0,
            }),
            pool_low: Some(PoolLowRule {
                early_warning: min(120),
                low_capacity_accounts: 2,
            }),
            ..round(total, usable)
        }
    }

    #[test]
    fn pool_low_is_raised_once_when_the_forecast_runs_dry_inside_the_warning_window() {
        let mut r = Run::new(AlertPolicy::default());
        assert!(r.at(0, burning(4, 4, None)).is_empty(), "no dry time");
        assert!(
            r.at(10, burning(4, 4, Some(120))).is_empty(),
            "exactly 120 min is not more"
        );
        assert_eq!(r.at(20, burning(4, 4, Some(121))), vec!["pool_low"]);
        assert!(r.at(30, burning(4, 4, Some(300))).is_empty(), "dedupe");
        assert!(
            r.at(600, burning(4, 4, Some(300))).is_empty(),
            "no reminders for a warning"
        );
        let e = evaluate(
            &SiteAlertState::default(),
            &burning(4, 4, Some(180)),
            &AlertPolicy::default(),
            t0(),
        );
        let d = &e.events[0].details;
        assert_eq!(e.events[0].kind, EventKind::PoolLow);
        assert_eq!(
            d.projected_dry_at,
            Some(t0() + Duration::hours(10) - min(180))
        );
        assert_eq!(d.forecast_reset_at, Some(t0() + Duration::hours(10)));
        assert_eq!(d.burn_per_hour, Some(12.5));
        assert_eq!(
            (d.early_warning_minutes, d.low_capacity_accounts),
            (Some(120), Some(2))
        );
        assert_eq!(EventKind::PoolLow.severity(), Severity::Warning);
    }

    #[test]
    fn pool_low_clears_only_30_minutes_back_outside_the_window_and_after_the_flap_guard() {
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, burning(4, 4, Some(200))), vec!["pool_low"]);
        // 91..=120 min before the reset: inside the hysteresis band, nothing moves.
        assert!(r.at(5, burning(4, 4, Some(110))).is_empty());
        assert!(r.at(30, burning(4, 4, Some(91))).is_empty());
        assert!(r.state.pool_low.raised);
        assert_eq!(
            r.state.pool_low.clear_evaluations, 0,
            "the band is no clear"
        );
        // 90 min: clear, but told only after 10 minutes and two evaluations.
        assert!(r.at(40, burning(4, 4, Some(90))).is_empty());
        assert!(r.at(45, burning(4, 4, None)).is_empty());
        assert_eq!(r.at(50, burning(4, 4, None)), vec!["pool_low_cleared"]);
        assert!(!r.state.pool_low.raised);
        assert!(
            r.at(60, burning(4, 4, Some(100))).is_empty(),
            "band: stays clear"
        );
        // A relapse inside the confirm span of a clear sends nothing.
        let mut r = Run::new(AlertPolicy::default());
        r.at(0, burning(4, 4, Some(200)));
        r.at(1, burning(4, 4, None));
        assert!(r.at(5, burning(4, 4, Some(200))).is_empty());
        assert!(r.at(12, burning(4, 4, None)).is_empty(), "span restarted");
        assert!(r.at(20, burning(4, 4, None)).is_empty());
        assert_eq!(r.at(22, burning(4, 4, None)), vec!["pool_low_cleared"]);
    }

    #[test]
    fn pool_low_is_raised_by_low_capacity_and_cleared_back_at_the_limit() {
        let mut r = Run::new(AlertPolicy::default());
        assert!(
            r.at(0, burning(4, 2, None)).is_empty(),
            "2 usable = the limit"
        );
        assert_eq!(r.at(10, burning(4, 1, None)), vec!["pool_low"]);
        // Capacity back, but the forecast now says dry too early: still held.
        assert!(r.at(20, burning(4, 3, Some(150))).is_empty());
        assert!(r.at(40, burning(4, 3, Some(150))).is_empty());
        assert!(r.state.pool_low.raised);
        r.at(50, burning(4, 3, None));
        assert_eq!(r.at(60, burning(4, 3, None)), vec!["pool_low_cleared"]);
        // The limit is capped at the accounts that count: a one-account site is not "low".
        let mut one = Run::new(AlertPolicy::default());
        assert!(one.at(0, burning(1, 1, None)).is_empty());
        // Dry with no reset known: nothing says capacity comes back.
        let no_reset = ForecastView {
            projected_dry_at: Some(t0() + min(30)),
            earliest_reset_at: None,
            ..Default::default()
        };
        let rule = PoolLowRule {
            early_warning: min(120),
            low_capacity_accounts: 2,
        };
        assert_eq!(
            pool_low_holds(&pool(4, 4), Some(&no_reset), &rule),
            Some(true)
        );
        // 0 turns the capacity rule off.
        let off = PoolLowRule {
            early_warning: min(120),
            low_capacity_accounts: 0,
        };
        assert_eq!(pool_low_holds(&pool(4, 1), None, &off), None);
    }

    #[test]
    fn pool_low_stays_quiet_while_the_site_is_exhausted_and_without_a_forecast() {
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, burning(3, 0, Some(500))), vec!["all_exhausted"]);
        assert!(
            !r.state.pool_low.raised,
            "no usable account: exhaustion's news"
        );
        r.at(5, burning(3, 3, Some(500)));
        assert!(
            r.at(8, burning(3, 3, Some(500))).is_empty(),
            "recovery being confirmed: still quiet"
        );
        assert_eq!(
            r.at(15, burning(3, 3, Some(500))),
            vec!["recovered", "pool_low"],
            "after the recovery, the early warning"
        );
        // No forecast known: the forecast part says nothing (a raised warning is kept).
        let held = r.state.clone();
        let e = evaluate(
            &held,
            &Observation {
                forecast: None,
                ..burning(3, 3, None)
            },
            &r.policy,
            t0() + min(100),
        );
        assert!(e.events.is_empty());
        assert!(e.state.pool_low.raised);
    }

    #[test]
    fn a_restart_resumes_pool_low_from_the_stored_state_without_resending() {
        let mut r = Run::new(AlertPolicy::default());
        assert_eq!(r.at(0, burning(4, 4, Some(200))), vec!["pool_low"]);
        r.at(3, burning(4, 4, None));
        // What the store keeps: the family's JSON; a new process loads it.
        let json = serde_json::to_string(&r.state.pool_low).unwrap();
        let mut after = Run::new(AlertPolicy::default());
        after.state.pool_low = serde_json::from_str(&json).unwrap();
        assert!(
            after.at(5, burning(4, 4, Some(200))).is_empty(),
            "no resend"
        );
        after.at(6, burning(4, 4, None));
        assert!(after.at(10, burning(4, 4, None)).is_empty());
        assert_eq!(after.at(16, burning(4, 4, None)), vec!["pool_low_cleared"]);
    }

    #[test]
    fn the_names_round_trip() {
        for f in Family::ALL {
            assert_eq!(Family::parse(f.as_str()), Some(f));
        }
        for k in [
            EventKind::AllExhausted,
            EventKind::Recovered,
            EventKind::BelowMinActive,
            EventKind::InvalidAccounts,
            EventKind::SiteUnreachable,
            EventKind::SiteReachable,
            EventKind::PoolLow,
            EventKind::PoolLowCleared,
            EventKind::DailyDigest,
            EventKind::Test,
        ] {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.as_str())
            );
        }
        for c in [ChannelKind::Email, ChannelKind::Webhook] {
            assert_eq!(ChannelKind::parse(c.as_str()), Some(c));
        }
        for d in [
            DeliveryStatus::Pending,
            DeliveryStatus::Delivered,
            DeliveryStatus::Failed,
            DeliveryStatus::Expired,
        ] {
            assert_eq!(DeliveryStatus::parse(d.as_str()), Some(d));
        }
        assert_eq!(EventKind::AllExhausted.severity(), Severity::Critical);
        assert_eq!(EventKind::InvalidAccounts.severity(), Severity::Warning);
        assert_eq!(EventKind::Recovered.severity(), Severity::Info);
    }

    #[test]
    fn a_retry_that_would_fall_after_the_expiry_is_not_scheduled() {
        let expires = t0() + Duration::hours(DELIVERY_EXPIRY_HOURS);
        assert_eq!(next_attempt_at(1, t0(), expires, 0.0), Some(t0() + min(1)));
        assert_eq!(
            next_attempt_at(9, expires - min(61), expires, 0.0),
            Some(expires - min(1))
        );
        assert_eq!(next_attempt_at(9, expires - min(60), expires, 0.0), None);
    }

    #[test]
    fn retries_back_off_from_one_minute_to_an_hour() {
        let got: Vec<i64> = (1..=9).map(|n| retry_delay(n, 0.0).num_minutes()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(
            retry_delay(9, 1.0),
            Duration::minutes(54),
            "jitter takes 10 % off"
        );
    }

    proptest! {
        #[test]
        fn backoff_is_capped_and_non_decreasing(n in 0u32..10_000, jitter in 0.0f64..=1.0) {
            let d = retry_delay(n, jitter);
            prop_assert!(d >= Duration::seconds(54) && d <= Duration::hours(1));
            prop_assert!(retry_delay(n + 1, jitter) >= d);
        }

        #[test]
        fn one_raise_per_transition_whatever_the_sequence(
            seq in proptest::collection::vec(0usize..3, 1..40),
        ) {
            // Usable counts over 2 accounts, one evaluation every 7 minutes: between two
            // `all_exhausted` there is always a `recovered`, and vice versa.
            let mut state = SiteAlertState::default();
            let p = AlertPolicy::default();
            let mut last: Option<EventKind> = None;
            for (i, usable) in seq.into_iter().enumerate() {
                let e = evaluate(&state, &round(2, usable.min(2)), &p, t0() + min(7 * i as i64));
                state = e.state;
                for ev in e.events {
                    prop_assert_ne!(Some(ev.kind), last);
                    last = Some(ev.kind);
                }
            }
        }
    }
}
