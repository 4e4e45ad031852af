//! Passes that run between regular rounds: reset re-probes (docs/rules/patrol.md §4.5), the freshness pass
//! that keeps every account within its real-refresh age even with auto polling off (§4.3), the
//! startup warm-up (§4.6) and single-account refreshes.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::inspect::run_round_locked;
use super::round::{RoundKind, RoundOptions};
use super::{JobError, Patrol};
use crate::core::account::QuotaSnapshot;
use crate::core::freshness::{self, reset_check_at};
use crate::core::inspect::RULE_PROBE_ERROR;
use crate::core::report::{InspectionRunResult, RunStatus};
use crate::core::site::Site;
use crate::store;

/// A pending reset re-check of one account.
#[derive(Debug, Clone, PartialEq)]
pub struct ResetCheck {
    pub account_name: String,
    /// The reset being waited for, plus the grace: the key under which it is marked handled.
    pub reset_key: DateTime<Utc>,
    /// When the re-probe is due: `reset_key`, later while a failed probe backs off.
    pub check_at: DateTime<Utc>,
}

/// Reset checks of a site not handled yet, earliest first.
pub async fn pending_reset_checks(p: &Patrol, site: &Site) -> Result<Vec<ResetCheck>, JobError> {
    let super::PoolData {
        accounts,
        states,
        reasons,
        exceptions,
        ..
    } = p.pool(&site.site_id).await?;
    let sid = site.site_id.clone();
    let handled = p
        .store
        .run(move |c| store::accounts::handled_resets(c, &sid))
        .await?;
    let now = p.now();
    let mut out = Vec::new();
    for a in accounts.iter().filter(|a| !exceptions.contains(&a.name)) {
        let Some(st) = states.get(&a.name) else {
            continue;
        };
        let reason = reasons.get(&a.name).map(|r| r.reason);
        let policy = site.quota_policy(&a.name);
        if let Some(at) = reset_check_at(a, reason, st, &policy, now)
            && !handled.contains(&(a.name.clone(), at))
        {
            out.push(ResetCheck {
                account_name: a.name.clone(),
                reset_key: at,
                check_at: st.retry_not_before.map_or(at, |t| t.max(at)),
            });
        }
    }
    out.sort_by_key(|c| c.check_at);
    Ok(out)
}

/// Runs the due reset re-checks of a site (forced probes, decisions and actions), then marks
/// each successfully re-probed reset as handled so that a restart does not repeat it.
/// `Ok(None)` when nothing was due; `Busy` when a round is running.
pub async fn run_reset_checks(
    p: &Patrol,
    site_id: &str,
) -> Result<Option<InspectionRunResult>, JobError> {
    let site = p.site(site_id).await?;
    let now = p.now();
    let due: Vec<ResetCheck> = pending_reset_checks(p, &site)
        .await?
        .into_iter()
        .filter(|c| c.check_at <= now)
        .collect();
    if due.is_empty() {
        return Ok(None);
    }
    let rt = p.runtime(site_id);
    let _guard = rt.begin(site_id)?;
    let only: HashSet<String> = due.iter().map(|c| c.account_name.clone()).collect();
    let opts = RoundOptions {
        kind: RoundKind::Reset,
        force: true,
        dry_run: false,
        only: Some(only),
    };
    let result = run_round_locked(p, &site, &rt, opts).await?;
    // Handled = the upstream answered (200, 401, 402), the answer was not stale, and any action
    // it led to succeeded. Transient failures back off and come again; a failed action pauses
    // the site's automatic work briefly so a broken CPA write path is not hammered.
    let sid = site.site_id.clone();
    let states = p
        .store
        .run(move |c| store::accounts::load_states(c, &sid))
        .await?;
    let mut handled = Vec::new();
    for c in due {
        let Some(d) = result
            .decisions
            .iter()
            .find(|d| d.account_name == c.account_name)
        else {
            continue;
        };
        let answered = matches!(d.status_code, Some(200 | 401 | 402)) && d.rule != RULE_PROBE_ERROR;
        let stale = states
            .get(&c.account_name)
            .and_then(|s| s.snapshot.as_ref())
            .is_some_and(|s| s.is_stale(s.refreshed_at));
        let action_failed = result
            .action_outcomes
            .iter()
            .any(|o| o.account_name == c.account_name && !o.success);
        if action_failed {
            rt.note_cpa_failure(
                p.now(),
                &crate::cpa::CpaError::Transient("an action of a reset re-check failed".into()),
            );
        }
        if answered && !stale && !action_failed {
            handled.push(c);
        }
    }
    let sid = site.site_id.clone();
    let at = p.now();
    p.store
        .run(move |c| {
            for h in &handled {
                store::accounts::mark_reset_handled(c, &sid, &h.account_name, h.reset_key, at)?;
            }
            Ok(())
        })
        .await?;
    Ok(Some(result))
}

/// Accounts whose real-refresh age is reached (or that were never probed) or whose stale window
/// is due for its re-check, at most `probeWorkers` of them, excluding exceptions and accounts in
/// failure back-off.
pub async fn due_for_refresh(p: &Patrol, site: &Site) -> Result<Vec<String>, JobError> {
    let super::PoolData {
        accounts,
        states,
        exceptions,
        ..
    } = p.pool(&site.site_id).await?;
    let now = p.now();
    let mut due: Vec<(DateTime<Utc>, String)> = Vec::new();
    for a in accounts
        .iter()
        .filter(|a| !exceptions.contains(&a.name) && a.auth_index.is_some())
    {
        let st = states.get(&a.name);
        if st.and_then(|s| s.retry_not_before).is_some_and(|t| t > now) {
            continue;
        }
        // A stale window (≥ 100 % with its reset past, docs/rules/patrol.md §3) is re-probed shortly, once
        // its re-check is due, not at the real-refresh age: an enabled account has no reset
        // check to do it, and the next round may be more than 5 minutes away.
        if let Some(s) = st
            && s.last_error.is_none()
            && let Some(at) = s.retry_not_before
            && s.snapshot
                .as_ref()
                .is_some_and(|x| x.is_stale(x.refreshed_at))
        {
            due.push((at, a.name.clone()));
            continue;
        }
        // The age counts from the last real probe, successful or not: an account that keeps
        // failing (401, no snapshot yet) is not re-probed on every tick.
        let refreshed = st.and_then(|s| {
            s.snapshot
                .as_ref()
                .map(|x| x.refreshed_at)
                .max(s.last_probe_at)
        });
        match freshness::next_real_refresh_at(&site.site_id, &a.name, refreshed, &site.settings) {
            None => due.push((DateTime::<Utc>::MIN_UTC, a.name.clone())),
            Some(at) if at <= now => due.push((at, a.name.clone())),
            Some(_) => {}
        }
    }
    due.sort();
    Ok(due
        .into_iter()
        .take(site.settings.probe_workers.max(1) as usize)
        .map(|(_, n)| n)
        .collect())
}

/// How old the stored account list may get before a freshness pass reloads it.
pub const LISTING_MAX_AGE: chrono::Duration = chrono::Duration::minutes(10);

/// Whether a freshness pass has work: the account list is stale, or an account is due.
pub async fn freshness_work_pending(p: &Patrol, site: &Site) -> Result<bool, JobError> {
    let sid = site.site_id.clone();
    let last_contact = p
        .store
        .run(move |c| store::sites::runtime(c, &sid))
        .await?
        .last_cpa_contact_at;
    if last_contact.is_none_or(|at| p.now() - at > LISTING_MAX_AGE) {
        return Ok(true);
    }
    Ok(!due_for_refresh(p, site).await?.is_empty())
}

/// One freshness pass (no actions): probes the due accounts. `Ok(None)` when none is due.
///
/// With auto polling off nothing else reloads the account list, so the pass reloads it first
/// when the last CPA contact is older than [`LISTING_MAX_AGE`] (or never happened).
pub async fn run_freshness_pass(
    p: &Patrol,
    site_id: &str,
) -> Result<Option<InspectionRunResult>, JobError> {
    let site = p.site(site_id).await?;
    let sid = site.site_id.clone();
    let last_contact = p
        .store
        .run(move |c| store::sites::runtime(c, &sid))
        .await?
        .last_cpa_contact_at;
    if last_contact.is_none_or(|at| p.now() - at > LISTING_MAX_AGE) {
        let client = p.client(&site).await?;
        let listed =
            super::listing::reload_accounts(p, &site, &client, crate::core::oplog::Source::System)
                .await;
        p.settle_key(&site, &client).await?;
        listed?;
    }
    let due = due_for_refresh(p, &site).await?;
    if due.is_empty() {
        return Ok(None);
    }
    let rt = p.runtime(site_id);
    let _guard = rt.begin(site_id)?;
    let opts = RoundOptions {
        kind: RoundKind::Freshness,
        force: true,
        dry_run: false,
        only: Some(due.into_iter().collect()),
    };
    run_round_locked(p, &site, &rt, opts).await.map(Some)
}

/// Startup warm-up: probes up to 3 accounts (the first enabled ones in CPA order), stopping at
/// the first one under the threshold. Returns the names probed.
pub async fn warm_up(p: &Patrol, site_id: &str) -> Result<Vec<String>, JobError> {
    let site = p.site(site_id).await?;
    let rt = p.runtime(site_id);
    let _guard = rt.begin(site_id)?;
    let client = p.client(&site).await?;
    let listed =
        super::listing::reload_accounts(p, &site, &client, crate::core::oplog::Source::System)
            .await;
    p.settle_key(&site, &client).await?;
    let accounts = listed?;
    super::pool::publish(p, site_id, crate::core::pool::PublishCause::ListingReload).await;
    let sid = site.site_id.clone();
    let (exceptions, list) = p
        .store
        .run(move |c| {
            Ok((
                store::accounts::exceptions(c, &sid)?,
                store::priorities::load(c, &sid)?,
            ))
        })
        .await?;
    let eligible = |a: &&crate::core::account::Account| {
        !a.disabled && a.auth_index.is_some() && !exceptions.contains(&a.name)
    };
    // Head of the line: the priority order when routing is on, else CPA's order.
    let candidates: Vec<String> = if site.settings.priority_routing_enabled {
        list.iter()
            .filter_map(|e| accounts.iter().find(|a| a.name == e.name))
            .filter(eligible)
            .map(|a| a.name.clone())
            .take(3)
            .collect()
    } else {
        accounts
            .iter()
            .filter(eligible)
            .map(|a| a.name.clone())
            .take(3)
            .collect()
    };
    let mut probed = Vec::new();
    for name in candidates {
        let opts = RoundOptions {
            kind: RoundKind::Warmup,
            force: true,
            // Not a dry run: a warm-up stores what it probed, it only never acts (its kind).
            dry_run: false,
            only: Some(HashSet::from([name.clone()])),
        };
        let r = run_round_locked(p, &site, &rt, opts).await?;
        probed.push(name);
        let usable = r
            .decisions
            .first()
            .is_some_and(|d| !d.is_quota_reached && d.used_percent.is_some() && d.error.is_none());
        if usable {
            break;
        }
    }
    Ok(probed)
}

/// `POST /api/quotas/{name}/refresh`: one forced probe of one account (exceptions included),
/// no action. Returns the round and the account's snapshot afterwards (`None` if it has none);
/// a round that failed as a whole comes back as `Ok` with `status: error` (check it), an
/// account CPA does not list is `NotFound`.
pub async fn refresh_one(
    p: &Patrol,
    site_id: &str,
    name: &str,
) -> Result<(InspectionRunResult, Option<QuotaSnapshot>), JobError> {
    // In its own task, so a disconnecting caller cannot cancel it half-way.
    let (p, site_id, name) = (p.clone(), site_id.to_string(), name.to_string());
    super::detached(async move { refresh_one_attached(&p, &site_id, &name).await }).await
}

async fn refresh_one_attached(
    p: &Patrol,
    site_id: &str,
    name: &str,
) -> Result<(InspectionRunResult, Option<QuotaSnapshot>), JobError> {
    let site = p.site(site_id).await?;
    let rt = p.runtime(site_id);
    let _guard = rt.begin(site_id)?;
    let opts = RoundOptions {
        kind: RoundKind::QuotaRefresh,
        force: true,
        // Not a dry run: the refresh stores the snapshot, it only never acts (its kind).
        dry_run: false,
        only: Some(HashSet::from([name.to_string()])),
    };
    let r = run_round_locked(p, &site, &rt, opts).await?;
    // A failed round (CPA unreachable, key refused) evaluated nobody: that is the caller's to
    // report from `r.status`/`r.error`, not a missing account.
    if r.decisions.is_empty() && r.status != RunStatus::Error {
        return Err(JobError::NotFound(format!(
            "account {name} not found in site {site_id}"
        )));
    }
    let sid = site.site_id.clone();
    let n = name.to_string();
    let states = p
        .store
        .run(move |c| store::accounts::load_states(c, &sid))
        .await?;
    Ok((r, states.get(&n).and_then(|s| s.snapshot.clone())))
}
