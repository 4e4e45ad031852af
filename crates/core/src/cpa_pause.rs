//! The pause of a site's automatic CPA work after failed management calls (docs/decisions.md §4:
//! other management failures pause automatic work for 1 min doubling to 30 min). A refused key is
//! not paused here: the jobs store it and its gate keeps every call away (docs/rules/cpa.md §1.2).
//! Pure: the caller passes `now` and the jitter drawn from its random source.

use chrono::{DateTime, Duration, Utc};

use super::retry::{Backoff, JITTER_SPREAD};

/// The pause after `n` failures in a row: 1, 2, 4 … 30 min, less up to [`JITTER_SPREAD`]
/// (10 %) of jitter.
pub const CPA_PAUSE: Backoff =
    Backoff::new(Duration::minutes(1), Duration::minutes(30)).with_spread(JITTER_SPREAD);

/// Failed management calls in a row and until when automatic work pauses because of them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CpaPause {
    until: Option<DateTime<Utc>>,
    failures: u32,
}

impl CpaPause {
    /// Counts a failed management call at `now`, `jitter` in `0.0..=1.0` (0 ⇒ the full pause):
    /// the pause then ends at the returned instant, [`CPA_PAUSE`] after `now`.
    pub fn note_failure(&mut self, now: DateTime<Utc>, jitter: f64) -> DateTime<Utc> {
        self.failures = self.failures.saturating_add(1);
        let until = now + CPA_PAUSE.delay(self.failures, jitter);
        self.until = Some(until);
        until
    }

    /// Until when automatic work is paused at `now` (`None` once the pause is over).
    pub fn paused_until(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.until.filter(|t| *t > now)
    }

    /// Failed management calls in a row since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
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
    fn failures_in_a_row_pause_one_two_four_up_to_thirty_minutes() {
        // (failures in a row, jitter, pause in seconds)
        let table = [
            (1, 0.0, 60),
            (2, 0.0, 120),
            (3, 0.0, 240),
            (5, 0.0, 960),
            (6, 0.0, 1800),
            (20, 0.0, 1800),
            (1, 1.0, 54),
            (6, 1.0, 1620),
            (3, 0.5, 228),
        ];
        for (failures, jitter, secs) in table {
            let mut p = CpaPause::default();
            let mut until = t0();
            for _ in 0..failures {
                until = p.note_failure(t0(), jitter);
            }
            assert_eq!(
                until - t0(),
                Duration::seconds(secs),
                "{failures} × {jitter}"
            );
            assert_eq!(p.failures(), failures);
            assert_eq!(p.paused_until(t0()), Some(until));
        }
    }

    #[test]
    fn a_pause_is_over_at_its_end_and_none_before_the_first_failure() {
        let mut p = CpaPause::default();
        assert_eq!(p.paused_until(t0()), None);
        let until = p.note_failure(t0(), 0.0);
        // (now, paused until)
        for (now, expected) in [
            (t0(), Some(until)),
            (until - Duration::seconds(1), Some(until)),
            (until, None),
            (until + Duration::hours(1), None),
        ] {
            assert_eq!(p.paused_until(now), expected, "at {now}");
        }
        assert_eq!(CpaPause::default().failures(), 0);
    }
}
