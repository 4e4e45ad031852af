//! Executing account actions in CPA — the round's disable/enable/delete and priority routing's
//! enable/standby — in one place: the reason guard, at most `actionWorkers` at a time, no new
//! action after the stop signal, the disable-reason write of what succeeded and the
//! operation-log entries. Deciding what to do is not done here (`core::inspect`,
//! `core::priority`).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Semaphore;

use super::{JobError, Patrol, SiteRuntime};
use crate::core::account::{DisableRecord, reason_changed_since};
use crate::core::inspect::{Action, ReasonChange};
use crate::core::oplog::{Category, FlipReset, Level, NewLogEntry, Source};
use crate::core::report::ActionOutcome;
use crate::core::site::Site;
use crate::cpa::CpaClient;
use crate::store;

/// Who decided the actions: sets the operation-log wording and category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    /// The round's decision table (log category `account`, operation `action`).
    Patrol,
    /// Priority routing (category `priority`, operation `priorityRouting`).
    Routing,
}

/// One action to execute.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedAction {
    /// Account (auth-file) name.
    pub name: String,
    /// `Keep` executes nothing and succeeds.
    pub action: Action,
    /// The listed file's `auth_index`: guards the status patch on CPA v7.2.x (docs/rules/cpa.md §2.2).
    pub auth_index: Option<String>,
    /// The disable-reason change stored once the action succeeded (`Unchanged` = none).
    pub reason: ReasonChange,
    /// The quota reset the action's log entry names once it succeeded
    /// (`core::inspect::Decision::flip_reset`; `FlipReset::None` for routing and manual steps).
    pub reset: FlipReset,
}

/// What [`execute`] did.
#[derive(Debug, Default)]
pub struct Executed {
    /// One outcome per started action, in the order planned.
    pub outcomes: Vec<ActionOutcome>,
    /// Planned actions dropped by the reason guard.
    pub dropped: usize,
    /// One operation-log entry per outcome; the caller logs them where its log order wants.
    pub logs: Vec<NewLogEntry>,
}

/// Executes `todo` in CPA and records it (docs/rules/patrol.md §5.1, §6.3):
/// 1. drops every action whose stored disable reason is no longer the one in `read` (the
///    records its decision was made on; [`reason_changed_since`]): a person's reason wins;
/// 2. runs the rest, at most `actionWorkers` at a time; after the stop signal no new action
///    starts (those in flight complete), so `outcomes` may be shorter than `todo`;
/// 3. stores the reason change of each success, in one transaction, again only where the
///    stored reason is still the one read;
/// 4. builds one log entry per outcome, worded for `actor`.
///
/// `progress`: the round's progress counter (`action_processed`), when a round runs this.
/// Errors: only store failures; a failed CPA call is an unsuccessful outcome.
#[allow(clippy::too_many_arguments)]
pub async fn execute(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    mut todo: Vec<PlannedAction>,
    read: &HashMap<String, DisableRecord>,
    actor: Actor,
    source: Source,
    progress: Option<&Arc<SiteRuntime>>,
) -> Result<Executed, JobError> {
    if todo.is_empty() {
        return Ok(Executed::default());
    }
    let sid = site.site_id.clone();
    let fresh = p
        .store
        .run(move |c| store::accounts::load_reasons(c, &sid))
        .await?;
    let planned = todo.len();
    todo.retain(|a| {
        let changed = reason_changed_since(read.get(&a.name), fresh.get(&a.name));
        if changed {
            tracing::info!(site = %site.site_id, account = %a.name, "disable reason changed during the round; its action is dropped");
        }
        !changed
    });
    let dropped = planned - todo.len();
    let reasons: HashMap<String, ReasonChange> =
        todo.iter().map(|a| (a.name.clone(), a.reason)).collect();
    let resets: HashMap<String, FlipReset> =
        todo.iter().map(|a| (a.name.clone(), a.reset)).collect();
    let outcomes = run_in_cpa(p, site, client, todo, actor, progress).await;
    write_reasons(p, site, &outcomes, &reasons, read).await?;
    let logs = outcomes
        .iter()
        .map(|o| {
            let reset = resets.get(&o.account_name).copied().unwrap_or_default();
            outcome_log(site, actor, source, o, reset)
        })
        .collect();
    Ok(Executed {
        outcomes,
        dropped,
        logs,
    })
}

/// Step 2 of [`execute`]: the CPA calls, bounded by `actionWorkers`, in planned order.
async fn run_in_cpa(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    todo: Vec<PlannedAction>,
    actor: Actor,
    progress: Option<&Arc<SiteRuntime>>,
) -> Vec<ActionOutcome> {
    let limit = Arc::new(Semaphore::new(site.settings.action_workers.max(1) as usize));
    let mut set = tokio::task::JoinSet::new();
    for (order, planned) in todo.into_iter().enumerate() {
        let (client, limit, stopping) = (client.clone(), limit.clone(), p.clone());
        let site_id = site.site_id.clone();
        set.spawn(async move {
            let _permit = limit.acquire().await;
            if stopping.is_shutting_down() {
                return None;
            }
            let PlannedAction {
                name,
                action,
                auth_index,
                ..
            } = planned;
            let index = auth_index.as_deref();
            let res = match action {
                Action::Disable => client.set_status(&name, true, index).await,
                Action::Enable => client.set_status(&name, false, index).await,
                Action::Delete => client.delete(&name).await,
                Action::Keep => Ok(()),
            };
            if actor == Actor::Patrol {
                metrics::counter!("quota_patrol_actions_total", "site" => site_id, "action" => action.as_str(), "result" => if res.is_ok() { "ok" } else { "error" }).increment(1);
            }
            let outcome = ActionOutcome {
                action,
                account_name: name,
                success: res.is_ok(),
                error: res.err().map(|e| e.to_string()),
            };
            Some((order, outcome))
        });
    }
    let mut out = Vec::new();
    while let Some(j) = set.join_next().await {
        if let Ok(Some(o)) = j {
            out.push(o);
            if let Some(rt) = progress {
                rt.update_progress(p.now(), |pr| pr.action_processed += 1);
            }
        }
    }
    out.sort_by_key(|(o, _)| *o);
    out.into_iter().map(|(_, o)| o).collect()
}

/// Step 3 of [`execute`]: the reason changes of the successful actions (a delete takes its
/// reason with the account), skipping accounts whose reason changed since `read`.
async fn write_reasons(
    p: &Patrol,
    site: &Site,
    outcomes: &[ActionOutcome],
    reasons: &HashMap<String, ReasonChange>,
    read: &HashMap<String, DisableRecord>,
) -> Result<(), JobError> {
    let writes: Vec<(String, ReasonChange, Option<DisableRecord>)> = outcomes
        .iter()
        .filter(|o| o.success && o.action != Action::Delete)
        .filter_map(|o| {
            let change = *reasons.get(&o.account_name)?;
            (change != ReasonChange::Unchanged).then(|| {
                let was = read.get(&o.account_name).cloned();
                (o.account_name.clone(), change, was)
            })
        })
        .collect();
    if writes.is_empty() {
        return Ok(());
    }
    let (sid, now) = (site.site_id.clone(), p.now());
    p.store
        .run(move |c| {
            let tx = c.transaction()?;
            let current = store::accounts::load_reasons(&tx, &sid)?;
            for (name, change, was) in &writes {
                if reason_changed_since(was.as_ref(), current.get(name)) {
                    continue;
                }
                store_reason(&tx, &sid, name, *change, now)?;
            }
            tx.commit()?;
            Ok(())
        })
        .await?;
    Ok(())
}

/// Stores one reason change (`Unchanged` writes nothing).
pub(crate) fn store_reason(
    c: &rusqlite::Connection,
    site_id: &str,
    name: &str,
    change: ReasonChange,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), crate::store::StoreError> {
    match change {
        ReasonChange::Set(r, o) => store::accounts::set_reason(c, site_id, name, r, o, now),
        ReasonChange::Clear => store::accounts::clear_reason(c, site_id, name),
        ReasonChange::Unchanged => Ok(()),
    }
}

/// The operation-log entry of one executed action, e.g. "disable a.json succeeded; back after
/// its reset at …" (patrol; a success names `reset`) or "routing standby-disabled a.json
/// failed: …" (routing); errors at level `error`.
fn outcome_log(
    site: &Site,
    actor: Actor,
    source: Source,
    o: &ActionOutcome,
    reset: FlipReset,
) -> NewLogEntry {
    let name = &o.account_name;
    let entry = match actor {
        Actor::Patrol => NewLogEntry::info(
            &site.site_id,
            Category::Account,
            "action",
            source,
            match &o.error {
                None => format!("{} {name} succeeded", o.action.as_str()),
                Some(e) => format!("{} {name} failed: {e}", o.action.as_str()),
            },
        ),
        Actor::Routing => {
            let what = if o.action == Action::Enable {
                "routing enabled"
            } else {
                "routing standby-disabled"
            };
            NewLogEntry::info(
                &site.site_id,
                Category::Priority,
                "priorityRouting",
                source,
                match &o.error {
                    None => format!("{what} {name}"),
                    Some(err) => format!("{what} {name} failed: {err}"),
                },
            )
        }
    };
    let entry = entry.for_account(name);
    if o.success {
        entry.with_reset(reset)
    } else {
        entry.at_level(Level::Error)
    }
}
