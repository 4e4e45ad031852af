//! Tests of `core::forecast`: the burn rate table (steady burn, burst then idle, reset in
//! between, too few points / too short, clock going backwards in the data), projections and
//! the site model.

use super::*;
use chrono::TimeZone;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 5, 21, 0, 0, 0).unwrap()
}

fn at(min: i64) -> DateTime<Utc> {
    t0() + Duration::minutes(min)
}

/// Samples `(minute, used%)` of one window resetting at `reset_min`.
fn series(points: &[(i64, f64)], reset_min: i64) -> Vec<Sample> {
    points
        .iter()
        .map(|&(m, u)| Sample {
            at: at(m),
            used_percent: u,
            reset_at: Some(at(reset_min)),
        })
        .collect()
}

fn rate(samples: &[Sample]) -> Option<f64> {
    burn_rate(samples, &ForecastConfig::default()).map(|b| b.percent_per_hour)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn the_defaults_are_the_documented_ones() {
    let c = ForecastConfig::default();
    assert_eq!((c.min_span_minutes, c.half_life_minutes), (30, 120));
}

#[test]
fn burn_rate_table() {
    let week = 7 * 24 * 60;
    // (case, samples, expected percent per hour; None = no rate)
    let steady: Vec<(i64, f64)> = (0..=8).map(|i| (i * 30, 10.0 + 2.5 * i as f64)).collect();
    let mut reset_between = series(&[(0, 80.0), (60, 90.0), (120, 95.0)], 150);
    reset_between.extend(series(&[(180, 1.0), (240, 4.0), (300, 7.0)], 150 + 300));
    let mut dropped_without_reset_at = series(&[(0, 60.0), (60, 70.0)], week);
    dropped_without_reset_at.extend(series(&[(120, 2.0), (180, 6.0)], week));
    let cases: Vec<(&str, Vec<Sample>, Option<f64>)> = vec![
        ("steady 5 %/h", series(&steady, week), Some(5.0)),
        (
            "flat",
            series(&[(0, 40.0), (60, 40.0), (120, 40.0)], week),
            Some(0.0),
        ),
        (
            "reset in between: only the current window",
            reset_between,
            Some(3.0),
        ),
        (
            "used% fell: a reset even with the same reset_at",
            dropped_without_reset_at,
            Some(4.0),
        ),
        ("one sample", series(&[(0, 10.0)], week), None),
        ("no sample", vec![], None),
        (
            "two samples 10 minutes apart",
            series(&[(0, 10.0), (10, 12.0)], week),
            None,
        ),
        (
            "reset leaves one sample of the current window",
            {
                let mut s = series(&[(0, 50.0), (60, 60.0), (120, 70.0)], 130);
                s.extend(series(&[(180, 3.0)], 500));
                s
            },
            None,
        ),
    ];
    for (case, samples, want) in cases {
        let got = rate(&samples);
        match (got, want) {
            (Some(g), Some(w)) => assert!(close(g, w), "{case}: got {g}, want {w}"),
            (g, w) => assert_eq!(g, w, "{case}"),
        }
    }
}

#[test]
fn a_burst_then_idle_weighs_the_recent_idle_more_than_the_plain_average() {
    // 0 → 50 % in the first hour, then flat for four hours: the plain average is 10 %/h.
    let mut points = vec![(0, 0.0), (30, 25.0), (60, 50.0)];
    points.extend((3..=10).map(|i| (i * 30, 50.0)));
    let weighted = rate(&series(&points, 7 * 24 * 60)).unwrap();
    let unweighted = burn_rate(
        &series(&points, 7 * 24 * 60),
        &ForecastConfig {
            half_life_minutes: 1_000_000,
            ..ForecastConfig::default()
        },
    )
    .unwrap()
    .percent_per_hour;
    assert!(weighted < unweighted, "{weighted} vs {unweighted}");
    assert!(weighted < 5.0, "recent idle dominates: {weighted}");
    // And the reverse: idle, then a burst now, reads higher than the plain average.
    let mut rev: Vec<(i64, f64)> = (0..=7).map(|i| (i * 30, 0.0)).collect();
    rev.extend([(270, 25.0), (300, 50.0)]);
    let recent = rate(&series(&rev, 7 * 24 * 60)).unwrap();
    assert!(recent > 10.0, "recent burst dominates: {recent}");
}

#[test]
fn the_burn_counts_since_the_first_sample_after_the_reset() {
    let mut s = series(&[(0, 80.0), (60, 90.0)], 100);
    s.extend(series(&[(120, 1.0), (150, 2.0), (180, 3.0)], 400));
    let b = burn_rate(&s, &ForecastConfig::default()).unwrap();
    assert_eq!((b.since, b.samples), (at(120), 3));
    assert!(close(b.percent_per_hour, 2.0));
}

#[test]
fn reset_at_moving_by_rounding_is_the_same_window() {
    let mut s = series(&[(0, 10.0), (30, 12.0)], 1000);
    // One minute later: rounding of reset_after_seconds, not a new window.
    s.extend(series(&[(60, 14.0), (90, 16.0)], 1001));
    let b = burn_rate(&s, &ForecastConfig::default()).unwrap();
    assert_eq!(b.samples, 4);
    assert!(close(b.percent_per_hour, 4.0));
}

#[test]
fn clock_going_backwards_in_the_data_gives_the_same_rate_as_ordered_data() {
    let ordered = series(&[(0, 10.0), (30, 12.5), (60, 15.0), (90, 17.5)], 10_000);
    let mut shuffled = vec![ordered[2], ordered[0], ordered[3], ordered[1]];
    let want = rate(&ordered).unwrap();
    assert!(close(rate(&shuffled).unwrap(), want));
    // A duplicate timestamp (the clock stepped back and a probe landed on the same instant):
    // one sample per instant, the last given wins; no division by zero, no negative rate.
    shuffled.push(Sample {
        at: at(90),
        used_percent: 17.5,
        reset_at: Some(at(10_000)),
    });
    let b = burn_rate(&shuffled, &ForecastConfig::default()).unwrap();
    assert_eq!(b.samples, 4);
    assert!(close(b.percent_per_hour, want));
    // Every sample at the same instant: no span, no rate.
    let same: Vec<Sample> = (0..5)
        .map(|i| Sample {
            at: at(0),
            used_percent: 10.0 + f64::from(i),
            reset_at: None,
        })
        .collect();
    assert_eq!(rate(&same), None);
    // NaN readings are ignored, not propagated.
    let mut nan = ordered.clone();
    nan.push(Sample {
        at: at(120),
        used_percent: f64::NAN,
        reset_at: Some(at(10_000)),
    });
    assert!(close(rate(&nan).unwrap(), want));
}

fn burn(rate: f64) -> Burn {
    Burn {
        percent_per_hour: rate,
        since: t0(),
        samples: 3,
    }
}

#[test]
fn projection_table() {
    let now = at(0);
    let b5 = burn(5.0);
    let b0 = burn(0.0);
    // (case, used, threshold, burn, reset, expected)
    type Case<'a> = (&'a str, f64, u8, Option<&'a Burn>, Option<i64>, Projection);
    let cases: Vec<Case<'_>> = vec![
        (
            "at the threshold",
            95.0,
            95,
            Some(&b5),
            Some(600),
            Projection::AlreadyExhausted,
        ),
        (
            "over the threshold, no burn",
            99.0,
            95,
            None,
            None,
            Projection::AlreadyExhausted,
        ),
        (
            "85 → 95 at 5 %/h: two hours",
            85.0,
            95,
            Some(&b5),
            Some(600),
            Projection::At { at: at(120) },
        ),
        (
            "no reset known",
            85.0,
            95,
            Some(&b5),
            None,
            Projection::At { at: at(120) },
        ),
        (
            "resets first",
            85.0,
            95,
            Some(&b5),
            Some(60),
            Projection::NotBeforeReset,
        ),
        (
            "reaches it exactly at the reset",
            85.0,
            95,
            Some(&b5),
            Some(120),
            Projection::NotBeforeReset,
        ),
        (
            "no burn rate yet",
            50.0,
            95,
            None,
            Some(600),
            Projection::Unknown,
        ),
        (
            "does not burn",
            50.0,
            95,
            Some(&b0),
            Some(600),
            Projection::NotBeforeReset,
        ),
        (
            "does not burn, no reset",
            50.0,
            95,
            Some(&b0),
            None,
            Projection::Unknown,
        ),
        (
            "reset already past: stale",
            50.0,
            95,
            Some(&b5),
            Some(-5),
            Projection::Unknown,
        ),
    ];
    for (case, used, threshold, b, reset, want) in cases {
        let got = project(used, threshold, b, reset.map(at), now);
        assert_eq!(got, want, "{case}");
    }
    assert_eq!(Projection::At { at: at(1) }.at(), Some(at(1)));
    assert_eq!(Projection::Unknown.at(), None);
}

#[test]
fn an_account_runs_out_with_its_first_deciding_window() {
    use Projection::*;
    let cases: Vec<(&str, Vec<Projection>, Projection)> = vec![
        ("none", vec![], Unknown),
        (
            "one exhausted wins",
            vec![At { at: at(5) }, AlreadyExhausted],
            AlreadyExhausted,
        ),
        (
            "earliest at",
            vec![At { at: at(50) }, NotBeforeReset, At { at: at(20) }],
            At { at: at(20) },
        ),
        (
            "an at beats unknown",
            vec![Unknown, At { at: at(9) }],
            At { at: at(9) },
        ),
        (
            "unknown beats not before reset",
            vec![NotBeforeReset, Unknown],
            Unknown,
        ),
        (
            "all reset first",
            vec![NotBeforeReset, NotBeforeReset],
            NotBeforeReset,
        ),
    ];
    for (case, windows, want) in cases {
        assert_eq!(account_projection(windows), want, "{case}");
    }
}

#[test]
fn projections_serialise_with_a_kind_tag() {
    let j = |p: Projection| serde_json::to_value(p).unwrap();
    assert_eq!(j(Projection::AlreadyExhausted)["kind"], "alreadyExhausted");
    assert_eq!(j(Projection::NotBeforeReset)["kind"], "notBeforeReset");
    let a = j(Projection::At { at: at(60) });
    assert_eq!(a["kind"], "at");
    assert_eq!(a["at"], "2026-05-21T01:00:00Z");
}

fn acct(
    name: &str,
    usable: bool,
    order: Option<usize>,
    headroom: f64,
    burn: Option<f64>,
    reset: Option<i64>,
) -> AccountInput {
    AccountInput {
        name: name.into(),
        usable,
        order,
        headroom_percent: headroom,
        burn_per_hour: burn,
        reset_at: reset.map(at),
    }
}

#[test]
fn unordered_sites_spend_every_usable_headroom_at_the_summed_burn() {
    let accounts = [
        acct("a", true, None, 50.0, Some(5.0), Some(3000)),
        acct("b", true, None, 30.0, Some(5.0), Some(2000)),
        // Exhausted: no capacity, no burn, but its return is the earliest reset.
        acct("c", false, None, 0.0, Some(20.0), Some(600)),
    ];
    let f = site_forecast(&accounts, None, at(0));
    assert_eq!((f.usable_accounts, f.active_accounts), (2, 2));
    assert!(close(f.remaining_percent, 80.0) && close(f.burn_per_hour, 10.0));
    assert_eq!(f.projected_dry_at, Some(at(8 * 60)));
    assert_eq!(f.earliest_reset_at, Some(at(600)));
    assert!(f.dry_before_reset);
    assert_eq!(f.computed_at, at(0));
}

#[test]
fn priority_routing_burns_at_the_active_sets_rate_and_successors_extend_the_pool() {
    // min_active 1: "first" is in use; "second" and "third" are its successors in order.
    let accounts = [
        acct("third", true, Some(2), 100.0, Some(0.0), Some(5000)),
        acct("first", true, Some(0), 20.0, Some(10.0), Some(5000)),
        acct("second", true, Some(1), 100.0, Some(0.1), Some(5000)),
    ];
    let f = site_forecast(&accounts, Some(1), at(0));
    assert_eq!((f.usable_accounts, f.active_accounts), (3, 1));
    assert!(close(f.burn_per_hour, 10.0), "standby burns do not count");
    // 220 points at 10 %/h: 22 hours.
    assert_eq!(f.projected_dry_at, Some(at(22 * 60)));
    assert!(f.dry_before_reset, "22 h < reset at 83 h: {f:?}");
    // min_active larger than the usable count: every usable account is in use.
    let all = site_forecast(&accounts, Some(5), at(0));
    assert_eq!(all.active_accounts, 3);
    assert!(close(all.burn_per_hour, 10.1));
}

#[test]
fn a_site_that_does_not_burn_or_has_nothing_usable() {
    let idle = [acct("a", true, None, 50.0, None, Some(100))];
    let f = site_forecast(&idle, None, at(0));
    assert_eq!((f.projected_dry_at, f.dry_before_reset), (None, false));
    assert!(close(f.burn_per_hour, 0.0));

    let later_reset = [acct("a", true, None, 10.0, Some(1.0), Some(60))];
    let f = site_forecast(&later_reset, None, at(0));
    assert_eq!(f.projected_dry_at, Some(at(600)));
    assert!(!f.dry_before_reset, "the reset at 1 h comes before 10 h");

    let empty = [acct("x", false, None, 0.0, None, Some(90))];
    let f = site_forecast(&empty, None, at(0));
    assert_eq!((f.usable_accounts, f.active_accounts), (0, 0));
    assert_eq!(f.projected_dry_at, Some(at(0)), "nothing usable: dry now");
    assert!(f.dry_before_reset);
    let none = site_forecast(&[], Some(2), at(0));
    assert_eq!(
        (none.earliest_reset_at, none.dry_before_reset),
        (None, true)
    );
}
