//! Passive quota evidence: what CPA saw on an account's last upstream response, listed per
//! account as the read-only `quota` field of `GET /v0/management/auth-files` (CPA builds after
//! v7.2.140; docs/rules/cpa.md §9). This module owns reading that field into the same windows a
//! probe gives, and the rule for what such evidence may do: it may spare a scheduled refresh
//! probe when it is fresh and well below the thresholds, or make the probe due now when it is at
//! or over one — never act by itself (a stale header has contradicted the usage body before).
//!
//! Shape read (every part optional, garbage ignored field by field):
//! `{"observed_at": RFC 3339, "signals": {"X-Codex-Primary-Used-Percent": "58", …}}`. Header
//! names compare case-insensitively; values are the raw header strings.

use chrono::{DateTime, Duration, Utc};
use serde_json::{Map, Value, json};

use crate::account::QuotaSnapshot;
use crate::policy::QuotaPolicy;
use crate::quota::{self, MAIN_GROUP, UsageReport, WindowKind};

/// Default longest age of passive evidence that may spare a probe (a site setting).
pub const DEFAULT_MAX_AGE: Duration = Duration::minutes(30);

/// Percentage points below every deciding threshold that count as "well below": a window at
/// 86 % under a 95 % threshold is not (a choice where the rule says only "well below").
pub const WELL_BELOW_MARGIN: f64 = 10.0;

/// Window lengths in minutes that count as monthly in headers (28 to 31 days): CPA passes the
/// upstream's `-Window-Minutes` through, and month lengths vary (docs/rules/cpa.md §9).
const MONTHLY_MINUTES: std::ops::RangeInclusive<i64> = 40_320..=44_640;

pub use crate::account::PassiveEvidence;

/// What passive evidence means for an account's next probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassiveVerdict {
    /// Fresh and well below every deciding threshold: the scheduled refresh probe may be
    /// skipped (the 10-hour rule still makes a real probe due).
    SpareProbe,
    /// At or over a threshold (or limit reached): probe now; the probe decides.
    ProbeNow,
    /// No use: why (a metric label, see [`Unused::as_str`]).
    Unused(Unused),
}

/// Why passive evidence was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unused {
    /// No main window in the signals (empty `signals`, WebSocket handshakes only, garbage).
    NoWindows,
    /// No readable `observed_at`.
    NoTime,
    /// Seen before (or at) the last real probe: the probe already knows more.
    OlderThanProbe,
    /// Older than the freshness limit.
    Stale,
    /// Between "well below" and the threshold: neither spares nor calls a probe.
    NearThreshold,
}

impl Unused {
    /// Stable label: `no_windows`, `no_time`, `older_than_probe`, `stale`, `near_threshold`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoWindows => "no_windows",
            Self::NoTime => "no_time",
            Self::OlderThanProbe => "older_than_probe",
            Self::Stale => "stale",
            Self::NearThreshold => "near_threshold",
        }
    }
}

/// Reads a listing entry's `quota` value. `None` when the feature is absent (no `quota` object,
/// or one without a `signals` object): the site's CPA does not list passive quota, and nothing
/// changes for it (feature-detected per listing, not by version).
pub fn read(quota: Option<&Value>) -> Option<PassiveEvidence> {
    let obj = quota?.as_object()?;
    let signals = obj.get("signals")?.as_object()?;
    let observed_at = obj
        .get("observed_at")
        .and_then(Value::as_str)
        .and_then(|s| DateTime::parse_from_rfc3339(s.trim()).ok())
        .map(|t| t.with_timezone(&Utc))
        .filter(|t| t.timestamp() > 0);
    // Reset-after seconds count from the observation; without one they cannot be placed.
    let report = observed_at.and_then(|at| usage_report(signals, at));
    Some(PassiveEvidence {
        observed_at,
        report,
    })
}

/// The usage report the signals describe, through the probe's own reader (one reader per rule):
/// the headers are rewritten as the `wham/usage` body they summarise. `None` without a main
/// window.
fn usage_report(signals: &Map<String, Value>, observed_at: DateTime<Utc>) -> Option<UsageReport> {
    let mut main = Map::new();
    let mut additional: Vec<(String, Map<String, Value>)> = Vec::new();
    let mut top = Map::new();
    for (name, value) in signals {
        let name = name.to_ascii_lowercase();
        let Some(rest) = name.strip_prefix("x-codex-") else {
            continue;
        };
        let Some(text) = value.as_str().map(str::trim).filter(|t| !t.is_empty()) else {
            continue;
        };
        match rest {
            "plan-type" => {
                top.insert("plan_type".into(), json!(text));
            }
            "limit-reached" => {
                main.insert("limit_reached".into(), json!(flag(text)));
            }
            "allowed" => {
                main.insert("allowed".into(), json!(flag(text)));
            }
            _ => place(rest, text, &mut main, &mut additional),
        }
    }
    if !main.is_empty() {
        top.insert("rate_limit".into(), Value::Object(main));
    }
    if !additional.is_empty() {
        let items: Vec<Value> = additional
            .into_iter()
            .map(|(key, mut limit)| {
                let name = limit.remove("limit_name").unwrap_or(Value::String(key));
                json!({"limit_name": name, "rate_limit": limit})
            })
            .collect();
        top.insert("additional_rate_limits".into(), Value::Array(items));
    }
    let mut report = quota::report_from_object(&top, observed_at)?;
    for w in &mut report.windows {
        let minutes = w.limit_window_seconds.map(|s| s / 60);
        if w.kind == WindowKind::Other && minutes.is_some_and(|m| MONTHLY_MINUTES.contains(&m)) {
            let other = format!("{}s window", w.limit_window_seconds.unwrap_or_default());
            w.kind = WindowKind::Monthly;
            w.label = match w.group.as_str() {
                MAIN_GROUP => "monthly".into(),
                _ => w.label.replace(&other, "monthly"),
            };
        }
    }
    let has_main = report.main_windows().next().is_some();
    has_main.then_some(report)
}

/// `true` for `"true"` / `"1"` (any case), else `false`.
fn flag(text: &str) -> bool {
    text.eq_ignore_ascii_case("true") || text == "1"
}

/// Puts one `<slot>-<field>` or `<limit>-<slot>-<field>` / `<limit>-limit-name` signal where the
/// usage body would hold it. Unknown names are ignored.
fn place(
    rest: &str,
    text: &str,
    main: &mut Map<String, Value>,
    additional: &mut Vec<(String, Map<String, Value>)>,
) {
    let (limit, slot, field) = match split_slot(rest) {
        Some(found) => found,
        None => match rest.strip_suffix("-limit-name") {
            Some(limit) => {
                group(additional, limit).insert("limit_name".into(), json!(text));
                return;
            }
            None => match rest.strip_suffix("-limit-reached") {
                Some(limit) => {
                    group(additional, limit).insert("limit_reached".into(), json!(flag(text)));
                    return;
                }
                None => return,
            },
        },
    };
    let (key, value) = match field {
        "used-percent" => ("used_percent", json!(text)),
        // Minutes in headers, seconds in the body.
        "window-minutes" => match text.parse::<f64>() {
            Ok(m) if m.is_finite() && m > 0.0 => ("limit_window_seconds", json!(m * 60.0)),
            _ => return,
        },
        "reset-at" => ("reset_at", json!(text)),
        "reset-after-seconds" => ("reset_after_seconds", json!(text)),
        _ => return,
    };
    let target = match limit {
        None => main,
        Some(limit) => group(additional, limit),
    };
    let window = target
        .entry(slot)
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(w) = window.as_object_mut() {
        w.insert(key.into(), value);
    }
}

/// `primary-used-percent` ⇒ `(None, "primary_window", "used-percent")`;
/// `spark-secondary-reset-at` ⇒ `(Some("spark"), "secondary_window", "reset-at")`.
fn split_slot(rest: &str) -> Option<(Option<&str>, &'static str, &str)> {
    for (slot, key) in [
        ("primary-", "primary_window"),
        ("secondary-", "secondary_window"),
    ] {
        if let Some(field) = rest.strip_prefix(slot) {
            return Some((None, key, field));
        }
        let infix = format!("-{slot}");
        if let Some(at) = rest.find(&infix) {
            let limit = &rest[..at];
            let field = &rest[at + infix.len()..];
            return Some((Some(limit), key, field));
        }
    }
    None
}

fn group<'a>(
    additional: &'a mut Vec<(String, Map<String, Value>)>,
    limit: &str,
) -> &'a mut Map<String, Value> {
    let at = match additional.iter().position(|(k, _)| k == limit) {
        Some(at) => at,
        None => {
            additional.push((limit.to_owned(), Map::new()));
            additional.len() - 1
        }
    };
    &mut additional[at].1
}

/// The evidence as a snapshot of the second kind, for storing and showing beside the probe's
/// (docs/rules/patrol.md §4.7): the windows at `observed_at` (`checkedAt` = `refreshedAt` =
/// `observed_at`, status 200). `None` when it has no readable time or no main window: such
/// evidence is never kept.
pub fn snapshot(evidence: &PassiveEvidence) -> Option<QuotaSnapshot> {
    let at = evidence.observed_at?;
    evidence
        .report
        .as_ref()
        .map(|r| QuotaSnapshot::from_report(r, at))
}

/// The rule (docs/rules/cpa.md §9): what `evidence` may do for an account whose last real probe
/// produced a snapshot at `last_probe_at`, under its effective `policy`, at `now`, when evidence
/// at least `max_age` old is stale (0: always; a time ahead of `now` counts as age 0). At or
/// over a deciding threshold (or limit reached, or any main window at 100 %) ⇒
/// [`PassiveVerdict::ProbeNow`] whatever the age, as long as it is newer
/// than the probe; fresh and every main window at least [`WELL_BELOW_MARGIN`] points below its
/// threshold ⇒ [`PassiveVerdict::SpareProbe`]; otherwise unused, with the reason.
pub fn judge(
    evidence: &PassiveEvidence,
    last_probe_at: Option<DateTime<Utc>>,
    policy: &QuotaPolicy,
    now: DateTime<Utc>,
    max_age: Duration,
) -> PassiveVerdict {
    let Some(at) = evidence.observed_at else {
        return PassiveVerdict::Unused(Unused::NoTime);
    };
    let Some(report) = &evidence.report else {
        return PassiveVerdict::Unused(Unused::NoWindows);
    };
    if last_probe_at.is_some_and(|probe| at <= probe) {
        return PassiveVerdict::Unused(Unused::OlderThanProbe);
    }
    let snapshot = QuotaSnapshot::from_report(report, at);
    if snapshot.is_exhausted(policy, now) {
        return PassiveVerdict::ProbeNow;
    }
    // Evidence stamped ahead of this clock (CPA's clock ahead) counts as just observed; a max
    // age of 0 then leaves nothing fresh, so it turns sparing off.
    if (now - at).max(Duration::zero()) >= max_age {
        return PassiveVerdict::Unused(Unused::Stale);
    }
    let mut main = snapshot.windows.iter().filter(|w| w.group == MAIN_GROUP);
    let well_below = main.all(|w| {
        let used = w.used_percent.unwrap_or(0.0);
        let limit = snapshot.threshold_for(w, policy).map_or(100.0, f64::from);
        used <= limit - WELL_BELOW_MARGIN
    });
    if well_below {
        PassiveVerdict::SpareProbe
    } else {
        PassiveVerdict::Unused(Unused::NearThreshold)
    }
}

#[cfg(test)]
#[path = "passive_tests.rs"]
mod tests;
