//! The exhaustion forecast (docs/rules/patrol.md §10) and the pool forecast gauges (item 4) over real
//! HTTP against the simulated CPA: usage is raised in the sim between forced rounds while the
//! manual clock moves an hour each time, so the history holds a known, steady burn.

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use quota_patrol::jobs::inspect::{RoundKind, RoundOptions, run_round};
use quota_patrol::jobs::sites::{SiteInput, create_site};

use crate::helpers::*;

async fn json(t: &TestApp, path: &str) -> Value {
    let r = t.get(path).await;
    assert_eq!(r.status(), 200, "{path}");
    let text = r.text().await.unwrap();
    assert!(
        !text.contains(MGMT_KEY) && !text.contains(ADMIN_TOKEN),
        "{text}"
    );
    serde_json::from_str(&text).unwrap()
}

fn at(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .unwrap_or_else(|| panic!("not a time: {v}"))
        .parse()
        .unwrap()
}

/// Forced rounds at t0, t0+1h, t0+2h; before each later one every named weekly window gains
/// `per_hour` percentage points.
async fn burn(t: &TestApp, emails: &[(&str, f64)]) {
    t.inspect_forced().await;
    for _ in 0..2 {
        t.clock.advance(Duration::hours(1));
        for (email, per_hour) in emails {
            let name = t.name_of(email);
            t.sim.update_usage(&name, |u| {
                if let Some(w) = u.weekly.as_mut() {
                    w.used_percent += per_hour;
                }
            });
        }
        t.inspect_forced().await;
    }
}

#[tokio::test]
async fn the_site_forecast_spends_the_usable_headroom_at_the_summed_burn() {
    // Weekly 10 % and 20 %, threshold 95, +5 points an hour each: after two hours 20 % and 30 %.
    let t = spawn_app(vec![free("a@x.com", 10.0), free("b@x.com", 20.0)]).await;
    burn(&t, &[("a@x.com", 5.0), ("b@x.com", 5.0)]).await;
    let now = t0() + Duration::hours(2);

    let f = json(&t, &format!("/api/sites/{SITE}/forecast")).await;
    assert_eq!(f["siteId"], SITE);
    assert_eq!(at(&f["computedAt"]), now);
    assert_eq!(
        (&f["usableAccounts"], &f["activeAccounts"]),
        (&Value::from(2), &Value::from(2)),
        "{f}"
    );
    let remaining = f["remainingPercent"].as_f64().unwrap();
    assert!((remaining - 140.0).abs() < 1e-6, "75 + 65 points: {f}");
    let burn = f["burnPerHour"].as_f64().unwrap();
    assert!((burn - 10.0).abs() < 1e-6, "{f}");
    // 140 points at 10 per hour: 14 hours; the earliest reset (free weekly) is 4 days out.
    assert_eq!(at(&f["projectedDryAt"]), now + Duration::hours(14), "{f}");
    assert_eq!(at(&f["earliestResetAt"]), t0() + Duration::days(4), "{f}");
    assert_eq!(f["dryBeforeReset"], true);

    let r = t.get("/api/sites/nope/forecast").await;
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "not_found", "{body}");
}

#[tokio::test]
async fn priority_routing_burns_at_the_active_sets_rate() {
    let mut settings = fast_settings();
    settings.priority_routing_enabled = Some(true);
    settings.priority_min_active_count = Some(1);
    let t = spawn_app_with(vec![free("a@x.com", 10.0), free("b@x.com", 10.0)], settings).await;
    // Only the active account burns; the standby one stays at 10 %.
    t.inspect_forced().await;
    let pool = json(&t, &format!("/api/pool?siteId={SITE}")).await;
    let first = pool["accounts"][0]["name"].as_str().unwrap().to_string();
    let email = t
        .sim
        .accounts()
        .into_iter()
        .find(|a| a.name == first)
        .unwrap()
        .email;
    for _ in 0..2 {
        t.clock.advance(Duration::hours(1));
        t.sim
            .update_usage(&first, |u| u.weekly.as_mut().unwrap().used_percent += 8.5);
        t.inspect_forced().await;
    }
    let f = json(&t, &format!("/api/sites/{SITE}/forecast")).await;
    assert_eq!(
        (&f["usableAccounts"], &f["activeAccounts"]),
        (&Value::from(2), &Value::from(1)),
        "{email}: {f}"
    );
    assert!(
        (f["burnPerHour"].as_f64().unwrap() - 8.5).abs() < 1e-6,
        "{f}"
    );
    // (95 - 27) + (95 - 10) = 153 points at 8.5 per hour: 18 hours.
    let now = t0() + Duration::hours(2);
    assert_eq!(at(&f["projectedDryAt"]), now + Duration::hours(18), "{f}");
}

/// The window `id` of `name` in a `GET /api/quotas` body.
fn window<'a>(quotas: &'a Value, name: &str, id: &str) -> &'a Value {
    let acc = quotas
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["accountName"] == name)
        .unwrap_or_else(|| panic!("{name} not in {quotas}"));
    acc["windows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == id)
        .unwrap_or_else(|| panic!("no window {id}: {acc}"))
}

#[tokio::test]
async fn quotas_show_each_windows_burn_rate_and_projected_exhaustion() {
    // Paid: 5-hour at 50 % resetting at t0+3h, weekly at 10 % resetting at t0+3d.
    let t = spawn_app(vec![plus("p@x.com", 50.0, 10.0)]).await;
    let p = t.name_of("p@x.com");
    t.inspect_forced().await;
    let q = json(&t, &format!("/api/quotas?siteId={SITE}")).await;
    let weekly = window(&q, &p, "main:secondary");
    assert_eq!(
        weekly["burnRatePerHour"],
        Value::Null,
        "one probe is no rate: {weekly}"
    );
    assert_eq!(weekly["projectedExhaustedAt"], Value::Null);
    assert_eq!(weekly["exhaustion"]["kind"], "unknown");
    assert_eq!(
        weekly["usedPercent"], 10.0,
        "the window's own fields stay: {weekly}"
    );

    for _ in 0..2 {
        t.clock.advance(Duration::hours(1));
        t.sim.update_usage(&p, |u| {
            u.weekly.as_mut().unwrap().used_percent += 5.0;
            u.five_hour.as_mut().unwrap().used_percent += 10.0;
        });
        t.inspect_forced().await;
    }
    let now = t0() + Duration::hours(2);
    let q = json(&t, &format!("/api/quotas?siteId={SITE}")).await;
    let weekly = window(&q, &p, "main:secondary");
    assert!(
        (weekly["burnRatePerHour"].as_f64().unwrap() - 5.0).abs() < 1e-6,
        "{weekly}"
    );
    // 20 % → 95 % at 5 per hour: 15 hours, well before the weekly reset.
    assert_eq!(
        at(&weekly["projectedExhaustedAt"]),
        now + Duration::hours(15),
        "{weekly}"
    );
    assert_eq!(weekly["exhaustion"]["kind"], "at");
    assert_eq!(weekly["forecastThreshold"], 95);
    // 5-hour at 70 % burning 10 per hour needs 2.5 h; it resets in 1 h.
    let five = window(&q, &p, "main:primary");
    assert!(
        (five["burnRatePerHour"].as_f64().unwrap() - 10.0).abs() < 1e-6,
        "{five}"
    );
    assert_eq!(five["projectedExhaustedAt"], Value::Null, "{five}");
    assert_eq!(five["exhaustion"]["kind"], "notBeforeReset", "{five}");

    // An account override of the weekly threshold moves the projection (80: 12 hours).
    let r = t
        .put(
            &format!("/api/accounts/{p}/policy?siteId={SITE}"),
            serde_json::json!({"weeklyThreshold": 80}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let q = json(&t, &format!("/api/quotas?siteId={SITE}")).await;
    let weekly = window(&q, &p, "main:secondary");
    assert_eq!(weekly["forecastThreshold"], 80, "{weekly}");
    assert_eq!(
        at(&weekly["projectedExhaustedAt"]),
        now + Duration::hours(12),
        "{weekly}"
    );
    t.delete(&format!("/api/accounts/{p}/policy?siteId={SITE}"))
        .await;

    // The round table's "runs out": the weekly window decides (the 5-hour one resets first).
    let runs_out = quota_patrol::jobs::forecast::runs_out(&t.patrol, SITE)
        .await
        .unwrap();
    let r = runs_out[&p];
    assert_eq!(
        r.window,
        Some(quota_patrol::core::quota::WindowKind::Weekly),
        "{r:?}"
    );
    assert_eq!(r.projection.at(), Some(now + Duration::hours(15)), "{r:?}");
    let round = t.inspect().await;
    let table = quota_patrol::table::render_round_with(&round, now, &runs_out);
    assert!(table.contains("weekly in 15h00m"), "{table}");
}

/// Forced rounds of `site` through the jobs layer.
async fn forced_round(t: &TestApp, site: &str) {
    let opts = RoundOptions {
        force: true,
        ..RoundOptions::new(RoundKind::Manual)
    };
    run_round(&t.patrol, site, opts).await.expect("round runs");
}

/// The value of `series{site="<site>"}` in a Prometheus text body.
fn gauge(text: &str, series: &str, site: &str) -> f64 {
    let label = format!(r#"site="{site}""#);
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{series}{{")) && l.contains(&label))
        .unwrap_or_else(|| panic!("no {series} for site {site} in:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_pool_forecast_gauges_are_on_metrics_after_a_round() {
    // A site of its own: the recorder is process-wide and every other test's site is `test`.
    const OWN: &str = "forecast-gauges";
    let t = spawn_app(vec![free("a@x.com", 10.0), free("b@x.com", 20.0)]).await;
    let input = SiteInput {
        site_id: Some(OWN.into()),
        site_name: Some("Forecast gauges".into()),
        cpa_base_url: Some(t.sim.base_url()),
        management_key: Some(MGMT_KEY.into()),
        usage_url: Some(format!("{}/backend-api/wham/usage", t.sim.base_url())),
        settings: fast_settings(),
        ..Default::default()
    };
    create_site(&t.patrol, input).await.expect("site created");
    let a = t.name_of("a@x.com");
    forced_round(&t, OWN).await;
    for _ in 0..2 {
        t.clock.advance(Duration::hours(1));
        t.sim
            .update_usage(&a, |u| u.weekly.as_mut().unwrap().used_percent += 5.0);
        forced_round(&t, OWN).await;
    }
    let text = t.get("/metrics").await.text().await.unwrap();
    let now = t0() + Duration::hours(2);
    assert_eq!(gauge(&text, "quota_patrol_usable_accounts", OWN), 2.0);
    assert_eq!(gauge(&text, "quota_patrol_active_accounts", OWN), 2.0);
    // (95 - 20) + (95 - 20) = 150 points at 5 per hour: 30 hours.
    assert_eq!(
        gauge(&text, "quota_patrol_pool_remaining_percent", OWN),
        150.0
    );
    let dry = now + Duration::hours(30);
    assert_eq!(
        gauge(&text, "quota_patrol_projected_dry_timestamp_seconds", OWN),
        dry.timestamp() as f64
    );
    let reset = t0() + Duration::days(4);
    assert_eq!(
        gauge(&text, "quota_patrol_earliest_reset_timestamp_seconds", OWN),
        reset.timestamp() as f64
    );
    // Per-account gauges are off by default (`[metrics] per_account`).
    assert!(
        !text.contains("quota_patrol_account_used_percent"),
        "{text}"
    );
}

#[test]
fn the_sample_grafana_dashboard_is_json_over_the_pool_series() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/grafana-dashboard.json"
    ))
    .unwrap();
    let d: Value = serde_json::from_str(&text).expect("valid JSON");
    let exprs: Vec<&str> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    for series in [
        "quota_patrol_usable_accounts",
        "quota_patrol_active_accounts",
        "quota_patrol_earliest_reset_timestamp_seconds",
        "quota_patrol_projected_dry_timestamp_seconds",
        "quota_patrol_pool_remaining_percent",
        "quota_patrol_account_used_percent",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(series)),
            "{series} in no panel: {exprs:?}"
        );
    }
}
