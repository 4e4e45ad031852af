//! The 7-day pool chart of a site's page (docs/rules/api.md §7) as inline SVG geometry: usable
//! accounts and remaining weekly capacity (in whole accounts' worth, `remaining_percent / 100`)
//! from the stored pool samples (migration 0009). Pure: samples, `now` and the zone in, numbers
//! and point lists out; the template draws them. The numbers are also given as a table (the
//! chart's text alternative).

use chrono::{DateTime, Duration, Timelike, Utc};
use chrono_tz::Tz;
use serde::Serialize;

use crate::core::pool::PoolSample;

/// Drawing area, SVG user units.
pub const WIDTH: f64 = 720.0;
pub const HEIGHT: f64 = 180.0;
/// Left margin (axis labels), bottom margin (day labels), top and right padding.
const LEFT: f64 = 36.0;
const BOTTOM: f64 = 20.0;
const PAD: f64 = 8.0;

/// A day boundary on the time axis.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Tick {
    pub x: f64,
    /// `Mon 18`, local.
    pub label: String,
}

/// One row of the chart's table: the last sample of a local day.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DayRow {
    /// `2026-05-21`.
    pub day: String,
    pub usable_min: u32,
    pub usable_max: u32,
    /// Remaining capacity at the day's last sample, accounts' worth (one decimal).
    pub capacity_last: String,
}

/// Everything the template needs to draw the chart.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Chart {
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub bottom_y: f64,
    pub right_x: f64,
    pub top_y: f64,
    /// `points` attribute of the usable-accounts polyline.
    pub usable_points: String,
    /// `points` attribute of the remaining-capacity polyline.
    pub capacity_points: String,
    /// The value at the top of the y axis (accounts).
    pub y_max: u32,
    pub ticks: Vec<Tick>,
    pub days: Vec<DayRow>,
    pub samples: usize,
    pub usable_now: Option<u32>,
    pub capacity_now: Option<String>,
}

/// At most one point per hour: the last sample of each hour (7 days: 168 points whatever the
/// round frequency).
fn hourly(samples: &[PoolSample]) -> Vec<PoolSample> {
    let mut out: Vec<PoolSample> = Vec::new();
    for s in samples {
        let hour = |t: DateTime<Utc>| t.with_minute(0).and_then(|t| t.with_second(0));
        match out.last_mut() {
            Some(last) if hour(last.at) == hour(s.at) => *last = *s,
            _ => out.push(*s),
        }
    }
    out
}

/// The chart of `samples` (oldest first) over the `days` days before `now`, day labels in `tz`.
pub fn chart(samples: &[PoolSample], now: DateTime<Utc>, days: i64, tz: Tz) -> Chart {
    let from = now - Duration::days(days);
    let points = hourly(samples);
    let y_max = points
        .iter()
        .map(|s| s.usable.max((s.remaining_percent / 100.0).ceil() as u32))
        .max()
        .unwrap_or(0)
        .max(1);
    let bottom_y = HEIGHT - BOTTOM;
    let right_x = WIDTH - PAD;
    let span = (now - from).num_seconds().max(1) as f64;
    let x = |t: DateTime<Utc>| LEFT + (right_x - LEFT) * ((t - from).num_seconds() as f64 / span);
    let y = |v: f64| bottom_y - (bottom_y - PAD) * (v / f64::from(y_max)).clamp(0.0, 1.0);
    let line = |value: &dyn Fn(&PoolSample) -> f64| {
        points
            .iter()
            .map(|s| format!("{:.1},{:.1}", x(s.at), y(value(s))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    Chart {
        width: WIDTH,
        height: HEIGHT,
        left: LEFT,
        bottom_y,
        right_x,
        top_y: PAD,
        usable_points: line(&|s| f64::from(s.usable)),
        capacity_points: line(&|s| s.remaining_percent / 100.0),
        y_max,
        ticks: ticks(from, now, tz, &x),
        days: day_rows(&points, tz),
        samples: samples.len(),
        usable_now: samples.last().map(|s| s.usable),
        capacity_now: samples
            .last()
            .map(|s| format!("{:.1}", s.remaining_percent / 100.0)),
    }
}

/// A tick at each local midnight between `from` and `now`.
fn ticks(
    from: DateTime<Utc>,
    now: DateTime<Utc>,
    tz: Tz,
    x: &dyn Fn(DateTime<Utc>) -> f64,
) -> Vec<Tick> {
    let mut out = Vec::new();
    let mut day = from.with_timezone(&tz).date_naive().succ_opt();
    while let Some(d) = day {
        let Some(midnight) = d
            .and_hms_opt(0, 0, 0)
            .and_then(|m| m.and_local_timezone(tz).earliest())
        else {
            break;
        };
        let at = midnight.with_timezone(&Utc);
        if at > now {
            break;
        }
        out.push(Tick {
            x: (x(at) * 10.0).round() / 10.0,
            label: d.format("%a %d").to_string(),
        });
        day = d.succ_opt();
    }
    out
}

/// One row per local day that has samples: min and max usable, last capacity.
fn day_rows(points: &[PoolSample], tz: Tz) -> Vec<DayRow> {
    let mut out: Vec<DayRow> = Vec::new();
    for s in points {
        let day = s.at.with_timezone(&tz).format("%Y-%m-%d").to_string();
        let cap = format!("{:.1}", s.remaining_percent / 100.0);
        match out.last_mut() {
            Some(r) if r.day == day => {
                r.usable_min = r.usable_min.min(s.usable);
                r.usable_max = r.usable_max.max(s.usable);
                r.capacity_last = cap;
            }
            _ => out.push(DayRow {
                day,
                usable_min: s.usable,
                usable_max: s.usable,
                capacity_last: cap,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 12, 0, 0).unwrap()
    }

    fn sample(at: DateTime<Utc>, usable: u32, remaining_percent: f64) -> PoolSample {
        PoolSample {
            at,
            total: 10,
            usable,
            active: usable.min(2),
            exhausted: 10 - usable,
            invalid: 0,
            remaining_percent,
        }
    }

    #[test]
    fn samples_of_one_hour_become_one_point_the_last_of_the_hour() {
        let t = now() - Duration::hours(3);
        let s = [
            sample(t, 9, 500.0),
            sample(t + Duration::minutes(10), 8, 450.0),
            sample(t + Duration::minutes(70), 7, 400.0),
        ];
        let c = chart(&s, now(), 7, chrono_tz::UTC);
        assert_eq!(c.usable_points.split(' ').count(), 2);
        assert_eq!(c.samples, 3);
        assert_eq!(c.usable_now, Some(7));
        assert_eq!(c.capacity_now.as_deref(), Some("4.0"));
    }

    #[test]
    fn points_span_the_drawing_area_and_the_y_axis_fits_the_largest_value() {
        let s = [
            sample(now() - Duration::days(7), 10, 1000.0),
            sample(now(), 0, 0.0),
        ];
        let c = chart(&s, now(), 7, chrono_tz::UTC);
        assert_eq!(c.y_max, 10);
        let pts: Vec<(f64, f64)> = c
            .usable_points
            .split(' ')
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        assert_eq!(pts[0], (LEFT, PAD), "oldest, full: top left");
        assert_eq!(
            pts[1],
            (WIDTH - PAD, HEIGHT - BOTTOM),
            "now, empty: bottom right"
        );
    }

    #[test]
    fn day_ticks_fall_on_local_midnights_and_the_table_has_a_row_per_day() {
        let s = [
            sample(now() - Duration::hours(30), 6, 300.0),
            sample(now() - Duration::hours(26), 4, 200.0),
            sample(now() - Duration::hours(2), 5, 250.0),
        ];
        let c = chart(&s, now(), 7, chrono_tz::UTC);
        assert_eq!(
            c.ticks.len(),
            7,
            "seven midnights in the last 7 days at noon"
        );
        assert_eq!(c.ticks.last().unwrap().label, "Thu 21");
        assert_eq!(
            c.days,
            vec![
                DayRow {
                    day: "2026-05-20".into(),
                    usable_min: 4,
                    usable_max: 6,
                    capacity_last: "2.0".into()
                },
                DayRow {
                    day: "2026-05-21".into(),
                    usable_min: 5,
                    usable_max: 5,
                    capacity_last: "2.5".into()
                },
            ]
        );
    }

    #[test]
    fn no_samples_draw_no_lines() {
        let c = chart(&[], now(), 7, chrono_tz::UTC);
        assert!(c.usable_points.is_empty());
        assert_eq!(c.usable_now, None);
        assert!(c.days.is_empty());
    }
}
