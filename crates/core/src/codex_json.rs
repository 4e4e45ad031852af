//! The tolerant reader of the JSON that Codex (wham/usage, 429 quota bodies) and CPA (its
//! management API) send: numbers that arrive as JSON numbers, floats or numeric strings, unix
//! times in seconds or milliseconds, RFC 3339 times, and where a 429 quota body states its reset
//! (docs/rules/cpa.md §4.4, docs/rules/router.md §3). One reader per rule; each caller keeps its own policy on top
//! (the patrol rounds a `resets_in_seconds` reset to the minute, the router drops past resets
//! and caps far ones at 31 days).
//!
//! Pure: no clock, no I/O.

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Map, Value};

/// Unix times above this are milliseconds, not seconds (docs/rules/cpa.md §4.4, docs/rules/router.md §3): 10^11 s is
/// the year 5138, 10^11 ms is 1973.
pub const MILLIS_THRESHOLD: f64 = 1e11;

/// Whether the unix time `n` is in milliseconds (above [`MILLIS_THRESHOLD`]) rather than
/// seconds.
pub fn is_unix_millis(n: f64) -> bool {
    n > MILLIS_THRESHOLD
}

/// A finite number from a JSON number (integer or float) or a numeric string (`"37"`,
/// `" 64.5 "`, `"1e3"`; surrounding blanks ignored). Anything else ⇒ `None`.
pub fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|x| x.is_finite())
}

/// [`number`], also accepting a percent sign after a numeric string (`"37%"`, `"37 %"`), as
/// wham/usage's `used_percent` sometimes arrives through proxies (docs/rules/patrol.md §3).
pub fn number_or_percent(value: &Value) -> Option<f64> {
    match value {
        Value::String(s) => s
            .trim()
            .trim_end_matches('%')
            .trim_end()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite()),
        _ => number(value),
    }
}

/// An integer from a JSON integer or an integer string, else a float or numeric string (a
/// trailing `%` allowed, see [`number_or_percent`]) rounded half away from zero; `None` when
/// out of the `i64` range.
pub fn rounded_integer(value: &Value) -> Option<i64> {
    let exact = match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    exact.or_else(|| number_or_percent(value).and_then(|x| float_to_i64(x.round())))
}

/// An integer from a JSON integer, else a float or numeric string truncated towards zero and
/// saturated at the `i64` bounds (Go's conversion of a decoded float, as CPA does).
pub fn truncated_integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| number(value).map(|f| f as i64)),
        _ => number(value).map(|f| f as i64),
    }
}

/// `x` as an `i64` when it is finite and within range (no saturation).
pub fn float_to_i64(x: f64) -> Option<i64> {
    // i64::MIN as f64 is exact (-2^63); i64::MAX as f64 rounds up to 2^63, hence `<`.
    (x.is_finite() && x >= i64::MIN as f64 && x < i64::MAX as f64).then_some(x as i64)
}

/// The instant of a unix time `n` in seconds, or in milliseconds above [`MILLIS_THRESHOLD`],
/// kept to the millisecond; `None` before 1970 or after 4·10^15 ms (the year ~128,000).
pub fn unix_instant(n: f64) -> Option<DateTime<Utc>> {
    let ms = if is_unix_millis(n) { n } else { n * 1000.0 };
    if !(0.0..=4e15).contains(&ms) {
        return None;
    }
    Utc.timestamp_millis_opt(ms as i64).single()
}

/// An instant from an RFC 3339 string (`"2026-05-26T13:00:00Z"`), else from a unix time as a
/// number or numeric string (see [`number`], [`unix_instant`]).
pub fn instant(value: &Value) -> Option<DateTime<Utc>> {
    if let Some(s) = value.as_str()
        && let Ok(t) = DateTime::parse_from_rfc3339(s.trim())
    {
        return Some(t.with_timezone(&Utc));
    }
    unix_instant(number(value)?)
}

/// The reset fields one object of a 429 quota body states, unread (each caller reads them its
/// way: see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ResetFields<'a> {
    /// `resets_at` / `resetsAt`: a unix time (seconds or milliseconds) or RFC 3339.
    pub resets_at: Option<&'a Value>,
    /// `resets_in_seconds` / `resetsInSeconds`: seconds from the answer.
    pub resets_in_seconds: Option<&'a Value>,
}

/// Where a 429 quota body (Codex `usage_limit_reached`, docs/rules/cpa.md §4.4; docs/rules/router.md §3) states its
/// reset: per object, in this order, `error`, `response.error` (a Responses stream's
/// `response.failed`) and the top level, the reset fields in snake_case or camelCase. Objects
/// that are not JSON objects are skipped; a `null` field counts as absent (the other spelling is
/// read).
pub fn reset_fields(body: &Value) -> impl Iterator<Item = ResetFields<'_>> {
    [
        body.get("error"),
        body.get("response").and_then(|r| r.get("error")),
        Some(body),
    ]
    .into_iter()
    .flatten()
    .filter_map(Value::as_object)
    .map(|o| ResetFields {
        resets_at: either(o, "resets_at", "resetsAt"),
        resets_in_seconds: either(o, "resets_in_seconds", "resetsInSeconds"),
    })
}

/// The first spelling of a field present in `o` and not `null`.
fn either<'a>(o: &'a Map<String, Value>, snake: &str, camel: &str) -> Option<&'a Value> {
    [snake, camel]
        .into_iter()
        .filter_map(|name| o.get(name))
        .find(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(unix: i64) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp(unix, 0)
    }

    #[test]
    fn numbers_are_read_from_numbers_floats_and_numeric_strings() {
        let cases: &[(Value, Option<f64>, Option<f64>)] = &[
            // (input, number, number_or_percent)
            (json!(37), Some(37.0), Some(37.0)),
            (json!(64.5), Some(64.5), Some(64.5)),
            (json!(" 64.5 "), Some(64.5), Some(64.5)),
            (json!("1e3"), Some(1000.0), Some(1000.0)),
            (json!("37%"), None, Some(37.0)),
            (json!("37 %"), None, Some(37.0)),
            (json!("NaN"), None, None),
            (json!("inf"), None, None),
            (json!("x"), None, None),
            (json!(""), None, None),
            (json!(true), None, None),
            (json!(null), None, None),
            (json!([1]), None, None),
        ];
        for (input, plain, percent) in cases {
            assert_eq!(number(input), *plain, "number({input})");
            assert_eq!(
                number_or_percent(input),
                *percent,
                "number_or_percent({input})"
            );
        }
    }

    #[test]
    fn integers_are_rounded_or_truncated_by_the_callers_rule() {
        let cases: &[(Value, Option<i64>, Option<i64>)] = &[
            // (input, rounded_integer, truncated_integer)
            (json!(7), Some(7), Some(7)),
            (json!("7"), Some(7), Some(7)),
            (json!(" -7 "), Some(-7), Some(-7)),
            (json!(2.5), Some(3), Some(2)),
            (json!(-2.7), Some(-3), Some(-2)),
            (json!("2.7"), Some(3), Some(2)),
            (json!("3%"), Some(3), None),
            (json!(1e300), None, Some(i64::MAX)),
            (json!(u64::MAX), None, Some(i64::MAX)),
            (json!("x"), None, None),
            (json!(false), None, None),
            (json!(null), None, None),
        ];
        for (input, rounded, truncated) in cases {
            assert_eq!(rounded_integer(input), *rounded, "rounded_integer({input})");
            assert_eq!(
                truncated_integer(input),
                *truncated,
                "truncated_integer({input})"
            );
        }
    }

    #[test]
    fn instants_are_rfc_3339_or_unix_seconds_or_milliseconds_above_1e11() {
        let ms = |unix_ms: i64| Utc.timestamp_millis_opt(unix_ms).single();
        let cases: &[(Value, Option<DateTime<Utc>>)] = &[
            (json!(1_780_110_480), at(1_780_110_480)),
            (json!("1780110480"), at(1_780_110_480)),
            (json!(1_780_110_480.5), ms(1_780_110_480_500)),
            (json!(1_780_110_480_123i64), ms(1_780_110_480_123)),
            (json!(100_000_000_000i64), at(100_000_000_000)),
            (json!(100_000_000_001i64), ms(100_000_000_001)),
            (json!("2026-05-26T13:00:00Z"), at(1_779_800_400)),
            (json!("2026-05-26T15:00:00+02:00"), at(1_779_800_400)),
            (json!(0), at(0)),
            (json!(-1), None),
            (json!(4e15), ms(4_000_000_000_000_000)),
            (json!(5e15), None),
            (json!("tomorrow"), None),
            (json!(null), None),
        ];
        for (input, expected) in cases {
            assert_eq!(instant(input), *expected, "instant({input})");
        }
        assert!(!is_unix_millis(MILLIS_THRESHOLD));
        assert!(is_unix_millis(MILLIS_THRESHOLD + 1.0));
    }

    #[test]
    fn reset_fields_are_found_in_error_response_error_and_the_top_level() {
        let fields = |body: Value| -> Vec<(Option<Value>, Option<Value>)> {
            reset_fields(&body)
                .map(|f| (f.resets_at.cloned(), f.resets_in_seconds.cloned()))
                .collect()
        };
        assert_eq!(
            fields(json!({"error":{"resets_at":1,"resets_in_seconds":2}})),
            [
                (Some(json!(1)), Some(json!(2))),
                (None, None) // the top level
            ]
        );
        assert_eq!(
            fields(json!({"response":{"error":{"resetsAt":"x"}},"resetsInSeconds":3})),
            [(Some(json!("x")), None), (None, Some(json!(3)))]
        );
        assert_eq!(
            fields(json!({"resets_at":null,"resetsAt":5})),
            [(Some(json!(5)), None)],
            "a null spelling is absent"
        );
        assert_eq!(fields(json!({"error":"x","response":[]})), [(None, None)]);
        assert!(fields(json!([1, 2])).is_empty());
    }
}
