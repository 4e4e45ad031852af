//! The exhaustion forecast of a site's accounts and of the site (docs/rules/patrol.md §10): reads
//! the current snapshots, the published pool and the recent `snapshot_history` in one store
//! call, feeds `core::forecast`, and sets the pool forecast gauges. Owns the choice of the
//! window each threshold applies to and the history looked at ([`LOOKBACK_HOURS`],
//! [`SAMPLES_PER_ACCOUNT`]); the arithmetic is `core::forecast`'s. Read-only: it never writes
//! the store or CPA.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::{JobError, Patrol};
use crate::core::account::{ProbeState, QuotaSnapshot};
use crate::core::forecast::{
    self, AccountInput, Burn, ForecastConfig, Projection, Sample, SiteForecast,
};
use crate::core::policy::QuotaPolicy;
use crate::core::pool::{PoolSnapshot, PublishCause};
use crate::core::quota::{MAIN_GROUP, QuotaWindow, WindowKind};
use crate::core::site::Site;

/// History looked at: the successful probes of the last 24 hours. At the default 120-minute
/// half-life a sample 24 h old weighs 2^-12 of a fresh one, so older ones change nothing but
/// cost a read and a parse per account on every publish: with 8 days (the first choice) the
/// cached round of the 10,000-account round benchmark grew from 0.70 s to 1.00 s within nine
/// rounds, and would have grown on with the history.
pub const LOOKBACK_HOURS: i64 = 24;
/// At most this many of an account's newest probes are read (48 = 8 h, four half-lives, at a
/// 10-minute interval with every probe real).
pub const SAMPLES_PER_ACCOUNT: u32 = 48;

/// Burn rate and projection of one window of one account (`/api/quotas` per window).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowForecast {
    /// `None` until two samples of the current window span `min_span_minutes`.
    pub burn: Option<Burn>,
    /// Percent the projection runs to: the deciding threshold of a window that disables the
    /// account, 100 for a window that only counts at 100 % (free 5-hour, code review, ...).
    pub threshold: u8,
    /// Whether this window disables the account at `threshold` (false: only at 100 %).
    pub decides: bool,
    pub projection: Projection,
}

/// Everything a forecast of a site is computed from.
struct Loaded {
    site: Site,
    pool: Arc<PoolSnapshot>,
    states: HashMap<String, ProbeState>,
    /// (account, window id) → samples, any order.
    samples: HashMap<(String, String), Vec<Sample>>,
    now: DateTime<Utc>,
}

impl Loaded {
    fn window(&self, name: &str, snap: &QuotaSnapshot, w: &QuotaWindow) -> WindowForecast {
        let key = (name.to_string(), w.id.clone());
        let samples = self.samples.get(&key).map_or(&[][..], Vec::as_slice);
        let burn = forecast::burn_rate(samples, &ForecastConfig::default());
        let deciding = deciding_threshold(&self.site, name, snap, w);
        let threshold = deciding.unwrap_or(100);
        let projection = match w.used_percent {
            Some(used) => forecast::project(used, threshold, burn.as_ref(), w.reset_at, self.now),
            None => Projection::Unknown,
        };
        WindowForecast {
            burn,
            threshold,
            decides: deciding.is_some(),
            projection,
        }
    }

    /// The site forecast's view of each account of the published pool, in its order.
    fn account_inputs(&self) -> Vec<AccountInput> {
        let routing = self.pool.routing_enabled;
        self.pool
            .accounts
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let snap = self.states.get(&a.name).and_then(|s| s.snapshot.as_ref());
                let long = snap.and_then(|s| s.long_window().map(|w| (s, w)));
                let usable = a.availability.is_usable();
                let wf = long.map(|(s, w)| self.window(&a.name, s, w));
                let used = long.and_then(|(_, w)| w.used_percent).unwrap_or(100.0);
                let threshold = f64::from(wf.map_or(100, |f| f.threshold));
                AccountInput {
                    name: a.name.clone(),
                    usable,
                    order: routing.then_some(i),
                    headroom_percent: if usable {
                        (threshold - used).max(0.0)
                    } else {
                        0.0
                    },
                    burn_per_hour: wf.and_then(|f| f.burn).map(|b| b.percent_per_hour),
                    reset_at: if usable {
                        long.and_then(|(_, w)| w.reset_at)
                    } else {
                        a.availability.until()
                    },
                }
            })
            .collect()
    }

    fn site_forecast(&self) -> SiteForecast {
        let s = &self.site.settings;
        let min_active = s
            .priority_routing_enabled
            .then_some(s.priority_min_active_count as usize);
        forecast::site_forecast(&self.account_inputs(), min_active, self.now)
    }
}

/// The threshold at which main window `w` of account `name` (snapshot `snap`) disables it,
/// `None` when it never does below 100 % (or is not a main window): the account's effective
/// policy (`QuotaPolicy::resolve` of the site settings and its override) through
/// `QuotaPolicy::deciding_threshold` (docs/rules/patrol.md §9, contract "core::policy").
fn deciding_threshold(
    site: &Site,
    name: &str,
    snap: &QuotaSnapshot,
    w: &QuotaWindow,
) -> Option<u8> {
    if w.group != MAIN_GROUP {
        return None;
    }
    let policy = QuotaPolicy::resolve(&site.settings, site.account_policies.get(name));
    snap.threshold_for(w, &policy)
}

/// Reads what the forecast of `site_id` needs; `None` for an unknown site. The pool is the
/// published one (published first when none is).
async fn load(p: &Patrol, site_id: &str) -> Result<Option<Loaded>, JobError> {
    let site = match p.site(site_id).await {
        Ok(s) => s,
        Err(JobError::UnknownSite(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let pool = match p.pool_snapshot(site_id) {
        Some(s) => s,
        None => p.publish_pool(site_id, PublishCause::Startup).await?,
    };
    let now = p.now();
    let sid = site_id.to_string();
    let since = now - Duration::hours(LOOKBACK_HOURS);
    let (states, mut samples, passive) = p
        .store
        .run(move |c| {
            let states = crate::store::accounts::load_states(c, &sid)?;
            let mut samples: HashMap<(String, String), Vec<Sample>> = HashMap::new();
            let fold = |crate::store::accounts::ProbeReading { name, at, windows }| {
                for w in windows {
                    if let Some(used_percent) = w.used_percent {
                        samples
                            .entry((name.clone(), w.id))
                            .or_default()
                            .push(Sample {
                                at,
                                used_percent,
                                reset_at: w.reset_at,
                            });
                    }
                }
            };
            crate::store::accounts::window_readings(c, &sid, since, SAMPLES_PER_ACCOUNT, fold)?;
            Ok((states, samples, crate::store::passive::load(c, &sid)?))
        })
        .await?;
    add_passive_samples(&mut samples, &states, &passive, since);
    Ok(Some(Loaded {
        site,
        pool,
        states,
        samples,
        now,
    }))
}

/// Passive readings newer than the account's probe (and within the lookback) are samples of
/// the burn rate too (docs/rules/patrol.md §4.7): CPA saw them on served responses, so they
/// follow a busy account between its probes. Each main window joins the probe window of the
/// same kind (its id), never by header slot; the projection still starts from the probe's
/// reading.
fn add_passive_samples(
    samples: &mut HashMap<(String, String), Vec<Sample>>,
    states: &HashMap<String, ProbeState>,
    passive: &HashMap<String, QuotaSnapshot>,
    since: DateTime<Utc>,
) {
    for (name, ps) in passive {
        let Some(snap) = states.get(name).and_then(|s| s.snapshot.as_ref()) else {
            continue;
        };
        if ps.refreshed_at <= snap.refreshed_at || ps.refreshed_at < since {
            continue;
        }
        for w in ps.windows.iter().filter(|w| w.group == MAIN_GROUP) {
            let probe_window = snap
                .windows
                .iter()
                .find(|pw| pw.group == MAIN_GROUP && pw.kind == w.kind);
            if let (Some(pw), Some(used_percent)) = (probe_window, w.used_percent) {
                samples
                    .entry((name.clone(), pw.id.clone()))
                    .or_default()
                    .push(Sample {
                        at: ps.refreshed_at,
                        used_percent,
                        reset_at: w.reset_at,
                    });
            }
        }
    }
}

/// The forecast of one site from its current snapshots and snapshot_history (None: unknown
/// site); also sets the site's forecast gauges ([`record_gauges`]). Errors: store failures.
/// Model: `core::forecast::site_forecast`, docs/patrol.md "The exhaustion forecast".
///
/// Reuse: a forecast computed for the same published pool version at most
/// [`REUSE_SECONDS`] ago is returned as is (gauges already set). A round's publish computes it
/// and the round's alerts read it; every change of history, settings or policy republishes
/// the pool (a new version), so a reused forecast never misses data.
pub async fn site_forecast(p: &Patrol, site_id: &str) -> Result<Option<SiteForecast>, JobError> {
    if let Some(version) = p.pool_snapshot(site_id).map(|s| s.version) {
        let now = p.now();
        let rt = p.runtime(site_id);
        if let Some(f) = rt.cached_forecast(version)
            && (now - f.computed_at).num_seconds().abs() <= REUSE_SECONDS
        {
            return Ok(Some(f));
        }
    }
    let Some(l) = load(p, site_id).await? else {
        return Ok(None);
    };
    let f = l.site_forecast();
    let per_account = p.options.per_account_metrics.then_some(&l.states);
    record_gauges(&l.site.site_id, &f, per_account);
    p.runtime(site_id).cache_forecast(l.pool.version, f.clone());
    Ok(Some(f))
}

/// The forecast of the site's published pool for readers that tolerate its age (the status
/// page): the one computed for the current pool version whatever its age (every round and
/// change republishes, and the publish computes it), else [`site_forecast`]. Its times are
/// absolute, so an older computation of the same data still says when the site runs dry.
/// Errors: store failures.
pub async fn published(p: &Patrol, site_id: &str) -> Result<Option<SiteForecast>, JobError> {
    if let Some(version) = p.pool_snapshot(site_id).map(|s| s.version)
        && let Some(f) = p.runtime(site_id).cached_forecast(version)
    {
        return Ok(Some(f));
    }
    site_forecast(p, site_id).await
}

/// How old (seconds, by the patrol's clock) a forecast of the same pool version may be to be
/// reused instead of recomputed.
pub const REUSE_SECONDS: i64 = 60;

/// Per account, per window id: burn rate and projection of every window of its current
/// snapshot (`/api/quotas`). Accounts without a snapshot are absent. Errors: `UnknownSite`,
/// store failures.
pub async fn window_forecasts(
    p: &Patrol,
    site_id: &str,
) -> Result<HashMap<String, HashMap<String, WindowForecast>>, JobError> {
    let l = load(p, site_id)
        .await?
        .ok_or_else(|| JobError::UnknownSite(site_id.to_string()))?;
    Ok(l.states
        .iter()
        .filter_map(|(name, st)| {
            let snap = st.snapshot.as_ref()?;
            let per_window = snap
                .windows
                .iter()
                .map(|w| (w.id.clone(), l.window(name, snap, w)))
                .collect();
            Some((name.clone(), per_window))
        })
        .collect())
}

/// When one account runs out, for the round table's "runs out" column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunsOut {
    /// `core::forecast::account_projection` over the windows that decide the account.
    pub projection: Projection,
    /// The kind of the window that gives `projection` (exhausted or earliest `At`); `None`
    /// for `NotBeforeReset` / `Unknown`.
    pub window: Option<WindowKind>,
}

/// Per account: when it runs out and by which window. Errors: `UnknownSite`, store failures.
pub async fn runs_out(p: &Patrol, site_id: &str) -> Result<HashMap<String, RunsOut>, JobError> {
    let l = load(p, site_id)
        .await?
        .ok_or_else(|| JobError::UnknownSite(site_id.to_string()))?;
    Ok(l.states
        .iter()
        .filter_map(|(name, st)| {
            let snap = st.snapshot.as_ref()?;
            let deciding: Vec<(WindowKind, Projection)> = snap
                .windows
                .iter()
                .map(|w| (w.kind, l.window(name, snap, w)))
                .filter(|(_, f)| f.decides)
                .map(|(k, f)| (k, f.projection))
                .collect();
            let projection = forecast::account_projection(deciding.iter().map(|d| d.1));
            let named = matches!(
                projection,
                Projection::At { .. } | Projection::AlreadyExhausted
            );
            let window = deciding
                .iter()
                .find(|(_, p)| named && *p == projection)
                .map(|d| d.0);
            Some((name.clone(), RunsOut { projection, window }))
        })
        .collect())
}

/// The site's pool forecast gauges (api.md `/metrics`, docs/operations.md "Pool and forecast"):
/// `quota_patrol_active_accounts`, `quota_patrol_earliest_reset_timestamp_seconds`,
/// `quota_patrol_projected_dry_timestamp_seconds` (Unix seconds; NaN when unknown / never),
/// `quota_patrol_pool_remaining_percent`; with `[metrics] per_account = true` also
/// `quota_patrol_account_used_percent{site, account, window}` (main windows, by kind).
/// `quota_patrol_usable_accounts` stays the pool publish's (`jobs::pool`).
fn record_gauges(
    site_id: &str,
    f: &SiteForecast,
    per_account: Option<&HashMap<String, ProbeState>>,
) {
    let site = site_id.to_string();
    let secs = |t: Option<DateTime<Utc>>| t.map_or(f64::NAN, |t| t.timestamp() as f64);
    metrics::gauge!("quota_patrol_active_accounts", "site" => site.clone())
        .set(f.active_accounts as f64);
    metrics::gauge!("quota_patrol_earliest_reset_timestamp_seconds", "site" => site.clone())
        .set(secs(f.earliest_reset_at));
    metrics::gauge!("quota_patrol_projected_dry_timestamp_seconds", "site" => site.clone())
        .set(secs(f.projected_dry_at));
    metrics::gauge!("quota_patrol_pool_remaining_percent", "site" => site.clone())
        .set(f.remaining_percent);
    for (name, st) in per_account.into_iter().flatten() {
        let Some(snap) = st.snapshot.as_ref() else {
            continue;
        };
        for w in snap.windows.iter().filter(|w| w.group == MAIN_GROUP) {
            let Some(used) = w.used_percent else { continue };
            metrics::gauge!("quota_patrol_account_used_percent",
                "site" => site.clone(), "account" => name.clone(), "window" => kind_label(w))
            .set(used);
        }
    }
}

fn kind_label(w: &QuotaWindow) -> &'static str {
    match w.kind {
        WindowKind::FiveHour => "fiveHour",
        WindowKind::Weekly => "weekly",
        WindowKind::Monthly => "monthly",
        WindowKind::Other => "other",
    }
}

/// Recomputes the site forecast (and so its gauges) after a round or publish; a failure is
/// logged, never fails the work that triggered it.
pub async fn refresh_gauges(p: &Patrol, site_id: &str) {
    if let Err(e) = site_forecast(p, site_id).await {
        tracing::warn!(site = site_id, error = %e, "forecast gauges not updated");
    }
}

/// `GET /api/sites/{id}/forecast` (camelCase; see `core::forecast::SiteForecast`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteForecastView {
    pub site_id: String,
    pub computed_at: DateTime<Utc>,
    /// Usable accounts now (standby accounts of priority routing included).
    pub usable_accounts: usize,
    /// Usable accounts in use: the first `priorityMinActiveCount` under priority routing,
    /// every usable account otherwise.
    pub active_accounts: usize,
    /// Sum of the usable accounts' headroom to their deciding threshold on the long (weekly,
    /// else monthly) window, percentage points.
    pub remaining_percent: f64,
    /// Summed burn of the accounts in use, percentage points per hour.
    pub burn_per_hour: f64,
    /// When the site runs dry at that burn; `null` when nothing burns.
    pub projected_dry_at: Option<DateTime<Utc>>,
    /// The earliest reset of any account (when capacity may come back); `null` when none known.
    pub earliest_reset_at: Option<DateTime<Utc>>,
    /// `projectedDryAt` is before `earliestResetAt` (or no reset is known).
    pub dry_before_reset: bool,
}

impl SiteForecastView {
    /// The API view of `f` for `site_id`.
    pub fn new(site_id: &str, f: &SiteForecast) -> Self {
        Self {
            site_id: site_id.to_string(),
            computed_at: f.computed_at,
            usable_accounts: f.usable_accounts,
            active_accounts: f.active_accounts,
            remaining_percent: f.remaining_percent,
            burn_per_hour: f.burn_per_hour,
            projected_dry_at: f.projected_dry_at,
            earliest_reset_at: f.earliest_reset_at,
            dry_before_reset: f.dry_before_reset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::quota::{UsageReport, WindowKind};
    use chrono::TimeZone;
    use metrics_exporter_prometheus::PrometheusBuilder;

    fn forecast(dry: Option<DateTime<Utc>>) -> SiteForecast {
        let now = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        SiteForecast {
            computed_at: now,
            usable_accounts: 3,
            active_accounts: 2,
            remaining_percent: 120.5,
            burn_per_hour: 4.0,
            projected_dry_at: dry,
            earliest_reset_at: Some(now + Duration::hours(5)),
            dry_before_reset: false,
        }
    }

    fn states() -> HashMap<String, ProbeState> {
        let window = |id: &str, kind, used| QuotaWindow {
            id: id.into(),
            label: id.into(),
            group: MAIN_GROUP.into(),
            kind,
            used_percent: Some(used),
            limit_window_seconds: None,
            reset_at: None,
            reset_after_seconds: None,
        };
        let report = UsageReport {
            plan_type: Some("plus".into()),
            windows: vec![
                window("main:primary", WindowKind::FiveHour, 12.0),
                window("main:secondary", WindowKind::Weekly, 34.0),
            ],
            ..Default::default()
        };
        let at = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let st = ProbeState {
            snapshot: Some(QuotaSnapshot::from_report(&report, at)),
            ..Default::default()
        };
        HashMap::from([("a.json".to_string(), st)])
    }

    fn render(f: &SiteForecast, per_account: Option<&HashMap<String, ProbeState>>) -> String {
        let recorder = PrometheusBuilder::new().build_recorder();
        metrics::with_local_recorder(&recorder, || record_gauges("s1", f, per_account));
        recorder.handle().render()
    }

    #[test]
    fn the_pool_gauges_carry_the_forecast_and_per_account_gauges_only_when_asked() {
        let f = forecast(Some(Utc.with_ymd_and_hms(2026, 5, 21, 9, 0, 0).unwrap()));
        let off = render(&f, None);
        assert!(
            off.contains(r#"quota_patrol_active_accounts{site="s1"} 2"#),
            "{off}"
        );
        assert!(
            off.contains(r#"quota_patrol_pool_remaining_percent{site="s1"} 120.5"#),
            "{off}"
        );
        let dry = f.projected_dry_at.unwrap().timestamp();
        assert!(
            off.contains(&format!(
                r#"quota_patrol_projected_dry_timestamp_seconds{{site="s1"}} {dry}"#
            )),
            "{off}"
        );
        let reset = f.earliest_reset_at.unwrap().timestamp();
        assert!(
            off.contains(&format!(
                r#"quota_patrol_earliest_reset_timestamp_seconds{{site="s1"}} {reset}"#
            )),
            "{off}"
        );
        assert!(!off.contains("quota_patrol_account_used_percent"), "{off}");

        let states = states();
        let on = render(&f, Some(&states));
        for (window, used) in [("fiveHour", 12), ("weekly", 34)] {
            let line = format!(
                r#"quota_patrol_account_used_percent{{site="s1",account="a.json",window="{window}"}} {used}"#
            );
            assert!(on.contains(&line), "{line} in {on}");
        }
    }

    #[test]
    fn newer_passive_readings_join_the_probe_window_of_their_kind() {
        let states = states();
        let probe_at = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let weekly_in_primary = |at, used| {
            let report = UsageReport {
                windows: vec![QuotaWindow {
                    id: "main:primary".into(),
                    label: "weekly".into(),
                    group: MAIN_GROUP.into(),
                    kind: WindowKind::Weekly,
                    used_percent: Some(used),
                    limit_window_seconds: Some(604_800),
                    reset_at: None,
                    reset_after_seconds: None,
                }],
                ..Default::default()
            };
            QuotaSnapshot::from_report(&report, at)
        };
        let since = probe_at - Duration::hours(LOOKBACK_HOURS);
        // (case, observed, expected samples of the weekly window)
        let table = [
            ("newer than the probe", probe_at + Duration::minutes(20), 1),
            ("at the probe", probe_at, 0),
            ("older than the probe", probe_at - Duration::minutes(5), 0),
        ];
        for (case, at, expected) in table {
            let passive = HashMap::from([("a.json".to_string(), weekly_in_primary(at, 50.0))]);
            let mut samples = HashMap::new();
            add_passive_samples(&mut samples, &states, &passive, since);
            let key = ("a.json".to_string(), "main:secondary".to_string());
            assert_eq!(samples.get(&key).map_or(0, Vec::len), expected, "{case}");
            // Never by slot: nothing joins the five-hour window in `main:primary`.
            let five = ("a.json".to_string(), "main:primary".to_string());
            assert!(!samples.contains_key(&five), "{case}");
        }
    }

    #[test]
    fn an_unknown_dry_time_is_nan_not_zero() {
        let out = render(&forecast(None), None);
        assert!(
            out.contains(r#"quota_patrol_projected_dry_timestamp_seconds{site="s1"} NaN"#),
            "{out}"
        );
    }
}
