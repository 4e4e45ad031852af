//! The inspection round of one site (docs/rules/patrol.md §4.1, §5) as an orchestration of named stages:
//! load listing → plan probes → probe → decide → act → persist → route → publish. Each stage
//! is a function below with a typed input and output; the pure rules live in `core`
//! (`freshness`, `probe`, `inspect`). An error never causes an action; a 401 from the
//! management API stops the round.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};

use super::actions::{self, Actor, PlannedAction};
use super::progress::{OperationType, ProgressStatus, Stage};
use super::{JobError, Patrol, SiteRuntime};
use crate::core::account::{
    Account, DisableRecord, ProbeState, QuotaSnapshot, reason_changed_since,
};
use crate::core::availability::enabled_and_usable;
use crate::core::freshness::{self, FreshnessInput, ProbeNeed};
use crate::core::inspect::{Action, Decision, Policy, ReasonChange, Subject, decide};
use crate::core::oplog::{Category, Level, NewLogEntry, Source};
use crate::core::passive::{self, PassiveVerdict};
use crate::core::policy::{QuotaPolicy, applied_threshold};
use crate::core::probe::{
    ProbeRecord, ProbeReply, ProbeView, apply_probe, evidence_for, next_probe_hint,
    not_evaluated_cause,
};
use crate::core::quota::{ProbeOutcome, classify_probe};
use crate::core::report::{ActionOutcome, DecisionRecord, InspectionRunResult, RunStatus};
use crate::core::retry::{PROBE_RETRY, retry};
use crate::core::site::Site;
use crate::cpa::{CpaClient, CpaError};
use crate::random::Random;
use crate::store::{self, accounts::HistoryRow};

pub use super::round::{RoundKind, RoundOptions};

/// What a round left undone because shutdown was requested (docs/operations.md "Stopping").
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

/// What one probe produced: the upstream's answer, or the failed CPA call with its display
/// text (kept once, for the state, the history and the decision record).
#[derive(Debug, Clone)]
enum ProbeResult {
    Outcome(ProbeOutcome),
    Failed(CpaError, String),
}

impl ProbeResult {
    fn failed(e: CpaError) -> Self {
        let text = e.to_string();
        ProbeResult::Failed(e, text)
    }

    /// The core's view of this result (`core::probe`).
    fn reply(&self) -> ProbeReply<'_> {
        match self {
            ProbeResult::Outcome(o) => ProbeReply::Answer(o),
            ProbeResult::Failed(e, text) => ProbeReply::CallFailed {
                status: e.status(),
                message: text,
            },
        }
    }
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
        let (kind, dry_run, whole) = (opts.kind, opts.dry_run, opts.only.is_none());
        let mut result = run_round_locked(&p, &site, &rt, opts).await?;
        // A site that runs dry may get one banked reset credit (docs/reset-credits.md), still
        // under the round lock: its re-probe is a one-account round.
        if kind.acts() && whole && result.status != RunStatus::Error {
            let trigger = super::reset_credits::Trigger::Round { dry_run };
            match super::reset_credits::redeem(&p, &site, trigger).await {
                Ok(report) => {
                    if let Some(r) = &report {
                        after_redemption(&p, &site, &rt, r).await?;
                    }
                    result.reset_credit = report;
                    if result.reset_credit.is_some() {
                        // The stored run says it too (`GET /api/inspection/last-run`).
                        let run = result.clone();
                        p.store
                            .run(move |c| crate::store::runs::save(c, &run))
                            .await?;
                    }
                }
                Err(JobError::Store(e)) => return Err(JobError::Store(e)),
                Err(e) => tracing::warn!(site = %site_id, error = %e, "reset credit not redeemed"),
            }
        }
        Ok(result)
    })
    .await
}

/// After a redemption whose answer spent the credit (`reset`, `already_redeemed`): the
/// `reset_credit_redeemed` alert, then one forced probe of the account (a one-account round;
/// the caller holds the round lock). Its guard keeps it from a second credit in this window
/// even when the usage still reads 100 % (docs/rules/cpa.md §10). Errors: the store.
pub async fn after_redemption(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    r: &crate::core::reset_credits::RedeemReport,
) -> Result<(), JobError> {
    if r.dry_run || !matches!(r.outcome.as_str(), "reset" | "already_redeemed") {
        return Ok(());
    }
    let cause = format!(
        "account {} ({}), credit {}",
        r.account_name,
        r.outcome,
        r.credit_id.as_deref().unwrap_or("picked by the server")
    );
    super::alerts::reset_credit_redeemed(p, site, cause).await;
    let opts = RoundOptions {
        kind: RoundKind::QuotaRefresh,
        force: true,
        dry_run: false,
        only: Some(HashSet::from([r.account_name.clone()])),
    };
    Box::pin(run_round_locked(p, site, rt, opts)).await?;
    Ok(())
}

/// `POST /api/accounts/{name}/reset-credit`: redeems one credit on `name` now, under the same
/// guard as the patrol (docs/reset-credits.md "Redeeming by hand"), whatever the site's mode and
/// count, then [`after_redemption`]. Takes the site's round lock (`Busy` while a round runs).
/// Errors: `NotFound` (unknown account), `Invalid` (not limited, no `chatgpt_account_id`,
/// disabled by a person, observe-only, or already tried in this window), `Busy`, CPA and store
/// failures.
pub async fn redeem_by_hand(
    p: &Patrol,
    site_id: &str,
    name: &str,
) -> Result<crate::core::reset_credits::RedeemReport, JobError> {
    let (p, site_id, name) = (p.clone(), site_id.to_string(), name.to_string());
    super::detached(async move {
        let site = p.site(&site_id).await?;
        let rt = p.runtime(&site_id);
        let _guard = rt.begin(&site_id)?;
        let trigger = super::reset_credits::Trigger::ByHand { name: name.clone() };
        let report = super::reset_credits::redeem(&p, &site, trigger)
            .await?
            .ok_or_else(|| JobError::NotFound(format!("account {name} not found")))?;
        after_redemption(&p, &site, &rt, &report).await?;
        Ok(report)
    })
    .await
}

/// Runs one round; the caller holds `rt.busy`. Orchestration: start (progress, run times) →
/// [`round_body`] with the site's client (what CPA said of the key is settled whatever the
/// body did) → settle the status → save the run → log → [`publish_round`] → alerts.
/// Errors: store failures only; a failed round is a result with status `error`.
///
/// A dry run (`opts.dry_run`) reads CPA and decides, and writes nothing but its run record
/// (`dryRun: true`): no run times, probe states, history, reasons, log entries, published pool,
/// pool sample, usage-queue pop or runtime counter (docs/patrol.md "What a round does", dry
/// runs).
/// What CPA says of the key is still settled: CPA counts a refused key whatever the mode.
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
    let mut result = new_result(site, &opts, started_at);
    start_round(p, site, rt, &opts, started_at).await?;
    let mut cut = ShutdownCut::default();
    let mut seen = None;
    let outcome = match p.client(site).await {
        Ok(client) => {
            let body = round_body(p, site, rt, &client, &opts, &mut result, &mut cut).await;
            let body = body.map(|pool| seen = pool);
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
    let logs = settle(site, opts.kind, &outcome, cut, &mut result);
    finish_progress(rt, finished, &result);
    save_run(p, site, &opts, &result).await?;
    if !opts.dry_run {
        p.log(logs).await;
    }
    publish_round(p, site, &opts, &result, seen).await;
    metrics::counter!("quota_patrol_rounds_total", "site" => site.site_id.clone(), "kind" => opts.kind.as_str(), "status" => result.status.as_str()).increment(1);
    // Alerts (docs/rules/alerts.md): evaluate the pool after the round, queue and deliver.
    super::alerts::after_round(p, site, opts.kind, &result).await;
    match outcome {
        Ok(()) => Ok(result),
        // A failed round is a result, not an API error, except for store failures.
        Err(JobError::Store(e)) => Err(JobError::Store(e)),
        Err(_) => Ok(result),
    }
}

/// The operation type of a round's progress and log entries (api.md progress).
fn op_type(kind: RoundKind) -> &'static str {
    OperationType::of(kind).as_str()
}

/// Full rounds (auto, manual) stamp the site's last run times.
fn is_full(kind: RoundKind) -> bool {
    matches!(kind, RoundKind::Auto | RoundKind::Manual)
}

/// The run's record before anything ran (status `running`, no counts).
fn new_result(site: &Site, opts: &RoundOptions, started_at: DateTime<Utc>) -> InspectionRunResult {
    InspectionRunResult {
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
        reset_credit: None,
    }
}

/// Stage "start": the progress says the round is loading; a full round (not a dry run) stores
/// its start time.
async fn start_round(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    opts: &RoundOptions,
    started_at: DateTime<Utc>,
) -> Result<(), JobError> {
    rt.update_progress(started_at, |pr| {
        *pr = super::Progress {
            operation_type: OperationType::of(opts.kind),
            source: opts.kind.log_source(),
            status: ProgressStatus::Running,
            stage: Stage::Prepare,
            message: "loading accounts from CPA".into(),
            started_at: Some(started_at),
            ..Default::default()
        }
    });
    if is_full(opts.kind) && !opts.dry_run {
        let sid = site.site_id.clone();
        p.store
            .run(move |c| store::sites::set_run_times(c, &sid, Some(started_at), None))
            .await?;
    }
    Ok(())
}

/// The progress at the round's end: `completed` (all work done, `partial` / `failed` rounds
/// included: the cause is in the message) or `error`.
fn finish_progress(rt: &Arc<SiteRuntime>, finished: DateTime<Utc>, result: &InspectionRunResult) {
    let completed = matches!(
        result.status,
        RunStatus::Completed | RunStatus::Partial | RunStatus::Failed
    );
    rt.update_progress(finished, |pr| {
        (pr.status, pr.stage) = if completed {
            (ProgressStatus::Completed, Stage::Completed)
        } else {
            (ProgressStatus::Error, Stage::Error)
        };
        pr.message = result.error.clone().unwrap_or_else(|| "done".into());
        pr.current_account_name = None;
        if completed {
            pr.processed = pr.total;
            pr.action_processed = pr.action_total;
        }
    });
}

/// Stage "save": the run's JSON record (warm-up rounds keep none) and, for full rounds that
/// are not dry runs, the site's last finish time.
async fn save_run(
    p: &Patrol,
    site: &Site,
    opts: &RoundOptions,
    result: &InspectionRunResult,
) -> Result<(), JobError> {
    let kind = opts.kind;
    if kind == RoundKind::Warmup {
        return Ok(());
    }
    let stamp = is_full(kind) && !opts.dry_run;
    let json = serde_json::to_string(result).map_err(crate::store::StoreError::from)?;
    let (run_id, started, status, source) = (
        result.run_id.clone(),
        result.started_at,
        result.status,
        result.source.clone(),
    );
    let finished = result.finished_at;
    let sid = site.site_id.clone();
    p.store
        .run(move |c| {
            store::runs::save_json(c, &run_id, &sid, &source, started, finished, status, &json)?;
            if let (true, Some(at)) = (stamp, finished) {
                store::sites::set_run_times(c, &sid, None, Some(at))?;
            }
            Ok(())
        })
        .await?;
    Ok(())
}

/// Stage "publish": makes the round's result visible to subscribers (`Patrol::subscribe_rounds`)
/// once it is saved; warm-up rounds are not announced. Before that, the site's published pool
/// snapshot is replaced (every kind, warm-up included: `jobs::pool`), so whoever hears of the
/// round reads a pool that already reflects it. A full round hands over the accounts and probe
/// states it holds (`seen`), so the publish reads only the small tables back from SQLite. A dry
/// run changed nothing: the pool (and its sample) stays as it was; its result is announced.
async fn publish_round(
    p: &Patrol,
    site: &Site,
    opts: &RoundOptions,
    result: &InspectionRunResult,
    seen: Option<super::pool::RoundPool>,
) {
    if !opts.dry_run {
        super::pool::publish_after_round(p, &site.site_id, result, seen).await;
    }
    if opts.kind != RoundKind::Warmup {
        p.publish_round(result);
    }
}

/// Sets the run's status and error from the round body's outcome and what shutdown cut
/// (docs/operations.md "Stopping"); answers the operation-log entry saying why the run is not
/// `completed`.
fn settle(
    site: &Site,
    kind: RoundKind,
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
    if matches!(outcome, Err(JobError::Cpa(e)) if e.is_unsupported()) {
        // `listing::unsupported` logged the one line this round gets (docs/rules/cpa.md §11).
        return vec![];
    }
    vec![
        NewLogEntry::info(
            &site.site_id,
            Category::Inspection,
            op_type(kind),
            kind.log_source(),
            text,
        )
        .at_level(level),
    ]
}

/// A probe's CPA error that ends the round before any action: a refused key (CPA bans after
/// 5), or a CPA whose management API cannot be used (`CpaError::is_unsupported`,
/// docs/rules/cpa.md §11). Later batches do not start.
fn ends_round(e: &CpaError) -> bool {
    matches!(e, CpaError::Auth { .. }) || e.is_unsupported()
}

/// Per-account working data of a round.
struct Item {
    account: Account,
    state: ProbeState,
    need: ProbeNeed,
    probe: Option<ProbeResult>,
}

impl Item {
    /// The core's view of this account (`core::probe`).
    fn view(&self) -> ProbeView<'_> {
        ProbeView {
            account: &self.account,
            state: &self.state,
            need: &self.need,
            reply: self.probe.as_ref().map(ProbeResult::reply),
        }
    }
}

/// One decided account: its working data, the decision and the probe's error text.
type Decided = (Item, Decision, Option<String>);

/// What the decide stage produced.
struct DecideOutput {
    decided: Vec<Decided>,
    /// One record per real probe, for the snapshot history.
    history: Vec<ProbeRecord>,
    /// CPA refused the management key during a probe, or answered that its management API
    /// cannot be used (docs/rules/cpa.md §11): the round must not act.
    management_auth_failure: Option<CpaError>,
    /// The disable reasons read at the round's start (the reason guard's `read`).
    read: HashMap<String, DisableRecord>,
}

/// Stage "load listing", its output: the accounts to inspect and what the store knew of them
/// when the round started.
struct Listing {
    accounts: Vec<Account>,
    states: HashMap<String, ProbeState>,
    /// The disable reasons the round's decisions are made on (the reason guard's `read`).
    read: HashMap<String, DisableRecord>,
    exceptions: HashSet<String>,
}

/// Stage "plan probes", its output: one item per account in scope, each with its probe plan.
struct Plan {
    items: Vec<Item>,
    read: HashMap<String, DisableRecord>,
    /// Listed accounts the round leaves alone (exceptions), with their stored state: the
    /// published pool still shows them.
    others: Vec<(Account, ProbeState)>,
}

/// Stage "probe", its output: the plan's items with their probe results.
struct Probed {
    items: Vec<Item>,
    read: HashMap<String, DisableRecord>,
    /// Due probes that never started because of shutdown.
    not_started: usize,
}

/// Stage "act", its output.
struct Acted {
    /// One outcome per executed action, in planned order.
    outcomes: Vec<ActionOutcome>,
    /// Their log entries (logged after the decisions').
    logs: Vec<NewLogEntry>,
    /// Planned actions that never started because of shutdown.
    not_started: usize,
    /// The status writes to read back, and the cooldown candidates (stage "route").
    after: AfterActions,
}

/// What stage "route" works from: the status writes to read back and the CPA cooldown
/// candidates (with the names whose recorded episodes are over).
struct AfterActions {
    written: Vec<super::readback::Written>,
    cooldowns: (Vec<super::cooldowns::Candidate>, Vec<String>),
}

/// The round's stages, in order: load listing → plan probes → probe → decide → act → persist
/// → route (publishing is [`run_round_locked`]'s, once the run is saved). Answers, for a round
/// over the whole site, every account with its probe state as the round left them (before its
/// actions: `jobs::pool` applies the outcomes), for the publish.
async fn round_body(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    client: &CpaClient,
    opts: &RoundOptions,
    result: &mut InspectionRunResult,
    cut: &mut ShutdownCut,
) -> Result<Option<super::pool::RoundPool>, JobError> {
    let listing = load_listing(p, site, client, opts).await?;
    let mut plan = plan_probes(p, site, rt, client, opts, listing).await;
    let others = std::mem::take(&mut plan.others);
    result.total_accounts = plan.items.len();
    let probed = probe_all(p, site, rt, client, plan).await;
    cut.probes = probed.not_started;
    let decided = decide_all(site, probed, p.now(), p.random().as_ref(), result);
    if let Some(e) = &decided.management_auth_failure {
        if e.is_unsupported() {
            // An 8.x CPA that dropped `/v0`, or management switched off, mid-round
            // (docs/rules/cpa.md §11): the same back-off and one line as a failed listing.
            let source = opts.kind.log_source();
            return Err(super::listing::unsupported(p, site, source, e.clone()).await);
        }
        rt.note_cpa_failure(p.now(), e);
        // Never act on a round where CPA refused our key: nothing learned is trustworthy enough.
        return Err(JobError::Cpa(e.clone()));
    }
    let mut logs: Vec<NewLogEntry> = Vec::new();
    note_cpa_probe_failures(
        site,
        opts.kind.log_source(),
        &decided.decided,
        result,
        &mut logs,
    );
    let acted = act(p, site, rt, client, opts, &decided).await?;
    cut.actions = acted.not_started;
    let (after, saved) = persist(p, site, rt, opts, decided, acted, result, logs).await?;
    let seen = (opts.only.is_none() && !opts.dry_run).then(|| {
        let mut accounts = others;
        accounts.extend(saved);
        super::pool::RoundPool { accounts }
    });
    route(p, site, client, opts, after, result, cut).await;
    Ok(seen)
}

/// Stage "load listing": the accounts (a full reload, or the single account of a one-account
/// round, `readback::round_accounts`; a dry run only reads the listing,
/// `listing::read_accounts`) and the stored states, reasons and exceptions.
async fn load_listing(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    opts: &RoundOptions,
) -> Result<Listing, JobError> {
    let single = opts.only.as_ref().filter(|o| o.len() == 1);
    let single = single.and_then(|o| o.iter().next()).map(String::as_str);
    let acting = opts.kind.acts() && !opts.dry_run;
    let source = opts.kind.log_source();
    let accounts = if opts.dry_run {
        // Read only: the listing is neither stored nor counted, the priority list not maintained.
        super::listing::read_accounts(p, site, client).await?
    } else {
        super::readback::round_accounts(p, site, client, single, acting, source).await?
    };
    let sid = site.site_id.clone();
    let (states, read, exceptions) = p
        .store
        .run(move |c| {
            Ok((
                store::accounts::load_states(c, &sid)?,
                store::accounts::load_reasons(c, &sid)?,
                store::accounts::exceptions(c, &sid)?,
            ))
        })
        .await?;
    Ok(Listing {
        accounts,
        states,
        read,
        exceptions: exceptions.into_iter().collect(),
    })
}

/// Stage "plan probes": reads the usage queue when enabled, then decides per account without
/// I/O whether to probe, reuse or skip (`core::freshness`).
async fn plan_probes(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    client: &CpaClient,
    opts: &RoundOptions,
    listing: Listing,
) -> Plan {
    let Listing {
        accounts,
        mut states,
        read,
        exceptions,
    } = listing;
    let settings = &site.settings;
    // Popping CPA's usage queue consumes its records: a dry run reads the marks already held.
    if settings.usage_queue_enabled && opts.kind != RoundKind::Warmup && !opts.dry_run {
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
    let (accounts, others): (Vec<Account>, Vec<Account>) = accounts
        .into_iter()
        .partition(|a| include_exceptions || !exceptions.contains(&a.name));
    let others = others
        .into_iter()
        .map(|a| {
            let st = states.remove(&a.name).unwrap_or_default();
            (a, st)
        })
        .collect();
    let items = accounts
        .into_iter()
        .filter(|a| opts.only.as_ref().is_none_or(|o| o.contains(&a.name)))
        .map(|account| {
            let state = states.remove(&account.name).unwrap_or_default();
            let marked = account
                .auth_index
                .as_ref()
                .is_some_and(|i| marks.contains(i));
            let act =
                freshness::activity(account.request_total, state.request_total_at_probe, marked);
            let policy = site.quota_policy(&account.name);
            let passive = passive_verdict(site, &account, &state, &policy, now);
            let need = freshness::needs_probe(FreshnessInput {
                site_id: &site.site_id,
                account: &account,
                state: &state,
                settings,
                policy,
                forced: opts.force,
                activity: act,
                passive,
                now,
            });
            if let Some(reason) = freshness::skipped_label(&need) {
                metrics::counter!("quota_patrol_probes_skipped_total", "site" => site.site_id.clone(), "reason" => reason).increment(1);
            }
            Item {
                account,
                state,
                need,
                probe: None,
            }
        })
        .collect();
    Plan {
        items,
        read,
        others,
    }
}

/// What the account's passive evidence may do this round (docs/rules/patrol.md §4.7): judged
/// against its last real probe attempt, its effective policy and the site's
/// `passiveMaxAgeMinutes`; `None` when its listing carries no `quota` field. Unusable evidence
/// is counted by why in `quota_patrol_passive_unused_total`.
fn passive_verdict(
    site: &Site,
    account: &Account,
    state: &ProbeState,
    policy: &QuotaPolicy,
    now: DateTime<Utc>,
) -> Option<PassiveVerdict> {
    let evidence = account.passive.as_ref()?;
    let max_age = chrono::Duration::minutes(i64::from(site.settings.passive_max_age_minutes));
    let verdict = passive::judge(evidence, state.last_probe_at, policy, now, max_age);
    if let PassiveVerdict::Unused(why) = verdict {
        metrics::counter!("quota_patrol_passive_unused_total", "site" => site.site_id.clone(), "reason" => why.as_str()).increment(1);
    }
    Some(verdict)
}

/// Stage "decide": folds each probe into its account's state and applies the decision table
/// (`core::inspect::decide`); counts probed, reused and failed accounts into `result`. The
/// back-off of a failed probe takes its jitter from `random`.
fn decide_all(
    site: &Site,
    probed: Probed,
    now: DateTime<Utc>,
    random: &dyn Random,
    result: &mut InspectionRunResult,
) -> DecideOutput {
    let settings = &site.settings;
    let policy = Policy {
        quota: QuotaPolicy::site(settings),
        invalid_confirmations: settings.invalid_confirmations,
        mode: settings.auto_action_mode,
        auto_enable_recovered: settings.auto_enable_recovered,
        priority_routing: settings.priority_routing_enabled,
    };
    let Probed { items, read, .. } = probed;
    let mut out = DecideOutput {
        decided: Vec::with_capacity(items.len()),
        history: Vec::new(),
        management_auth_failure: None,
        read: HashMap::new(),
    };
    for mut item in items {
        let own = Policy {
            quota: site.quota_policy(&item.account.name),
            ..policy
        };
        // Read before this round's probe replaces the snapshot.
        let awaited_reset = freshness::awaited_reset(&item.state, &own.quota, now);
        let evidence_error: Option<String>;
        match item.probe.take() {
            Some(pr) => {
                result.probed_count += 1;
                let record = apply_probe(
                    &mut item.account,
                    &mut item.state,
                    pr.reply(),
                    now,
                    random.fraction(),
                );
                let err = record.error.clone();
                out.history.push(record);
                if let ProbeResult::Failed(e, _) = &pr
                    && ends_round(e)
                {
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
            reason: read
                .get(&item.account.name)
                .map(|r: &DisableRecord| (r.reason, r.owner)),
            awaited_reset,
        };
        let evidence = evidence_for(&item.view(), evidence_error.as_deref());
        let decision = decide(&subject, &evidence, &own, now);
        out.decided.push((item, decision, evidence_error));
    }
    out.read = read;
    out
}

/// Stage "act": executes the plan ([`planned_actions`]) through `jobs::actions` — the reason
/// guard, `actionWorkers`, the stop signal, reason writes and log entries — and derives what
/// stage "route" needs. Rounds that do not act (dry run, quota refresh, freshness, warm-up)
/// execute nothing.
async fn act(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    client: &CpaClient,
    opts: &RoundOptions,
    d: &DecideOutput,
) -> Result<Acted, JobError> {
    let todo = if opts.kind.acts() && !opts.dry_run {
        planned_actions(&d.decided, &d.read)
    } else {
        vec![]
    };
    rt.update_progress(p.now(), |pr| {
        pr.stage = Stage::Actions;
        pr.action_total = todo.len();
        pr.message = format!("{} action(s)", todo.len());
    });
    let planned = todo.len();
    let source = opts.kind.log_source();
    let done = actions::execute(
        p,
        site,
        client,
        todo,
        &d.read,
        Actor::Patrol,
        source,
        Some(rt),
    )
    .await?;
    let indices: HashMap<String, Option<String>> = d
        .decided
        .iter()
        .map(|(i, _, _)| (i.account.name.clone(), i.account.auth_index.clone()))
        .collect();
    let after = AfterActions {
        written: super::readback::status_writes(&done.outcomes, &indices),
        cooldowns: cooldown_candidates(site, &d.decided, &done.outcomes, p.now()),
    };
    Ok(Acted {
        not_started: planned - done.dropped - done.outcomes.len(),
        outcomes: done.outcomes,
        logs: done.logs,
        after,
    })
}

/// Stage "act", its plan: every decision that is not `keep`, with the probed file's
/// `auth_index` and the reason change to store once it succeeds (a delete takes its reason
/// with the account). Actions whose reason a person changed while the round was probing are
/// dropped when executed (docs/rules/patrol.md §5.1).
fn planned_actions(
    decided: &[Decided],
    read: &HashMap<String, DisableRecord>,
) -> Vec<PlannedAction> {
    decided
        .iter()
        .filter(|(_, d, _)| d.action != Action::Keep)
        .map(|(i, d, _)| PlannedAction {
            name: i.account.name.clone(),
            action: d.action,
            auth_index: i.account.auth_index.clone(),
            reason: reason_write(i, d, Some(true), read).unwrap_or(ReasonChange::Unchanged),
            reset: d.flip_reset(),
        })
        .collect()
}

/// Stage "persist": the decision records and counts, the log entries (decisions, then
/// actions, then the summary), and probe states, history and `keep` reason changes in one
/// transaction ([`persist_round`]); a dry run keeps the records and counts only. Returns what stage "route" works from and the accounts with
/// their stored states (for the publish).
#[allow(clippy::too_many_arguments)]
async fn persist(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    opts: &RoundOptions,
    d: DecideOutput,
    acted: Acted,
    result: &mut InspectionRunResult,
    mut logs: Vec<NewLogEntry>,
) -> Result<(AfterActions, Vec<(Account, ProbeState)>), JobError> {
    let reason_writes = report_decisions(site, opts, &d.decided, &d.read, result, &mut logs);
    result.action_outcomes = acted.outcomes;
    if opts.dry_run {
        // The decisions are the run's record; nothing is stored or logged.
        return Ok((acted.after, Vec::new()));
    }
    logs.extend(acted.logs);
    logs.push(summary_log(site, opts.kind.log_source(), result));
    let saved = persist_round(p, site, rt, d.decided, d.history, reason_writes, d.read).await?;
    p.log(logs).await;
    Ok((acted.after, saved))
}

/// The round's summary line for the operation log.
fn summary_log(site: &Site, source: Source, result: &InspectionRunResult) -> NewLogEntry {
    NewLogEntry::info(
        &site.site_id,
        Category::Inspection,
        "summary",
        source,
        format!(
            "{} accounts: {} probed, {} reused, {} failed; {} disable, {} enable, {} delete, {} keep",
            result.total_accounts,
            result.probed_count,
            result.reused_count,
            result.failed_count,
            result.disable_count,
            result.enable_count,
            result.delete_count,
            result.keep_count
        ),
    )
}

/// Stage "persist", its report half: one `DecisionRecord` and log entry per account, the
/// action counts, and the disable-reason changes of `keep` decisions to write.
fn report_decisions(
    site: &Site,
    opts: &RoundOptions,
    decided: &[Decided],
    reasons: &HashMap<String, DisableRecord>,
    result: &mut InspectionRunResult,
    logs: &mut Vec<NewLogEntry>,
) -> Vec<(String, ReasonChange)> {
    let source = opts.kind.log_source();
    let acting = opts.kind.acts() && !opts.dry_run;
    let mut reason_writes: Vec<(String, ReasonChange)> = Vec::new();
    for (item, decision, err) in decided {
        let name = &item.account.name;
        // An executed action's reason is written with it (`jobs::actions`).
        let keep_change = (decision.action == Action::Keep)
            .then(|| reason_write(item, decision, None, reasons))
            .flatten();
        if let Some(change) = keep_change {
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
        used_window: snap.and_then(|s| s.long_window()).map(|w| w.kind),
        five_hour_used_percent: snap.and_then(QuotaSnapshot::five_hour_used),
        // Read at the round's evaluation time (`checked_at` is set to the round's now).
        threshold: snap.and_then(|s| {
            let at = item.state.checked_at.unwrap_or(s.checked_at);
            applied_threshold(s, &site.quota_policy(&item.account.name), at)
        }),
        is_quota_reached: decision.is_quota_reached,
        from_cache: !probed && snap.is_some(),
        spared_by_passive: item.need.spared_by_passive(),
        evaluated: (probed && err.is_none()) || matches!(item.need, ProbeNeed::Reuse(_)),
        error: err.cloned().or_else(|| not_evaluated_cause(&item.view())),
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
        .for_account(&item.account.name)
        .with_reset(decision.flip_reset()),
    )
}

/// Stage "persist": probe states, snapshot history and disable reasons in one transaction (a
/// reason a person changed during the round is kept); then the probed accounts' usage marks
/// are dropped. Answers the accounts with the states it stored (what the publish shows).
async fn persist_round(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    decided: Vec<Decided>,
    history: Vec<ProbeRecord>,
    reason_writes: Vec<(String, ReasonChange)>,
    reasons: HashMap<String, DisableRecord>,
) -> Result<Vec<(Account, ProbeState)>, JobError> {
    let now = p.now();
    let sid = site.site_id.clone();
    let probed_indices: Vec<String> = decided
        .iter()
        .filter(|(i, _, _)| i.probe.is_some())
        .filter_map(|(i, _, _)| i.account.auth_index.clone())
        .collect();
    let to_save: Vec<(Account, ProbeState)> = decided
        .into_iter()
        .map(|(i, _, _)| (i.account, i.state))
        .collect();
    let saved = p
        .store
        .run(move |c| {
            let tx = c.transaction()?;
            for (account, st) in &to_save {
                store::accounts::save_state(&tx, &sid, &account.name, st, now)?;
            }
            let states: HashMap<&str, &ProbeState> = to_save
                .iter()
                .map(|(a, st)| (a.name.as_str(), st))
                .collect();
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
                if reason_changed_since(reasons.get(name), current.get(name)) {
                    continue;
                }
                actions::store_reason(&tx, &sid, name, *change, now)?;
            }
            tx.commit()?;
            drop(states);
            Ok(to_save)
        })
        .await?;
    if let Ok(mut m) = rt.usage_marks.lock() {
        for idx in &probed_indices {
            m.remove(idx);
        }
    }
    Ok(saved)
}

/// Stage "route": re-reads CPA after actions so local state matches it, every
/// write read back and a mismatch re-applied once (docs/rules/patrol.md §5, docs/rules/patrol.md §11); clears stale CPA
/// cooldowns; runs priority routing after every inspection, auto or manual, and after a reset
/// re-check only while auto polling runs (docs/rules/patrol.md §4.5, §6.3) — never on a stale copy of
/// CPA's `disabled` flags, never after the stop signal, never in a dry run.
async fn route(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    opts: &RoundOptions,
    after: AfterActions,
    result: &mut InspectionRunResult,
    cut: &mut ShutdownCut,
) {
    if opts.dry_run {
        // Nothing was written to read back; routing and cooldown resets are writes.
        return;
    }
    let source = opts.kind.log_source();
    let AfterActions {
        written,
        cooldowns: (cooldown_candidates, cooldown_over),
    } = after;
    let mut local_state_current = true;
    if !result.action_outcomes.is_empty()
        && let Err(e) =
            super::readback::reread_after_status_writes(p, site, client, &written, source).await
    {
        tracing::warn!(site = %site.site_id, error = %e, "cannot re-read accounts after actions");
        local_state_current = false;
    }
    if opts.kind.acts() {
        super::cooldowns::clear_stale(p, site, client, &cooldown_candidates, cooldown_over, source)
            .await;
    }
    if !site.settings.priority_routing_enabled
        || !opts.kind.routes_after(site.settings.auto_polling_enabled)
    {
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
            Some(ProbeResult::Failed(e, _)) if e.is_transient() => Some(e),
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

/// Probes every item that needs it: batches of `probeWorkers` in parallel, a random pause
/// between batches, transient failures retried `retryCount` times with exponential backoff.
/// After shutdown is requested no new batch (and no retry) starts; probes in flight complete.
/// `not_started` counts the due probes that never started because of shutdown.
async fn probe_all(
    p: &Patrol,
    site: &Site,
    rt: &Arc<SiteRuntime>,
    client: &CpaClient,
    plan: Plan,
) -> Probed {
    let Plan {
        mut items, read, ..
    } = plan;
    let idx: Vec<usize> = items
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i.need, ProbeNeed::Probe(_)))
        .map(|(n, _)| n)
        .collect();
    let s = &site.settings;
    rt.update_progress(p.now(), |pr| {
        pr.stage = Stage::Probing;
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
            rt.update_progress(p.now(), |pr| pr.stage = Stage::Delay);
            tokio::select! {
                () = tokio::time::sleep(StdDuration::from_millis(ms)) => {}
                () = p.shutdown_requested() => break,
            }
            rt.update_progress(p.now(), |pr| pr.stage = Stage::Probing);
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
                        Err(e) => Err(ProbeResult::failed(e)),
                    }
                };
                let transient = |e: &ProbeResult| !stopping.is_shutting_down() && match e {
                    ProbeResult::Outcome(o) => o.is_transient(),
                    ProbeResult::Failed(e, _) => e.is_transient(),
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
                    ProbeResult::Failed(..) => "cpa_error",
                };
                metrics::counter!("quota_patrol_probes_total", "site" => site_id.clone(), "result" => label).increment(1);
                metrics::histogram!("quota_patrol_probe_seconds", "site" => site_id).record(started.elapsed().as_secs_f64());
                (n, res)
            });
        }
        while let Some(joined) = set.join_next().await {
            let Ok((n, res)) = joined else { continue };
            if matches!(&res, ProbeResult::Failed(e, _) if ends_round(e)) {
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
    let not_started = if aborted { 0 } else { idx.len() - started };
    Probed {
        items,
        read,
        not_started,
    }
}

/// Accounts to consider for CPA's `reset-quota` (docs/rules/patrol.md §11.3): those the patrol just
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
    for (item, decision, err) in decided {
        let a = &item.account;
        if !crate::core::writes::cooling_down(a, now) {
            over.push(a.name.clone());
        }
        let policy = site.quota_policy(&a.name);
        if policy.never_act {
            // Observe only (docs/rules/patrol.md §9): not even a cooldown reset is written.
            continue;
        }
        let trigger = if enabled.contains(a.name.as_str()) {
            Trigger::ReEnabled
        } else if !a.disabled
            && decision.action == Action::Keep
            && item.probe.is_some()
            && err.is_none()
            && enabled_and_usable(&item.state, &policy, now)
        {
            Trigger::ProbedUsable
        } else {
            continue;
        };
        out.extend(Candidate::new(a, trigger, now));
    }
    (out, over)
}
