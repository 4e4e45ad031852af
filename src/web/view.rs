//! Template contexts of the status page: `jobs::status_page`'s read model formatted for a
//! reader in `[alerts] timezone` (times as `2026-05-21 08:12 CEST` and "in 3 h 12 min"),
//! percentages as bar widths and words (never colour alone). Only what is listed here reaches
//! a template, so no secret can.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::Serialize;

use super::chart::{self, Chart};
use crate::core::alerting::Family;
use crate::core::availability::Availability;
use crate::core::quota::WindowKind;
use crate::core::report::{RunStatus, RunSummary};
use crate::core::when::{ago, local, until};
use crate::jobs::status_page::{AccountRow, CHART_DAYS, SiteCard, SitePage, WindowCell};

/// An instant as shown: absolute (local) and relative to the page's time.
#[derive(Debug, Clone, Serialize)]
pub struct When {
    /// `2026-05-21 08:12 CEST`.
    pub at: String,
    /// `in 3 h 12 min` / `3 h 12 min ago`.
    pub rel: String,
    /// RFC 3339 UTC, for `<time datetime>`.
    pub iso: String,
}

/// Formats instants for one page.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub now: DateTime<Utc>,
    pub tz: Tz,
}

impl Clock {
    fn when(&self, t: DateTime<Utc>) -> When {
        When {
            at: local(t, self.tz),
            rel: if t > self.now {
                until(self.now, t)
            } else {
                ago(t, self.now)
            },
            iso: t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }

    fn opt(&self, t: Option<DateTime<Utc>>) -> Option<When> {
        t.map(|t| self.when(t))
    }
}

/// Parts shared by every page.
#[derive(Debug, Clone, Serialize)]
pub struct Frame {
    pub generated: When,
    pub timezone: String,
    /// Seconds between automatic reloads (`<meta http-equiv="refresh">`).
    pub refresh_seconds: u32,
    pub signed_in: bool,
}

impl Frame {
    pub fn new(clock: Clock, signed_in: bool) -> Self {
        Self {
            generated: clock.when(clock.now),
            timezone: clock.tz.name().to_string(),
            refresh_seconds: 60,
            signed_in,
        }
    }
}

/// How CPA's management API answers.
#[derive(Debug, Clone, Serialize)]
pub struct Reach {
    /// `reachable`, `unreachable`, `refused` (management key), `unsupported` (an 8.x CPA
    /// that dropped `/v0`, management off or a cluster node), `paused`, `unknown`, `off`.
    pub state: &'static str,
    pub text: String,
    /// The `X-CPA-VERSION` CPA last reported (`v7.2.140`), when known.
    pub version: Option<String>,
}

/// Counts of a card.
#[derive(Debug, Clone, Serialize)]
pub struct Counts {
    pub total: usize,
    pub usable: usize,
    pub active: usize,
    pub exhausted: usize,
    /// Invalid (401) and deactivated (402).
    pub invalid: usize,
    pub disabled: usize,
    pub failing: usize,
    pub no_data: usize,
}

/// A round as listed.
#[derive(Debug, Clone, Serialize)]
pub struct Round {
    pub kind: String,
    /// `completed`, `partial`, `failed`, `running`, ...
    pub status: String,
    pub started: When,
    pub finished: Option<When>,
    pub total: usize,
    pub probed: usize,
    pub reused: usize,
    pub failed: usize,
    pub disabled: usize,
    pub enabled: usize,
    pub deleted: usize,
    pub dry_run: bool,
    pub error: Option<String>,
}

/// A raised alert family.
#[derive(Debug, Clone, Serialize)]
pub struct RaisedAlert {
    pub family: &'static str,
    pub label: &'static str,
    pub since: Option<When>,
}

/// One site's card.
#[derive(Debug, Clone, Serialize)]
pub struct Card {
    pub id: String,
    pub name: String,
    pub enabled: bool,
    pub href: String,
    pub reach: Reach,
    pub counts: Option<Counts>,
    pub earliest_reset: Option<When>,
    /// The forecast's dry time, when something burns.
    pub dry: Option<When>,
    /// The dry time comes before the earliest reset (or no reset is known).
    pub dry_before_reset: bool,
    /// Remaining capacity of the usable accounts, accounts' worth (one decimal).
    pub capacity: Option<String>,
    pub last_round: Option<Round>,
    pub polling: bool,
    pub next_round: Option<When>,
    pub alerts: Vec<RaisedAlert>,
}

/// A window's bar.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    /// Used percent as reported (may exceed 100), one decimal.
    pub shown: String,
    /// Width of the fill, percent of the meter (clamped to 0..100).
    pub width: String,
    /// `ok`, `near` (within 10 points of the threshold) or `over` (at or above it).
    pub level: &'static str,
    /// The deciding threshold; `None`: this window does not disable the account.
    pub threshold: Option<u8>,
}

/// One account row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub name: String,
    pub display: String,
    pub priority: Option<u32>,
    pub plan: String,
    /// `weekly` or `monthly`.
    pub long_label: &'static str,
    pub long: Option<Bar>,
    pub five_hour: Option<Bar>,
    /// `usable`, `exhausted`, `invalid`, `deactivated`, `failing`, `noData`, `disabled`.
    pub availability: &'static str,
    pub availability_label: &'static str,
    pub until: Option<When>,
    pub next_reset: Option<When>,
    pub reason: Option<String>,
    pub owner: Option<&'static str>,
    pub provisional: bool,
    pub disabled: bool,
    pub active: bool,
    pub pending: bool,
    pub exception: bool,
    pub never_act: bool,
    pub checked: Option<When>,
    /// The last probe's error as reported (may hold an upstream body).
    pub error: Option<String>,
    /// Its first [`SHORT_ERROR`] characters (the cell; the whole text is its tooltip).
    pub error_short: Option<String>,
    pub next_probe: Option<When>,
    /// Banked reset credits, `2 (1 now)` (`None`: mode `off` or nothing known).
    pub reset_credits: Option<String>,
    /// Passive evidence (docs/status-page.md): `weekly 40 % · 5-hour 10 %`, when CPA saw it,
    /// and whether it is newer than the last probe.
    pub passive: Option<PassiveLine>,
}

/// The passive evidence of a row.
#[derive(Debug, Clone, Serialize)]
pub struct PassiveLine {
    pub text: String,
    pub seen: When,
    pub newer: bool,
}

/// One operation-log line.
#[derive(Debug, Clone, Serialize)]
pub struct LogLine {
    pub at: When,
    pub level: &'static str,
    pub category: &'static str,
    pub operation: String,
    pub account: Option<String>,
    pub message: String,
}

/// A router account as listed.
#[derive(Debug, Clone, Serialize)]
pub struct RouterAccountRow {
    pub pool: String,
    pub id: String,
    pub tier: u64,
    pub site: Option<String>,
    pub enabled: bool,
    pub state: String,
    pub until: Option<When>,
    pub cooldown: Option<String>,
    pub cooldown_until: Option<When>,
    pub demoted: bool,
}

/// The overview page (`/`).
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    pub frame: Frame,
    pub cards: Vec<Card>,
}

/// A site's page (`/sites/{id}`).
#[derive(Debug, Clone, Serialize)]
pub struct SiteView {
    pub frame: Frame,
    pub card: Card,
    pub routing_enabled: bool,
    pub min_active: u32,
    pub rows: Vec<Row>,
    pub rounds: Vec<Round>,
    pub log: Vec<LogLine>,
    pub chart: Chart,
    pub chart_days: i64,
    /// `None` without a router.
    pub router: Option<Vec<RouterAccountRow>>,
    /// The site's banked reset credits line (`None`: mode `off`; docs/reset-credits.md).
    pub reset_credits: Option<String>,
}

fn family_label(f: Family) -> &'static str {
    match f {
        Family::Exhaustion => "every account exhausted",
        Family::MinActive => "below the minimum of active accounts",
        Family::InvalidAccounts => "invalid accounts found",
        Family::Reachability => "CPA unreachable",
        Family::PoolLow => "pool running low",
    }
}

fn availability_label(a: Availability) -> &'static str {
    match a {
        Availability::Usable => "usable",
        Availability::Exhausted { .. } => "exhausted",
        Availability::Invalid => "invalid (401)",
        Availability::Deactivated => "deactivated (402)",
        Availability::Failing { .. } => "probe failing",
        Availability::NoData => "no data",
        Availability::Disabled { .. } => "disabled",
    }
}

fn run_status(s: RunStatus) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn round(c: Clock, r: &RunSummary) -> Round {
    Round {
        kind: r.source.clone(),
        status: run_status(r.status),
        started: c.when(r.started_at),
        finished: c.opt(r.finished_at),
        total: r.total_accounts,
        probed: r.probed_count,
        reused: r.reused_count,
        failed: r.failed_count,
        disabled: r.disable_count,
        enabled: r.enable_count,
        deleted: r.delete_count,
        dry_run: r.dry_run,
        error: r.error.clone(),
    }
}

fn reach(c: Clock, s: &SiteCard) -> Reach {
    Reach {
        version: s.contact.cpa_version.clone(),
        ..reach_state(c, s)
    }
}

fn reach_state(c: Clock, s: &SiteCard) -> Reach {
    let st = &s.contact;
    if !s.site_enabled {
        return Reach {
            state: "off",
            text: "site disabled".into(),
            version: None,
        };
    }
    if let Some(k) = &st.key_refusal {
        return Reach {
            state: "refused",
            text: format!(
                "management key refused ({}); next automatic try {}",
                k.cause,
                c.when(k.next_automatic_try_at).rel
            ),
            version: None,
        };
    }
    if let Some(why) = &st.cpa_unsupported {
        let paused = st
            .paused_until
            .map(|p| format!("; next try {}", c.when(p).rel))
            .unwrap_or_default();
        return Reach {
            state: "unsupported",
            text: format!("{why}{paused}"),
            version: None,
        };
    }
    if let Some(since) = st.cpa_failing_since {
        let paused = st
            .paused_until
            .map(|p| format!("; paused until {}", c.when(p).at))
            .unwrap_or_default();
        return Reach {
            state: "unreachable",
            text: format!("CPA failing since {}{paused}", c.when(since).rel),
            version: None,
        };
    }
    match st.last_cpa_contact_at {
        Some(t) => Reach {
            state: "reachable",
            text: format!("last contact {}", c.when(t).rel),
            version: None,
        },
        None => Reach {
            state: "unknown",
            text: "not contacted yet".into(),
            version: None,
        },
    }
}

/// The card of `s` as shown at `c.now`.
pub fn card(c: Clock, s: &SiteCard) -> Card {
    let f = s.forecast.as_ref();
    Card {
        id: s.site_id.clone(),
        name: s.site_name.clone(),
        enabled: s.site_enabled,
        href: format!("/sites/{}", s.site_id),
        reach: reach(c, s),
        counts: s.counts.map(|k| Counts {
            total: k.total,
            usable: k.usable,
            active: s.active,
            exhausted: k.exhausted,
            invalid: k.invalid + k.deactivated,
            disabled: k.disabled,
            failing: k.failing,
            no_data: k.no_data,
        }),
        earliest_reset: c.opt(s.earliest_reset_at),
        dry: c.opt(f.and_then(|f| f.projected_dry_at)),
        dry_before_reset: f.is_some_and(|f| f.dry_before_reset),
        capacity: f.map(|f| format!("{:.1}", f.remaining_percent / 100.0)),
        last_round: s.last_round.as_ref().map(|r| round(c, r)),
        polling: s.contact.is_polling,
        next_round: c.opt(s.contact.next_scheduled_at),
        alerts: s
            .raised
            .iter()
            .map(|(f, since)| RaisedAlert {
                family: f.as_str(),
                label: family_label(*f),
                since: c.opt(*since),
            })
            .collect(),
    }
}

fn bar(w: &WindowCell) -> Option<Bar> {
    let used = w.used_percent?;
    let level = match w.threshold.map(f64::from) {
        Some(t) if used >= t => "over",
        Some(t) if used >= t - 10.0 => "near",
        _ => "ok",
    };
    Some(Bar {
        shown: format!("{used:.1}"),
        width: format!("{:.1}", used.clamp(0.0, 100.0)),
        level,
        threshold: w.threshold,
    })
}

/// Characters of a probe error shown in a row.
pub const SHORT_ERROR: usize = 90;

/// `s` cut to [`SHORT_ERROR`] characters with `…` when longer.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(SHORT_ERROR) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn row(c: Clock, r: &AccountRow) -> Row {
    let long = r.long_window.as_ref();
    let next_reset = [
        long.and_then(|(_, w)| w.reset_at),
        r.five_hour.and_then(|w| w.reset_at),
    ]
    .into_iter()
    .flatten()
    .filter(|t| *t > c.now)
    .min();
    Row {
        name: r.name.clone(),
        display: r.display_account.clone(),
        priority: r.priority,
        plan: r.plan_type.clone().unwrap_or_else(|| "—".into()),
        long_label: match long.map(|(k, _)| *k) {
            Some(WindowKind::Monthly) => "monthly",
            _ => "weekly",
        },
        long: long.and_then(|(_, w)| bar(w)),
        five_hour: r.five_hour.as_ref().and_then(bar),
        availability: r.availability.as_str(),
        availability_label: availability_label(r.availability),
        until: c.opt(r.availability.until()),
        next_reset: c.opt(next_reset),
        reason: r.reason.as_ref().map(|(s, _, _)| s.clone()),
        owner: r.reason.as_ref().map(|(_, o, _)| o.as_str()),
        provisional: r.reason.as_ref().is_some_and(|(_, _, p)| *p),
        disabled: r.disabled,
        active: r.active,
        pending: r.pending_first_inspection,
        exception: r.exception,
        never_act: r.never_act,
        checked: c.opt(r.checked_at),
        error_short: r.error.as_deref().map(shorten),
        error: r.error.clone(),
        next_probe: c.opt(r.next_real_refresh_at),
        reset_credits: r.reset_credits.as_ref().map(|v| v.short()),
        passive: r.passive.as_ref().map(|p| {
            let pct = |v: Option<f64>| v.map_or_else(|| "—".to_string(), |x| format!("{x:.0} %"));
            PassiveLine {
                text: format!(
                    "{} {} · 5-hour {}",
                    match p.long_kind {
                        Some(WindowKind::Monthly) => "monthly",
                        _ => "weekly",
                    },
                    pct(p.long_used),
                    pct(p.five_hour_used)
                ),
                seen: c.when(p.observed_at),
                newer: p.newer_than_probe,
            }
        }),
    }
}

/// The router's accounts from its status document (`GET /api/router/status`: `pools[].accounts[]`
/// with `availability {state, until}` and `cooldown {kind, until}`).
fn router_rows(c: Clock, status: &serde_json::Value) -> Vec<RouterAccountRow> {
    let time = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| c.when(t.with_timezone(&Utc)))
    };
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let mut out = Vec::new();
    for pool in status["pools"].as_array().into_iter().flatten() {
        for a in pool["accounts"].as_array().into_iter().flatten() {
            out.push(RouterAccountRow {
                pool: text(&pool["id"]).unwrap_or_default(),
                id: text(&a["id"]).unwrap_or_default(),
                tier: a["tier"].as_u64().unwrap_or(0),
                site: text(&a["site"]),
                enabled: a["enabled"].as_bool().unwrap_or(false),
                state: text(&a["availability"]["state"]).unwrap_or_else(|| "unknown".into()),
                until: time(&a["availability"]["until"]),
                cooldown: text(&a["cooldown"]["kind"]),
                cooldown_until: time(&a["cooldown"]["until"]),
                demoted: a["demoted"].as_bool().unwrap_or(false),
            });
        }
    }
    out
}

/// The overview of `cards`.
pub fn overview(c: Clock, cards: &[SiteCard]) -> Overview {
    Overview {
        frame: Frame::new(c, true),
        cards: cards.iter().map(|s| card(c, s)).collect(),
    }
}

/// The page of one site.
pub fn site(c: Clock, p: &SitePage) -> SiteView {
    SiteView {
        frame: Frame::new(c, true),
        card: card(c, &p.card),
        routing_enabled: p.routing_enabled,
        min_active: p.min_active,
        rows: p.rows.iter().map(|r| row(c, r)).collect(),
        reset_credits: p.reset_credits.as_ref().map(|s| s.line()),
        rounds: p.rounds.iter().map(|r| round(c, r)).collect(),
        log: p
            .log
            .iter()
            .map(|e| LogLine {
                at: c.when(e.at),
                level: e.level.as_str(),
                category: e.category.as_str(),
                operation: e.operation_type.clone(),
                account: e.account_name.clone(),
                message: e.message.clone(),
            })
            .collect(),
        chart: chart::chart(&p.samples, c.now, CHART_DAYS, c.tz),
        chart_days: CHART_DAYS,
        router: p.router.as_ref().map(|s| router_rows(c, s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_errors_are_cut_on_a_character_boundary() {
        let long = "é".repeat(SHORT_ERROR + 5);
        let cut = shorten(&long);
        assert_eq!(cut.chars().count(), SHORT_ERROR + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(shorten("401 invalid"), "401 invalid");
    }

    #[test]
    fn a_bar_is_clamped_and_marked_against_its_threshold() {
        let cell = |used, threshold| WindowCell {
            used_percent: Some(used),
            threshold,
            reset_at: None,
        };
        let over = bar(&cell(104.0, Some(95))).unwrap();
        assert_eq!(
            (over.width.as_str(), over.shown.as_str(), over.level),
            ("100.0", "104.0", "over")
        );
        assert_eq!(bar(&cell(86.0, Some(95))).unwrap().level, "near");
        assert_eq!(bar(&cell(84.9, Some(95))).unwrap().level, "ok");
        assert_eq!(
            bar(&cell(100.0, None)).unwrap().level,
            "ok",
            "a window that never decides"
        );
        assert!(
            bar(&WindowCell {
                used_percent: None,
                threshold: Some(95),
                reset_at: None
            })
            .is_none()
        );
    }
}
