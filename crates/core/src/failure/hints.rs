//! The reset and wait hints of a failed answer (docs/rules/router.md §3): a quota body's `resets_at` /
//! `resets_in_seconds` (read by [`crate::codex_json`]), Codex's `x-codex-*` headers and
//! their model scope, `Retry-After`.

use chrono::{DateTime, Duration, NaiveDateTime, Utc};
use serde_json::Value;

use super::headers::Headers;
use super::verdict::{Scope, reset_ceiling};
use crate::codex_json;

/// The quota reset a body states (docs/rules/router.md §3): `resets_at` (unix seconds, or milliseconds
/// above 10^11; a number, a numeric string or an RFC 3339 string) wins over `resets_in_seconds`
/// (from `now`); looks in `error.*`, `response.error.*` and the top level, snake_case or
/// camelCase. A reset at or before `now` is ignored; one beyond now + 31 days is capped there.
pub fn parse_reset(body: &Value, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    codex_json::reset_fields(body).find_map(|fields| {
        let at = fields.resets_at.and_then(codex_json::instant);
        let after = fields
            .resets_in_seconds
            .and_then(codex_json::number)
            .filter(|s| *s > 0.0)
            .map(|s| now + seconds(s));
        [at, after]
            .into_iter()
            .flatten()
            .find(|t| *t > now)
            .map(|t| t.min(now + reset_ceiling()))
    })
}

/// A duration of `s` seconds (finite, ≥ 0), saturating at the 31-day ceiling.
fn seconds(s: f64) -> Duration {
    let ceiling = reset_ceiling();
    if s >= ceiling.num_seconds() as f64 {
        ceiling
    } else {
        Duration::milliseconds((s * 1000.0).round() as i64)
    }
}

/// A `Retry-After` value (RFC 9110 §10.2.3): delay-seconds (a non-negative integer; a decimal is
/// accepted too) or an HTTP-date (IMF-fixdate, also the obsolete RFC 850 and asctime forms),
/// as the wait from `now`. A date in the past ⇒ zero; garbage or a negative number ⇒ `None`;
/// waits beyond 31 days are capped there.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(
            value
                .parse::<u64>()
                .map_or(reset_ceiling(), |s| seconds(s as f64)),
        );
    }
    if let Ok(s) = value.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then(|| seconds(s));
    }
    let at = DateTime::parse_from_rfc2822(value)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            ["%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"]
                .iter()
                .find_map(|f| NaiveDateTime::parse_from_str(value, f).ok())
                .map(|n| n.and_utc())
        })?;
    Some((at - now).clamp(Duration::zero(), reset_ceiling()))
}

/// The scope of a quota answer from Codex's headers (docs/rules/router.md §3), with the reset the headers
/// give: the main windows (`x-codex-primary-used-percent`, `x-codex-secondary-used-percent`) —
/// at least one present, all present below 100 — while some `x-codex-<name>-primary-` /
/// `-secondary-used-percent` is at 100 ⇒ [`Scope::Model`], reset = the latest
/// `x-codex-<name>-<slot>-reset-at` (unix seconds; or `-reset-after-seconds`) of those at 100.
/// Otherwise ⇒ [`Scope::Account`], reset = the latest reset of the main windows at 100 (if any).
/// Resets at or before `now` are ignored, later ones capped at now + 31 days.
pub fn codex_scope(headers: &dyn Headers, now: DateTime<Utc>) -> (Scope, Option<DateTime<Utc>>) {
    let percent = |name: &str| headers.get(name).and_then(|v| v.trim().parse::<f64>().ok());
    let main: Vec<(&str, f64)> = ["primary", "secondary"]
        .into_iter()
        .filter_map(|slot| Some((slot, percent(&format!("x-codex-{slot}-used-percent"))?)))
        .collect();
    let exhausted = |p: f64| p >= 100.0;
    let latest = |windows: &mut dyn Iterator<Item = String>| {
        windows
            .filter_map(|prefix| header_reset(headers, &prefix, now))
            .max()
    };
    if !main.is_empty() && main.iter().all(|(_, p)| !exhausted(*p)) {
        let names = headers.names();
        let mut model_windows = names.iter().filter_map(|n| {
            let n = n.to_ascii_lowercase();
            let rest = n.strip_prefix("x-codex-")?;
            ["primary", "secondary"].into_iter().find_map(|slot| {
                let name = rest.strip_suffix(&format!("-{slot}-used-percent"))?;
                (!name.is_empty() && percent(&n).is_some_and(exhausted))
                    .then(|| format!("x-codex-{name}-{slot}"))
            })
        });
        if let Some(first) = model_windows.next() {
            let mut all = std::iter::once(first).chain(model_windows);
            return (Scope::Model, latest(&mut all));
        }
    }
    let mut at_limit = main
        .into_iter()
        .filter(|(_, p)| exhausted(*p))
        .map(|(slot, _)| format!("x-codex-{slot}"));
    (Scope::Account, latest(&mut at_limit))
}

/// The reset of one Codex window (`<prefix>-reset-at`, else `<prefix>-reset-after-seconds`).
fn header_reset(headers: &dyn Headers, prefix: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let at = headers
        .get(&format!("{prefix}-reset-at"))
        .and_then(|v| codex_json::instant(&Value::String(v.to_owned())));
    let after = headers
        .get(&format!("{prefix}-reset-after-seconds"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| now + seconds(s));
    at.or(after)
        .filter(|t| *t > now)
        .map(|t| t.min(now + reset_ceiling()))
}

#[cfg(test)]
#[path = "hints_tests.rs"]
mod tests;
