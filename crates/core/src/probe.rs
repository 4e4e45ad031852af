//! One probe's consequences for one account, without I/O: how a reply folds into the account's
//! probe state ([`apply_probe`]), which [`Evidence`] the decision table sees ([`evidence_for`]),
//! why an account was not evaluated and when it will be probed for real next.
//! The round (`jobs::inspect`) probes and persists; it must not re-implement these rules.

use chrono::{DateTime, Utc};

use super::account::{Account, ProbeState, QuotaSnapshot};
use super::freshness::{self, ProbeNeed, STALE_RECHECK, failure_backoff};
use super::inspect::Evidence;
use super::quota::ProbeOutcome;
use super::site::Site;

/// What one probe produced, as the core sees it: the upstream's answer relayed by CPA, or a
/// failed call to CPA's `api-call` (transport error, timeout, management 4xx/5xx).
#[derive(Debug, Clone, Copy)]
pub enum ProbeReply<'a> {
    /// The upstream answered (classified by `core::quota::classify_probe`).
    Answer(&'a ProbeOutcome),
    /// The CPA call failed; `status` = CPA's HTTP status when it sent one, `message` = the
    /// adapter error's display text (never carries the management key).
    CallFailed {
        status: Option<u16>,
        message: &'a str,
    },
}

/// One real probe, for the snapshot history (`store::accounts::append_history`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRecord {
    /// Account (auth-file) name.
    pub account: String,
    pub at: DateTime<Utc>,
    /// Upstream status (200 for a usage answer), CPA's status on a failed call, 0 when none.
    pub status_code: u16,
    /// `None` on success; else the text the decision record and the log show.
    pub error: Option<String>,
}

/// One account of a round as the pure rules see it: the listing, its probe state (already
/// folded with this round's probe, if any), the freshness plan and the probe's reply.
#[derive(Debug, Clone, Copy)]
pub struct ProbeView<'a> {
    pub account: &'a Account,
    pub state: &'a ProbeState,
    pub need: &'a ProbeNeed,
    /// `None` when the account was not probed this round.
    pub reply: Option<ProbeReply<'a>>,
}

/// Folds a probe reply into the account's state (docs/rules/patrol.md §4.2–§4.4): a usage answer stores
/// the snapshot, resets streaks and errors (a stale snapshot re-checks after
/// [`STALE_RECHECK`]); any other reply keeps the last snapshot, counts a failure and backs off
/// ([`failure_backoff`]) — except 401/402, which are answers (no back-off, the confirmation
/// comes with the next round). A 401 extends the invalid streak, anything else breaks it.
/// `jitter` (0.0..=1.0, from the injected random source) shortens the back-off. Returns the history record; its `error` is the probe's error text (`None` on success).
pub fn apply_probe(
    account: &mut Account,
    st: &mut ProbeState,
    reply: ProbeReply<'_>,
    now: DateTime<Utc>,
    jitter: f64,
) -> ProbeRecord {
    st.last_probe_at = Some(now);
    let record = |status_code, error| ProbeRecord {
        account: account.name.clone(),
        at: now,
        status_code,
        error,
    };
    let outcome = match reply {
        ProbeReply::Answer(ProbeOutcome::Usage(report)) => {
            let snap = QuotaSnapshot::from_report(report, now);
            if let Some(plan) = &report.plan_type {
                account.plan_type = Some(plan.clone());
            }
            st.retry_not_before = snap.is_stale(now).then(|| now + STALE_RECHECK);
            st.snapshot = Some(snap);
            st.consecutive_failures = 0;
            st.consecutive_invalid = 0;
            st.payment_problem = None;
            st.last_error = None;
            st.last_error_at = None;
            st.last_status_code = Some(200);
            st.request_total_at_probe = account.request_total;
            return record(200, None);
        }
        ProbeReply::Answer(o) => o,
        ProbeReply::CallFailed { status, message } => {
            let error = format!("CPA call failed: {message}");
            note_failure(st, status.unwrap_or(0), &error, false, now, jitter);
            return record(status.unwrap_or(0), Some(error));
        }
    };
    let error = answer_error(st, outcome);
    let answered = matches!(
        outcome,
        ProbeOutcome::Invalid { .. } | ProbeOutcome::Payment { .. }
    );
    note_failure(st, outcome.status_code(), &error, answered, now, jitter);
    record(outcome.status_code(), Some(error))
}

/// The error text of a non-usage answer; updates the 401 streak and the payment problem.
fn answer_error(st: &mut ProbeState, outcome: &ProbeOutcome) -> String {
    match outcome {
        ProbeOutcome::Invalid { message } => {
            st.consecutive_invalid += 1;
            return format!("401 invalid credential: {message}");
        }
        ProbeOutcome::Payment {
            deactivated,
            message,
        } => {
            st.payment_problem = Some(*deactivated);
            st.consecutive_invalid = 0;
            return format!("402 payment problem: {message}");
        }
        _ => {}
    }
    // The upstream answered without a 401: a 401 streak is broken.
    st.consecutive_invalid = 0;
    match outcome {
        ProbeOutcome::Inconclusive(_) => {
            "2xx answer without a main rate-limit window: inconclusive, last snapshot kept".into()
        }
        // The parser's message already says "blocked by an edge HTML page (HTTP 403 …)".
        ProbeOutcome::Blocked { message } => message.clone(),
        ProbeOutcome::RateLimited { message } => format!("429 rate limited: {message}"),
        ProbeOutcome::HttpError { status, message } => format!("upstream {status}: {message}"),
        ProbeOutcome::Unparsable { status, message } => {
            format!("unparsable {status} answer: {message}")
        }
        _ => "unexpected outcome".to_string(),
    }
}

/// Records a failed probe in the state; `answered` (401/402) means no back-off.
fn note_failure(
    st: &mut ProbeState,
    status: u16,
    error: &str,
    answered: bool,
    now: DateTime<Utc>,
    jitter: f64,
) {
    st.consecutive_failures += 1;
    st.last_status_code = Some(status);
    st.last_error = Some(error.to_string());
    st.last_error_at = Some(now);
    st.retry_not_before = if answered {
        None
    } else {
        Some(now + failure_backoff(st.consecutive_failures, jitter))
    };
}

/// The evidence an account provides for `core::inspect::decide` (docs/rules/patrol.md §5): a 401/402
/// answer as such, a failed probe as its `error`, a fresh or reused snapshot, and otherwise
/// "not evaluated" with the plan's reason. A disabled account whose skip is
/// [`ProbeNeed::Known`] (free-like, exhausted until its reset) still re-states its snapshot.
pub fn evidence_for<'a>(v: &ProbeView<'a>, error: Option<&'a str>) -> Evidence<'a> {
    let snapshot_or = |none: Evidence<'a>| match &v.state.snapshot {
        Some(s) => Evidence::Snapshot(s),
        None => none,
    };
    match (v.reply, v.need) {
        (Some(ProbeReply::Answer(ProbeOutcome::Invalid { .. })), _) => Evidence::Invalid {
            streak: v.state.consecutive_invalid,
        },
        (Some(ProbeReply::Answer(ProbeOutcome::Payment { deactivated, .. })), _) => {
            Evidence::Payment {
                deactivated: *deactivated,
            }
        }
        (Some(_), _) if error.is_some() => Evidence::Error {
            message: error.unwrap_or_default(),
        },
        (Some(_), _) => snapshot_or(Evidence::Error {
            message: "no snapshot",
        }),
        (None, ProbeNeed::Reuse(_)) => snapshot_or(Evidence::NotEvaluated { why: "no snapshot" }),
        (None, ProbeNeed::Known(why)) => match &v.state.snapshot {
            Some(s) if v.account.disabled => Evidence::Snapshot(s),
            _ => Evidence::NotEvaluated { why },
        },
        (None, ProbeNeed::Skip(why)) => Evidence::NotEvaluated { why },
        (None, ProbeNeed::Probe(_)) => Evidence::NotEvaluated {
            why: "the probe did not run",
        },
    }
}

/// Why an account was not evaluated this round (no auth_index, back-off, probe did not run),
/// e.g. `"not evaluated: no snapshot"`, for the decision's `error` (api.md decision record);
/// `None` when it was evaluated or its probe failed (that error is reported as such).
pub fn not_evaluated_cause(v: &ProbeView<'_>) -> Option<String> {
    match evidence_for(v, None) {
        Evidence::NotEvaluated { why } => Some(format!("not evaluated: {why}")),
        _ => None,
    }
}

/// When the account will be probed for real next (`None` = at the next round), for the
/// decision's `nextRealRefreshAt`: a failing account (a 401 awaiting confirmation included)
/// shows its back-off end; one parked after a confirmed 401 or a 402, or a healthy one, the
/// end of its real-refresh age (`core::freshness::next_real_refresh_at`, docs/rules/patrol.md §4.3).
pub fn next_probe_hint(site: &Site, account: &Account, st: &ProbeState) -> Option<DateTime<Utc>> {
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

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone};

    use super::*;
    use crate::quota::classify_probe;

    const PLUS: &str = include_str!("../../../fixtures/upstream/wham-usage__plus.json");

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
    }

    fn account() -> Account {
        Account {
            name: "a.json".into(),
            auth_index: Some("0123456789abcdef".into()),
            request_total: Some(7),
            ..Default::default()
        }
    }

    fn failing_state() -> ProbeState {
        ProbeState {
            consecutive_failures: 2,
            consecutive_invalid: 1,
            last_error: Some("old".into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_usage_answer_stores_the_snapshot_and_clears_every_failure() {
        let (mut a, mut st) = (account(), failing_state());
        let usage = classify_probe(200, PLUS, now());
        let rec = apply_probe(&mut a, &mut st, ProbeReply::Answer(&usage), now(), 0.0);
        assert_eq!(rec.error, None);
        assert_eq!(rec.status_code, 200);
        assert!(st.snapshot.is_some());
        assert_eq!((st.consecutive_failures, st.consecutive_invalid), (0, 0));
        assert_eq!(st.last_error, None);
        assert_eq!(st.request_total_at_probe, Some(7));
        assert_eq!(a.plan_type.as_deref(), Some("plus"));
    }

    #[test]
    fn a_401_extends_the_streak_without_back_off() {
        let (mut a, mut st) = (account(), failing_state());
        let invalid = ProbeOutcome::Invalid {
            message: "revoked".into(),
        };
        let rec = apply_probe(&mut a, &mut st, ProbeReply::Answer(&invalid), now(), 0.0);
        assert_eq!(rec.status_code, 401);
        assert_eq!(
            rec.error.as_deref(),
            Some("401 invalid credential: revoked")
        );
        assert_eq!((st.consecutive_invalid, st.consecutive_failures), (2, 3));
        assert_eq!(st.retry_not_before, None);
        let v = ProbeView {
            account: &a,
            state: &st,
            need: &ProbeNeed::Probe("forced"),
            reply: Some(ProbeReply::Answer(&invalid)),
        };
        assert_eq!(
            evidence_for(&v, rec.error.as_deref()),
            Evidence::Invalid { streak: 2 }
        );
    }

    #[test]
    fn a_failed_cpa_call_backs_off_breaks_nothing_and_is_an_error() {
        let (mut a, mut st) = (account(), failing_state());
        let reply = ProbeReply::CallFailed {
            status: Some(502),
            message: "bad gateway",
        };
        let rec = apply_probe(&mut a, &mut st, reply, now(), 0.0);
        assert_eq!(rec.status_code, 502);
        assert_eq!(rec.error.as_deref(), Some("CPA call failed: bad gateway"));
        // A CPA failure says nothing about the credential: the 401 streak stands.
        assert_eq!(st.consecutive_invalid, 1);
        assert_eq!(st.retry_not_before, Some(now() + failure_backoff(3, 0.0)));
        let need = ProbeNeed::Probe("forced");
        let v = ProbeView {
            account: &a,
            state: &st,
            need: &need,
            reply: Some(reply),
        };
        assert_eq!(
            evidence_for(&v, rec.error.as_deref()),
            Evidence::Error {
                message: "CPA call failed: bad gateway"
            }
        );
        assert_eq!(not_evaluated_cause(&v), None);
    }

    #[test]
    fn a_429_breaks_the_401_streak_and_backs_off() {
        let (mut a, mut st) = (account(), failing_state());
        let limited = ProbeOutcome::RateLimited {
            message: "slow down".into(),
        };
        let rec = apply_probe(&mut a, &mut st, ProbeReply::Answer(&limited), now(), 0.0);
        assert_eq!(rec.error.as_deref(), Some("429 rate limited: slow down"));
        assert_eq!(st.consecutive_invalid, 0);
        assert!(st.retry_not_before.is_some_and(|t| t > now()));
    }

    #[test]
    fn unprobed_accounts_say_why_they_were_not_evaluated() {
        let a = account();
        let st = ProbeState::default();
        for (need, cause) in [
            (
                ProbeNeed::Skip("back-off"),
                Some("not evaluated: back-off".to_string()),
            ),
            (
                ProbeNeed::Probe("due"),
                Some("not evaluated: the probe did not run".to_string()),
            ),
            (
                ProbeNeed::Reuse("fresh"),
                Some("not evaluated: no snapshot".to_string()),
            ),
        ] {
            let v = ProbeView {
                account: &a,
                state: &st,
                need: &need,
                reply: None,
            };
            assert_eq!(not_evaluated_cause(&v), cause, "{need:?}");
        }
    }

    #[test]
    fn a_known_skip_re_states_the_snapshot_only_while_disabled() {
        let mut a = account();
        let mut st = ProbeState::default();
        let usage = classify_probe(200, PLUS, now());
        apply_probe(&mut a, &mut st, ProbeReply::Answer(&usage), now(), 0.0);
        let need = ProbeNeed::Known("exhausted until reset");
        let enabled = ProbeView {
            account: &a,
            state: &st,
            need: &need,
            reply: None,
        };
        assert!(matches!(
            evidence_for(&enabled, None),
            Evidence::NotEvaluated { .. }
        ));
        let off = Account {
            disabled: true,
            ..a.clone()
        };
        let disabled = ProbeView {
            account: &off,
            ..enabled
        };
        assert!(matches!(
            evidence_for(&disabled, None),
            Evidence::Snapshot(_)
        ));
    }

    #[test]
    fn the_next_probe_of_a_failing_account_is_its_back_off_end() {
        let site = Site {
            site_id: "s".into(),
            site_name: "s".into(),
            site_enabled: true,
            cpa_base_url: "http://127.0.0.1:1".into(),
            management_key: None,
            management_key_env: None,
            provider: "codex".into(),
            usage_url: String::new(),
            user_agent: String::new(),
            settings: Default::default(),
            account_policies: Default::default(),
        };
        let a = account();
        let st = ProbeState {
            last_error: Some("timeout".into()),
            retry_not_before: Some(now() + Duration::minutes(4)),
            ..Default::default()
        };
        assert_eq!(
            next_probe_hint(&site, &a, &st),
            Some(now() + Duration::minutes(4))
        );
        let healthy = ProbeState {
            last_probe_at: Some(now()),
            ..Default::default()
        };
        assert!(next_probe_hint(&site, &a, &healthy).is_some_and(|t| t > now()));
    }
}
