//! The exhaustion forecast (docs/rules/patrol.md §10): a window's burn rate from its snapshot history,
//! the projected time it reaches its deciding threshold, and the time a whole site runs dry.
//! Owns the choice of the samples of the current window (a reset cuts the history), the
//! weighting (recent samples count more) and the site model (remaining usable capacity against
//! the summed burn of the accounts in use). Pure: the history, the thresholds and `now` come in
//! as arguments; it must not read the store or the clock. `jobs::forecast` feeds it.
//!
//! Burn rate: exponentially weighted least squares of used percent against time over the
//! samples since the window's last reset, weight `0.5^(age / half_life)` where age is measured
//! from the newest sample; the slope is clamped at 0 (used percent never falls inside a window).

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

/// Two `reset_at` values closer than this are the same window: `reset_at` derived from
/// `reset_after_seconds` is rounded to the minute, so consecutive probes may differ by one.
pub const RESET_TOLERANCE_SECONDS: i64 = 120;

/// A fall of used percent larger than this (percentage points) between two consecutive samples
/// is a reset even when `reset_at` is missing or unchanged.
pub const DROP_TOLERANCE_PERCENT: f64 = 0.5;

/// One point of a window's history (from `snapshot_history`), UTC.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When the probe was made.
    pub at: DateTime<Utc>,
    /// Used share of the window, percent (may exceed 100).
    pub used_percent: f64,
    /// When this window resets, as the probe reported it.
    pub reset_at: Option<DateTime<Utc>>,
}

/// Tuning of the burn rate (defaults in docs/patrol.md "The exhaustion forecast").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForecastConfig {
    /// The samples of the current window must span at least this many minutes (default 30):
    /// two probes a minute apart say nothing about a rate.
    pub min_span_minutes: i64,
    /// A sample this many minutes older than the newest weighs half as much (default 120).
    pub half_life_minutes: i64,
}

impl Default for ForecastConfig {
    fn default() -> Self {
        Self {
            min_span_minutes: 30,
            half_life_minutes: 120,
        }
    }
}

/// A window's burn rate over the samples since its last reset (recent samples weighted more).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Burn {
    /// Percentage points of the window used per hour, >= 0.
    pub percent_per_hour: f64,
    /// The oldest sample used (the first probe after the last reset seen).
    pub since: DateTime<Utc>,
    /// Samples used (distinct timestamps).
    pub samples: usize,
}

/// The samples of the current window, oldest first: sorted by time (the history may come out
/// of order, and a clock that went backwards leaves older timestamps after newer ones), one per
/// timestamp (the last given wins), and cut at the newest reset — a change of `reset_at` beyond
/// [`RESET_TOLERANCE_SECONDS`] or a fall of used percent beyond [`DROP_TOLERANCE_PERCENT`].
pub fn current_window(samples: &[Sample]) -> Vec<Sample> {
    let mut sorted: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.used_percent.is_finite())
        .collect();
    // Stable: among equal timestamps the input order stays, so the last given is last.
    sorted.sort_by_key(|s| s.at);
    let mut dedup: Vec<Sample> = Vec::with_capacity(sorted.len());
    for s in sorted {
        match dedup.last_mut() {
            Some(last) if last.at == s.at => *last = s,
            _ => dedup.push(s),
        }
    }
    let start = dedup
        .windows(2)
        .rposition(|w| is_reset(&w[0], &w[1]))
        .map_or(0, |i| i + 1);
    dedup.split_off(start)
}

/// Whether a reset happened between `before` and `after` (consecutive in time).
fn is_reset(before: &Sample, after: &Sample) -> bool {
    let moved = match (before.reset_at, after.reset_at) {
        (Some(a), Some(b)) => (b - a).num_seconds().abs() > RESET_TOLERANCE_SECONDS,
        _ => false,
    };
    moved || after.used_percent < before.used_percent - DROP_TOLERANCE_PERCENT
}

/// The burn rate of a window from its history (any order, any window). `None` when the
/// current window (see [`current_window`]) has fewer than two samples or they span less than
/// `cfg.min_span_minutes`. Rule: docs/rules/patrol.md §10; model in the module doc.
pub fn burn_rate(samples: &[Sample], cfg: &ForecastConfig) -> Option<Burn> {
    let window = current_window(samples);
    let (first, last) = (window.first()?, window.last()?);
    if window.len() < 2 || last.at - first.at < Duration::minutes(cfg.min_span_minutes.max(1)) {
        return None;
    }
    let half_life_h = cfg.half_life_minutes.max(1) as f64 / 60.0;
    let hours = |s: &Sample| (s.at - first.at).num_seconds() as f64 / 3600.0;
    let newest = hours(last);
    let weighted: Vec<(f64, f64, f64)> = window
        .iter()
        .map(|s| {
            let x = hours(s);
            (x, s.used_percent, 0.5f64.powf((newest - x) / half_life_h))
        })
        .collect();
    let sw: f64 = weighted.iter().map(|p| p.2).sum();
    let mx = weighted.iter().map(|p| p.2 * p.0).sum::<f64>() / sw;
    let my = weighted.iter().map(|p| p.2 * p.1).sum::<f64>() / sw;
    let sxx: f64 = weighted.iter().map(|p| p.2 * (p.0 - mx).powi(2)).sum();
    let sxy: f64 = weighted.iter().map(|p| p.2 * (p.0 - mx) * (p.1 - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    Some(Burn {
        percent_per_hour: slope.max(0.0),
        since: first.at,
        samples: window.len(),
    })
}

/// When a window reaches its threshold at its burn rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Projection {
    /// Already at or over the threshold.
    AlreadyExhausted,
    /// Reaches the threshold at `at`, before the window resets.
    At { at: DateTime<Utc> },
    /// The window resets before it would reach the threshold (or it does not burn at all).
    NotBeforeReset,
    /// No burn rate yet, no reset known for a window that does not burn, or a reset time
    /// already past (the reading is stale).
    Unknown,
}

impl Projection {
    /// The instant of [`Projection::At`], else `None`.
    pub fn at(&self) -> Option<DateTime<Utc>> {
        match self {
            Projection::At { at } => Some(*at),
            _ => None,
        }
    }
}

/// Projects when a window at `used_percent` reaches `threshold` (percent, compared with >=) at
/// `burn`, compared with its `reset_at`: already over ⇒ `AlreadyExhausted`; a reset at or
/// before `now` ⇒ `Unknown` (stale reading); no burn ⇒ `Unknown`; zero burn ⇒ `NotBeforeReset`
/// when the reset is known, else `Unknown`; else `now + (threshold - used) / rate`, which is
/// `NotBeforeReset` when not before `reset_at`. Rule: docs/rules/patrol.md §10.
pub fn project(
    used_percent: f64,
    threshold: u8,
    burn: Option<&Burn>,
    reset_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Projection {
    let headroom = f64::from(threshold) - used_percent;
    if headroom <= 0.0 {
        return Projection::AlreadyExhausted;
    }
    if reset_at.is_some_and(|r| r <= now) {
        return Projection::Unknown;
    }
    let Some(burn) = burn else {
        return Projection::Unknown;
    };
    match (dry_in(headroom, burn.percent_per_hour), reset_at) {
        (None, Some(_)) => Projection::NotBeforeReset,
        (None, None) => Projection::Unknown,
        (Some(d), Some(r)) if now + d >= r => Projection::NotBeforeReset,
        (Some(d), _) => Projection::At { at: now + d },
    }
}

/// When an account runs out, from the projections of the windows that decide it: already
/// exhausted if one is; else the earliest `At`; else `Unknown` if one is unknown (or there is
/// no window); else `NotBeforeReset`. The round table's "runs out" column.
pub fn account_projection(windows: impl IntoIterator<Item = Projection>) -> Projection {
    let (mut earliest, mut unknown, mut any) = (None::<DateTime<Utc>>, false, false);
    for p in windows {
        any = true;
        match p {
            Projection::AlreadyExhausted => return Projection::AlreadyExhausted,
            Projection::At { at } => earliest = Some(earliest.map_or(at, |e| e.min(at))),
            Projection::Unknown => unknown = true,
            Projection::NotBeforeReset => {}
        }
    }
    match earliest {
        Some(at) => Projection::At { at },
        None if unknown || !any => Projection::Unknown,
        None => Projection::NotBeforeReset,
    }
}

/// How long `headroom` percent lasts at `rate` percent per hour; `None` for a rate that is not
/// positive or a time beyond chrono's range (~10^5 years: never, in practice).
fn dry_in(headroom: f64, rate: f64) -> Option<Duration> {
    if rate <= 1e-9 || !rate.is_finite() {
        return None;
    }
    let secs = headroom.max(0.0) / rate * 3600.0;
    (secs < 1e12).then(|| Duration::seconds(secs.round() as i64))
}

/// One account as the site forecast sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct AccountInput {
    pub name: String,
    /// Usable now (`core::availability`): only usable accounts hold remaining capacity.
    pub usable: bool,
    /// Position in the consumption order (priority routing: active set first, then successors);
    /// None = unordered.
    pub order: Option<usize>,
    /// Deciding threshold minus used percent of the window the site forecast follows, >= 0.
    pub headroom_percent: f64,
    /// That window's burn rate (percent per hour); `None` = not known yet.
    pub burn_per_hour: Option<f64>,
    /// When capacity of this account comes back: its window's reset (usable accounts) or the
    /// end of its exhaustion (exhausted accounts); `None` = unknown.
    pub reset_at: Option<DateTime<Utc>>,
}

/// The forecast of one site (camelCase JSON, `GET /api/sites/{id}/forecast`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteForecast {
    pub computed_at: DateTime<Utc>,
    /// Usable accounts now.
    pub usable_accounts: usize,
    /// Usable accounts in use: the active set under priority routing (`min_active` first in
    /// order), every usable account otherwise.
    pub active_accounts: usize,
    /// Sum of the usable accounts' headroom, percentage points (100 = one account's window).
    pub remaining_percent: f64,
    /// Summed burn of the accounts in use, percentage points per hour (unknown burns count 0).
    pub burn_per_hour: f64,
    /// `computed_at + remaining / burn`; `None` when nothing burns (or no account is usable
    /// and nothing is known to burn).
    pub projected_dry_at: Option<DateTime<Utc>>,
    /// The earliest reset over every account (usable or exhausted): when capacity may return.
    pub earliest_reset_at: Option<DateTime<Utc>>,
    /// projected_dry_at is before earliest_reset_at (or before any reset when none is known).
    pub dry_before_reset: bool,
}

/// The site's dry time: the usable accounts' remaining capacity against the summed burn of the
/// accounts in use. `min_active = Some(n)` (priority routing on, `priorityMinActiveCount`): the
/// first `n` usable accounts by `order` (unordered ones last, by input order) are in use and
/// their successors take over the same demand in order as each runs out, so the pool runs dry
/// when the whole remaining capacity is spent at the active set's summed burn. `None`: every
/// usable account is in use. No usable account ⇒ dry now. Model: docs/patrol.md "The exhaustion
/// forecast".
pub fn site_forecast(
    accounts: &[AccountInput],
    min_active: Option<usize>,
    now: DateTime<Utc>,
) -> SiteForecast {
    let mut usable: Vec<&AccountInput> = accounts.iter().filter(|a| a.usable).collect();
    usable.sort_by_key(|a| a.order.unwrap_or(usize::MAX));
    let in_use = match min_active {
        Some(n) => n.max(1).min(usable.len()),
        None => usable.len(),
    };
    let remaining: f64 = usable.iter().map(|a| a.headroom_percent.max(0.0)).sum();
    let burn: f64 = usable[..in_use]
        .iter()
        .filter_map(|a| a.burn_per_hour)
        .filter(|b| b.is_finite())
        .map(|b| b.max(0.0))
        .sum();
    let projected_dry_at = if usable.is_empty() {
        Some(now)
    } else {
        dry_in(remaining, burn).map(|d| now + d)
    };
    let earliest_reset_at = accounts.iter().filter_map(|a| a.reset_at).min();
    let dry_before_reset = match (projected_dry_at, earliest_reset_at) {
        (Some(d), Some(r)) => d < r,
        (Some(_), None) => true,
        (None, _) => false,
    };
    SiteForecast {
        computed_at: now,
        usable_accounts: usable.len(),
        active_accounts: in_use,
        remaining_percent: remaining,
        burn_per_hour: burn,
        projected_dry_at,
        earliest_reset_at,
        dry_before_reset,
    }
}

#[cfg(test)]
mod tests;
