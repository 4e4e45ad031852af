//! Banked rate-limit reset credits of Codex accounts (docs/rules/cpa.md §10): reading the hint
//! in `wham/usage`, the credit list and the consume answer; which account of a site gets the one
//! credit when the site runs dry; and the guard that keeps a credit from being spent twice in one
//! window. Pure rules: the calls (through CPA's `api-call`) and the persisted guard rows belong
//! to the daemon.
//!
//! Never twice: a guard per `chatgpt_account_id` and window (its `reset_at`) is written before
//! the consume call with its `redeem_request_id`; an ambiguous answer is retried with the same
//! id, never a new one; once the window's guard is settled, that account is not redeemed again
//! in that window even when a re-probe still reads 100 % (the reset can take hours to show).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codex_json;

/// `rate_limit_reset_credits` of a `wham/usage` body. Absent on older payloads: unknown, not 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CreditHint {
    /// Credits the account holds (`available_count`).
    pub available: Option<u32>,
    /// Credits that would reset a window right now (`applicable_available_count`; 0 when
    /// nothing is limited).
    pub applicable: Option<u32>,
}

/// The hint of a usage body (its JSON object); `None` when the body has no
/// `rate_limit_reset_credits` object.
pub fn read_hint_object(usage: &serde_json::Map<String, Value>) -> Option<CreditHint> {
    let obj = usage
        .get("rate_limit_reset_credits")
        .or_else(|| usage.get("rateLimitResetCredits"))?
        .as_object()?;
    let count = |names: [&str; 2]| {
        names
            .iter()
            .find_map(|n| obj.get(*n))
            .and_then(codex_json::rounded_integer)
            .and_then(|n| u32::try_from(n).ok())
    };
    Some(CreditHint {
        available: count(["available_count", "availableCount"]),
        applicable: count(["applicable_available_count", "applicableAvailableCount"]),
    })
}

/// A credit's `status` (an open enum upstream).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CreditStatus {
    Available,
    Redeeming,
    Redeemed,
    /// Any other value, kept as sent.
    Other(String),
}

/// One banked credit of the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Credit {
    /// `RateLimitResetCredit_…`.
    pub id: String,
    pub status: CreditStatus,
    pub granted_at: Option<DateTime<Utc>>,
    /// When it lapses (about 30 days after `granted_at`); `None` when not sent.
    pub expires_at: Option<DateTime<Utc>>,
}

/// `GET …/wham/rate-limit-reset-credits`: `available_count` is authoritative, `credits` may be
/// capped or `null`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreditList {
    pub available_count: u32,
    pub credits: Vec<Credit>,
}

impl CreditList {
    /// The available, unexpired credit that lapses first (no known expiry sorts last); `None`
    /// when the list names none although `available_count` may be positive (the server then
    /// picks one: consume without a `credit_id`).
    pub fn soonest_expiring(&self, now: DateTime<Utc>) -> Option<&Credit> {
        self.credits
            .iter()
            .filter(|c| c.status == CreditStatus::Available)
            .filter(|c| c.expires_at.is_none_or(|at| at > now))
            .min_by_key(|c| (c.expires_at.is_none(), c.expires_at))
    }
}

/// Reads the list body. `Err` says why it is not one (not JSON, no `available_count`).
pub fn read_list(body: &str) -> Result<CreditList, String> {
    let value: Value =
        serde_json::from_str(body).map_err(|_| "credit list is not JSON".to_string())?;
    let available_count = value
        .get("available_count")
        .and_then(codex_json::rounded_integer)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| "credit list has no available_count".to_string())?;
    let credits = value
        .get("credits")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(read_credit).collect())
        .unwrap_or_default();
    Ok(CreditList {
        available_count,
        credits,
    })
}

fn read_credit(item: &Value) -> Option<Credit> {
    let id = item.get("id")?.as_str()?.trim();
    if id.is_empty() {
        return None;
    }
    let status = match item.get("status").and_then(Value::as_str).unwrap_or("") {
        "available" => CreditStatus::Available,
        "redeeming" => CreditStatus::Redeeming,
        "redeemed" => CreditStatus::Redeemed,
        other => CreditStatus::Other(other.to_owned()),
    };
    let time = |name: &str| item.get(name).and_then(codex_json::instant);
    Some(Credit {
        id: id.to_owned(),
        status,
        granted_at: time("granted_at"),
        expires_at: time("expires_at"),
    })
}

/// What a consume call came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum ConsumeOutcome {
    /// `reset`: the windows were reset (`windows_reset` as sent).
    Reset { windows_reset: Option<u32> },
    /// `already_redeemed`: this `redeem_request_id` completed before (success).
    AlreadyRedeemed,
    /// `nothing_to_reset`: no window was limited; the credit is kept.
    NothingToReset,
    /// `no_credit`: none left (others spend them too).
    NoCredit,
    /// The call may or may not have taken effect (CPA 502 `request failed`, a timeout, a 5xx):
    /// retry with the same `redeem_request_id`.
    Ambiguous { reason: String },
    /// Refused (401/403, 409, 429, another 4xx) or an unknown `code`: not success, nothing to
    /// retry blindly.
    Refused { status: u16, reason: String },
}

impl ConsumeOutcome {
    /// Whether the credit is spent for this window (`reset` or `already_redeemed`).
    pub fn redeemed(&self) -> bool {
        matches!(self, Self::Reset { .. } | Self::AlreadyRedeemed)
    }

    /// Whether the call must be retried with the same request id.
    pub fn ambiguous(&self) -> bool {
        matches!(self, Self::Ambiguous { .. })
    }

    /// Stable name for logs and metrics: `reset`, `already_redeemed`, `nothing_to_reset`,
    /// `no_credit`, `ambiguous`, `refused`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Reset { .. } => "reset",
            Self::AlreadyRedeemed => "already_redeemed",
            Self::NothingToReset => "nothing_to_reset",
            Self::NoCredit => "no_credit",
            Self::Ambiguous { .. } => "ambiguous",
            Self::Refused { .. } => "refused",
        }
    }
}

/// Classifies the upstream answer of `POST …/rate-limit-reset-credits/consume` (`status`, body
/// as relayed). `status` 0 stands for no answer (timeout, transport failure): ambiguous.
pub fn classify_consume(status: u16, body: &str) -> ConsumeOutcome {
    let ambiguous = |reason: String| ConsumeOutcome::Ambiguous { reason };
    if status == 0 {
        return ambiguous("no answer".into());
    }
    if status >= 500 {
        return ambiguous(format!("HTTP {status}"));
    }
    if !(200..300).contains(&status) {
        return ConsumeOutcome::Refused {
            status,
            reason: format!("HTTP {status}"),
        };
    }
    let code = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("code").and_then(Value::as_str).map(str::to_owned));
    match code.as_deref() {
        Some("reset") => ConsumeOutcome::Reset {
            windows_reset: serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|v| v.get("windows_reset").and_then(codex_json::rounded_integer))
                .and_then(|n| u32::try_from(n).ok()),
        },
        Some("already_redeemed") => ConsumeOutcome::AlreadyRedeemed,
        Some("nothing_to_reset") => ConsumeOutcome::NothingToReset,
        Some("no_credit") => ConsumeOutcome::NoCredit,
        Some(other) => ConsumeOutcome::Refused {
            status,
            reason: format!("unknown code {other:?}"),
        },
        // A 2xx without a readable code: the consume may have happened.
        None => ambiguous(format!("HTTP {status} without a code")),
    }
}

/// What the patrol did with a reset credit (or, in a dry run, would do): the round's
/// `resetCredit`, the operation-log entry and the `reset_credit_redeemed` alert.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RedeemReport {
    pub account_name: String,
    /// The reset of the limited window the credit was for.
    pub window_reset_at: DateTime<Utc>,
    /// The credit named in the consume call (`None`: the server picks one).
    pub credit_id: Option<String>,
    /// The idempotency key of the attempt (`None` in a dry run or before a guard was written).
    pub redeem_request_id: Option<String>,
    /// `reset`, `already_redeemed`, `nothing_to_reset`, `no_credit`, `ambiguous`, `refused`,
    /// `list_failed` (the list could not be read: nothing was sent), or `would_redeem` (dry run).
    pub outcome: String,
    /// Why, in words (an error, the answer's status).
    pub detail: Option<String>,
    /// This call retried an attempt whose answer was unknown (same `redeem_request_id`).
    pub retry: bool,
    pub dry_run: bool,
}

/// A persisted guard: one redemption attempt of one account in one window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RedeemGuard {
    pub chatgpt_account_id: String,
    /// The limited window's reset the credit was meant to cut short.
    pub window_reset_at: DateTime<Utc>,
    /// The idempotency key sent with every try of this attempt.
    pub redeem_request_id: String,
    /// `None` while the answer is unknown (written before the call, or ambiguous so far).
    pub settled: Option<String>,
}

/// What the guards allow for an account and window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardDecision {
    /// No attempt in this window: write a new guard (with a new request id), then call.
    Proceed,
    /// An attempt whose answer is unknown (crash or ambiguous answer): call again with this id.
    Retry { redeem_request_id: String },
    /// Settled in this window (redeemed, or a normal outcome): do not call again.
    Settled { outcome: String },
}

/// The guard rule for `chatgpt_account_id` limited until `window_reset_at`.
pub fn guard_decision(
    guards: &[RedeemGuard],
    chatgpt_account_id: &str,
    window_reset_at: DateTime<Utc>,
) -> GuardDecision {
    let Some(g) = guards.iter().find(|g| {
        g.chatgpt_account_id == chatgpt_account_id && g.window_reset_at == window_reset_at
    }) else {
        return GuardDecision::Proceed;
    };
    match &g.settled {
        None => GuardDecision::Retry {
            redeem_request_id: g.redeem_request_id.clone(),
        },
        Some(outcome) => GuardDecision::Settled {
            outcome: outcome.clone(),
        },
    }
}

/// One account as the candidate rule sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateFacts {
    pub name: String,
    /// `None`: the account cannot be guarded, so it is never a candidate.
    pub chatgpt_account_id: Option<String>,
    /// Enabled in CPA, or disabled by the patrol and waiting (standby): a person's disable
    /// rules it out.
    pub enabled_or_standby: bool,
    /// The patrol saw it limited: weekly (or monthly) at 100 % or `limit_reached`, with the
    /// window's reset.
    pub limited_until: Option<DateTime<Utc>>,
    /// `applicable_available_count` of its last probe.
    pub applicable: Option<u32>,
    /// Observe only (`neverAct`).
    pub never_act: bool,
    /// The soonest expiry among its available credits, when listed.
    pub soonest_expiry: Option<DateTime<Utc>>,
}

/// Whether a site needs a redemption: fewer usable accounts than `min_active` (at least one).
pub fn site_needs_credit(usable: usize, min_active: usize) -> bool {
    usable < min_active.max(1)
}

/// The best candidate: limited, with an applicable credit, not observe-only, guardable, allowed
/// by its guard. An attempt whose answer is still unknown comes first (its retry, with the same
/// id, settles it before any other credit is spent); then the soonest-expiring credit across the
/// site (unknown expiry last), then by name. Returns the candidate and what its guard says
/// (`Proceed` or `Retry`).
pub fn pick_candidate<'a>(
    accounts: &'a [CandidateFacts],
    guards: &[RedeemGuard],
) -> Option<(&'a CandidateFacts, GuardDecision)> {
    accounts
        .iter()
        .filter(|a| a.enabled_or_standby && !a.never_act)
        .filter(|a| a.applicable.is_some_and(|n| n > 0))
        .filter_map(|a| {
            let id = a.chatgpt_account_id.as_deref()?;
            let until = a.limited_until?;
            match guard_decision(guards, id, until) {
                GuardDecision::Settled { .. } => None,
                d => Some((a, d)),
            }
        })
        .min_by_key(|(a, d)| {
            (
                *d == GuardDecision::Proceed,
                a.soonest_expiry.is_none(),
                a.soonest_expiry,
                a.name.clone(),
            )
        })
}

/// Guards whose answer is unknown (written before a call that never answered, or answered
/// ambiguously): the daemon retries each with its own request id before it starts a new attempt
/// anywhere in the site, so a consume that did take effect is never followed by another.
pub fn unsettled(guards: &[RedeemGuard]) -> impl Iterator<Item = &RedeemGuard> {
    guards.iter().filter(|g| g.settled.is_none())
}

#[cfg(test)]
#[path = "reset_credits_tests.rs"]
mod tests;
