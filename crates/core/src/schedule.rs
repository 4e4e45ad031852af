//! When the next regular round of a site is due (docs/patrol.md "Settings reference":
//! `pollIntervalMinutes` plus an integer jitter in `[pollRandomDelayMinMinutes,
//! pollRandomDelayMaxMinutes]`, re-drawn each time; docs/rules/patrol.md §4.1). Pure: the caller draws the
//! jitter from its random source within [`jitter_range`] and passes `now`.

use chrono::{DateTime, Duration, Utc};

use super::settings::PatrolSettings;

/// The inclusive range, in interval units (minutes), the jitter of the next round is drawn from.
pub fn jitter_range(s: &PatrolSettings) -> (u64, u64) {
    (
        s.poll_random_delay_min_minutes.into(),
        s.poll_random_delay_max_minutes.into(),
    )
}

/// Next regular round: `now + (pollIntervalMinutes + jitter) · unit`, `jitter` drawn from
/// [`jitter_range`], `unit` the length of one "minute" (60 s; the demo uses less). Saturates at
/// `i32::MAX` units.
pub fn next_regular_at(
    s: &PatrolSettings,
    jitter: u64,
    unit: Duration,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let minutes = u64::from(s.poll_interval_minutes) + jitter;
    now + unit * i32::try_from(minutes).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn the_next_round_is_the_interval_plus_the_jitter_in_units_after_now() {
        let now = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        // (interval minutes, jitter, unit seconds, due after seconds)
        let table = [
            (10, 0, 60, 600),
            (10, 3, 60, 780),
            (5, 1, 60, 360),
            (10, 2, 1, 12),
        ];
        for (interval, jitter, unit, secs) in table {
            let s = PatrolSettings {
                poll_interval_minutes: interval,
                ..PatrolSettings::default()
            };
            assert_eq!(
                next_regular_at(&s, jitter, Duration::seconds(unit), now) - now,
                Duration::seconds(secs),
                "{interval} + {jitter} × {unit} s"
            );
        }
    }

    #[test]
    fn the_jitter_range_is_the_settings_min_and_max() {
        let s = PatrolSettings {
            poll_random_delay_min_minutes: 2,
            poll_random_delay_max_minutes: 7,
            ..PatrolSettings::default()
        };
        assert_eq!(jitter_range(&s), (2, 7));
        assert_eq!(jitter_range(&PatrolSettings::default()), (1, 3));
    }
}
