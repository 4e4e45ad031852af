//! Banked rate-limit reset credits in the patrol (docs/reset-credits.md, docs/rules/cpa.md §10):
//! the read models (per account and per site) shown by the API, the CLI table, the status page
//! and the daily digest. Each site's `resetCreditsMode` decides: `off` shows nothing, `observe`
//! and `redeem` show what the probes and list reads saw.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{JobError, Patrol};
use crate::core::account::{QuotaSnapshot, ReasonOwner};
use crate::core::oplog::{Category, Level, NewLogEntry, Source};
use crate::core::reset_credits::{
    CandidateFacts, ConsumeOutcome, GuardDecision, RedeemGuard, RedeemReport, classify_consume,
    guard_decision, pick_candidate, read_list, site_needs_credit,
};
use crate::core::settings::ResetCreditsMode;
use crate::core::site::Site;
use crate::store;
use crate::store::reset_credits::ListedCredits;

/// One account's banked reset credits. Counts are `null` when unknown (the usage body had no
/// `rate_limit_reset_credits`, or the account was never probed): unknown is not zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountCreditsView {
    /// `available_count` of the last probe's usage body.
    pub available: Option<u32>,
    /// `applicable_available_count`: credits that would reset a window now (0 when nothing is
    /// limited).
    pub applicable: Option<u32>,
    /// When the credit list was last read (before a redemption); `null` = never.
    pub listed_at: Option<DateTime<Utc>>,
    /// The soonest expiry among the available credits of that list read.
    pub soonest_expires_at: Option<DateTime<Utc>>,
}

/// A site's banked reset credits: sums over the accounts whose count is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteCreditsView {
    /// `observe` or `redeem` (a site in `off` has no summary).
    #[schema(value_type = String)]
    pub mode: ResetCreditsMode,
    /// Sum of `available` over the accounts that reported it.
    pub available: u32,
    /// Sum of `applicable` over the accounts that reported it.
    pub applicable: u32,
    /// Accounts whose count is known.
    pub accounts_known: u32,
    /// The soonest expiry over every list read of the site (`null` when none was read).
    pub soonest_expires_at: Option<DateTime<Utc>>,
}

impl AccountCreditsView {
    /// `2 (1 now)` = 2 banked, 1 would reset a window now; `-` when the count is unknown.
    pub fn short(&self) -> String {
        match (self.available, self.applicable) {
            (Some(a), Some(n)) => format!("{a} ({n} now)"),
            (Some(a), None) => a.to_string(),
            _ => "-".into(),
        }
    }
}

impl SiteCreditsView {
    /// `reset credits (observe): 3 banked on 2 accounts, 1 usable now, soonest expiry
    /// 2026-06-01 12:00 UTC` (the table's and the status page's line).
    pub fn line(&self) -> String {
        let expiry = self
            .soonest_expires_at
            .map(|at| format!(", soonest expiry {}", at.format("%Y-%m-%d %H:%M UTC")))
            .unwrap_or_default();
        format!(
            "reset credits ({}): {} banked on {} accounts, {} usable now{expiry}",
            self.mode.as_str(),
            self.available,
            self.accounts_known,
            self.applicable
        )
    }
}

/// The view of one account under `mode` (`None` in `off`, or when nothing is known).
pub fn account_view(
    mode: ResetCreditsMode,
    snap: Option<&QuotaSnapshot>,
    listed: Option<&ListedCredits>,
) -> Option<AccountCreditsView> {
    if mode == ResetCreditsMode::Off {
        return None;
    }
    let hint = snap.and_then(|s| s.reset_credits);
    if hint.is_none() && listed.is_none() {
        return None;
    }
    Some(AccountCreditsView {
        available: hint.and_then(|h| h.available),
        applicable: hint.and_then(|h| h.applicable),
        listed_at: listed.map(|l| l.listed_at),
        soonest_expires_at: listed.and_then(|l| l.soonest_expires_at),
    })
}

/// The site summary of the account views (`None` in `off`).
pub fn site_summary<'a>(
    mode: ResetCreditsMode,
    accounts: impl IntoIterator<Item = Option<&'a AccountCreditsView>>,
) -> Option<SiteCreditsView> {
    if mode == ResetCreditsMode::Off {
        return None;
    }
    let mut s = SiteCreditsView {
        mode,
        available: 0,
        applicable: 0,
        accounts_known: 0,
        soonest_expires_at: None,
    };
    for v in accounts.into_iter().flatten() {
        if let Some(n) = v.available {
            s.available += n;
            s.accounts_known += 1;
        }
        s.applicable += v.applicable.unwrap_or(0);
        if let Some(at) = v.soonest_expires_at {
            s.soonest_expires_at = Some(s.soonest_expires_at.map_or(at, |cur| cur.min(at)));
        }
    }
    Some(s)
}

/// The list reads of a site by account name.
pub(crate) fn lists_by_name(
    c: &rusqlite::Connection,
    site_id: &str,
) -> Result<HashMap<String, ListedCredits>, store::StoreError> {
    Ok(store::reset_credits::lists(c, site_id)?
        .into_iter()
        .map(|l| (l.name.clone(), l))
        .collect())
}

/// The per-account views and the summary of a site (`GET /api/reset-credits`, the table, the
/// status page, the digest).
pub async fn site_credits(
    p: &Patrol,
    site: &Site,
) -> Result<(Vec<(String, AccountCreditsView)>, Option<SiteCreditsView>), JobError> {
    let mode = site.settings.reset_credits_mode;
    if mode == ResetCreditsMode::Off {
        return Ok((Vec::new(), None));
    }
    let sid = site.site_id.clone();
    let (states, lists) = p
        .store
        .run(move |c| {
            Ok((
                store::accounts::load_states(c, &sid)?,
                lists_by_name(c, &sid)?,
            ))
        })
        .await?;
    let mut names: Vec<&String> = states.keys().chain(lists.keys()).collect();
    names.sort();
    names.dedup();
    let views: Vec<(String, AccountCreditsView)> = names
        .into_iter()
        .filter_map(|n| {
            let snap = states.get(n).and_then(|s| s.snapshot.as_ref());
            account_view(mode, snap, lists.get(n)).map(|v| (n.clone(), v))
        })
        .collect();
    let summary = site_summary(mode, views.iter().map(|(_, v)| Some(v)));
    Ok((views, summary))
}

/// The digest's credits line of `site` (`None` in `off`): the summary of now and the credits
/// redeemed (`reset` or `already_redeemed`) since `since`.
pub async fn digest_credits(
    p: &Patrol,
    site: &Site,
    since: DateTime<Utc>,
) -> Result<Option<crate::core::digest::DigestCredits>, JobError> {
    let (_, Some(summary)) = site_credits(p, site).await? else {
        return Ok(None);
    };
    let sid = site.site_id.clone();
    let guards = p
        .store
        .run(move |c| store::reset_credits::guards_in_site(c, &sid))
        .await?;
    let redeemed = guards
        .iter()
        .filter(|g| g.settled_at.is_some_and(|at| at >= since))
        .filter(|g| {
            matches!(
                g.guard.settled.as_deref(),
                Some("reset" | "already_redeemed")
            )
        })
        .count();
    Ok(Some(crate::core::digest::DigestCredits {
        mode: summary.mode.as_str().to_string(),
        available: summary.available,
        applicable: summary.applicable,
        accounts_known: summary.accounts_known,
        soonest_expires_at: summary.soonest_expires_at,
        redeemed: u32::try_from(redeemed).unwrap_or(u32::MAX),
    }))
}

// ---- Redemption (mode `redeem`) -------------------------------------------------------------

/// The list endpoint next to the site's usage URL (`…/wham/usage` → `…/wham/rate-limit-reset-
/// credits`); the public ChatGPT backend when the usage URL has another shape.
pub fn list_url(usage_url: &str) -> String {
    let base = usage_url.trim_end_matches('/');
    match base.strip_suffix("/wham/usage") {
        Some(root) => format!("{root}/wham/rate-limit-reset-credits"),
        None => "https://chatgpt.com/backend-api/wham/rate-limit-reset-credits".to_string(),
    }
}

/// What asks for a redemption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// After an acting round (auto or manual): only when the site runs dry
    /// (`core::reset_credits::site_needs_credit`).
    Round { dry_run: bool },
    /// `POST /api/accounts/{name}/reset-credit`: this account, whatever the site's count.
    ByHand { name: String },
}

/// The facts of one account for the candidate rule, from the pool data.
fn facts(
    site: &Site,
    pool: &super::PoolData,
    lists: &HashMap<String, ListedCredits>,
    now: DateTime<Utc>,
) -> Vec<CandidateFacts> {
    pool.accounts
        .iter()
        .map(|a| {
            let snap = pool.states.get(&a.name).and_then(|s| s.snapshot.as_ref());
            let reason = pool.reasons.get(&a.name);
            let standby = reason
                .is_some_and(|r| matches!(r.owner, ReasonOwner::Patrol | ReasonOwner::Routing));
            CandidateFacts {
                name: a.name.clone(),
                chatgpt_account_id: a.chatgpt_account_id.clone().filter(|s| !s.is_empty()),
                enabled_or_standby: !a.disabled || standby,
                limited_until: snap.and_then(|s| limited_until(s, now)),
                applicable: snap
                    .and_then(|s| s.reset_credits)
                    .and_then(|h| h.applicable),
                never_act: site.quota_policy(&a.name).never_act
                    || pool.exceptions.contains(&a.name),
                soonest_expiry: lists.get(&a.name).and_then(|l| l.soonest_expires_at),
            }
        })
        .collect()
}

/// The reset of the window that limits the account, when the snapshot says it is limited: the
/// long window at 100 %, or `limit_reached` (then the fullest main window's reset). A reset
/// already past `now` limits nothing (the snapshot is stale, `QuotaSnapshot::is_stale`): no
/// guard is written for a window that has ended.
fn limited_until(s: &QuotaSnapshot, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let long = s.long_window();
    let reset = if let Some(w) = long.filter(|w| w.used_percent.is_some_and(|u| u >= 100.0)) {
        w.reset_at
    } else if s.main_limit_reached {
        s.windows
            .iter()
            .filter(|w| w.group == crate::core::quota::MAIN_GROUP)
            .max_by(|a, b| {
                a.used_percent
                    .unwrap_or(0.0)
                    .total_cmp(&b.used_percent.unwrap_or(0.0))
            })
            .and_then(|w| w.reset_at)
    } else {
        None
    };
    reset.filter(|r| *r > now)
}

/// Usable accounts of the site now (`core::availability`), the count the site's need is read
/// from.
fn usable_count(site: &Site, pool: &super::PoolData, now: DateTime<Utc>) -> usize {
    pool.accounts
        .iter()
        .filter(|a| !pool.exceptions.contains(&a.name))
        .filter(|a| {
            let facts = crate::core::availability::AccountFacts::from_parts(
                a.disabled,
                pool.reasons.get(&a.name),
                pool.states.get(&a.name),
            );
            crate::core::availability::availability(facts, &site.quota_policy(&a.name), now)
                == crate::core::availability::Availability::Usable
        })
        .count()
}

/// Redeems at most one credit in `site` (docs/reset-credits.md). The caller holds the site's
/// round lock, and after a redeemed answer (`report.outcome` `reset` / `already_redeemed`)
/// queues the alert and probes the account again (`jobs::inspect::after_redemption`). Order: an attempt of the site
/// whose answer is unknown is retried first, with its own `redeem_request_id`; else the best
/// candidate (`core::reset_credits::pick_candidate`) gets a new attempt: the list is read again,
/// the guard is written, then the consume is sent. After `reset` / `already_redeemed`, CPA's
/// cooldown is cleared where the version has `reset-quota`.
/// `Ok(None)`: mode not `redeem`, the site not dry (rounds), or no candidate. Errors: the
/// store; `NotFound` / `Invalid` for a manual redemption that cannot be made.
pub async fn redeem(
    p: &Patrol,
    site: &Site,
    trigger: Trigger,
) -> Result<Option<RedeemReport>, JobError> {
    let by_hand = matches!(trigger, Trigger::ByHand { .. });
    let dry_run = matches!(trigger, Trigger::Round { dry_run: true });
    if site.settings.reset_credits_mode != ResetCreditsMode::Redeem && !by_hand {
        return Ok(None);
    }
    if p.is_shutting_down() {
        return Ok(None);
    }
    let now = p.now();
    let pool = p.pool(&site.site_id).await?;
    let needed = by_hand
        || site_needs_credit(
            usable_count(site, &pool, now),
            site.settings.priority_min_active_count as usize,
        );
    let sid = site.site_id.clone();
    let ids: Vec<String> = pool
        .accounts
        .iter()
        .filter_map(|a| a.chatgpt_account_id.clone())
        .collect();
    let (lists, guards) = p
        .store
        .run(move |c| {
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            Ok((
                lists_by_name(c, &sid)?,
                store::reset_credits::guards_of(c, &refs)?,
            ))
        })
        .await?;
    let facts = facts(site, &pool, &lists, now);
    let core_guards: Vec<RedeemGuard> = guards.iter().map(|g| g.guard.clone()).collect();
    // An attempt whose answer is unknown comes first (docs/decisions.md §14), whatever the
    // site's need: only its retry with the same key tells whether the credit went. An attempt
    // whose window has passed is closed unanswered (docs/decisions.md §17).
    let open = guards
        .iter()
        .find(|g| g.site_id == site.site_id && g.guard.settled.is_none());
    if let Some(g) = open.filter(|g| g.guard.window_reset_at <= now)
        && !dry_run
    {
        let (id, w) = (g.guard.chatgpt_account_id.clone(), g.guard.window_reset_at);
        p.store
            .run(move |c| {
                store::reset_credits::settle_guard(
                    c,
                    &id,
                    w,
                    "window_passed",
                    Some("the window reset before the answer was known"),
                    now,
                )
            })
            .await?;
        let message = format!(
            "reset credit attempt {} closed unanswered: its window reset at {} before the answer was known; never sent again",
            g.guard.redeem_request_id,
            g.guard.window_reset_at.to_rfc3339()
        );
        p.log(vec![
            NewLogEntry::info(
                &site.site_id,
                Category::Account,
                "resetCredit",
                Source::System,
                message,
            )
            .at_level(Level::Warning)
            .for_account(&g.name),
        ])
        .await;
    }
    let open = open.filter(|g| g.guard.window_reset_at > now);
    let chosen: Option<(CandidateFacts, GuardDecision)> = match (&trigger, open) {
        (Trigger::ByHand { name }, _) => {
            let f = facts
                .iter()
                .find(|f| &f.name == name)
                .ok_or_else(|| JobError::NotFound(format!("account {name} not found")))?;
            let problems = by_hand_problems(f);
            if !problems.is_empty() {
                return Err(JobError::Invalid(problems));
            }
            let (id, until) = (
                f.chatgpt_account_id.clone().unwrap_or_default(),
                f.limited_until.unwrap_or(now),
            );
            match guard_decision(&core_guards, &id, until) {
                GuardDecision::Settled { outcome } => {
                    return Err(JobError::Invalid(vec![format!(
                        "a reset credit was already tried on {name} in this window ({outcome}); it is never spent twice"
                    )]));
                }
                d => Some((f.clone(), d)),
            }
        }
        (_, Some(g)) => facts.iter().find(|f| f.name == g.name).map(|f| {
            let mut f = f.clone();
            f.limited_until = Some(g.guard.window_reset_at);
            f.chatgpt_account_id = Some(g.guard.chatgpt_account_id.clone());
            (
                f,
                GuardDecision::Retry {
                    redeem_request_id: g.guard.redeem_request_id.clone(),
                },
            )
        }),
        (_, None) if needed => pick_candidate(&facts, &core_guards).map(|(f, d)| (f.clone(), d)),
        (_, None) => None,
    };
    let Some((f, decision)) = chosen else {
        return Ok(None);
    };
    let Some(account) = pool.accounts.iter().find(|a| a.name == f.name).cloned() else {
        return Ok(None);
    };
    let chatgpt_id = f.chatgpt_account_id.clone().unwrap_or_default();
    let window = f.limited_until.unwrap_or(now);
    let mut report = RedeemReport {
        account_name: f.name.clone(),
        window_reset_at: window,
        credit_id: None,
        redeem_request_id: None,
        outcome: String::new(),
        detail: None,
        retry: matches!(decision, GuardDecision::Retry { .. }),
        dry_run,
    };
    let client = p.client(site).await?;
    let url = list_url(&site.usage_url);
    let (request_id, credit_id) = match decision {
        GuardDecision::Retry { redeem_request_id } => {
            let credit = guards
                .iter()
                .find(|g| g.guard.redeem_request_id == redeem_request_id)
                .and_then(|g| g.credit_id.clone());
            if dry_run {
                report.outcome = "would_redeem".into();
                report.redeem_request_id = Some(redeem_request_id);
                report.credit_id = credit;
                return Ok(Some(report));
            }
            (redeem_request_id, credit)
        }
        GuardDecision::Settled { .. } => return Ok(None),
        GuardDecision::Proceed => {
            // Others spend credits too: read the list right before consuming.
            let listed = client
                .api_call(&account, "GET", &url, &site.user_agent, "")
                .await;
            let list = match listed {
                Ok(a) if (200..300).contains(&a.status) => read_list(&a.body),
                Ok(a) => Err(format!("credit list answered HTTP {}", a.status)),
                Err(e) => Err(format!("credit list not read: {e}")),
            };
            let list = match list {
                Ok(l) => l,
                Err(e) => {
                    report.outcome = "list_failed".into();
                    report.detail = Some(e);
                    if !dry_run {
                        log_report(p, site, &report, by_hand).await;
                    }
                    return Ok(Some(report));
                }
            };
            let soonest = list.soonest_expiring(now);
            let credit = soonest.map(|c| c.id.clone());
            if !dry_run {
                let l = ListedCredits {
                    name: f.name.clone(),
                    listed_at: now,
                    available_count: list.available_count,
                    soonest_expires_at: soonest.and_then(|c| c.expires_at),
                };
                let sid = site.site_id.clone();
                p.store
                    .run(move |c| store::reset_credits::save_list(c, &sid, &l))
                    .await?;
            }
            report.credit_id = credit.clone();
            if list.available_count == 0 {
                // Nothing to spend: no guard, nothing sent.
                report.outcome = "no_credit".into();
                report.detail = Some("the credit list is empty".into());
                if !dry_run {
                    log_report(p, site, &report, by_hand).await;
                }
                return Ok(Some(report));
            }
            if dry_run {
                report.outcome = "would_redeem".into();
                return Ok(Some(report));
            }
            let request_id = uuid::Uuid::new_v4().to_string();
            // The guard is written BEFORE the call (docs/rules/cpa.md §10).
            let row = store::reset_credits::GuardRow {
                guard: RedeemGuard {
                    chatgpt_account_id: chatgpt_id.clone(),
                    window_reset_at: window,
                    redeem_request_id: request_id.clone(),
                    settled: None,
                },
                site_id: site.site_id.clone(),
                name: f.name.clone(),
                credit_id: credit.clone(),
                created_at: now,
                tries: 0,
                detail: None,
                settled_at: None,
            };
            p.store
                .run(move |c| store::reset_credits::insert_guard(c, &row))
                .await?;
            (request_id, credit)
        }
    };
    report.redeem_request_id = Some(request_id.clone());
    report.credit_id = credit_id.clone();
    let outcome = consume(
        p,
        site,
        &client,
        &account,
        &chatgpt_id,
        window,
        &request_id,
        credit_id.as_deref(),
    )
    .await?;
    report.outcome = outcome.as_str().to_string();
    report.detail = match &outcome {
        ConsumeOutcome::Ambiguous { reason } | ConsumeOutcome::Refused { reason, .. } => {
            Some(reason.clone())
        }
        ConsumeOutcome::Reset { windows_reset } => {
            windows_reset.map(|n| format!("{n} window(s) reset"))
        }
        _ => None,
    };
    log_report(p, site, &report, by_hand).await;
    if outcome.redeemed() {
        // CPA may still hold its own cooldown of the account: clear it where it can.
        let candidate = super::cooldowns::Candidate {
            name: account.name.clone(),
            auth_index: account.auth_index.clone(),
            trigger: super::cooldowns::Trigger::ReEnabled,
            episode: None,
        };
        let source = if by_hand {
            Source::Manual
        } else {
            Source::Auto
        };
        super::cooldowns::clear_stale(p, site, &client, &[candidate], vec![], source).await;
    }
    Ok(Some(report))
}

/// Why an account cannot be redeemed by hand (empty: it can).
fn by_hand_problems(f: &CandidateFacts) -> Vec<String> {
    let mut p = Vec::new();
    if f.chatgpt_account_id.is_none() {
        p.push(format!(
            "{} has no chatgpt_account_id: it cannot be guarded",
            f.name
        ));
    }
    if f.limited_until.is_none() {
        p.push(format!(
            "{} is not limited (weekly 100 % or limit_reached) at its last probe",
            f.name
        ));
    }
    if !f.enabled_or_standby {
        p.push(format!(
            "{} is disabled by a person or another tool",
            f.name
        ));
    }
    if f.never_act {
        p.push(format!("{} is observe-only or an exception", f.name));
    }
    p
}

/// One consume try under an open guard: counted, sent, and the guard settled or noted.
#[allow(clippy::too_many_arguments)]
async fn consume(
    p: &Patrol,
    site: &Site,
    client: &crate::cpa::CpaClient,
    account: &crate::core::account::Account,
    chatgpt_id: &str,
    window: DateTime<Utc>,
    request_id: &str,
    credit_id: Option<&str>,
) -> Result<ConsumeOutcome, JobError> {
    let id = chatgpt_id.to_string();
    p.store
        .run(move |c| store::reset_credits::count_try(c, &id, window))
        .await?;
    let mut body = serde_json::json!({ "redeem_request_id": request_id });
    if let Some(cid) = credit_id {
        body["credit_id"] = serde_json::Value::String(cid.to_string());
    }
    let url = format!("{}/consume", list_url(&site.usage_url));
    let answer = client
        .api_call(account, "POST", &url, &site.user_agent, &body.to_string())
        .await;
    let outcome = match answer {
        Ok(a) => classify_consume(a.status, &a.body),
        // Whatever CPA said, the call may have reached the upstream: retried with the same id.
        Err(e) => ConsumeOutcome::Ambiguous {
            reason: e.to_string(),
        },
    };
    let (id, at) = (chatgpt_id.to_string(), p.now());
    let o = outcome.clone();
    p.store
        .run(move |c| match &o {
            ConsumeOutcome::Ambiguous { reason } => {
                store::reset_credits::note_ambiguous(c, &id, window, reason)
            }
            ConsumeOutcome::Refused { reason, .. } => {
                store::reset_credits::settle_guard(c, &id, window, o.as_str(), Some(reason), at)
            }
            _ => store::reset_credits::settle_guard(c, &id, window, o.as_str(), None, at),
        })
        .await?;
    Ok(outcome)
}

/// The operation-log entry of a redemption (category `account`, `resetCredit`).
async fn log_report(p: &Patrol, site: &Site, r: &RedeemReport, by_hand: bool) {
    let level = match r.outcome.as_str() {
        "reset" | "already_redeemed" | "nothing_to_reset" | "no_credit" => Level::Info,
        "refused" => Level::Error,
        _ => Level::Warning,
    };
    let message = format!(
        "reset credit {}{}: {}{}{}",
        if r.retry { "retried " } else { "" },
        r.credit_id.as_deref().unwrap_or("(server's pick)"),
        r.outcome,
        r.detail
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default(),
        r.redeem_request_id
            .as_deref()
            .map(|id| format!("; redeem_request_id {id}"))
            .unwrap_or_default(),
    );
    let source = if by_hand {
        Source::Manual
    } else {
        Source::Auto
    };
    p.log(vec![
        NewLogEntry::info(
            &site.site_id,
            Category::Account,
            "resetCredit",
            source,
            message,
        )
        .at_level(level)
        .for_account(&r.account_name),
    ])
    .await;
}

/// What a round's table shows of the credits: per account by name, and the site line (`None`
/// when the site's mode is `off`).
#[derive(Debug, Clone, Default)]
pub struct RoundCredits {
    pub accounts: HashMap<String, AccountCreditsView>,
    pub site: Option<SiteCreditsView>,
}

/// [`site_credits`] of `site_id` for a round's table.
pub async fn round_credits(p: &Patrol, site_id: &str) -> Result<RoundCredits, JobError> {
    let site = p.site(site_id).await?;
    let (accounts, site) = site_credits(p, &site).await?;
    Ok(RoundCredits {
        accounts: accounts.into_iter().collect(),
        site,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::reset_credits::CreditHint;
    use chrono::{Duration, TimeZone};

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 26, 12, 0, 0).unwrap()
    }

    fn view(
        available: Option<u32>,
        applicable: Option<u32>,
        exp: Option<i64>,
    ) -> AccountCreditsView {
        AccountCreditsView {
            available,
            applicable,
            listed_at: exp.map(|_| t0()),
            soonest_expires_at: exp.map(|d| t0() + Duration::days(d)),
        }
    }

    #[test]
    fn a_limit_whose_reset_has_passed_limits_nothing() {
        let mut snap = crate::store::stored::tests::fixed_snapshot();
        assert_eq!(
            limited_until(&snap, t0()),
            None,
            "weekly 96 % is not limited"
        );
        snap.windows[1].used_percent = Some(100.0);
        let reset = snap.windows[1].reset_at.unwrap();
        assert_eq!(limited_until(&snap, t0()), Some(reset));
        assert_eq!(limited_until(&snap, reset), None, "the window has ended");
        snap.windows[1].used_percent = Some(50.0);
        snap.main_limit_reached = true;
        assert_eq!(
            limited_until(&snap, t0()),
            Some(reset),
            "the fullest main window"
        );
        assert_eq!(limited_until(&snap, reset + Duration::minutes(1)), None);
    }

    #[test]
    fn off_shows_nothing_and_unknown_is_not_zero() {
        let mut snap = crate::store::stored::tests::fixed_snapshot();
        snap.reset_credits = Some(CreditHint {
            available: Some(2),
            applicable: Some(1),
        });
        assert_eq!(account_view(ResetCreditsMode::Off, Some(&snap), None), None);
        let v = account_view(ResetCreditsMode::Observe, Some(&snap), None).unwrap();
        assert_eq!((v.available, v.applicable), (Some(2), Some(1)));
        snap.reset_credits = None;
        assert_eq!(
            account_view(ResetCreditsMode::Observe, Some(&snap), None),
            None
        );
    }

    #[test]
    fn the_site_sums_known_counts_and_takes_the_soonest_expiry() {
        let a = view(Some(2), Some(1), Some(9));
        let b = view(Some(1), Some(0), Some(4));
        let c = view(None, None, None);
        let s = site_summary(
            ResetCreditsMode::Redeem,
            [Some(&a), Some(&b), Some(&c), None],
        )
        .unwrap();
        assert_eq!((s.available, s.applicable, s.accounts_known), (3, 1, 2));
        assert_eq!(s.soonest_expires_at, Some(t0() + Duration::days(4)));
        assert_eq!(site_summary(ResetCreditsMode::Off, [Some(&a)]), None);
    }
}
