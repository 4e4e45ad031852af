//! WIRING: decides *when* jobs run. A tokio-cron-scheduler job ticks every `tick_seconds`; each
//! tick starts, per enabled site and without waiting, the regular round when due (interval +
//! jitter, re-drawn each time), else due reset re-checks, else a freshness pass. A site never
//! runs two rounds at once (its round lock), and sites never wait for each other.

use chrono::{DateTime, Duration, Utc};
use tokio_cron_scheduler::{Job, JobScheduler};

use crate::core::schedule;
use crate::core::site::Site;
use crate::jobs::inspect::{RoundKind, RoundOptions, run_round};
use crate::jobs::{JobError, Patrol, refresh};
use crate::random::Random;
use crate::store;

/// What a tick started, per site (for logs and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    Regular(String),
    ResetCheck(String),
    Freshness(String),
}

/// Next regular round: `now + interval + uniform integer jitter in [min, max]`, all in the
/// interval unit (docs/rules/patrol.md §4.1; the rule is `core::schedule`), the jitter drawn from `random`
/// (the patrol's injected source).
pub fn next_regular_at(
    site: &Site,
    unit: Duration,
    now: DateTime<Utc>,
    random: &dyn Random,
) -> DateTime<Utc> {
    let (min, max) = schedule::jitter_range(&site.settings);
    schedule::next_regular_at(&site.settings, random.between(min, max), unit, now)
}

/// Looks at every enabled site once and spawns what is due. Returns what was started; nothing
/// once shutdown is requested ([`Patrol::request_shutdown`]).
pub async fn tick(p: &Patrol) -> Vec<Started> {
    if p.is_shutting_down() {
        return vec![];
    }
    let sites = match p.store.run(|c| store::sites::list(c)).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "scheduler cannot read sites");
            return vec![];
        }
    };
    let now = p.now();
    // Alerts: reachability of every site and due deliveries, in their own task.
    tokio::spawn(crate::jobs::alerts::on_tick(p.clone()));
    let mut started = Vec::new();
    for site in sites.into_iter().filter(|s| s.site_enabled) {
        let rt = p.runtime(&site.site_id);
        // A refused key is never retried by a tick before its automatic try is due.
        if rt.is_running()
            || rt.cpa_paused_until(now).is_some()
            || matches!(p.check_key(&site).await, Err(JobError::KeyRefused { .. }))
        {
            continue;
        }
        if site.settings.auto_polling_enabled {
            let due = {
                let mut next = rt.next_scheduled_at.lock().expect("schedule lock");
                match *next {
                    Some(at) if at > now => false,
                    _ => {
                        *next = Some(next_regular_at(
                            &site,
                            p.options.interval_unit,
                            now,
                            p.random().as_ref(),
                        ));
                        true
                    }
                }
            };
            if due {
                let (p2, id) = (p.clone(), site.site_id.clone());
                tokio::spawn(async move {
                    match run_round(&p2, &id, RoundOptions::new(RoundKind::Auto)).await {
                        Ok(r) if r.error.is_some() => {
                            tracing::warn!(site = %id, status = r.status.as_str(), error = r.error.as_deref().unwrap_or_default(), "regular round did not complete")
                        }
                        Ok(r) => {
                            tracing::info!(site = %id, probed = r.probed_count, "regular round finished")
                        }
                        // Another round took the site first: try again at the next tick
                        // instead of skipping a whole interval.
                        Err(JobError::Busy(_)) => {
                            if let Ok(mut next) = p2.runtime(&id).next_scheduled_at.lock() {
                                *next = None;
                            }
                        }
                        Err(JobError::ShuttingDown) => {}
                        Err(e) => tracing::error!(site = %id, error = %e, "regular round failed"),
                    }
                });
                started.push(Started::Regular(site.site_id.clone()));
                continue;
            }
        }
        let resets_due = matches!(refresh::pending_reset_checks(p, &site).await, Ok(v) if v.first().is_some_and(|c| c.check_at <= now));
        if resets_due {
            let (p2, id) = (p.clone(), site.site_id.clone());
            tokio::spawn(async move {
                if let Err(e) = refresh::run_reset_checks(&p2, &id).await
                    && !matches!(e, JobError::Busy(_) | JobError::ShuttingDown)
                {
                    tracing::error!(site = %id, error = %e, "reset re-check failed");
                }
            });
            started.push(Started::ResetCheck(site.site_id.clone()));
            continue;
        }
        if matches!(refresh::freshness_work_pending(p, &site).await, Ok(true)) {
            let (p2, id) = (p.clone(), site.site_id.clone());
            tokio::spawn(async move {
                if let Err(e) = refresh::run_freshness_pass(&p2, &id).await
                    && !matches!(e, JobError::Busy(_) | JobError::ShuttingDown)
                {
                    tracing::error!(site = %id, error = %e, "freshness pass failed");
                }
            });
            started.push(Started::Freshness(site.site_id.clone()));
        }
    }
    started
}

/// Daily housekeeping: prune the operation log and old snapshot history.
pub async fn housekeeping(p: &Patrol) {
    let now = p.now();
    let days = p.options.log_retention_days;
    match p
        .store
        .run(move |c| {
            Ok((
                store::log::prune(c, now, days)?,
                store::accounts::prune_history(c, now, 30, 100)?
                    + store::runs::prune(c, now, 30, 200)?,
            ))
        })
        .await
    {
        Ok((logs, history)) if logs + history > 0 => {
            tracing::info!(logs, history, "pruned old log entries and snapshot history")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "housekeeping failed"),
    }
}

/// Starts the tick and housekeeping jobs; the returned scheduler must be kept alive.
pub async fn start(
    p: Patrol,
    tick_seconds: u64,
) -> Result<JobScheduler, tokio_cron_scheduler::JobSchedulerError> {
    let sched = JobScheduler::new().await?;
    let p1 = p.clone();
    sched
        .add(Job::new_repeated_async(
            std::time::Duration::from_secs(tick_seconds),
            move |_id, _s| {
                // A tick only looks and spawns; rounds run in their own tasks.
                let p = p1.clone();
                Box::pin(async move {
                    tick(&p).await;
                })
            },
        )?)
        .await?;
    let p2 = p.clone();
    sched
        .add(Job::new_async("0 17 3 * * *", move |_id, _s| {
            let p = p2.clone();
            Box::pin(async move { housekeeping(&p).await })
        })?)
        .await?;
    sched.start().await?;
    Ok(sched)
}
