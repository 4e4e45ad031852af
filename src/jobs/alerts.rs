//! USE CASE alerts (docs/rules/alerts.md): after every full round and on every scheduler tick,
//! derive the site's alert events with `core::alerting` and write the new state, the events and one
//! outbox message per channel in ONE store transaction; deliver due messages with retries and
//! exponential back-off until delivered or expired. [`deliver_due`] is the one-step function the
//! scheduler and the tests drive; nothing here sleeps or reads the wall clock.

use std::sync::Arc;

use chrono::{DateTime, Duration, NaiveDate, NaiveTime, Utc};
use chrono_tz::Tz;
use serde::Serialize;

use super::{JobError, Patrol};
use crate::alerts::{AlertsError, Channels};
use crate::config::AlertsConfig;
use crate::core::alerting::{
    self, AccountView, AlertDetails, AlertPolicy, AlertRecord, ChannelKind, DELIVERY_EXPIRY_HOURS,
    EventKind, ForecastView, Observation, PoolLowRule, PoolView, Reachability, Severity,
};
use crate::core::availability::{AccountFacts, availability};
use crate::core::digest;
use crate::core::inspect::Action;
use crate::core::oplog::{Category, Level, NewLogEntry, Source};
use crate::core::report::InspectionRunResult;
use crate::core::site::Site;
use crate::store::{self, alerts::AttemptResult};

pub use crate::store::alerts::{AlertEventView, AlertMessageView, DeliveryAttemptView};

/// Messages one delivery pass looks at (the rest wait for the next tick).
const BATCH: u32 = 50;

/// Alerting of the patrol: the delivery rules, the channels, one delivery pass at a time.
pub struct Alerting {
    /// Derive and queue events (`[alerts] enabled`); delivery and tests work either way.
    pub enabled: bool,
    pub policy: AlertPolicy,
    pub channels: Channels,
    /// `[alerts] daily_digest_at`: when the daily digest goes out; `None` = no digest.
    pub digest: Option<DigestSchedule>,
    delivering: tokio::sync::Mutex<()>,
}

/// When the daily digest goes out: `at` local time in `timezone` (`[alerts] daily_digest_at`,
/// `[alerts] timezone`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DigestSchedule {
    pub at: NaiveTime,
    pub timezone: Tz,
}

impl std::fmt::Debug for Alerting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerting")
            .field("enabled", &self.enabled)
            .field("policy", &self.policy)
            .field("channels", &self.channels)
            .field("digest", &self.digest)
            .finish()
    }
}

impl Alerting {
    /// From `[alerts]`: the policy and the channels.
    pub fn from_config(cfg: &AlertsConfig) -> Result<Self, AlertsError> {
        Ok(
            Self::new(cfg.enabled, policy(cfg), Channels::from_config(cfg)?).with_digest(
                cfg.daily_digest_at.map(|at| DigestSchedule {
                    at,
                    timezone: cfg.timezone,
                }),
            ),
        )
    }

    /// With given channels (tests); no digest.
    pub fn new(enabled: bool, policy: AlertPolicy, channels: Channels) -> Self {
        Self {
            enabled,
            policy,
            channels,
            digest: None,
            delivering: tokio::sync::Mutex::new(()),
        }
    }

    /// With (or without) the daily digest.
    pub fn with_digest(mut self, digest: Option<DigestSchedule>) -> Self {
        self.digest = digest;
        self
    }
}

/// The delivery rules of `[alerts]`.
pub fn policy(cfg: &AlertsConfig) -> AlertPolicy {
    AlertPolicy {
        recovery_confirm: Duration::minutes(cfg.recovery_confirm_minutes),
        min_interval: Duration::minutes(cfg.min_interval_minutes),
        repeat: (cfg.repeat_hours > 0).then(|| Duration::hours(cfg.repeat_hours)),
        unreachable_after: Duration::minutes(cfg.unreachable_after_minutes),
    }
}

// ---- Evaluation -----------------------------------------------------------------------------

/// The hook at the end of every round: after a full round (auto, manual, reset; not a dry run)
/// evaluates the site's pool, the invalid accounts and its reachability, queues what changed
/// and starts a delivery pass. Failures are logged, never fail the round.
pub async fn after_round(
    p: &Patrol,
    site: &Site,
    kind: super::round::RoundKind,
    result: &InspectionRunResult,
) {
    let Some(a) = p.alerting().cloned() else {
        return;
    };
    if !a.enabled || result.dry_run || !kind.acts() {
        return;
    }
    match evaluate_round(p, &a, site, result).await {
        Ok(n) if n > 0 => spawn_delivery(p),
        Ok(_) => {}
        Err(e) => {
            tracing::error!(site = %site.site_id, error = %e, "alert evaluation after the round failed")
        }
    }
}

/// Accounts deleted or disabled as invalid (rule 1) whose action succeeded, by display name.
fn invalidated(result: &InspectionRunResult) -> Vec<String> {
    result
        .decisions
        .iter()
        .filter(|d| d.rule == 1 && matches!(d.action, Action::Delete | Action::Disable))
        .filter(|d| {
            result
                .action_outcomes
                .iter()
                .any(|o| o.account_name == d.account_name && o.action == d.action && o.success)
        })
        .map(|d| d.display_account.clone())
        .collect()
}

/// Evaluates one round; answers how many events were queued.
async fn evaluate_round(
    p: &Patrol,
    a: &Alerting,
    site: &Site,
    result: &InspectionRunResult,
) -> Result<usize, JobError> {
    let now = p.now();
    let mut obs = Observation {
        reachability: Some(reachability(p, site).await?),
        ..Default::default()
    };
    // A partial round still evaluated most of the pool; a failed one did not.
    if result.status.evaluated_pool() {
        let s = &site.settings;
        obs.pool = Some(pool_view(p, site, now).await?);
        obs.min_active = s
            .priority_routing_enabled
            .then_some(s.priority_min_active_count);
        obs.invalid_accounts = invalidated(result);
        obs.forecast = forecast_view(p, site).await;
        obs.pool_low = Some(PoolLowRule {
            early_warning: Duration::minutes(s.early_warning_minutes.into()),
            low_capacity_accounts: s.low_capacity_accounts,
        });
    }
    commit(p, a, site, obs, now).await
}

/// The pool of a site as alerting counts it, from the stored accounts, probe states and
/// reasons (no CPA call).
async fn pool_view(p: &Patrol, site: &Site, now: DateTime<Utc>) -> Result<PoolView, JobError> {
    let super::PoolData {
        accounts,
        states,
        reasons,
        exceptions,
        priorities: list,
    } = p.pool(&site.site_id).await?;
    // Which accounts count (docs/rules/alerts.md §1): without priority routing, every non-exception
    // account; with it, the accounts of the priority list, where a standby account
    // (disabled by routing, quota usable) is capacity, not a loss.
    let routing = site.settings.priority_routing_enabled;
    let listed: std::collections::HashSet<&str> = list.iter().map(|e| e.name.as_str()).collect();
    let routable = if routing {
        Some(super::priority::routable(p, site).await?)
    } else {
        None
    };
    let views: Vec<AccountView<'_>> = accounts
        .iter()
        .filter(|acc| !exceptions.contains(&acc.name))
        .filter(|acc| !routing || listed.contains(acc.name.as_str()))
        .map(|acc| {
            AccountView {
                name: &acc.name,
                display_name: acc.display_name(),
                plan: acc.plan_type.as_deref(),
                // Under routing, capacity is what routing itself may use (the selection
                // engine's eligible accounts, standby included); else enabled accounts.
                disabled: match &routable {
                    Some(r) => !r.contains(&acc.name),
                    None => acc.disabled,
                },
                availability: availability(
                    AccountFacts::from_parts(
                        acc.disabled,
                        reasons.get(&acc.name),
                        states.get(&acc.name),
                    ),
                    &site.quota_policy(&acc.name),
                    now,
                ),
                snapshot: states.get(&acc.name).and_then(|s| s.snapshot.as_ref()),
            }
        })
        .collect();
    Ok(alerting::pool_view(&views))
}

/// The site forecast (`jobs::forecast`) as alerting reads it; `None` when it cannot be
/// computed (logged): `pool_low` then decides by capacity alone and messages show no dry time.
async fn forecast_view(p: &Patrol, site: &Site) -> Option<ForecastView> {
    match super::forecast::site_forecast(p, &site.site_id).await {
        Ok(f) => f.map(|f| ForecastView {
            projected_dry_at: f.projected_dry_at,
            earliest_reset_at: f.earliest_reset_at,
            burn_per_hour: f.burn_per_hour,
            remaining_percent: f.remaining_percent,
        }),
        Err(e) => {
            tracing::warn!(site = %site.site_id, error = %e, "site forecast for the alerts failed");
            None
        }
    }
}

/// The site's reachability as this process knows it: failing management calls (memory) and a
/// stored refusal of the management key (which counts at once and survives restarts).
/// `last_contact_at` is filled in by [`commit`].
async fn reachability(p: &Patrol, site: &Site) -> Result<Reachability, JobError> {
    let failing = p.runtime(&site.site_id).cpa_failing_since();
    let refusal = p.key_refusal(&site.site_id).await?;
    Ok(Reachability {
        failing_since: match &refusal {
            Some(r) => Some(failing.map_or(r.first_refused_at, |f| f.min(r.first_refused_at))),
            None => failing,
        },
        last_contact_at: None,
        key_refused: refusal.is_some(),
        cause: refusal.map(|r| r.detail()),
    })
}

/// Evaluates reachability of every enabled site (scheduler ticks: a site whose CPA is down gets
/// no round, so its outage is noticed here).
pub async fn evaluate_reachability(p: &Patrol, a: &Alerting) -> Result<usize, JobError> {
    let sites = p.store.run(|c| store::sites::list(c)).await?;
    let now = p.now();
    let mut queued = 0;
    for site in sites.into_iter().filter(|s| s.site_enabled) {
        let obs = Observation {
            reachability: Some(reachability(p, &site).await?),
            ..Default::default()
        };
        queued += commit(p, a, &site, obs, now).await?;
    }
    Ok(queued)
}

/// Loads the site's alert state, evaluates `obs`, and writes the changed families, the events
/// and their messages in one transaction. Answers the number of events.
async fn commit(
    p: &Patrol,
    a: &Alerting,
    site: &Site,
    mut obs: Observation,
    now: DateTime<Utc>,
) -> Result<usize, JobError> {
    let policy = a.policy;
    let channels = a.channels.kinds();
    let queue_on = channels.clone();
    let (sid, name) = (site.site_id.clone(), site.site_name.clone());
    let records = p
        .store
        .run(move |c| {
            let tx = c.transaction()?;
            if let Some(r) = obs.reachability.as_mut() {
                r.last_contact_at = store::sites::runtime(&tx, &sid)?.last_cpa_contact_at;
            }
            let prev = store::alerts::load_state(&tx, &sid)?;
            let eval = alerting::evaluate(&prev, &obs, &policy, now);
            for f in &eval.changed {
                store::alerts::save_state(&tx, &sid, *f, eval.state.get(*f), now)?;
            }
            let expires = now + Duration::hours(DELIVERY_EXPIRY_HOURS);
            let mut records = Vec::with_capacity(eval.events.len());
            for ev in eval.events {
                let r = AlertRecord {
                    id: uuid::Uuid::new_v4().to_string(),
                    site_id: sid.clone(),
                    site_name: name.clone(),
                    kind: ev.kind,
                    at: now,
                    reminder: ev.reminder,
                    details: ev.details,
                };
                store::alerts::insert_event(&tx, &r)?;
                for ch in &queue_on {
                    store::alerts::enqueue(&tx, &r.id, *ch, now, expires)?;
                }
                records.push(r);
            }
            tx.commit()?;
            Ok(records)
        })
        .await?;
    announce(p, &records, &channels).await;
    Ok(records.len())
}

/// Counts and logs queued events (one operation-log line each, at the event's level).
async fn announce(p: &Patrol, records: &[AlertRecord], channels: &[ChannelKind]) {
    if records.is_empty() {
        return;
    }
    let queued_on = if channels.is_empty() {
        "no channel configured".to_string()
    } else {
        format!(
            "queued for {}",
            channels
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(" and ")
        )
    };
    let logs = records
        .iter()
        .map(|r| {
            metrics::counter!("quota_patrol_alert_events_total", "site" => r.site_id.clone(), "event" => r.kind.as_str()).increment(1);
            NewLogEntry::info(
                &r.site_id,
                Category::Alert,
                "alertRaised",
                Source::System,
                format!(
                    "{}{}: {} ({queued_on})",
                    r.kind.as_str(),
                    if r.reminder { " (reminder)" } else { "" },
                    describe(r)
                ),
            )
            .at_level(match r.level() {
                Severity::Critical => Level::Error,
                Severity::Warning => Level::Warning,
                Severity::Info => Level::Info,
            })
        })
        .collect();
    p.log(logs).await;
}

/// One line for the operation log.
fn describe(r: &AlertRecord) -> String {
    let d = &r.details;
    let counts = match (d.usable_accounts, d.total_accounts) {
        (Some(u), Some(t)) => format!("{u} of {t} account(s) usable"),
        _ => String::new(),
    };
    match r.kind {
        EventKind::AllExhausted => format!(
            "{counts}; earliest reset {}",
            d.earliest_reset_at
                .map_or_else(|| "unknown".into(), |t| t.to_rfc3339())
        ),
        EventKind::InvalidAccounts => d.invalid_accounts.join(", "),
        EventKind::SiteUnreachable => format!(
            "CPA management API failing{}; last contact {}",
            d.cause
                .as_deref()
                .map_or_else(String::new, |c| format!(" ({c})")),
            d.last_contact_at
                .map_or_else(|| "never".into(), |t| t.to_rfc3339())
        ),
        EventKind::SiteReachable => "CPA management API answers again".into(),
        EventKind::ResetCreditRedeemed => format!(
            "{}; {counts} before it",
            d.cause.as_deref().unwrap_or("reset credit redeemed")
        ),
        EventKind::PoolLow | EventKind::PoolLowCleared | EventKind::DailyDigest => format!(
            "{counts}; projected dry {}; earliest reset {}",
            d.projected_dry_at
                .map_or_else(|| "not before a reset".into(), |t| t.to_rfc3339()),
            d.forecast_reset_at
                .map_or_else(|| "unknown".into(), |t| t.to_rfc3339())
        ),
        _ => counts,
    }
}

// ---- Reset credits ---------------------------------------------------------------------------

/// Queues `reset_credit_redeemed` for `site` (docs/reset-credits.md): the pool view of now and
/// `cause` (which account, which credit). A no-op without `[alerts]` or with alerts off; store
/// failures are logged, never fatal (the redemption itself is recorded already).
pub async fn reset_credit_redeemed(p: &Patrol, site: &Site, cause: String) {
    let Some(a) = p.alerting().cloned() else {
        return;
    };
    if !a.enabled {
        return;
    }
    let now = p.now();
    let pool = match pool_view(p, site, now).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(site = %site.site_id, error = %e, "reset credit alert: no pool view");
            return;
        }
    };
    let record = AlertRecord {
        id: uuid::Uuid::new_v4().to_string(),
        site_id: site.site_id.clone(),
        site_name: site.site_name.clone(),
        kind: EventKind::ResetCreditRedeemed,
        at: now,
        reminder: false,
        details: AlertDetails {
            cause: Some(cause),
            ..AlertDetails::from_pool(&pool, None)
        },
    };
    let channels = a.channels.kinds();
    let (r, on) = (record.clone(), channels.clone());
    let stored = p
        .store
        .run(move |c| {
            let tx = c.transaction()?;
            store::alerts::insert_event(&tx, &r)?;
            let expires = now + Duration::hours(DELIVERY_EXPIRY_HOURS);
            for ch in &on {
                store::alerts::enqueue(&tx, &r.id, *ch, now, expires)?;
            }
            tx.commit()?;
            Ok(())
        })
        .await;
    match stored {
        Ok(()) => {
            announce(p, std::slice::from_ref(&record), &channels).await;
            spawn_delivery(p);
        }
        Err(e) => {
            tracing::error!(site = %site.site_id, error = %e, "reset credit alert not stored")
        }
    }
}

// ---- Daily digest ---------------------------------------------------------------------------

/// Queues the daily digest of every enabled site whose digest is due (`core::digest::due`:
/// once per local day at the configured local time, the last date stored per site, DST-safe).
/// Answers how many were queued. Driven by the scheduler tick; tests call it directly.
pub async fn evaluate_digests(
    p: &Patrol,
    a: &Alerting,
    schedule: DigestSchedule,
) -> Result<usize, JobError> {
    let sites = p.store.run(|c| store::sites::list(c)).await?;
    let now = p.now();
    let mut queued = 0;
    for site in sites.into_iter().filter(|s| s.site_enabled) {
        let sid = site.site_id.clone();
        let last = p
            .store
            .run(move |c| store::alerts::last_digest_date(c, &sid))
            .await?;
        if let Some(date) = digest::due(last, schedule.at, schedule.timezone, now) {
            queued += queue_digest(p, a, &site, schedule, date, now).await?;
        }
    }
    if queued > 0 {
        spawn_delivery(p);
    }
    Ok(queued)
}

/// Builds the digest of `site` for `date` and writes its event, its messages and the date in
/// one transaction — unless another pass recorded that date meanwhile (then 0).
async fn queue_digest(
    p: &Patrol,
    a: &Alerting,
    site: &Site,
    schedule: DigestSchedule,
    date: NaiveDate,
    now: DateTime<Utc>,
) -> Result<usize, JobError> {
    let pool = pool_view(p, site, now).await?;
    let (sid, since) = (
        site.site_id.clone(),
        now - Duration::hours(digest::DIGEST_SPAN_HOURS),
    );
    let runs = p
        .store
        .run(move |c| store::runs::since(c, &sid, since))
        .await?;
    let fc = forecast_view(p, site).await;
    let mut digest = digest::digest(date, &pool, &runs, now);
    digest.reset_credits = super::reset_credits::digest_credits(p, site, since).await?;
    let record = AlertRecord {
        id: uuid::Uuid::new_v4().to_string(),
        site_id: site.site_id.clone(),
        site_name: site.site_name.clone(),
        kind: EventKind::DailyDigest,
        at: now,
        reminder: false,
        details: AlertDetails {
            digest: Some(digest),
            ..AlertDetails::from_pool(&pool, fc.as_ref())
        },
    };
    let channels = a.channels.kinds();
    let (r, on) = (record.clone(), channels.clone());
    let queued = p
        .store
        .run(move |c| {
            let tx = c.transaction()?;
            let last = store::alerts::last_digest_date(&tx, &r.site_id)?;
            if digest::due(last, schedule.at, schedule.timezone, now) != Some(date) {
                return Ok(false);
            }
            store::alerts::insert_event(&tx, &r)?;
            let expires = now + Duration::hours(DELIVERY_EXPIRY_HOURS);
            for ch in &on {
                store::alerts::enqueue(&tx, &r.id, *ch, now, expires)?;
            }
            store::alerts::record_digest(&tx, &r.site_id, date, &r.id, now)?;
            tx.commit()?;
            Ok(true)
        })
        .await?;
    if !queued {
        return Ok(0);
    }
    announce(p, std::slice::from_ref(&record), &channels).await;
    Ok(1)
}

// ---- Delivery -------------------------------------------------------------------------------

/// What one delivery pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryReport {
    pub delivered: usize,
    /// Failed transiently, retried later.
    pub retried: usize,
    /// Refused for good.
    pub failed: usize,
    pub expired: usize,
}

/// Starts a delivery pass in the background (right after events were queued).
fn spawn_delivery(p: &Patrol) {
    let p = p.clone();
    tokio::spawn(async move {
        if let Err(e) = deliver_due(&p).await {
            tracing::error!(error = %e, "alert delivery failed");
        }
    });
}

/// The scheduler tick: reachability of every enabled site, then a delivery pass unless one is
/// already running.
pub async fn on_tick(p: Patrol) {
    let Some(a) = p.alerting().cloned() else {
        return;
    };
    if p.is_shutting_down() {
        return;
    }
    if a.enabled
        && let Err(e) = evaluate_reachability(&p, &a).await
    {
        tracing::error!(error = %e, "alert reachability evaluation failed");
    }
    if a.enabled
        && let Some(schedule) = a.digest
        && let Err(e) = evaluate_digests(&p, &a, schedule).await
    {
        tracing::error!(error = %e, "daily digest evaluation failed");
    }
    let Ok(guard) = a.delivering.try_lock() else {
        return;
    };
    if let Err(e) = deliver_locked(&p, &a).await {
        tracing::error!(error = %e, "alert delivery failed");
    }
    drop(guard);
}

/// One delivery pass (the one-step function): every message due now is attempted once —
/// delivered, retried after 1, 2, 4 … 60 minutes, refused for good, or expired 24 h after it
/// was queued. Waits for a pass already running, so two never send the same message.
pub async fn deliver_due(p: &Patrol) -> Result<DeliveryReport, JobError> {
    let Some(a) = p.alerting().cloned() else {
        return Ok(DeliveryReport::default());
    };
    let _guard = a.delivering.lock().await;
    deliver_locked(p, &a).await
}

/// Shutdown flush (docs/operations.md "Stopping"): waits until a delivery pass in flight has
/// finished and recorded its attempt. Call after [`Patrol::request_shutdown`], under a deadline;
/// passes that start later send nothing, so the outbox state is final when this returns.
pub async fn wait_for_delivery(p: &Patrol) {
    if let Some(a) = p.alerting() {
        drop(a.delivering.lock().await);
    }
}

async fn deliver_locked(p: &Patrol, a: &Arc<Alerting>) -> Result<DeliveryReport, JobError> {
    let now = p.now();
    let due = p
        .store
        .run(move |c| store::alerts::due(c, now, BATCH))
        .await?;
    let mut report = DeliveryReport::default();
    for m in due {
        // After the signal no new delivery starts; queued messages wait for the next start.
        if p.is_shutting_down() {
            break;
        }
        let now = p.now();
        let outcome = if now >= m.expires_at {
            AttemptResult::Expired { detail: None }
        } else {
            let Some(channel) = a.channels.get(m.channel).cloned() else {
                record(
                    p,
                    &m,
                    now,
                    &AttemptResult::Failed {
                        detail: format!(
                            "the {} channel is no longer configured",
                            m.channel.as_str()
                        ),
                    },
                    &mut report,
                )
                .await?;
                continue;
            };
            // The lease covers the longest attempt; a crash mid-attempt retries after it.
            let lease = now + Duration::minutes(5);
            let id = m.message_id;
            if !p
                .store
                .run(move |c| store::alerts::claim(c, id, now, lease))
                .await?
            {
                continue;
            }
            match channel.send(&m.record, now).await {
                Ok(answer) => AttemptResult::Delivered { detail: answer },
                Err(e) if !e.retryable => AttemptResult::Failed { detail: e.message },
                Err(e) => match alerting::next_attempt_at(
                    m.attempts + 1,
                    now,
                    m.expires_at,
                    p.random().fraction(),
                ) {
                    Some(next_at) => AttemptResult::Retry {
                        detail: e.message,
                        next_at,
                    },
                    None => AttemptResult::Expired {
                        detail: Some(format!("{} (no retry before the expiry)", e.message)),
                    },
                },
            }
        };
        record(p, &m, now, &outcome, &mut report).await?;
    }
    Ok(report)
}

async fn record(
    p: &Patrol,
    m: &store::alerts::DueMessage,
    now: DateTime<Utc>,
    outcome: &AttemptResult,
    report: &mut DeliveryReport,
) -> Result<(), JobError> {
    let (id, o) = (m.message_id, outcome.clone());
    if !p
        .store
        .run(move |c| store::alerts::record_attempt(c, id, now, &o))
        .await?
    {
        return Ok(());
    }
    let channel = m.channel.as_str();
    let what = format!(
        "{}{} {channel}",
        m.record.kind.as_str(),
        if m.record.reminder { " reminder" } else { "" }
    );
    let (label, level, text) = match outcome {
        AttemptResult::Delivered { detail } => {
            report.delivered += 1;
            (
                "delivered",
                Level::Info,
                format!("{what} delivered: {detail}"),
            )
        }
        AttemptResult::Retry { detail, next_at } => {
            report.retried += 1;
            (
                "retry",
                Level::Warning,
                format!(
                    "{what} not delivered ({detail}); next attempt at {}",
                    next_at.to_rfc3339()
                ),
            )
        }
        AttemptResult::Failed { detail } => {
            report.failed += 1;
            (
                "failed",
                Level::Error,
                format!("{what} failed for good: {detail}"),
            )
        }
        AttemptResult::Expired { .. } => {
            report.expired += 1;
            (
                "expired",
                Level::Error,
                format!("{what} expired undelivered after {DELIVERY_EXPIRY_HOURS} h"),
            )
        }
    };
    metrics::counter!("quota_patrol_alert_deliveries_total", "channel" => channel, "result" => label).increment(1);
    p.log(vec![
        NewLogEntry::info(
            &m.record.site_id,
            Category::Alert,
            "alertDelivery",
            Source::System,
            text,
        )
        .at_level(level),
    ])
    .await;
    Ok(())
}

// ---- Test message and history ---------------------------------------------------------------

/// Result of the test message on one channel (`POST /api/alerts/test`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelResult {
    pub channel: ChannelKind,
    pub success: bool,
    /// The SMTP answer or HTTP status, or the error.
    pub detail: String,
}

/// Sends a test message now on every configured channel (not queued, not retried) and answers
/// each channel's result; empty when no channel is configured.
pub async fn send_test(p: &Patrol, site: Option<&Site>) -> Vec<ChannelResult> {
    let Some(a) = p.alerting().cloned() else {
        return vec![];
    };
    let now = p.now();
    let record = AlertRecord {
        id: uuid::Uuid::new_v4().to_string(),
        site_id: site.map_or_else(|| "-".into(), |s| s.site_id.clone()),
        site_name: site.map_or_else(|| "quota-patrol".into(), |s| s.site_name.clone()),
        kind: EventKind::Test,
        at: now,
        reminder: false,
        details: AlertDetails::default(),
    };
    let mut out = Vec::new();
    for ch in a.channels.all() {
        let res = ch.send(&record, now).await;
        let label = if res.is_ok() { "delivered" } else { "failed" };
        metrics::counter!("quota_patrol_alert_deliveries_total", "channel" => ch.kind().as_str(), "result" => label).increment(1);
        out.push(ChannelResult {
            channel: ch.kind(),
            success: res.is_ok(),
            detail: res.unwrap_or_else(|e| e.message),
        });
    }
    let text = out
        .iter()
        .map(|r| {
            format!(
                "{} {}: {}",
                r.channel.as_str(),
                if r.success { "ok" } else { "failed" },
                r.detail
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let entry = NewLogEntry::info(
        site.map_or("-", |s| s.site_id.as_str()),
        Category::Alert,
        "alertTest",
        Source::Manual,
        format!("test message: {text}"),
    );
    p.log(vec![if out.iter().all(|r| r.success) {
        entry
    } else {
        entry.at_level(Level::Warning)
    }])
    .await;
    out
}

/// `GET /api/alerts`: whether alerts are on, the channels, and the events newest first with
/// their messages and delivery attempts.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertHistory {
    /// `[alerts] enabled`.
    pub enabled: bool,
    /// Configured channels.
    pub channels: Vec<ChannelKind>,
    pub events: Vec<AlertEventView>,
}

/// The alert history of one site (or all sites), newest first.
pub async fn history(
    p: &Patrol,
    site_id: Option<String>,
    limit: u32,
) -> Result<AlertHistory, JobError> {
    let events = p
        .store
        .run(move |c| store::alerts::history(c, site_id.as_deref(), limit))
        .await?;
    let (enabled, channels) = p
        .alerting()
        .map_or((false, vec![]), |a| (a.enabled, a.channels.kinds()));
    Ok(AlertHistory {
        enabled,
        channels,
        events,
    })
}
