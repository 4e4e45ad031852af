//! Instants and spans as people read them, in the operator's zone (`[alerts] timezone`): the
//! wording shared by alert messages and the status page. Pure: "now" is an argument.

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;

/// The format of [`local`], parsed once (a status page formats up to four times per account
/// row).
static LOCAL: std::sync::LazyLock<Vec<chrono::format::Item<'static>>> =
    std::sync::LazyLock::new(|| {
        chrono::format::StrftimeItems::new("%Y-%m-%d %H:%M %Z")
            .parse_to_owned()
            .expect("a valid format")
    });

/// `2026-05-21 08:12 CEST`.
pub fn local(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz)
        .format_with_items(LOCAL.iter())
        .to_string()
}

/// "3 h 12 min", "2 d 4 h", "45 min", "less than a minute".
pub fn span(d: Duration) -> String {
    let mins = d.num_minutes();
    let (days, hours, m) = (mins / 1440, (mins % 1440) / 60, mins % 60);
    match (days, hours, m) {
        (0, 0, 0) => "less than a minute".into(),
        (0, 0, m) => format!("{m} min"),
        (0, h, 0) => format!("{h} h"),
        (0, h, m) => format!("{h} h {m} min"),
        (d, 0, _) => format!("{d} d"),
        (d, h, _) => format!("{d} d {h} h"),
    }
}

/// "in 3 h 12 min" from `now` to `t`; "already passed" when `t` is not after `now`.
pub fn until(now: DateTime<Utc>, t: DateTime<Utc>) -> String {
    if t <= now {
        "already passed".into()
    } else {
        format!("in {}", span(t - now))
    }
}

/// "3 h 12 min ago"; "just now" when `t` is not before `now`.
pub fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if t >= now {
        "just now".into()
    } else {
        format!("{} ago", span(now - t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    #[test]
    fn spans_read_like_a_person_would_say_them() {
        let m = Duration::minutes;
        assert_eq!(span(Duration::seconds(30)), "less than a minute");
        assert_eq!(span(m(45)), "45 min");
        assert_eq!(span(m(180)), "3 h");
        assert_eq!(span(m(192)), "3 h 12 min");
        assert_eq!(span(m(2 * 1440 + 250)), "2 d 4 h");
        assert_eq!(span(m(1440 + 5)), "1 d");
        assert_eq!(until(t0(), t0() - m(1)), "already passed");
        assert_eq!(until(t0(), t0() + m(192)), "in 3 h 12 min");
        assert_eq!(ago(t0() - m(75), t0()), "1 h 15 min ago");
        assert_eq!(ago(t0(), t0()), "just now");
    }

    #[test]
    fn local_times_carry_the_zone_abbreviation() {
        assert_eq!(local(t0(), chrono_tz::UTC), "2026-05-21 03:00 UTC");
        assert_eq!(
            local(t0(), chrono_tz::Europe::Berlin),
            "2026-05-21 05:00 CEST"
        );
    }
}
