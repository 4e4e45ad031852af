//! Accounts as the patrol sees them: identity from the CPA listing, the last good quota
//! snapshot with the probe state beside it, and the persisted disable reason with its owner.
//! Pure data plus small derived window rules (exhausted windows, recovery time); whether an
//! account is usable is `core::availability`'s answer, not this module's. No I/O.
//! Rules: docs/rules/patrol.md §2, §3 (snapshot fields), §4.5 (resets), §5.1 (reasons), §6.3 (usable).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::quota::{Credits, QuotaWindow, UsageReport, WindowKind, is_free_like};
use super::reset_credits::CreditHint;
use super::thresholds::QuotaPolicy;

/// One account of a site, as read from CPA's auth-file listing (CPA v7.1.19 `GET /auth-files`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Account {
    /// Auth-file name (the identity used by every CPA endpoint).
    pub name: String,
    /// 16-hex `auth_index`; `None` when CPA did not send one (then the account cannot be probed).
    pub auth_index: Option<String>,
    pub email: Option<String>,
    pub label: Option<String>,
    /// Normalised plan from `id_token.plan_type` (refreshed by probes).
    pub plan_type: Option<String>,
    /// `id_token.chatgpt_account_id`, sent as `ChatGPT-Account-Id`.
    pub chatgpt_account_id: Option<String>,
    /// CPA's operator switch; CPA is the source of truth for it.
    pub disabled: bool,
    pub status: String,
    pub status_message: String,
    /// CPA `priority` (absent = 0).
    pub cpa_priority: i64,
    /// `success + failed` counters from the listing (`None` on CPAs older than v6.9.46).
    pub request_total: Option<u64>,
    /// Requests in the `recent_requests` buckets (sum of success + failed over the 20 buckets).
    pub recent_requests: Option<u64>,
    /// CPA's auth-level cooling-down flag (`unavailable`, docs/rules/cpa.md §2.1).
    #[serde(default)]
    pub unavailable: bool,
    /// CPA's auth-level retry time while cooling down (`next_retry_after`, CPA ≥ v6.8.31).
    #[serde(default)]
    pub next_retry_after: Option<DateTime<Utc>>,
    /// CPA's last successful token refresh (`last_refresh`); a refresh rewrites the auth file.
    #[serde(default)]
    pub last_refresh: Option<DateTime<Utc>>,
    /// What CPA saw on the account's last upstream response, when its listing carries the
    /// `quota` field (`core::passive::read`, docs/rules/cpa.md §9); `None` when the field is
    /// absent. Never stored with the account, never served as part of it.
    #[serde(skip)]
    pub passive: Option<PassiveEvidence>,
}

/// One account's passive evidence, read from its listing entry (`core::passive`).
#[derive(Debug, Clone, PartialEq)]
pub struct PassiveEvidence {
    /// When CPA saw the response (`observed_at`); `None` when absent or unreadable: such
    /// evidence has no age and is never used.
    pub observed_at: Option<DateTime<Utc>>,
    /// The windows, plan and limit flags the signals carry, as a probe's usage report would
    /// hold them (`None` when the signals name no window at all: "not seen", never 0 %).
    pub report: Option<UsageReport>,
}

impl Account {
    /// What a person reads: the e-mail when known, else the label, else the file name.
    pub fn display_name(&self) -> &str {
        self.email
            .as_deref()
            .filter(|s| !s.is_empty())
            .or(self.label.as_deref().filter(|s| !s.is_empty()))
            .unwrap_or(&self.name)
    }
}

/// Why an account is disabled (docs/rules/patrol.md §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum DisableReason {
    QuotaExhausted,
    OrderedStandby,
    ManualDisabled,
    ErrorDisabled,
}

impl DisableReason {
    /// The API / database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DisableReason::QuotaExhausted => "QuotaExhausted",
            DisableReason::OrderedStandby => "OrderedStandby",
            DisableReason::ManualDisabled => "ManualDisabled",
            DisableReason::ErrorDisabled => "ErrorDisabled",
        }
    }

    /// Parses the API / database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "QuotaExhausted" => Some(Self::QuotaExhausted),
            "OrderedStandby" => Some(Self::OrderedStandby),
            "ManualDisabled" => Some(Self::ManualDisabled),
            "ErrorDisabled" => Some(Self::ErrorDisabled),
            _ => None,
        }
    }
}

/// Who set a disable reason; only the owner may re-enable automatically (docs/rules/patrol.md §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ReasonOwner {
    Patrol,
    Routing,
    Manual,
    External,
}

impl ReasonOwner {
    /// The API / database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonOwner::Patrol => "patrol",
            ReasonOwner::Routing => "routing",
            ReasonOwner::Manual => "manual",
            ReasonOwner::External => "external",
        }
    }

    /// Parses the API / database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "patrol" => Some(Self::Patrol),
            "routing" => Some(Self::Routing),
            "manual" => Some(Self::Manual),
            "external" => Some(Self::External),
            _ => None,
        }
    }
}

/// A persisted disable reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisableRecord {
    pub reason: DisableReason,
    pub owner: ReasonOwner,
    pub set_at: DateTime<Utc>,
}

/// The "a person changed the reason during the round" guard (docs/rules/patrol.md §5.1: a manual
/// action's reason wins): whether the stored disable reason of an account is no longer the
/// one a decision was made on. `read` = the record read when the decision's inputs were
/// loaded (a round: at its start; routing: when it loaded the pool), `now` = the record read
/// just before acting or writing. Compared: reason and owner (`None` = no record); `set_at`
/// is not, so re-writing the same reason by the same owner is no change. When it answers
/// `true` the patrol neither acts on the account nor writes its reason this round.
pub fn reason_changed_since(read: Option<&DisableRecord>, now: Option<&DisableRecord>) -> bool {
    read.map(|r| (r.reason, r.owner)) != now.map(|r| (r.reason, r.owner))
}

/// The disable reason an account shows in the API (`GET /api/accounts`, `GET /api/quotas`,
/// the published pool snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShownReason {
    pub reason: DisableReason,
    pub owner: ReasonOwner,
    /// When the reason was recorded; `None` for a provisional one.
    pub set_at: Option<DateTime<Utc>>,
    /// Derived, not stored: the account is disabled in CPA and we have no record of why, so it
    /// is treated as ManualDisabled/external until its first successful probe classifies it.
    pub provisional: bool,
}

/// What reason an account shows (docs/rules/patrol.md §5.1): the stored record when there is one; a
/// disabled account without a record of ours shows ManualDisabled, owner external,
/// provisional (that is how the decision table and routing already treat it); an enabled
/// account without a record shows none. Derived at read time: nothing is persisted until the
/// first successful probe classifies the account.
pub fn shown_reason(disabled: bool, record: Option<&DisableRecord>) -> Option<ShownReason> {
    match record {
        Some(r) => Some(ShownReason {
            reason: r.reason,
            owner: r.owner,
            set_at: Some(r.set_at),
            provisional: false,
        }),
        None if disabled => Some(ShownReason {
            reason: DisableReason::ManualDisabled,
            owner: ReasonOwner::External,
            set_at: None,
            provisional: true,
        }),
        None => None,
    }
}

/// The last good quota reading of an account (docs/rules/patrol.md §3 "Snapshot fields").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaSnapshot {
    pub plan_type: Option<String>,
    pub windows: Vec<QuotaWindow>,
    pub credits: Option<Credits>,
    /// Main group said `limit_reached` / `allowed == false`.
    pub main_limit_reached: bool,
    /// Upstream status of the probe that produced it (200 for a usage payload).
    pub status_code: u16,
    /// Every evaluation (probe, cache reuse or skip).
    pub checked_at: DateTime<Utc>,
    /// Last real probe that produced this snapshot.
    pub refreshed_at: DateTime<Utc>,
    pub from_cache: bool,
    pub cache_reason: Option<String>,
    /// Banked reset credits the usage body reported (docs/rules/cpa.md §10); `None` = unknown
    /// (older payloads, snapshots stored before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_credits: Option<CreditHint>,
}

impl QuotaSnapshot {
    /// A snapshot from a fresh usage report.
    pub fn from_report(report: &UsageReport, at: DateTime<Utc>) -> Self {
        Self {
            plan_type: report.plan_type.clone(),
            windows: report.windows.clone(),
            credits: report.credits.clone(),
            main_limit_reached: report.main_limit_reached,
            status_code: 200,
            checked_at: at,
            refreshed_at: at,
            from_cache: false,
            cache_reason: None,
            reset_credits: report.reset_credits,
        }
    }

    fn main(&self, kind: WindowKind) -> Option<&QuotaWindow> {
        self.windows
            .iter()
            .find(|w| w.group == super::quota::MAIN_GROUP && w.kind == kind)
    }

    /// Main weekly window.
    pub fn weekly(&self) -> Option<&QuotaWindow> {
        self.main(WindowKind::Weekly)
    }

    /// Main five-hour window.
    pub fn five_hour(&self) -> Option<&QuotaWindow> {
        self.main(WindowKind::FiveHour)
    }

    /// The long window decisions use: weekly, or monthly for monthly-only accounts.
    pub fn long_window(&self) -> Option<&QuotaWindow> {
        self.weekly().or_else(|| self.main(WindowKind::Monthly))
    }

    /// Main weekly (or monthly) used percent.
    pub fn weekly_used(&self) -> Option<f64> {
        self.long_window().and_then(|w| w.used_percent)
    }

    /// Main five-hour used percent.
    pub fn five_hour_used(&self) -> Option<f64> {
        self.five_hour().and_then(|w| w.used_percent)
    }

    /// Whether the account is free-like (judged on the long window only).
    pub fn is_free_like(&self) -> bool {
        is_free_like(self.plan_type.as_deref())
    }

    /// The threshold a main window is judged against under `policy`, or `None` when only 100 %
    /// counts for it (see [`QuotaPolicy::deciding_threshold`]).
    pub fn threshold_for(&self, w: &QuotaWindow, policy: &QuotaPolicy) -> Option<u8> {
        policy.deciding_threshold(w.kind, self.is_free_like())
    }

    /// Main windows that exhaust the account, not stale (a window at ≥ 100 % with a past
    /// reset is *stale*, docs/rules/patrol.md §3): each window at or over its deciding threshold under
    /// `policy` (weekly / monthly thresholds, the five-hour one per `fiveHourRule`; docs/rules/patrol.md §9
    /// item 1), plus any other main window that reached 100 % (docs/rules/patrol.md §5 rule 3 "any main
    /// window reached 100"; not the five-hour window under `fiveHourRule = never`).
    pub fn exhausted_windows(&self, policy: &QuotaPolicy, now: DateTime<Utc>) -> Vec<&QuotaWindow> {
        self.windows
            .iter()
            .filter(|w| w.group == super::quota::MAIN_GROUP)
            .filter(|w| {
                let used = w.used_percent.unwrap_or(0.0);
                let over = self
                    .threshold_for(w, policy)
                    .is_some_and(|t| used >= f64::from(t));
                over || (used >= 100.0 && policy.counts_at_100(w.kind))
            })
            .filter(|w| !is_stale(w, now))
            .collect()
    }

    /// A main window reports ≥ 100 % but its reset time already passed: no evidence either way.
    pub fn is_stale(&self, now: DateTime<Utc>) -> bool {
        self.windows
            .iter()
            .filter(|w| w.group == super::quota::MAIN_GROUP)
            .any(|w| is_stale(w, now))
    }

    /// Exhausted by the plan rules (rules 3 and 4 of docs/rules/patrol.md §5) under `policy`: a window at
    /// or over its deciding threshold or at 100 % ([`Self::exhausted_windows`]), or the main
    /// group reports its limit reached (unless stale). Core-only:
    /// everything outside reads [`super::availability::snapshot_availability`].
    pub(crate) fn is_exhausted(&self, policy: &QuotaPolicy, now: DateTime<Utc>) -> bool {
        if !self.exhausted_windows(policy, now).is_empty() {
            return true;
        }
        self.main_limit_reached && !self.is_stale(now)
    }

    /// When the account can be usable again: the latest reset among its exhausted windows
    /// (a five-hour reset alone never counts while the weekly window is over; docs/rules/patrol.md §4.5).
    /// `None` when not exhausted or when an exhausted window has no known reset.
    pub fn recovery_at(&self, policy: &QuotaPolicy, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let exhausted = self.exhausted_windows(policy, now);
        if exhausted.is_empty() {
            // limit_reached without a window over threshold: the latest main reset.
            if self.main_limit_reached {
                return self
                    .windows
                    .iter()
                    .filter(|w| w.group == super::quota::MAIN_GROUP)
                    .filter_map(|w| w.reset_at)
                    .max();
            }
            return None;
        }
        let mut latest = None;
        for w in exhausted {
            let at = w.reset_at?;
            latest = Some(latest.map_or(at, |l: DateTime<Utc>| l.max(at)));
        }
        latest
    }

    /// Whether some main window's reset time has been reached (a reason to probe again).
    pub fn reset_reached(&self, now: DateTime<Utc>) -> bool {
        self.windows
            .iter()
            .filter(|w| w.group == super::quota::MAIN_GROUP)
            .any(|w| w.reset_at.is_some_and(|r| r <= now))
    }
}

fn is_stale(w: &QuotaWindow, now: DateTime<Utc>) -> bool {
    w.used_percent.is_some_and(|u| u >= 100.0) && w.reset_at.is_some_and(|r| r <= now)
}

/// Probe bookkeeping kept beside the last good snapshot (docs/rules/patrol.md §3: a probe error never
/// changes the last good snapshot).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeState {
    pub snapshot: Option<QuotaSnapshot>,
    /// Status of the last probe attempt (upstream status; 0 for transport errors).
    pub last_status_code: Option<u16>,
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    /// Failed probes in a row (any error, 401 included).
    pub consecutive_failures: u32,
    /// 401 answers in a row (docs/rules/patrol.md §5 rules 1–2).
    pub consecutive_invalid: u32,
    /// Last 402: `Some(true)` deactivated, `Some(false)` plain payment problem; cleared by a success.
    pub payment_problem: Option<bool>,
    /// Last real probe attempt, whatever its result.
    pub last_probe_at: Option<DateTime<Utc>>,
    /// `success + failed` of the listing at the last real probe (activity evidence, §4.4).
    pub request_total_at_probe: Option<u64>,
    /// Do not probe again before this instant (failure back-off, stale re-check, no auth_index).
    pub retry_not_before: Option<DateTime<Utc>>,
    /// Last time this account's decision was evaluated.
    pub checked_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_reason_changed_since_it_was_read_when_its_reason_or_owner_differs() {
        let at = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        let rec = |reason, owner| DisableRecord {
            reason,
            owner,
            set_at: at,
        };
        let quota = rec(DisableReason::QuotaExhausted, ReasonOwner::Patrol);
        let manual = rec(DisableReason::ManualDisabled, ReasonOwner::Manual);
        let rewritten = DisableRecord {
            set_at: at + chrono::Duration::minutes(5),
            ..quota.clone()
        };
        assert!(!reason_changed_since(None, None));
        assert!(!reason_changed_since(Some(&quota), Some(&rewritten)));
        assert!(reason_changed_since(Some(&quota), Some(&manual)));
        assert!(reason_changed_since(None, Some(&manual)));
        assert!(reason_changed_since(Some(&quota), None));
        // Same reason, another owner: a person took the account over.
        let taken = rec(DisableReason::QuotaExhausted, ReasonOwner::Manual);
        assert!(reason_changed_since(Some(&quota), Some(&taken)));
    }

    #[test]
    fn a_disabled_account_without_a_record_shows_a_provisional_external_manual_disable() {
        let shown = shown_reason(true, None).unwrap();
        assert_eq!(shown.reason, DisableReason::ManualDisabled);
        assert_eq!(shown.owner, ReasonOwner::External);
        assert!(shown.provisional);
        assert_eq!(shown.set_at, None);
        assert_eq!(shown_reason(false, None), None);
        let at = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let rec = DisableRecord {
            reason: DisableReason::QuotaExhausted,
            owner: ReasonOwner::Patrol,
            set_at: at,
        };
        let shown = shown_reason(true, Some(&rec)).unwrap();
        assert_eq!(
            (shown.reason, shown.owner, shown.set_at, shown.provisional),
            (
                DisableReason::QuotaExhausted,
                ReasonOwner::Patrol,
                Some(at),
                false
            )
        );
    }
}
