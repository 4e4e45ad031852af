//! Priority routing use cases (docs/rules/patrol.md §6): the reorder + dispatch after an inspection, the
//! routing configuration (status and save) and the incremental CPA priority sync. The rules
//! themselves are pure (`core::priority`, `core::selection`); this module loads, acts, persists
//! and logs (category `priority`).

use std::collections::{HashMap, HashSet};

use super::actions::{self, Actor, PlannedAction};
use super::{JobError, Patrol};
use crate::core::account::{DisableReason, DisableRecord, ReasonOwner};
use crate::core::availability::{AccountFacts, availability};
use crate::core::inspect::{Action, ReasonChange};
use crate::core::oplog::{Category, Level, NewLogEntry, Source};
use crate::core::priority::{self, PriorityEntry, RoutingAccount, RoutingStep, Standing};
use crate::core::report::{ActionOutcome, InspectionRunResult};
use crate::core::settings::SettingsPatch;
use crate::core::site::Site;
use crate::cpa::CpaClient;
use crate::store;
use serde::{Deserialize, Serialize};

/// `GET /api/settings/priority-routing` (api.md).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutingStatus {
    pub priority_routing_enabled: bool,
    pub priority_min_active_count: u32,
    /// Set exception/pending accounts above the routed ones to CPA priority 0 (default off).
    pub lower_stale_priorities: bool,
    pub account_priorities: Vec<PriorityEntry>,
    /// The accounts routing keeps active now (computed from the stored snapshots).
    pub active_account_names: Vec<String>,
    /// Why the CPA priority sync stopped, if it did (only after a save).
    pub cpa_priority_sync_warning: Option<String>,
    /// Problems with the saved list that did not stop the save (unknown names), and exception
    /// or pending accounts whose CPA priority sits above the routed accounts' (CPA sends them
    /// all the traffic).
    pub warnings: Vec<String>,
}

/// `PUT /api/settings/priority-routing` body.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutingUpdate {
    pub priority_routing_enabled: bool,
    pub priority_min_active_count: Option<i64>,
    /// `lowerStalePriorities`, when sent (unchanged when omitted).
    #[serde(default)]
    pub lower_stale_priorities: Option<bool>,
    /// The whole list, when sent: omitted accounts are removed and come back as pending at the
    /// next reload.
    pub account_priorities: Option<Vec<crate::core::priority::SavedPriorityEntry>>,
}

/// The priority list and, for every listed CPA account, what routing knows (availability read
/// at `now`). Returns the list, the accounts and that `now` (dispatch takes it).
async fn load(
    p: &Patrol,
    site: &Site,
) -> Result<
    (
        Vec<PriorityEntry>,
        HashMap<String, RoutingAccount>,
        chrono::DateTime<chrono::Utc>,
    ),
    JobError,
> {
    let pool = p.pool(&site.site_id).await?;
    let now = p.now();
    let map = routing_accounts(site, &pool, now);
    Ok((pool.priorities, map, now))
}

/// What routing knows of every CPA account of `pool` at `now`: CPA's disabled flag, our
/// reason, exception (or `neverAct`) and availability by the one rule.
fn routing_accounts(
    site: &Site,
    pool: &super::PoolData,
    now: chrono::DateTime<chrono::Utc>,
) -> HashMap<String, RoutingAccount> {
    let observed = never_act_names(site);
    pool.accounts
        .iter()
        .map(|a| {
            let reason = pool.reasons.get(&a.name).map(|r| (r.reason, r.owner));
            let facts = AccountFacts {
                disabled: a.disabled,
                reason,
                probe: pool.states.get(&a.name),
            };
            let ra = RoutingAccount {
                disabled: a.disabled,
                reason: reason.map(|(r, _)| r),
                // A `neverAct` account is held like an exception: routing never enables,
                // standby-disables or re-prioritises it (docs/rules/patrol.md §9).
                exception: pool.exceptions.contains(&a.name) || observed.contains(&a.name),
                // The one rule: a failing probe (401/402 the patrol just acted on) is not
                // usable whatever its older snapshot said, and a person's disable is Disabled.
                availability: availability(facts, &site.quota_policy(&a.name), now),
            };
            (a.name.clone(), ra)
        })
        .collect()
}

/// The active set of priority routing over an already loaded `pool` at `now` (the same
/// dispatch a round makes); empty when routing is off.
pub fn active_set(
    site: &Site,
    pool: &super::PoolData,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<String> {
    if !site.settings.priority_routing_enabled {
        return vec![];
    }
    let accounts = routing_accounts(site, pool, now);
    priority::dispatch(
        &pool.priorities,
        &accounts,
        site.settings.priority_min_active_count,
        now,
    )
    .active
}

/// The site's `neverAct` (observe-only) accounts: priority routing holds them like exceptions
/// and writes nothing to them in CPA (docs/rules/patrol.md §9).
fn never_act_names(site: &Site) -> HashSet<String> {
    site.account_policies
        .iter()
        .filter(|(_, p)| p.never_act)
        .map(|(n, _)| n.clone())
        .collect()
}

/// Accounts routing may use now: the selection engine's eligible ones (active and standby).
pub async fn routable(p: &Patrol, site: &Site) -> Result<HashSet<String>, JobError> {
    let (list, accounts, now) = load(p, site).await?;
    let d = priority::dispatch(
        &list,
        &accounts,
        site.settings.priority_min_active_count,
        now,
    );
    Ok(d.active.into_iter().chain(d.standby).collect())
}

/// The routing status of a site.
pub async fn status(p: &Patrol, site: &Site) -> Result<RoutingStatus, JobError> {
    let (list, accounts, now) = load(p, site).await?;
    let d = priority::dispatch(
        &list,
        &accounts,
        site.settings.priority_min_active_count,
        now,
    );
    Ok(RoutingStatus {
        priority_routing_enabled: site.settings.priority_routing_enabled,
        priority_min_active_count: site.settings.priority_min_active_count,
        lower_stale_priorities: site.settings.lower_stale_priorities,
        warnings: stale_warnings(p, site, &list).await?,
        account_priorities: list,
        active_account_names: if site.settings.priority_routing_enabled {
            d.active
        } else {
            vec![]
        },
        cpa_priority_sync_warning: None,
    })
}

/// Exception and pending accounts above the routed accounts' CPA priority, from the stored
/// listing (`core::priority::stale_priorities`).
async fn stale_of(
    p: &Patrol,
    site: &Site,
    list: &[PriorityEntry],
) -> Result<Vec<priority::StalePriority>, JobError> {
    let sid = site.site_id.clone();
    let (accounts, exceptions) = p
        .store
        .run(move |c| {
            Ok((
                store::accounts::list(c, &sid)?,
                store::accounts::exceptions(c, &sid)?,
            ))
        })
        .await?;
    let cpa: Vec<(String, i64)> = accounts
        .into_iter()
        .map(|a| (a.name, a.cpa_priority))
        .collect();
    let observed = never_act_names(site);
    let exceptions: HashSet<String> = exceptions.into_iter().chain(observed.clone()).collect();
    let mut stale = priority::stale_priorities(list, &cpa, &exceptions);
    // A `neverAct` account is never written to, so it is no stale priority to lower either.
    stale.retain(|s| !observed.contains(&s.name));
    Ok(stale)
}

async fn stale_warnings(
    p: &Patrol,
    site: &Site,
    list: &[PriorityEntry],
) -> Result<Vec<String>, JobError> {
    Ok(stale_of(p, site, list)
        .await?
        .iter()
        .map(|s| s.warning())
        .collect())
}

/// Stale priorities (docs/rules/patrol.md §11.4): logs each one as a warning; with `lowerStalePriorities`
/// sets them to CPA priority 0 (exactly `{name, priority}`), records and reads the writes back.
pub async fn handle_stale_priorities(p: &Patrol, site: &Site, client: &CpaClient, source: Source) {
    let sid = site.site_id.clone();
    let list = match p.store.run(move |c| store::priorities::load(c, &sid)).await {
        Ok(l) => l,
        Err(e) => {
            return tracing::warn!(site = %site.site_id, error = %e, "priority list unreadable");
        }
    };
    let stale = match stale_of(p, site, &list).await {
        Ok(s) if !s.is_empty() => s,
        Ok(_) => return,
        Err(e) => {
            return tracing::warn!(site = %site.site_id, error = %e, "stale priorities not checked");
        }
    };
    let mut logs = Vec::new();
    let mut written = Vec::new();
    for s in &stale {
        let entry = if site.settings.lower_stale_priorities {
            let res = client.set_priority(&s.name, 0).await;
            if res.is_ok() {
                written.push(super::readback::Written::priority(&s.name, 0));
            }
            NewLogEntry::info(
                &site.site_id,
                Category::Priority,
                "stalePriority",
                source,
                match res {
                    Ok(()) => format!("{}; lowered to 0 (lowerStalePriorities)", s.warning()),
                    Err(e) => format!("{}; lowering it to 0 failed: {e}", s.warning()),
                },
            )
        } else {
            NewLogEntry::info(
                &site.site_id,
                Category::Priority,
                "stalePriority",
                source,
                format!(
                    "{} (set lowerStalePriorities to lower it to 0)",
                    s.warning()
                ),
            )
        };
        logs.push(entry.at_level(Level::Warning).for_account(&s.name));
    }
    p.log(logs).await;
    confirm_priority_writes(p, site, client, &written, source).await;
}

/// Records priority writes, lists CPA again and re-applies a mismatch once (docs/rules/patrol.md §11.2).
async fn confirm_priority_writes(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    written: &[super::readback::Written],
    source: Source,
) {
    if written.is_empty() {
        return;
    }
    super::readback::record(p, &site.site_id, written).await;
    match client.list_all_names().await {
        Ok(listed) => {
            let values: HashMap<String, i64> = listed.into_iter().collect();
            if super::readback::confirm(p, site, client, written, &values, source).await == 0 {
                store_listed_priorities(p, site, written, &values).await;
            }
        }
        Err(e) => {
            tracing::warn!(site = %site.site_id, error = %e, "priority writes not read back")
        }
    }
}

/// Saves the routing configuration (docs/rules/patrol.md §6.4): switch, minimum (validated 1..10) and, when
/// sent, the list. Never enables or disables accounts; always syncs CPA priorities and reports
/// the sync warning; local config is never rolled back.
pub async fn save(
    p: &Patrol,
    site_id: &str,
    update: RoutingUpdate,
) -> Result<RoutingStatus, JobError> {
    // A round reorders the list: saving while one runs would be overwritten (409 instead).
    let rt = p.runtime(site_id);
    let _round = rt.begin(site_id)?;
    let patch = SettingsPatch {
        priority_routing_enabled: Some(update.priority_routing_enabled),
        // Clamped, not rejected (docs/rules/patrol.md §6.4).
        priority_min_active_count: update.priority_min_active_count.map(|v| v.clamp(1, 10)),
        lower_stale_priorities: update.lower_stale_priorities,
        ..Default::default()
    };
    let input = super::sites::SiteInput {
        settings: patch,
        ..Default::default()
    };
    let site = super::sites::update_site(p, site_id, input).await?;
    let mut warnings = Vec::new();
    if let Some(sent) = update.account_priorities {
        let sid = site.site_id.clone();
        let known = p.store.run(move |c| store::accounts::list(c, &sid)).await?;
        let names: Vec<&str> = known.iter().map(|a| a.name.as_str()).collect();
        let sent: Vec<PriorityEntry> = sent.into_iter().map(PriorityEntry::from).collect();
        let (list, unknown) = priority::normalize_saved(&sent, &names);
        warnings.extend(
            unknown
                .into_iter()
                .map(|n| format!("unknown account {n}: left out of the list")),
        );
        let sid = site.site_id.clone();
        let count = list.len();
        p.store
            .run(move |c| store::priorities::replace(c, &sid, &list))
            .await?;
        p.log(vec![NewLogEntry::info(
            site_id,
            Category::Priority,
            "settings",
            Source::Manual,
            format!(
                "routing config saved: {count} account(s), routing {}",
                if site.settings.priority_routing_enabled {
                    "on"
                } else {
                    "off"
                }
            ),
        )])
        .await;
    }
    let warning = match p.client(&site).await {
        Ok(client) => {
            let w = sync_cpa_priorities(p, &site, &client, "routing config saved", Source::Manual)
                .await;
            handle_stale_priorities(p, &site, &client, Source::Manual).await;
            p.settle_key(&site, &client).await?;
            w
        }
        Err(e) => Some(format!(
            "routing config saved, but CPA priorities were not synced: {e}"
        )),
    };
    // The list's tiers changed (the settings half was published by `update_site`).
    super::pool::publish(p, site_id, crate::core::pool::PublishCause::SettingsChange).await;
    let mut st = status(p, &site).await?;
    st.cpa_priority_sync_warning = warning;
    warnings.append(&mut st.warnings);
    st.warnings = warnings;
    Ok(st)
}

/// Incremental CPA priority sync (docs/rules/patrol.md §6.5). Returns the warning when it stopped.
pub async fn sync_cpa_priorities(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    context: &str,
    source: Source,
) -> Option<String> {
    let sid = site.site_id.clone();
    let loaded = p
        .store
        .run(move |c| {
            Ok((
                store::priorities::load(c, &sid)?,
                store::accounts::exceptions(c, &sid)?,
            ))
        })
        .await;
    let (list, exceptions) = match loaded {
        Ok(x) => x,
        Err(e) => {
            return Some(format!(
                "{context}, but the priority list could not be read: {e}"
            ));
        }
    };
    if list.is_empty() {
        return None;
    }
    // `neverAct` accounts get no priority write (docs/rules/patrol.md §9): synced like exceptions.
    let exceptions: HashSet<String> = exceptions
        .into_iter()
        .chain(never_act_names(site))
        .collect();
    let outcome = async {
        // All providers: a duplicate name anywhere in CPA makes name-based patches ambiguous.
        let listing = client
            .list_all_names()
            .await
            .map_err(|e| format!("listing CPA accounts failed: {e}"))?;
        let plan = priority::sync_plan(&list, &listing, &exceptions).map_err(|s| s.to_string())?;
        let mut done = Vec::new();
        for (name, prio) in &plan {
            let res = client.set_priority(name, *prio).await;
            if let Err(e) = res {
                confirm_priority_writes(p, site, client, &done, source).await;
                return Err(format!(
                    "patching {name} failed after {} update(s): {e}",
                    done.len()
                ));
            }
            done.push(super::readback::Written::priority(name, *prio));
        }
        confirm_priority_writes(p, site, client, &done, source).await;
        Ok::<usize, String>(done.len())
    }
    .await;
    let (entry, warning) = match outcome {
        Ok(0) => (
            NewLogEntry::info(
                &site.site_id,
                Category::Priority,
                "prioritySync",
                source,
                format!("{context}; CPA priorities need no change"),
            ),
            None,
        ),
        Ok(n) => (
            NewLogEntry::info(
                &site.site_id,
                Category::Priority,
                "prioritySync",
                source,
                format!("{context}; synced CPA priorities, {n} account(s) updated"),
            ),
            None,
        ),
        Err(why) => {
            let w = format!("{context}, but syncing CPA priorities stopped: {why}");
            (
                NewLogEntry::info(
                    &site.site_id,
                    Category::Priority,
                    "prioritySync",
                    source,
                    w.clone(),
                )
                .at_level(Level::Warning),
                Some(w),
            )
        }
    };
    p.log(vec![entry]).await;
    warning
}

/// After an inspection with routing on (docs/rules/patrol.md §6.2–§6.3): graduate and reorder the list
/// (syncing CPA priorities when the order changed), compute the active set, enable and
/// standby-disable accounts (at most `actionWorkers` at a time) and record the outcomes in
/// `result.priority_routing_outcomes`.
pub async fn after_round(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    result: &mut InspectionRunResult,
    source: Source,
) -> Result<(), JobError> {
    // The records routing decides on; a reason changed after this read is a person's.
    let sid = site.site_id.clone();
    let read = p
        .store
        .run(move |c| store::accounts::load_reasons(c, &sid))
        .await?;
    let (list, accounts, now) = load(p, site).await?;
    let reordered = reorder_after_round(p, site, &list, &accounts, result, source).await?;
    let d = priority::dispatch(
        &reordered,
        &accounts,
        site.settings.priority_min_active_count,
        now,
    );
    log_active_set(p, site, &d, source).await;
    let outcomes = run_steps(p, site, client, &d.steps, &read, source).await?;
    let acted = !outcomes.is_empty();
    result.priority_routing_outcomes = outcomes;
    if priority::changed(&list, &reordered) {
        sync_cpa_priorities(
            p,
            site,
            client,
            "priority list reordered after the inspection",
            source,
        )
        .await;
    }
    if acted {
        confirm_routing_writes(p, site, client, &result.priority_routing_outcomes, source).await;
    }
    handle_stale_priorities(p, site, client, source).await;
    Ok(())
}

/// Graduates and reorders the list from the stored snapshots (only accounts evaluated
/// successfully in this round may graduate); stores and logs a changed order. Returns it.
async fn reorder_after_round(
    p: &Patrol,
    site: &Site,
    list: &[PriorityEntry],
    accounts: &HashMap<String, RoutingAccount>,
    result: &InspectionRunResult,
    source: Source,
) -> Result<Vec<PriorityEntry>, JobError> {
    let sid = site.site_id.clone();
    let (states, reasons) = p
        .store
        .run(move |c| {
            Ok((
                store::accounts::load_states(c, &sid)?,
                store::accounts::load_reasons(c, &sid)?,
            ))
        })
        .await?;
    let now = p.now();
    let ok_now: HashSet<&str> = result
        .decisions
        .iter()
        .filter(|d| d.evaluated)
        .map(|d| d.account_name.as_str())
        .collect();
    let standing: HashMap<String, Standing> = list
        .iter()
        .map(|e| {
            let state = states.get(&e.name);
            let snap = state.and_then(|s| s.snapshot.as_ref());
            let facts = AccountFacts::from_parts(
                accounts.get(&e.name).is_some_and(|a| a.disabled),
                reasons.get(&e.name),
                state,
            );
            let st = Standing {
                free_like: snap.map(|s| s.is_free_like()),
                weekly: snap.and_then(|s| s.weekly_used()),
                availability: availability(facts, &site.quota_policy(&e.name), now),
                evaluated_ok: ok_now.contains(e.name.as_str()) && snap.is_some(),
            };
            (e.name.clone(), st)
        })
        .collect();
    let exceptions: HashSet<String> = accounts
        .iter()
        .filter(|(_, a)| a.exception)
        .map(|(n, _)| n.clone())
        .collect();
    let reordered = priority::reorder(list, &standing, &exceptions);
    if !priority::changed(list, &reordered) {
        return Ok(reordered);
    }
    let sid = site.site_id.clone();
    let l = reordered.clone();
    p.store
        .run(move |c| store::priorities::replace(c, &sid, &l))
        .await?;
    let order: Vec<String> = reordered
        .iter()
        .take(10)
        .map(|e| {
            format!(
                "{}{}",
                e.name,
                if e.pending_first_inspection {
                    " (pending)"
                } else {
                    ""
                }
            )
        })
        .collect();
    p.log(vec![NewLogEntry::info(
        &site.site_id,
        Category::Priority,
        "reorder",
        source,
        format!(
            "priority list reordered after the inspection: {}{}",
            order.join(", "),
            if reordered.len() > 10 { ", …" } else { "" }
        ),
    )])
    .await;
    Ok(reordered)
}

/// Logs the dispatch's warning (too few usable, all exhausted) and the active set.
async fn log_active_set(p: &Patrol, site: &Site, d: &priority::Dispatch, source: Source) {
    let mut logs = Vec::new();
    if let Some(w) = &d.warning {
        logs.push(
            NewLogEntry::info(
                &site.site_id,
                Category::Priority,
                "activeSet",
                source,
                w.clone(),
            )
            .at_level(if d.all_exhausted {
                Level::Error
            } else {
                Level::Warning
            }),
        );
    }
    logs.push(NewLogEntry::info(
        &site.site_id,
        Category::Priority,
        "activeSet",
        source,
        format!(
            "active set: {}",
            if d.active.is_empty() {
                "(none)".to_string()
            } else {
                d.active.join(", ")
            }
        ),
    ));
    p.log(logs).await;
}

/// Executes routing's steps through [`super::actions::execute`] (the one action path): an
/// account whose reason a manual action changed since routing read it (`read`) is skipped (it
/// is not routing's now); a success stores `OrderedStandby` (owner routing) or clears the
/// reason; every outcome is logged.
async fn run_steps(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    steps: &[RoutingStep],
    read: &HashMap<String, DisableRecord>,
    source: Source,
) -> Result<Vec<ActionOutcome>, JobError> {
    let indices = if steps.is_empty() {
        HashMap::new()
    } else {
        auth_indices(p, site).await?
    };
    let todo = steps
        .iter()
        .map(|step| {
            let (RoutingStep::Enable(n) | RoutingStep::Standby(n)) = step;
            let (action, reason) = match step {
                RoutingStep::Enable(_) => (Action::Enable, ReasonChange::Clear),
                RoutingStep::Standby(_) => (
                    Action::Disable,
                    ReasonChange::Set(DisableReason::OrderedStandby, ReasonOwner::Routing),
                ),
            };
            PlannedAction {
                name: n.clone(),
                action,
                auth_index: indices.get(n).cloned().flatten(),
                reason,
                // A standby account is usable: it waits for its turn, not for a reset.
                reset: crate::core::oplog::FlipReset::None,
            }
        })
        .collect();
    let done = actions::execute(p, site, client, todo, read, Actor::Routing, source, None).await?;
    p.log(done.logs).await;
    Ok(done.outcomes)
}

/// Routing's status patches: recorded, read back (a mismatch re-applied once), and CPA's
/// cooldown cleared for the accounts routing re-enabled (docs/rules/patrol.md §11.2–§11.3).
async fn confirm_routing_writes(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    outcomes: &[ActionOutcome],
    source: Source,
) {
    let indices = match auth_indices(p, site).await {
        Ok(i) => i,
        Err(e) => return tracing::warn!(site = %site.site_id, error = %e, "accounts unreadable"),
    };
    let written = super::readback::status_writes(outcomes, &indices);
    match super::readback::reread_after_status_writes(p, site, client, &written, source).await {
        Ok(listed) => {
            let now = p.now();
            let enabled: HashSet<&str> = outcomes
                .iter()
                .filter(|o| o.success && o.action == Action::Enable)
                .map(|o| o.account_name.as_str())
                .collect();
            let candidates: Vec<_> = listed
                .iter()
                .filter(|a| enabled.contains(a.name.as_str()))
                .filter_map(|a| {
                    super::cooldowns::Candidate::new(
                        a,
                        super::cooldowns::Trigger::RoutingEnabled,
                        now,
                    )
                })
                .collect();
            super::cooldowns::clear_stale(p, site, client, &candidates, vec![], source).await;
        }
        Err(e) => {
            tracing::warn!(site = %site.site_id, error = %e, "cannot re-read accounts after routing")
        }
    }
}

/// Keeps the stored listing's CPA priorities of the `written` accounts equal to what CPA lists
/// after a sync (the stale-priority check and the routing status read them).
async fn store_listed_priorities(
    p: &Patrol,
    site: &Site,
    written: &[super::readback::Written],
    values: &HashMap<String, i64>,
) {
    let sid = site.site_id.clone();
    let updates: HashMap<String, i64> = written
        .iter()
        .filter_map(|w| values.get(&w.name).map(|v| (w.name.clone(), *v)))
        .collect();
    let res = p
        .store
        .run(move |c| {
            for mut a in store::accounts::list(c, &sid)? {
                if let Some(v) = updates.get(&a.name)
                    && a.cpa_priority != *v
                {
                    a.cpa_priority = *v;
                    store::accounts::save_account(c, &sid, &a)?;
                }
            }
            Ok(())
        })
        .await;
    if let Err(e) = res {
        tracing::warn!(site = %site.site_id, error = %e, "stored priorities not updated");
    }
}

/// `auth_index` of every stored account, by name (the status-patch guard, docs/rules/cpa.md §2.2).
async fn auth_indices(
    p: &Patrol,
    site: &Site,
) -> Result<HashMap<String, Option<String>>, JobError> {
    let sid = site.site_id.clone();
    let accounts = p.store.run(move |c| store::accounts::list(c, &sid)).await?;
    Ok(accounts
        .into_iter()
        .map(|a| (a.name, a.auth_index))
        .collect())
}
