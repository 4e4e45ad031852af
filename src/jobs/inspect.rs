//! The inspection round of one site (patrol.md §4.1, §5): reload accounts, decide per account
//! without I/O whether to probe, probe in batches with retries, decide, act (at most
//! `actionWorkers` at a time), persist everything and re-read CPA after actions.
//! An error never causes an action; a 401 from the management API stops the round.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::Semaphore;

use super::{JobError, Patrol, SiteRuntime};
use crate::core::account::{Account, DisableRecord, ProbeState, QuotaSnapshot};
use crate::core::freshness::{self, FreshnessInput, ProbeNeed, STALE_RECHECK, failure_backoff};
use crate::core::inspect::{Action, Decision, Evidence, Policy, ReasonChange, Subject, decide};
use crate::core::oplog::{Category, Level, NewLogEntry, Source};
use crate::core::quota::{ProbeOutcome, classify_probe};
use crate::core::report::{ActionOutcome, DecisionRecord, InspectionRunResult, RunStatus};
use crate::core::retry::{PROBE_RETRY, retry};
use crate::core::site::Site;
use crate::cpa::{CpaClient, CpaError};
use crate::random::Random;
use crate::store::{self, accounts::HistoryRow};

/// Why a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundKind {
    /// Regular round from the scheduler.
    Auto,
    /// `POST /api/inspection/run`, `quota-patrol inspect`.
    Manual,
    /// `POST /api/quotas/refresh`: evaluate everything (exceptions included), no actions.
    QuotaRefresh,
    /// Re-probe at a quota reset (patrol.md §4.5).
    Reset,
    /// Background real-refresh of due accounts (patrol.md §4.3); no actions.
    Freshness,
    /// Startup warm-up (patrol.md §4.6); no actions.
    Warmup,
}

impl RoundKind {
    /// The spelling in `InspectionRunResult.source` and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RoundKind::Auto => "auto",
            RoundKind::Manual => "manual",
            RoundKind::QuotaRefresh => "quotaRefresh",
            RoundKind::Reset => "reset",
            RoundKind::Freshness => "freshness",
            RoundKind::Warmup => "warmup",
        }
    }

    fn log_source(self) -> Source {
        match self {
            RoundKind::Manual | RoundKind::QuotaRefresh => Source::Manual,
            RoundKind::Auto => Source::Auto,
            _ => Source::System,
        }
    }

    /// Whether rounds of this kind act (auto, manual, reset re-checks): the full rounds whose
    /// result alerts evaluate and the demo prints.
    pub fn acts(self) -> bool {
        matches!(self, RoundKind::Auto | RoundKind::Manual | RoundKind::Reset)
    }

    /// The kind an `InspectionRunResult.source` names (its `as_str` spelling).
    pub fn from_source(source: &str) -> Option<Self> {
        [
            RoundKind::Auto,
            RoundKind::Manual,
            RoundKind::QuotaRefresh,
            RoundKind::Reset,
            RoundKind::Freshness,
            RoundKind::Warmup,
        ]
        .into_iter()
        .find(|k| k.as_str() == source)
    }
}

/// Options of one round.
#[derive(Debug, Clone)]
pub struct RoundOptions {
    pub kind: RoundKind,
    /// Probe every evaluated account for real.
    pub force: bool,
    /// Decide but execute no action.
    pub dry_run: bool,
    /// Restrict the round to these accounts (reset checks, freshness, single refresh).
    pub only: Option<HashSet<String>>,
}

impl RoundOptions {
    /// A round of `kind` over the whole site.
    pub fn new(kind: RoundKind) -> Self {
        Self {
            kind,
            force: false,
            dry_run: false,
            only: None,
        }
    }
}

/// What a round left undone because shutdown was requested (README "Stopping").
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct ShutdownCut {
    /// Probes that were due but never started.
    probes: usize,
    /// Decided actions that were never started.
    actions: usize,
    /// Priority routing did not run.
    routing: bool,
}

impl ShutdownCut {
    /// The run's error text when something was cut, e.g. "stopped by shutdown before 2
    /// probe(s) and 1 action(s)"; `None` when the round did all its work.
    fn message(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.probes > 0 {
            parts.push(format!("{} probe(s)", self.probes));
        }
        if self.actions > 0 {
            parts.push(format!("{} action(s)", self.actions));
        }
        if self.routing {
            parts.push("priority routing".to_string());
        }
        (!parts.is_empty()).then(|| format!("stopped by shutdown before {}", parts.join(" and ")))
    }
}

/// What one probe produced.
#[derive(Debug, Clone)]
enum ProbeResult {
    Outcome(ProbeOutcome),
    Failed(CpaError),
}

/// Runs one round, holding the site's round lock; `Busy` when another round holds it.
///
/// The round runs in its own task: a caller that goes away (an HTTP client disconnecting)
/// does not cancel it half-way, between an action in CPA and its record here.
pub async fn run_round(
    p: &Patrol,
    site_id: &str,
    opts: RoundOptions,
) -> Result<InspectionRunResult, JobError> {
    if p.is_shutting_down() {
        return Err(JobError::ShuttingDown);
    }
    let (p, site_id) = (p.clone(), site_id.to_string());
    super::detached(async move {
        let site = p.site(&site_id).await?;
        let rt = p.runtime(&site_id);
        let _guard = rt.begin(&site_id)?;
        run_round_locked(&p, &site, &rt, opts).await
    })
    .await
}

/// Runs one round; the caller holds `rt.busy`.
pub async fn run_round_locked(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    opts: RoundOptions,
) -> Result<InspectionRunResult, JobError> {
    if p.is_shutting_down() {
        return Err(JobError::ShuttingDown);
    }
    let started_at = p.now();
    let mut result = InspectionRunResult {
        run_id: uuid::Uuid::new_v4().to_string(),
        site_id: site.site_id.clone(),
        source: opts.kind.as_str().into(),
        dry_run: opts.dry_run,
        decisions: vec![],
        action_outcomes: vec![],
        priority_routing_outcomes: vec![],
        total_accounts: 0,
        probed_count: 0,
        reused_count: 0,
        failed_count: 0,
        delete_count: 0,
        disable_count: 0,
        enable_count: 0,
        keep_count: 0,
        started_at,
        finished_at: None,
        status: RunStatus::Running,
        error: None,
    };
    let op_type = match opts.kind {
        RoundKind::QuotaRefresh => "quotaRefresh",
        RoundKind::Reset => "resetCheck",
        RoundKind::Freshness => "freshness",
        _ => "inspection",
    };
    rt.update_progress(started_at, |pr| {
        *pr = super::Progress {
            operation_type: op_type.into(),
            source: opts.kind.log_source().as_str().into(),
            status: "running".into(),
            stage: "prepare".into(),
            message: "loading accounts from CPA".into(),
            started_at: Some(started_at),
            ..Default::default()
        }
    });
    let full = matches!(opts.kind, RoundKind::Auto | RoundKind::Manual);
    if full {
        let sid = site.site_id.clone();
        p.store
            .run(move |c| store::sites::set_run_times(c, &sid, Some(started_at), None))
            .await?;
    }
    let mut cut = ShutdownCut::default();
    let outcome = match p.client(site).await {
        Ok(client) => {
            let body = round_body(p, site, rt, &client, &opts, &mut result, &mut cut).await;
            // What CPA said of the key is recorded whatever the round did.
            match p.settle_key(site, &client).await {
                Ok(Some(refusal)) if body.is_err() => {
                    Err(super::connection::refused(site, &refusal))
                }
                Ok(_) => body,
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    let finished = p.now();
    result.finished_at = Some(finished);
    let logs = settle(
        site,
        op_type,
        opts.kind.log_source(),
        &outcome,
        cut,
        &mut result,
    );
    // `partial` / `failed` rounds did all their work (the cause is in the message).
    let completed = matches!(
        result.status,
        RunStatus::Completed | RunStatus::Partial | RunStatus::Failed
    );
    rt.update_progress(finished, |pr| {
        pr.status = if completed {
            "completed".into()
        } else {
            "error".into()
        };
        pr.stage = pr.status.clone();
        pr.message = result.error.clone().unwrap_or_else(|| "done".into());
        pr.current_account_name = None;
        if completed {
            pr.processed = pr.total;
            pr.action_processed = pr.action_total;
        }
    });
    if opts.kind != RoundKind::Warmup {
        let json = serde_json::to_string(&result).map_err(crate::store::StoreError::from)?;
        let (run_id, started, status, kind) = (
            result.run_id.clone(),
            result.started_at,
            result.status,
            result.source.clone(),
        );
        let sid = site.site_id.clone();
        p.store
            .run(move |c| {
                store::runs::save_json(
                    c,
                    &run_id,
                    &sid,
                    &kind,
                    started,
                    Some(finished),
                    status,
                    &json,
                )?;
                if full {
                    store::sites::set_run_times(c, &sid, None, Some(finished))?;
                }
                Ok(())
            })
            .await?;
    }
    p.log(logs).await;
    if opts.kind != RoundKind::Warmup {
        p.publish_round(&result);
    }
    metrics::counter!("quota_patrol_rounds_total", "site" => site.site_id.clone(), "kind" => opts.kind.as_str(), "status" => result.status.as_str()).increment(1);
    // Alerts (spec/alerts.md): evaluate the pool after the round, queue and deliver.
    super::alerts::after_round(p, site, opts.kind, &result).await;
    match outcome {
        Ok(()) => Ok(result),
        // A failed round is a result, not an API error, except for store failures.
        Err(JobError::Store(e)) => Err(JobError::Store(e)),
        Err(_) => Ok(result),
    }
}

/// Sets the run's status and error from the round body's outcome and what shutdown cut
/// (README "Stopping"); answers the operation-log entry saying why the run is not `completed`.
fn settle(
    site: &Site,
    op_type: &'static str,
    source: Source,
    outcome: &Result<(), JobError>,
    cut: ShutdownCut,
    result: &mut InspectionRunResult,
) -> Vec<NewLogEntry> {
    let (text, level) = match (outcome, cut.message()) {
        (Ok(()), None) => {
            // `partial` / `failed` were set by the round when CPA left probes unanswered.
            if result.status == RunStatus::Running {
                result.status = RunStatus::Completed;
            }
            return vec![];
        }
        // What ran is persisted as usual; the run says honestly what did not.
        (Ok(()), Some(why)) => {
            let text = format!("round {why}; what ran is recorded, the next round does the rest");
            result.error = Some(why);
            (text, Level::Warning)
        }
        (Err(e), _) => {
            result.error = Some(e.to_string());
            (format!("round failed, no action taken: {e}"), Level::Error)
        }
    };
    result.status = RunStatus::Error;
    vec![
        NewLogEntry::info(&site.site_id, Category::Inspection, op_type, source, text)
            .at_level(level),
    ]
}

/// Reloads the account list from CPA and stores it; logs added/removed accounts.
pub async fn reload_accounts(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    source: Source,
) -> Result<Vec<Account>, JobError> {
    let rt = p.runtime(&site.site_id);
    let listing = match client.list_accounts(&site.provider).await {
        Ok(l)
            if l.accounts.is_empty()
                && !rt.accept_empty_listing()
                && known_accounts(p, site).await? > 0 =>
        {
            // A CPA that just restarted may list nothing before its auth files are loaded;
            // dropping every account would lose reasons, streaks and the priority list.
            let e = CpaError::Protocol("CPA listed no accounts although the site had some; listing ignored (accepted when it repeats 3 times)".into());
            p.log(vec![
                NewLogEntry::info(
                    &site.site_id,
                    Category::System,
                    "emptyListing",
                    source,
                    e.to_string(),
                )
                .at_level(Level::Warning),
            ])
            .await;
            return Err(e.into());
        }
        Ok(l) => {
            rt.note_cpa_success();
            rt.reset_empty_listings();
            l
        }
        Err(e) => return Err(listing_failed(p, site, source, e).await),
    };
    let now = p.now();
    let version = client.version();
    let sid = site.site_id.clone();
    let accounts = Arc::new(listing.accounts);
    let shared = accounts.clone();
    let change = p
        .store
        .run(move |c| {
            let ch = store::accounts::replace_listing(c, &sid, &shared, now)?;
            store::sites::set_cpa_contact(c, &sid, now, version.as_deref())?;
            // Priority-list maintenance runs on every reload, routing on or off (patrol.md §6.1).
            let list = store::priorities::load(c, &sid)?;
            let exceptions: HashSet<String> =
                store::accounts::exceptions(c, &sid)?.into_iter().collect();
            let names: Vec<&str> = shared.iter().map(|a| a.name.as_str()).collect();
            let maintained = crate::core::priority::maintain(&list, &names, &exceptions);
            if crate::core::priority::changed(&list, &maintained) {
                store::priorities::replace(c, &sid, &maintained)?;
            }
            Ok(ch)
        })
        .await?;
    let mut logs = Vec::new();
    if !change.added.is_empty() {
        logs.push(NewLogEntry::info(
            &site.site_id,
            Category::Account,
            "accountsAdded",
            source,
            format!(
                "{} new account(s): {}",
                change.added.len(),
                preview(&change.added)
            ),
        ));
    }
    if !change.removed.is_empty() {
        logs.push(NewLogEntry::info(
            &site.site_id,
            Category::Account,
            "accountsRemoved",
            source,
            format!(
                "{} account(s) gone from CPA: {}",
                change.removed.len(),
                preview(&change.removed)
            ),
        ));
    }
    p.log(logs).await;
    Ok(Arc::try_unwrap(accounts).unwrap_or_else(|a| (*a).clone()))
}

/// A failed listing (full or single): counted, the site's automatic work paused and logged
/// (a refused key is logged and stored when the caller settles the client).
pub(crate) async fn listing_failed(
    p: &Patrol,
    site: &Site,
    source: Source,
    e: CpaError,
) -> JobError {
    metrics::counter!("quota_patrol_cpa_errors_total", "site" => site.site_id.clone(), "endpoint" => "auth-files").increment(1);
    if let Some(until) = p.runtime(&site.site_id).note_cpa_failure(p.now(), &e) {
        p.log(vec![
            NewLogEntry::info(
                &site.site_id,
                Category::System,
                "cpaUnavailable",
                source,
                format!(
                    "{e}; CPA management API failed; automatic work pauses until {}",
                    until.to_rfc3339()
                ),
            )
            .at_level(Level::Error),
        ])
        .await;
    }
    e.into()
}

async fn known_accounts(p: &Patrol, site: &Site) -> Result<usize, JobError> {
    let sid = site.site_id.clone();
    Ok(p.store
        .run(move |c| store::accounts::count(c, &sid))
        .await?)
}

fn preview(names: &[String]) -> String {
    let mut s = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 5 {
        s.push_str(&format!(" and {} more", names.len() - 5));
    }
    s
}

/// Per-account working data of a round.
struct Item {
    account: Account,
    state: ProbeState,
    need: ProbeNeed,
    probe: Option<ProbeResult>,
}

/// One decided account: its working data, the decision and the probe's error text.
type Decided = (Item, Decision, Option<String>);

/// What the decide stage produced.
struct DecideOutput {
    decided: Vec<Decided>,
    /// One record per real probe, for the snapshot history.
    history: Vec<ProbeRecord>,
    /// CPA refused the management key during a probe: the round must not act.
    management_auth_failure: Option<CpaError>,
}

/// The round's stages: load the listing → plan probes → probe → decide → act → persist →
/// re-read, clear cooldowns and route. Each stage is a function below.
async fn round_body(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    client: &CpaClient,
    opts: &RoundOptions,
    result: &mut InspectionRunResult,
    cut: &mut ShutdownCut,
) -> Result<(), JobError> {
    let source = opts.kind.log_source();
    let single = opts.only.as_ref().filter(|o| o.len() == 1);
    let single = single.and_then(|o| o.iter().next()).map(String::as_str);
    let acting = opts.kind.acts() && !opts.dry_run;
    let accounts = super::readback::round_accounts(p, site, client, single, acting, source).await?;
    let sid = site.site_id.clone();
    let (states, reasons, exceptions) = p
        .store
        .run(move |c| {
            Ok((
                store::accounts::load_states(c, &sid)?,
                store::accounts::load_reasons(c, &sid)?,
                store::accounts::exceptions(c, &sid)?,
            ))
        })
        .await?;
    let exceptions: HashSet<String> = exceptions.into_iter().collect();
    let mut items = plan_probes(p, site, rt, client, opts, accounts, states, &exceptions).await;
    result.total_accounts = items.len();

    cut.probes = probe_all(p, site, rt, client, &mut items).await;

    let DecideOutput {
        decided,
        history,
        management_auth_failure,
    } = decide_all(site, items, &reasons, p.now(), p.random().as_ref(), result);
    if let Some(e) = &management_auth_failure {
        rt.note_cpa_failure(p.now(), e);
        // Never act on a round where CPA refused our key: nothing learned is trustworthy enough.
        return Err(JobError::Cpa(e.clone()));
    }
    let mut logs: Vec<NewLogEntry> = Vec::new();
    note_cpa_probe_failures(site, source, &decided, result, &mut logs);

    // Act.
    let todo = if acting {
        planned_actions(p, site, &decided, &reasons).await?
    } else {
        vec![]
    };
    rt.update_progress(p.now(), |pr| {
        pr.stage = "actions".into();
        pr.action_total = todo.len();
        pr.message = format!("{} action(s)", todo.len());
    });
    let indices: HashMap<String, Option<String>> = decided
        .iter()
        .map(|(i, _, _)| (i.account.name.clone(), i.account.auth_index.clone()))
        .collect();
    let planned = todo.len();
    let outcomes = execute_actions(p, site, rt, client, todo, &indices).await;
    cut.actions = planned - outcomes.len();
    let written = super::readback::status_writes(&outcomes, &indices);
    let cooldowns = cooldown_candidates(site, &decided, &outcomes, p.now());
    let ok: HashMap<String, bool> = outcomes
        .iter()
        .map(|o| (o.account_name.clone(), o.success))
        .collect();
    if opts.only.is_none() {
        record_pool_gauges(site, &decided, &ok, p.now());
    }

    // Persist states, reasons, history; build the report.
    let reason_writes = report_decisions(site, opts, &decided, &reasons, &ok, result, &mut logs);
    result.action_outcomes = outcomes;
    log_outcomes(site, source, result, &mut logs);
    persist_round(p, site, rt, decided, history, reason_writes, reasons).await?;
    p.log(logs).await;

    after_actions(p, site, client, opts, &written, cooldowns, result, cut).await;
    Ok(())
}

/// Stage "plan probes": reads the usage queue when enabled, then decides per account without
/// I/O whether to probe, reuse or skip (`core::freshness`).
#[allow(clippy::too_many_arguments)]
async fn plan_probes(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    client: &CpaClient,
    opts: &RoundOptions,
    accounts: Vec<Account>,
    mut states: HashMap<String, ProbeState>,
    exceptions: &HashSet<String>,
) -> Vec<Item> {
    let settings = &site.settings;
    if settings.usage_queue_enabled && opts.kind != RoundKind::Warmup {
        match client.pop_usage_queue(500).await {
            Ok(ids) => {
                if let Ok(mut marks) = rt.usage_marks.lock() {
                    marks.extend(ids);
                }
            }
            Err(e) => {
                tracing::warn!(site = %site.site_id, error = %e, "usage queue not read; activity falls back to counters")
            }
        }
    }
    let marks = rt.usage_marks.lock().map(|m| m.clone()).unwrap_or_default();
    let now = p.now();
    let include_exceptions = opts.kind == RoundKind::QuotaRefresh || opts.only.is_some();
    accounts
        .into_iter()
        .filter(|a| include_exceptions || !exceptions.contains(&a.name))
        .filter(|a| opts.only.as_ref().is_none_or(|o| o.contains(&a.name)))
        .map(|account| {
            let state = states.remove(&account.name).unwrap_or_default();
            let marked = account
                .auth_index
                .as_ref()
                .is_some_and(|i| marks.contains(i));
            let act =
                freshness::activity(account.request_total, state.request_total_at_probe, marked);
            let need = freshness::needs_probe(FreshnessInput {
                site_id: &site.site_id,
                account: &account,
                state: &state,
                settings,
                forced: opts.force,
                activity: act,
                now,
            });
            Item {
                account,
                state,
                need,
                probe: None,
            }
        })
        .collect()
}

/// Stage "decide": folds each probe into its account's state and applies the decision table
/// (`core::inspect::decide`); counts probed, reused and failed accounts into `result`. The
/// back-off of a failed probe takes its jitter from `random`.
fn decide_all(
    site: &Site,
    items: Vec<Item>,
    reasons: &HashMap<String, DisableRecord>,
    now: DateTime<Utc>,
    random: &dyn Random,
    result: &mut InspectionRunResult,
) -> DecideOutput {
    let settings = &site.settings;
    let policy = Policy {
        threshold: settings.used_percent_threshold,
        invalid_confirmations: settings.invalid_confirmations,
        mode: settings.auto_action_mode,
        auto_enable_recovered: settings.auto_enable_recovered,
        priority_routing: settings.priority_routing_enabled,
    };
    let mut out = DecideOutput {
        decided: Vec::with_capacity(items.len()),
        history: Vec::new(),
        management_auth_failure: None,
    };
    for mut item in items {
        let evidence_error: Option<String>;
        match item.probe.take() {
            Some(pr) => {
                result.probed_count += 1;
                let err = apply_probe(&mut item, &pr, now, random.fraction(), &mut out.history);
                if let ProbeResult::Failed(e @ CpaError::Auth { .. }) = &pr {
                    out.management_auth_failure.get_or_insert(e.clone());
                }
                if err.is_some() {
                    result.failed_count += 1;
                }
                evidence_error = err;
                item.probe = Some(pr);
            }
            None => {
                evidence_error = None;
                let reused = matches!(item.need, ProbeNeed::Reuse(_));
                if let (
                    ProbeNeed::Reuse(why) | ProbeNeed::Skip(why) | ProbeNeed::Known(why),
                    Some(s),
                ) = (&item.need, item.state.snapshot.as_mut())
                {
                    s.checked_at = now;
                    s.from_cache = true;
                    s.cache_reason = Some((*why).to_string());
                }
                if reused {
                    result.reused_count += 1;
                }
            }
        }
        item.state.checked_at = Some(now);
        let subject = Subject {
            disabled: item.account.disabled,
            reason: reasons
                .get(&item.account.name)
                .map(|r: &DisableRecord| (r.reason, r.owner)),
        };
        let evidence = evidence_for(&item, evidence_error.as_deref());
        let decision = decide(&subject, &evidence, &policy, now);
        out.decided.push((item, decision, evidence_error));
    }
    out
}

/// Stage "act", its plan: every decision that is not `keep`, except those whose disable
/// reason a person changed while the round was probing — their reason wins (patrol.md §5.1).
async fn planned_actions(
    p: &Patrol,
    site: &Site,
    decided: &[Decided],
    reasons: &HashMap<String, DisableRecord>,
) -> Result<Vec<(String, Action)>, JobError> {
    let mut todo: Vec<(String, Action)> = decided
        .iter()
        .filter(|(_, d, _)| d.action != Action::Keep)
        .map(|(i, d, _)| (i.account.name.clone(), d.action))
        .collect();
    if todo.is_empty() {
        return Ok(todo);
    }
    let sid = site.site_id.clone();
    let fresh = p
        .store
        .run(move |c| store::accounts::load_reasons(c, &sid))
        .await?;
    todo.retain(|(name, _)| {
        let changed = fresh.get(name).map(|r| (r.reason, r.owner))
            != reasons.get(name).map(|r| (r.reason, r.owner));
        if changed {
            tracing::info!(site = %site.site_id, account = %name, "disable reason changed during the round; its action is dropped");
        }
        !changed
    });
    Ok(todo)
}

/// Stage "persist", its report half: one `DecisionRecord` and log entry per account, the
/// action counts, and the disable-reason changes to write (only for executed actions).
fn report_decisions(
    site: &Site,
    opts: &RoundOptions,
    decided: &[Decided],
    reasons: &HashMap<String, DisableRecord>,
    ok: &HashMap<String, bool>,
    result: &mut InspectionRunResult,
    logs: &mut Vec<NewLogEntry>,
) -> Vec<(String, ReasonChange)> {
    let source = opts.kind.log_source();
    let acting = opts.kind.acts() && !opts.dry_run;
    let mut reason_writes: Vec<(String, ReasonChange)> = Vec::new();
    for (item, decision, err) in decided {
        let name = &item.account.name;
        if let Some(change) = reason_write(item, decision, ok.get(name).copied(), reasons) {
            reason_writes.push((name.clone(), change));
            if let ReasonChange::Set(r, o) = change
                && decision.action == Action::Keep
            {
                logs.push(
                    NewLogEntry::info(
                        &site.site_id,
                        Category::Account,
                        "disableReason",
                        source,
                        format!(
                            "{} classified as {} (owner {}): {}",
                            item.account.display_name(),
                            r.as_str(),
                            o.as_str(),
                            decision.reason
                        ),
                    )
                    .for_account(name),
                );
            }
        }
        let shown_action = if acting {
            decision.action
        } else {
            Action::Keep
        };
        match shown_action {
            Action::Keep => result.keep_count += 1,
            Action::Disable => result.disable_count += 1,
            Action::Enable => result.enable_count += 1,
            Action::Delete => result.delete_count += 1,
        }
        result
            .decisions
            .push(decision_record(site, opts, item, decision, err.as_ref()));
        if let Some(entry) = decision_log(site, source, item, decision, err.is_some()) {
            logs.push(entry);
        }
    }
    reason_writes
}

/// The disable-reason change a decision makes, if it changes the stored one: a `keep` always
/// may, another action only once executed; a delete takes its reason with the account.
fn reason_write(
    item: &Item,
    decision: &Decision,
    executed: Option<bool>,
    reasons: &HashMap<String, DisableRecord>,
) -> Option<ReasonChange> {
    let change = match (decision.action, executed) {
        (Action::Keep, _) => decision.reason_change,
        (_, Some(true)) => decision.reason_change,
        _ => ReasonChange::Unchanged,
    };
    if change == ReasonChange::Unchanged
        || (decision.action == Action::Delete && executed == Some(true))
    {
        return None;
    }
    let current = reasons.get(&item.account.name).map(|r| (r.reason, r.owner));
    let differs = match change {
        ReasonChange::Set(r, o) => current != Some((r, o)),
        ReasonChange::Clear => current.is_some(),
        ReasonChange::Unchanged => false,
    };
    differs.then_some(change)
}

/// The API's record of one decision (api.md `InspectionRunResult.decisions`).
fn decision_record(
    site: &Site,
    opts: &RoundOptions,
    item: &Item,
    decision: &Decision,
    err: Option<&String>,
) -> DecisionRecord {
    let acting = opts.kind.acts() && !opts.dry_run;
    let snap = item.state.snapshot.as_ref();
    let probed = item.probe.is_some();
    DecisionRecord {
        account_name: item.account.name.clone(),
        display_account: item.account.display_name().to_string(),
        plan_type: snap
            .and_then(|s| s.plan_type.clone())
            .or(item.account.plan_type.clone()),
        action: decision.action,
        rule: decision.rule,
        reason: if acting || decision.action == Action::Keep {
            decision.reason.clone()
        } else {
            format!(
                "{} (not executed: {})",
                decision.reason,
                if opts.dry_run {
                    "dry run"
                } else {
                    "this pass takes no action"
                }
            )
        },
        disable_reason: decision.disable_reason,
        status_code: if probed {
            item.state.last_status_code
        } else {
            None
        },
        used_percent: snap.and_then(QuotaSnapshot::weekly_used),
        five_hour_used_percent: snap.and_then(QuotaSnapshot::five_hour_used),
        is_quota_reached: decision.is_quota_reached,
        from_cache: !probed && snap.is_some(),
        evaluated: (probed && err.is_none()) || matches!(item.need, ProbeNeed::Reuse(_)),
        error: err.cloned().or_else(|| not_evaluated_cause(item)),
        next_real_refresh_at: next_probe_hint(site, &item.account, &item.state),
    }
}

/// The operation-log entry of one decision: for probed accounts, actions and errors.
fn decision_log(
    site: &Site,
    source: Source,
    item: &Item,
    decision: &Decision,
    failed: bool,
) -> Option<NewLogEntry> {
    if item.probe.is_none() && decision.action == Action::Keep && !failed {
        return None;
    }
    let how = match &item.need {
        ProbeNeed::Probe(why) => format!("probed ({why})"),
        ProbeNeed::Reuse(why) => format!("cache reuse ({why})"),
        ProbeNeed::Skip(why) | ProbeNeed::Known(why) => format!("skipped ({why})"),
    };
    Some(
        NewLogEntry::info(
            &site.site_id,
            Category::Inspection,
            "decision",
            source,
            format!(
                "{}: {} -> {} [rule {}] {}",
                item.account.display_name(),
                how,
                decision.action.as_str(),
                decision.rule,
                decision.reason
            ),
        )
        .at_level(if failed { Level::Warning } else { Level::Info })
        .for_account(&item.account.name),
    )
}

/// Log entries of the executed actions and the round's summary line.
fn log_outcomes(
    site: &Site,
    source: Source,
    result: &InspectionRunResult,
    logs: &mut Vec<NewLogEntry>,
) {
    for o in &result.action_outcomes {
        let entry = NewLogEntry::info(
            &site.site_id,
            Category::Account,
            "action",
            source,
            match &o.error {
                None => format!("{} {} succeeded", o.action.as_str(), o.account_name),
                Some(e) => format!("{} {} failed: {e}", o.action.as_str(), o.account_name),
            },
        )
        .for_account(&o.account_name);
        logs.push(if o.success {
            entry
        } else {
            entry.at_level(Level::Error)
        });
    }
    logs.push(NewLogEntry::info(
        &site.site_id,
        Category::Inspection,
        "summary",
        source,
        format!(
            "{} accounts: {} probed, {} reused, {} failed; {} disable, {} enable, {} delete, {} keep",
            result.total_accounts, result.probed_count, result.reused_count, result.failed_count, result.disable_count, result.enable_count, result.delete_count, result.keep_count
        ),
    ));
}

/// Stage "persist": probe states, snapshot history and disable reasons in one transaction (a
/// reason a person changed during the round is kept); then the probed accounts' usage marks
/// are dropped.
async fn persist_round(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    decided: Vec<Decided>,
    history: Vec<ProbeRecord>,
    reason_writes: Vec<(String, ReasonChange)>,
    reasons: HashMap<String, DisableRecord>,
) -> Result<(), JobError> {
    let now = p.now();
    let sid = site.site_id.clone();
    let probed_indices: Vec<String> = decided
        .iter()
        .filter(|(i, _, _)| i.probe.is_some())
        .filter_map(|(i, _, _)| i.account.auth_index.clone())
        .collect();
    let to_save: Vec<(String, ProbeState)> = decided
        .into_iter()
        .map(|(i, _, _)| (i.account.name, i.state))
        .collect();
    p.store
        .run(move |c| {
            let tx = c.transaction()?;
            for (name, st) in &to_save {
                store::accounts::save_state(&tx, &sid, name, st, now)?;
            }
            let states: HashMap<&str, &ProbeState> =
                to_save.iter().map(|(n, st)| (n.as_str(), st)).collect();
            for h in &history {
                // A successful probe's snapshot is the one just stored in the account's state.
                let snapshot = if h.error.is_none() {
                    states
                        .get(h.account.as_str())
                        .and_then(|st| st.snapshot.as_ref())
                } else {
                    None
                };
                let row = HistoryRow {
                    at: h.at,
                    status_code: h.status_code,
                    success: h.error.is_none(),
                    snapshot,
                    error: h.error.as_deref(),
                };
                store::accounts::append_history(&tx, &sid, &h.account, row)?;
            }
            let current = store::accounts::load_reasons(&tx, &sid)?;
            for (name, change) in &reason_writes {
                // Someone else (a manual action) changed the reason during the round: keep theirs.
                if current.get(name).map(|r| (r.reason, r.owner))
                    != reasons.get(name).map(|r| (r.reason, r.owner))
                {
                    continue;
                }
                match change {
                    ReasonChange::Set(r, o) => {
                        store::accounts::set_reason(&tx, &sid, name, *r, *o, now)?
                    }
                    ReasonChange::Clear => store::accounts::clear_reason(&tx, &sid, name)?,
                    ReasonChange::Unchanged => {}
                }
            }
            tx.commit()?;
            Ok(())
        })
        .await?;
    if let Ok(mut m) = rt.usage_marks.lock() {
        for idx in &probed_indices {
            m.remove(idx);
        }
    }
    Ok(())
}

/// Stage "re-read and route": re-reads CPA after actions so local state matches it, every
/// write read back and a mismatch re-applied once (patrol.md §5, issue 7); clears stale CPA
/// cooldowns; runs priority routing after every inspection, auto or manual, and after a reset
/// re-check only while auto polling runs (patrol.md §4.5, §6.3) — never on a stale copy of
/// CPA's `disabled` flags, never after the stop signal.
#[allow(clippy::too_many_arguments)]
async fn after_actions(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    opts: &RoundOptions,
    written: &[super::readback::Written],
    (cooldown_candidates, cooldown_over): (Vec<super::cooldowns::Candidate>, Vec<String>),
    result: &mut InspectionRunResult,
    cut: &mut ShutdownCut,
) {
    let source = opts.kind.log_source();
    let mut local_state_current = true;
    if !result.action_outcomes.is_empty()
        && let Err(e) =
            super::readback::reread_after_status_writes(p, site, client, written, source).await
    {
        tracing::warn!(site = %site.site_id, error = %e, "cannot re-read accounts after actions");
        local_state_current = false;
    }
    if opts.kind.acts() && !opts.dry_run {
        super::cooldowns::clear_stale(p, site, client, &cooldown_candidates, cooldown_over, source)
            .await;
    }
    let routing_round = match opts.kind {
        RoundKind::Auto | RoundKind::Manual => true,
        RoundKind::Reset => site.settings.auto_polling_enabled,
        _ => false,
    };
    if !site.settings.priority_routing_enabled || !routing_round {
        return;
    }
    if !local_state_current {
        p.log(vec![
            NewLogEntry::info(
                &site.site_id,
                Category::Priority,
                "activeSet",
                source,
                "routing skipped this round: CPA could not be re-read after the patrol's actions",
            )
            .at_level(Level::Warning),
        ])
        .await;
        return;
    }
    if opts.dry_run {
        return;
    }
    if p.is_shutting_down() {
        // Routing starts new CPA writes: none after the signal.
        cut.routing = true;
        return;
    }
    if let Err(e) = super::priority::after_round(p, site, client, result, source).await {
        // A routing failure is logged as such; the patrol's part of the round stands.
        p.log(vec![
            NewLogEntry::info(
                &site.site_id,
                Category::Priority,
                "priorityRouting",
                source,
                format!("priority routing failed this round: {e}"),
            )
            .at_level(Level::Error),
        ])
        .await;
    }
}

/// When the account will be probed for real next (`None` = at the next round): a failing
/// account (a 401 awaiting confirmation included) shows its back-off end, one parked after a
/// confirmed 401 or a 402, or a healthy one, its age.
fn next_probe_hint(site: &Site, account: &Account, st: &ProbeState) -> Option<DateTime<Utc>> {
    let parked = freshness::parked(account, st, &site.settings);
    if st.last_error.is_some() && !parked {
        return st.retry_not_before;
    }
    let last = st
        .snapshot
        .as_ref()
        .map(|s| s.refreshed_at)
        .max(st.last_probe_at);
    freshness::next_real_refresh_at(&site.site_id, &account.name, last, &site.settings)
}

/// Marks the round `partial` or `failed` (with the cause in `error` and the operation log) when
/// probes failed because CPA did not answer them: transport errors, timeouts, CPA 5xx
/// ([`CpaError::is_transient`]). Upstream answers (401, 402, 429, HTML 403) do not count.
/// Rule: [`crate::core::report::status_from_probes`].
fn note_cpa_probe_failures(
    site: &Site,
    source: Source,
    decided: &[(Item, Decision, Option<String>)],
    result: &mut InspectionRunResult,
    logs: &mut Vec<NewLogEntry>,
) {
    let failed: Vec<&CpaError> = decided
        .iter()
        .filter_map(|(i, _, _)| match &i.probe {
            Some(ProbeResult::Failed(e)) if e.is_transient() => Some(e),
            _ => None,
        })
        .collect();
    let timeouts = failed
        .iter()
        .filter(|e| matches!(e, CpaError::Timeout))
        .count();
    let attempted = result.probed_count;
    // A probe that timed out is usually a slow upstream (CPA's api-call waits on it); it
    // counts as CPA not answering only when CPA was seen going away in the same round
    // (refused or reset connections, 5xx), or when every probe timed out.
    let gone = failed.len() - timeouts;
    let count = if gone > 0 || (attempted >= 2 && timeouts == attempted) {
        failed.len()
    } else {
        0
    };
    if count == 0 {
        return;
    }
    // The first sign of CPA going away, else the first timeout.
    let first = failed
        .iter()
        .find(|e| !matches!(e, CpaError::Timeout))
        .unwrap_or(&failed[0]);
    result.status = crate::core::report::status_from_probes(attempted, count);
    let cause = format!(
        "CPA did not answer {count} of {attempted} probe(s) (first: {first}); those accounts were not evaluated"
    );
    logs.push(
        NewLogEntry::info(
            &site.site_id,
            Category::Inspection,
            "cpaProbeFailures",
            source,
            format!("round {}: {cause}", result.status.as_str()),
        )
        .at_level(if result.status == RunStatus::Failed {
            Level::Error
        } else {
            Level::Warning
        }),
    );
    result.error = Some(cause);
}

/// Why an account was not evaluated this round (no auth_index, back-off, probe did not run),
/// for the decision's `error` (api.md decision record); `None` when it was evaluated or its
/// probe failed (that error is reported as such).
fn not_evaluated_cause(item: &Item) -> Option<String> {
    match evidence_for(item, None) {
        Evidence::NotEvaluated { why } => Some(format!("not evaluated: {why}")),
        _ => None,
    }
}

/// The evidence an item provides for [`decide`].
fn evidence_for<'a>(item: &'a Item, error: Option<&'a str>) -> Evidence<'a> {
    match (&item.probe, &item.need) {
        (Some(ProbeResult::Outcome(ProbeOutcome::Invalid { .. })), _) => Evidence::Invalid {
            streak: item.state.consecutive_invalid,
        },
        (Some(ProbeResult::Outcome(ProbeOutcome::Payment { deactivated, .. })), _) => {
            Evidence::Payment {
                deactivated: *deactivated,
            }
        }
        (Some(_), _) if error.is_some() => Evidence::Error {
            message: error.unwrap_or_default(),
        },
        (Some(_), _) => match &item.state.snapshot {
            Some(s) => Evidence::Snapshot(s),
            None => Evidence::Error {
                message: "no snapshot",
            },
        },
        (None, ProbeNeed::Reuse(_)) => match &item.state.snapshot {
            Some(s) => Evidence::Snapshot(s),
            None => Evidence::NotEvaluated { why: "no snapshot" },
        },
        // A skip of a disabled exhausted free account still re-states its known quota.
        (None, ProbeNeed::Known(why)) => match &item.state.snapshot {
            Some(s) if item.account.disabled => Evidence::Snapshot(s),
            _ => Evidence::NotEvaluated { why },
        },
        (None, ProbeNeed::Skip(why)) => Evidence::NotEvaluated { why },
        (None, ProbeNeed::Probe(_)) => Evidence::NotEvaluated {
            why: "the probe did not run",
        },
    }
}

/// Folds a probe result into the item's state; returns the error text when the probe failed.
fn apply_probe(
    item: &mut Item,
    pr: &ProbeResult,
    now: DateTime<Utc>,
    jitter: f64,
    history: &mut Vec<ProbeRecord>,
) -> Option<String> {
    let st = &mut item.state;
    st.last_probe_at = Some(now);
    let (status, error) = match pr {
        ProbeResult::Outcome(ProbeOutcome::Usage(report)) => {
            let snap = QuotaSnapshot::from_report(report, now);
            if let Some(plan) = &report.plan_type {
                item.account.plan_type = Some(plan.clone());
            }
            st.retry_not_before = snap.is_stale(now).then(|| now + STALE_RECHECK);
            st.snapshot = Some(snap);
            st.consecutive_failures = 0;
            st.consecutive_invalid = 0;
            st.payment_problem = None;
            st.last_error = None;
            st.last_error_at = None;
            st.last_status_code = Some(200);
            st.request_total_at_probe = item.account.request_total;
            history.push(ProbeRecord {
                account: item.account.name.clone(),
                at: now,
                status_code: 200,
                error: None,
            });
            return None;
        }
        ProbeResult::Outcome(ProbeOutcome::Inconclusive(_)) => {
            // The upstream accepted the token: a 401 streak is broken.
            st.consecutive_invalid = 0;
            (
                200,
                "2xx answer without a main rate-limit window: inconclusive, last snapshot kept"
                    .to_string(),
            )
        }
        ProbeResult::Outcome(o @ ProbeOutcome::Invalid { message }) => {
            st.consecutive_invalid += 1;
            (
                o.status_code(),
                format!("401 invalid credential: {message}"),
            )
        }
        ProbeResult::Outcome(
            o @ ProbeOutcome::Payment {
                deactivated,
                message,
            },
        ) => {
            st.payment_problem = Some(*deactivated);
            st.consecutive_invalid = 0;
            (o.status_code(), format!("402 payment problem: {message}"))
        }
        ProbeResult::Outcome(o) => {
            st.consecutive_invalid = 0;
            let msg = match o {
                // The parser's message already says "blocked by an edge HTML page (HTTP 403 …)".
                ProbeOutcome::Blocked { message } => message.clone(),
                ProbeOutcome::RateLimited { message } => format!("429 rate limited: {message}"),
                ProbeOutcome::HttpError { status, message } => {
                    format!("upstream {status}: {message}")
                }
                ProbeOutcome::Unparsable { status, message } => {
                    format!("unparsable {status} answer: {message}")
                }
                _ => "unexpected outcome".to_string(),
            };
            (o.status_code(), msg)
        }
        ProbeResult::Failed(e) => (e.status().unwrap_or(0), format!("CPA call failed: {e}")),
    };
    st.consecutive_failures += 1;
    st.last_status_code = Some(status);
    st.last_error = Some(error.clone());
    st.last_error_at = Some(now);
    // 401/402 are answers, not outages: no back-off, so a confirmation comes with the next round.
    let answered = matches!(
        pr,
        ProbeResult::Outcome(ProbeOutcome::Invalid { .. } | ProbeOutcome::Payment { .. })
    );
    st.retry_not_before = if answered {
        None
    } else {
        Some(now + failure_backoff(st.consecutive_failures, jitter))
    };
    history.push(ProbeRecord {
        account: item.account.name.clone(),
        at: now,
        status_code: status,
        error: Some(error.clone()),
    });
    Some(error)
}

/// Probes every item that needs it: batches of `probeWorkers` in parallel, a random pause
/// between batches, transient failures retried `retryCount` times with exponential backoff.
/// After shutdown is requested no new batch (and no retry) starts; probes in flight complete.
/// Returns the number of due probes that never started because of shutdown.
async fn probe_all(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    client: &CpaClient,
    items: &mut [Item],
) -> usize {
    let idx: Vec<usize> = items
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i.need, ProbeNeed::Probe(_)))
        .map(|(n, _)| n)
        .collect();
    let s = &site.settings;
    rt.update_progress(p.now(), |pr| {
        pr.stage = "probing".into();
        pr.total = idx.len();
        pr.message = format!("probing {} of {} account(s)", idx.len(), items.len());
    });
    let workers = s.probe_workers.max(1) as usize;
    let mut aborted = false;
    let mut started = 0;
    for (batch_no, batch) in idx.chunks(workers).enumerate() {
        if aborted || p.is_shutting_down() {
            break;
        }
        if batch_no > 0 && s.probe_batch_delay_max_ms > 0 {
            let ms = p
                .random()
                .between(s.probe_batch_delay_min_ms, s.probe_batch_delay_max_ms);
            rt.update_progress(p.now(), |pr| pr.stage = "delay".into());
            tokio::select! {
                () = tokio::time::sleep(StdDuration::from_millis(ms)) => {}
                () = p.shutdown_requested() => break,
            }
            rt.update_progress(p.now(), |pr| pr.stage = "probing".into());
        }
        started += batch.len();
        let mut set = tokio::task::JoinSet::new();
        for &n in batch {
            let account = items[n].account.clone();
            let client = client.clone();
            let url = site.usage_url.clone();
            let ua = site.user_agent.clone();
            let retries = s.retry_count;
            let site_id = site.site_id.clone();
            let clock = p.clock.clone();
            let stopping = p.clone();
            set.spawn(async move {
                let started = std::time::Instant::now();
                let attempt = || async {
                    match client.probe_usage(&account, &url, &ua).await {
                        Ok(ans) => {
                            let o = classify_probe(ans.status, &ans.body, clock.now());
                            if o.is_transient() { Err(ProbeResult::Outcome(o)) } else { Ok(ProbeResult::Outcome(o)) }
                        }
                        Err(e) => Err(ProbeResult::Failed(e)),
                    }
                };
                let transient = |e: &ProbeResult| !stopping.is_shutting_down() && match e {
                    ProbeResult::Outcome(o) => o.is_transient(),
                    ProbeResult::Failed(e) => e.is_transient(),
                };
                let jitter = || stopping.random().fraction();
                let sleep = |d: chrono::Duration| tokio::time::sleep(d.to_std().unwrap_or_default());
                let res = retry(&PROBE_RETRY, retries, attempt, transient, jitter, sleep)
                    .await
                    .unwrap_or_else(|e| e);
                let label = match &res {
                    ProbeResult::Outcome(ProbeOutcome::Usage(_)) => "ok",
                    ProbeResult::Outcome(ProbeOutcome::Invalid { .. }) => "invalid",
                    ProbeResult::Outcome(_) => "upstream_error",
                    ProbeResult::Failed(_) => "cpa_error",
                };
                metrics::counter!("quota_patrol_probes_total", "site" => site_id.clone(), "result" => label).increment(1);
                metrics::histogram!("quota_patrol_probe_seconds", "site" => site_id).record(started.elapsed().as_secs_f64());
                (n, res)
            });
        }
        while let Some(joined) = set.join_next().await {
            let Ok((n, res)) = joined else { continue };
            if matches!(res, ProbeResult::Failed(CpaError::Auth { .. })) {
                aborted = true;
            }
            let name = items[n].account.name.clone();
            items[n].probe = Some(res);
            rt.update_progress(p.now(), |pr| {
                pr.processed += 1;
                pr.current_account_name = Some(name);
            });
        }
    }
    if aborted { 0 } else { idx.len() - started }
}

/// Executes actions, at most `actionWorkers` at a time; records every outcome. After shutdown
/// is requested no new action starts (those in flight complete): the result then holds fewer
/// outcomes than `todo`.
async fn execute_actions(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    client: &CpaClient,
    todo: Vec<(String, Action)>,
    indices: &HashMap<String, Option<String>>,
) -> Vec<ActionOutcome> {
    if todo.is_empty() {
        return vec![];
    }
    let limit = Arc::new(Semaphore::new(site.settings.action_workers.max(1) as usize));
    let mut set = tokio::task::JoinSet::new();
    for (order, (name, action)) in todo.into_iter().enumerate() {
        let client = client.clone();
        let limit = limit.clone();
        let site_id = site.site_id.clone();
        // The probed file's auth_index guards the status patch on CPA v7.2.x (cpa.md §2.2).
        let index = indices.get(&name).cloned().flatten();
        let stopping = p.clone();
        set.spawn(async move {
            let _permit = limit.acquire().await;
            if stopping.is_shutting_down() {
                return None;
            }
            let index = index.as_deref();
            let res = match action {
                Action::Disable => client.set_status(&name, true, index).await,
                Action::Enable => client.set_status(&name, false, index).await,
                Action::Delete => client.delete(&name).await,
                Action::Keep => Ok(()),
            };
            metrics::counter!("quota_patrol_actions_total", "site" => site_id, "action" => action.as_str(), "result" => if res.is_ok() { "ok" } else { "error" }).increment(1);
            Some((order, ActionOutcome { action, account_name: name, success: res.is_ok(), error: res.err().map(|e| e.to_string()) }))
        });
    }
    let mut out = Vec::new();
    while let Some(j) = set.join_next().await {
        if let Ok(Some(o)) = j {
            out.push(o);
            rt.update_progress(p.now(), |pr| pr.action_processed += 1);
        }
    }
    out.sort_by_key(|(o, _)| *o);
    out.into_iter().map(|(_, o)| o).collect()
}

/// Helper for callers that want to know whether the site's head of line is usable.
pub fn is_usable(state: &ProbeState, threshold: u8, now: DateTime<Utc>) -> bool {
    state
        .snapshot
        .as_ref()
        .is_some_and(|s| s.is_usable(threshold, now))
}

/// Gauges of the site's pool after a full round: accounts by state and usable accounts
/// (api.md `/metrics`).
fn record_pool_gauges(
    site: &Site,
    decided: &[(Item, Decision, Option<String>)],
    executed: &HashMap<String, bool>,
    now: DateTime<Utc>,
) {
    let (mut enabled, mut disabled, mut usable) = (0u32, 0u32, 0u32);
    for (item, decision, _) in decided {
        let done = executed.get(&item.account.name).copied() == Some(true);
        let is_disabled = match decision.action {
            Action::Disable | Action::Delete if done => true,
            Action::Enable if done => false,
            _ => item.account.disabled,
        };
        if is_disabled {
            disabled += 1;
        } else {
            enabled += 1;
            if item
                .state
                .snapshot
                .as_ref()
                .is_some_and(|s| s.is_usable(site.settings.used_percent_threshold, now))
            {
                usable += 1;
            }
        }
    }
    let id = site.site_id.clone();
    metrics::gauge!("quota_patrol_accounts", "site" => id.clone(), "state" => "enabled")
        .set(f64::from(enabled));
    metrics::gauge!("quota_patrol_accounts", "site" => id.clone(), "state" => "disabled")
        .set(f64::from(disabled));
    metrics::gauge!("quota_patrol_usable_accounts", "site" => id).set(f64::from(usable));
}

/// Accounts to consider for CPA's `reset-quota` (issue 7 item 4): those the patrol just
/// re-enabled, and enabled ones that probed usable this round while CPA lists them cooling
/// down; plus the names of the round's accounts CPA does not list as cooling down (their
/// recorded episodes are over).
fn cooldown_candidates(
    site: &Site,
    decided: &[(Item, Decision, Option<String>)],
    outcomes: &[ActionOutcome],
    now: DateTime<Utc>,
) -> (Vec<super::cooldowns::Candidate>, Vec<String>) {
    use super::cooldowns::{Candidate, Trigger};
    let enabled: HashSet<&str> = outcomes
        .iter()
        .filter(|o| o.success && o.action == Action::Enable)
        .map(|o| o.account_name.as_str())
        .collect();
    let mut out = Vec::new();
    let mut over = Vec::new();
    let threshold = site.settings.used_percent_threshold;
    for (item, decision, err) in decided {
        let a = &item.account;
        if !crate::core::writes::cooling_down(a, now) {
            over.push(a.name.clone());
        }
        let trigger = if enabled.contains(a.name.as_str()) {
            Trigger::ReEnabled
        } else if !a.disabled
            && decision.action == Action::Keep
            && item.probe.is_some()
            && err.is_none()
            && is_usable(&item.state, threshold, now)
        {
            Trigger::ProbedUsable
        } else {
            continue;
        };
        out.extend(Candidate::new(a, trigger, now));
    }
    (out, over)
}

/// One real probe of the round, for the snapshot history.
struct ProbeRecord {
    account: String,
    at: DateTime<Utc>,
    status_code: u16,
    error: Option<String>,
}

#[cfg(test)]
mod round_kind_tests {
    use super::RoundKind;

    #[test]
    fn a_round_kind_reads_back_from_its_source_spelling() {
        for k in [
            RoundKind::Auto,
            RoundKind::Manual,
            RoundKind::Reset,
            RoundKind::Warmup,
        ] {
            assert_eq!(RoundKind::from_source(k.as_str()), Some(k));
        }
        assert_eq!(
            RoundKind::from_source("quotaRefresh"),
            Some(RoundKind::QuotaRefresh)
        );
        assert_eq!(RoundKind::from_source("bogus"), None);
        assert!(RoundKind::Reset.acts() && !RoundKind::Freshness.acts());
    }
}
