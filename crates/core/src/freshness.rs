//! When to probe for real and when to reuse the last snapshot: the per-account real-refresh
//! spread, activity evidence, reset re-checks and failure back-off. Whether a snapshot is
//! exhausted, and until when, is `core::availability`'s answer. Pure: `now` is an argument.
//! Rules: docs/rules/patrol.md §4.2–§4.5.

use chrono::{DateTime, Duration, Utc};

use super::account::{Account, DisableReason, ProbeState};
use super::availability::snapshot_availability;
use super::passive::PassiveVerdict;
use super::policy::QuotaPolicy;
use super::settings::PatrolSettings;

/// Grace after a reset time before the re-probe (docs/rules/patrol.md §4.5: reset + 1 minute).
pub const RESET_GRACE: Duration = Duration::minutes(1);
/// Re-probe delay for a stale window (≥ 100 % with a past reset; docs/rules/patrol.md §3: ≤ 5 min).
pub const STALE_RECHECK: Duration = Duration::minutes(2);
/// Failure back-off: first delay, doubled per consecutive failure, capped.
pub const FAILURE_BACKOFF_BASE: Duration = Duration::minutes(1);
/// Cap of the failure back-off.
pub const FAILURE_BACKOFF_CAP: Duration = Duration::minutes(30);

/// The reuse reason of a refresh probe that fresh passive evidence well below the thresholds
/// spared (docs/rules/patrol.md §4.7).
pub const PASSIVE_SPARED: &str = "fresh passive evidence well below the thresholds";
/// The probe reason when passive evidence at or over a threshold makes the probe due now
/// (docs/rules/patrol.md §4.7): the probe decides, the evidence never acts.
pub const PASSIVE_PROBE_NOW: &str = "passive evidence at or over a threshold";

/// FNV-1a 32-bit over UTF-16 code units (docs/rules/patrol.md §4.3).
fn fnv1a32_utf16(s: &str) -> u32 {
    let mut h: u32 = 2_166_136_261;
    for c in s.encode_utf16() {
        h ^= u32::from(c);
        h = h.wrapping_mul(16_777_619);
    }
    h
}

/// Stable per-(site, account) offset in minutes, `0..=spread`:
/// `fnv1a32(lower(trim(siteId)) + "\n" + lower(trim(name))) mod (spread + 1)` (docs/rules/patrol.md §4.3).
pub fn spread_offset_minutes(site_id: &str, account_name: &str, spread_minutes: u32) -> u32 {
    let key = format!(
        "{}\n{}",
        site_id.trim().to_lowercase(),
        account_name.trim().to_lowercase()
    );
    fnv1a32_utf16(&key) % spread_minutes.saturating_add(1)
}

/// The account's real-refresh age: `realRefreshMinHours` h + its spread offset.
pub fn real_refresh_age(site_id: &str, account_name: &str, s: &PatrolSettings) -> Duration {
    Duration::hours(i64::from(s.real_refresh_min_hours))
        + Duration::minutes(i64::from(spread_offset_minutes(
            site_id,
            account_name,
            s.real_refresh_spread_minutes,
        )))
}

/// When the account is due for a real probe at the latest (`None` = never probed: due now).
pub fn next_real_refresh_at(
    site_id: &str,
    account_name: &str,
    refreshed_at: Option<DateTime<Utc>>,
    s: &PatrolSettings,
) -> Option<DateTime<Utc>> {
    refreshed_at.map(|at| at + real_refresh_age(site_id, account_name, s))
}

/// Evidence that client traffic used an account since its last real probe (docs/rules/patrol.md §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// Counters unchanged since the last probe.
    Idle,
    /// Counters grew (or went backwards: CPA restarted), or the usage queue named the account.
    Used,
    /// No counters to compare: CPA too old, or no baseline recorded yet.
    Unobservable,
}

/// Compares the listing's `success + failed` with the value recorded at the last real probe.
/// `queue_marked` = the usage queue (when enabled) reported traffic for this account.
pub fn activity(now_total: Option<u64>, at_probe: Option<u64>, queue_marked: bool) -> Activity {
    if queue_marked {
        return Activity::Used;
    }
    match (now_total, at_probe) {
        (Some(now), Some(then)) if now == then => Activity::Idle,
        (Some(_), Some(_)) => Activity::Used,
        _ => Activity::Unobservable,
    }
}

/// Whether an evaluation needs a real probe (docs/rules/patrol.md §4.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeNeed {
    /// Probe for real; the text says why.
    Probe(&'static str),
    /// Reuse the last snapshot (`fromCache = true`, `cacheReason` = the text).
    Reuse(&'static str),
    /// Do not probe and do not decide anew this time (no auth_index, back-off, skip rule).
    Skip(&'static str),
    /// Do not probe: the last snapshot still tells all there is (a disabled free-like account
    /// exhausted until its weekly reset), so the round decides again from it.
    Known(&'static str),
}

impl ProbeNeed {
    /// A reuse because fresh passive evidence spared the probe ([`PASSIVE_SPARED`]).
    pub fn spared_by_passive(&self) -> bool {
        matches!(self, ProbeNeed::Reuse(why) if *why == PASSIVE_SPARED)
    }
}

/// Inputs of [`needs_probe`].
#[derive(Debug, Clone, Copy)]
pub struct FreshnessInput<'a> {
    pub site_id: &'a str,
    pub account: &'a Account,
    pub state: &'a ProbeState,
    pub settings: &'a PatrolSettings,
    /// The account's effective quota policy (`Site::quota_policy`; docs/rules/patrol.md §9).
    pub policy: QuotaPolicy,
    /// Forced evaluation (API `force=true`, reset re-check, single-account refresh).
    pub forced: bool,
    pub activity: Activity,
    /// What the account's passive evidence may do (`core::passive::judge`); `None` when the
    /// listing carries none (nothing changes then).
    pub passive: Option<PassiveVerdict>,
    pub now: DateTime<Utc>,
}

/// Decides without I/O whether an account must be probed now (docs/rules/patrol.md §4.2, §4.3).
///
/// Order: no `auth_index` ⇒ skip; forced ⇒ probe; failure back-off pending ⇒ skip;
/// `disableCacheRefresh` ⇒ probe; no snapshot ⇒ probe; real-refresh age reached ⇒ probe;
/// disabled free-like account exhausted until a future reset ⇒ skip; a window reached its reset
/// ⇒ probe; activity seen or unobservable ⇒ probe, unless fresh passive evidence well below the
/// thresholds spares it (reuse, [`PASSIVE_SPARED`]); otherwise reuse, unless passive evidence at
/// or over a threshold makes the probe due ([`PASSIVE_PROBE_NOW`]; docs/rules/patrol.md §4.7).
pub fn needs_probe(i: FreshnessInput<'_>) -> ProbeNeed {
    if i.account.auth_index.as_deref().is_none_or(str::is_empty) {
        return ProbeNeed::Skip("no auth_index: the account cannot be probed");
    }
    if i.forced {
        return ProbeNeed::Probe("forced");
    }
    if i.state.retry_not_before.is_some_and(|t| t > i.now) {
        return ProbeNeed::Skip("waiting before the next probe attempt (back-off)");
    }
    // A 401 streak not yet confirmed is re-probed at the next round, enabled or disabled
    // (routing may have put a new account on standby after its first 401): its confirmation
    // must not wait for the real-refresh age (docs/rules/patrol.md §5 rules 1–2).
    if awaiting_invalid_confirmation(i.state, i.settings) {
        return ProbeNeed::Probe("401 awaiting confirmation");
    }
    // Disabled after a (confirmed) 401 or a 402 answer: nothing changes that soon; look again
    // at the age.
    if parked(i.account, i.state, i.settings) {
        let due = next_real_refresh_at(
            i.site_id,
            &i.account.name,
            i.state.last_probe_at,
            i.settings,
        );
        if due.is_some_and(|d| i.now < d) {
            return ProbeNeed::Skip(
                "disabled after a 401/402 answer; re-checked at its real-refresh age",
            );
        }
        return ProbeNeed::Probe("real-refresh age reached");
    }
    if i.settings.disable_cache_refresh {
        return ProbeNeed::Probe("cache refresh disabled");
    }
    let Some(snap) = &i.state.snapshot else {
        return ProbeNeed::Probe("no successful snapshot yet");
    };
    // A later probe failed (401, 402, error): the good snapshot no longer speaks for the account.
    if i.state
        .last_probe_at
        .is_some_and(|at| at > snap.refreshed_at)
    {
        return ProbeNeed::Probe("the last probe failed");
    }
    let due = next_real_refresh_at(
        i.site_id,
        &i.account.name,
        Some(snap.refreshed_at),
        i.settings,
    );
    if due.is_some_and(|d| i.now >= d) {
        return ProbeNeed::Probe("real-refresh age reached");
    }
    if i.account.disabled
        && snap.is_free_like()
        && snapshot_availability(snap, &i.policy, i.now)
            .until()
            .is_some_and(|until| until > i.now)
    {
        return ProbeNeed::Known("disabled free account, weekly window not reset yet");
    }
    if snap.reset_reached(i.now) {
        return ProbeNeed::Probe("a window reached its reset time");
    }
    match (i.activity, i.passive) {
        (_, Some(PassiveVerdict::ProbeNow)) => ProbeNeed::Probe(PASSIVE_PROBE_NOW),
        (Activity::Used | Activity::Unobservable, Some(PassiveVerdict::SpareProbe)) => {
            ProbeNeed::Reuse(PASSIVE_SPARED)
        }
        (Activity::Used, _) => ProbeNeed::Probe("activity since the last probe"),
        (Activity::Unobservable, _) => ProbeNeed::Probe("activity cannot be observed"),
        (Activity::Idle, _) => {
            ProbeNeed::Reuse("no activity since the last probe and no reset reached")
        }
    }
}

/// The `reason` label of `quota_patrol_probes_skipped_total` for an evaluation that did not
/// probe: `passive` (spared by fresh passive evidence), `reuse` (no activity), `known`
/// (exhausted until a reset), `skip` (back-off, parked, no `auth_index`); `None` for a probe.
pub fn skipped_label(need: &ProbeNeed) -> Option<&'static str> {
    match need {
        ProbeNeed::Probe(_) => None,
        _ if need.spared_by_passive() => Some("passive"),
        ProbeNeed::Reuse(_) => Some("reuse"),
        ProbeNeed::Known(_) => Some("known"),
        ProbeNeed::Skip(_) => Some("skip"),
    }
}

/// Whether the account's last answers are a 401 streak still short of `invalidConfirmations`
/// (`0 < consecutive_invalid < invalidConfirmations`): such an account is re-probed at the next
/// round whatever its `disabled` flag, so rule 1 (docs/rules/patrol.md §5) can confirm it.
pub fn awaiting_invalid_confirmation(state: &ProbeState, s: &PatrolSettings) -> bool {
    state.consecutive_invalid > 0 && state.consecutive_invalid < s.invalid_confirmations.max(1)
}

/// Whether a disabled account is "parked" after a confirmed 401 or a 402 answer: it is re-probed
/// only at its real-refresh age (docs/rules/patrol.md §4.3). A 401 awaiting confirmation is never parked.
pub fn parked(account: &Account, state: &ProbeState, s: &PatrolSettings) -> bool {
    account.disabled
        && !awaiting_invalid_confirmation(state, s)
        && (state.consecutive_invalid > 0 || state.payment_problem.is_some())
}

/// Back-off after `consecutive_failures` failed probes: 1, 2, 4, … minutes, capped at 30;
/// `jitter` (0.0..=1.0, drawn by the caller from its injected random source) takes off up to
/// [`super::retry::JITTER_SPREAD`] of it. 0 failures ⇒ no back-off.
pub fn failure_backoff(consecutive_failures: u32, jitter: f64) -> Duration {
    if consecutive_failures == 0 {
        return Duration::zero();
    }
    super::retry::Backoff::new(FAILURE_BACKOFF_BASE, FAILURE_BACKOFF_CAP)
        .with_spread(super::retry::JITTER_SPREAD)
        .delay(consecutive_failures, jitter)
}

/// When a disabled account's exhausting window resets, plus the grace (docs/rules/patrol.md §4.5).
/// `None` for enabled accounts, ManualDisabled accounts, deactivated (402) accounts, and
/// accounts whose exhausting window has no known reset. Paid accounts wait for the latest of
/// their exhausted windows (a five-hour reset alone is not a recovery).
pub fn reset_check_at(
    account: &Account,
    reason: Option<DisableReason>,
    state: &ProbeState,
    policy: &QuotaPolicy,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    if !account.disabled || reason == Some(DisableReason::ManualDisabled) {
        return None;
    }
    if state.payment_problem == Some(true) {
        return None;
    }
    let snap = state.snapshot.as_ref()?;
    // Evaluate exhaustion as of the snapshot's probe time, so a reset that already passed still
    // yields its (past) check time instead of disappearing.
    // A stale window (≥ 100 % with its reset already past) is re-checked shortly (docs/rules/patrol.md §3).
    if snap.is_stale(snap.refreshed_at) {
        return Some(snap.refreshed_at + STALE_RECHECK);
    }
    awaited_reset(state, policy, now).map(|r| r + RESET_GRACE)
}

/// The reset the stored snapshot of `state` waits for: when its exhaustion ends
/// ([`Availability::Exhausted`](super::availability::Availability::Exhausted)'s `until`, the
/// latest reset among the exhausted windows), judged as of the snapshot's probe time so that a
/// reset that already passed is still named. `None` without a snapshot, when it was not
/// exhausted, or when the reset is unknown. The reset re-check waits for it (docs/rules/patrol.md §4.5);
/// a re-enable's log entry names it as the reset that passed.
pub fn awaited_reset(
    state: &ProbeState,
    policy: &QuotaPolicy,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let snap = state.snapshot.as_ref()?;
    snapshot_availability(snap, policy, snap.refreshed_at.min(now)).until()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::{QuotaWindow, WindowKind};
    use crate::testkit::snapshot;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    #[test]
    fn spread_matches_the_spec_test_vectors() {
        assert_eq!(spread_offset_minutes("default", "account-1", 110), 98);
        assert_eq!(spread_offset_minutes("default", "account-a", 110), 32);
        assert_eq!(
            spread_offset_minutes("default", "user@example.com", 110),
            45
        );
        assert_eq!(spread_offset_minutes("site-2", "账号", 110), 39);
    }

    #[test]
    fn spread_ignores_case_and_surrounding_space() {
        assert_eq!(spread_offset_minutes(" Default ", "ACCOUNT-1 ", 110), 98);
    }

    #[test]
    fn spread_zero_means_no_offset() {
        assert_eq!(spread_offset_minutes("default", "account-1", 0), 0);
    }

    #[test]
    fn real_refresh_age_is_min_hours_plus_offset() {
        let s = PatrolSettings::default();
        assert_eq!(
            real_refresh_age("default", "account-1", &s),
            Duration::minutes(8 * 60 + 98)
        );
    }

    fn window(kind: WindowKind, used: f64, reset_at: DateTime<Utc>) -> QuotaWindow {
        crate::testkit::main_window(kind, used, reset_at)
    }

    fn account(disabled: bool) -> Account {
        Account {
            name: "account-1".into(),
            auth_index: Some("dced952c87a12d9f".into()),
            disabled,
            request_total: Some(10),
            ..Default::default()
        }
    }

    fn input<'a>(
        account: &'a Account,
        state: &'a ProbeState,
        settings: &'a PatrolSettings,
        activity: Activity,
        now: DateTime<Utc>,
    ) -> FreshnessInput<'a> {
        FreshnessInput {
            site_id: "default",
            account,
            state,
            settings,
            policy: QuotaPolicy::site(settings),
            forced: false,
            activity,
            passive: None,
            now,
        }
    }

    fn fresh_state(plan: &str, used: f64) -> ProbeState {
        ProbeState {
            snapshot: Some(snapshot(
                plan,
                vec![window(WindowKind::Weekly, used, t0() + Duration::days(3))],
                t0(),
            )),
            request_total_at_probe: Some(10),
            ..Default::default()
        }
    }

    #[test]
    fn idle_account_with_a_fresh_snapshot_reuses_it() {
        let (a, st, s) = (
            account(false),
            fresh_state("plus", 40.0),
            PatrolSettings::default(),
        );
        let need = needs_probe(input(
            &a,
            &st,
            &s,
            Activity::Idle,
            t0() + Duration::hours(1),
        ));
        assert!(matches!(need, ProbeNeed::Reuse(_)), "{need:?}");
    }

    #[test]
    fn forced_always_probes() {
        let (a, st, s) = (
            account(false),
            fresh_state("plus", 40.0),
            PatrolSettings::default(),
        );
        let mut i = input(&a, &st, &s, Activity::Idle, t0());
        i.forced = true;
        assert_eq!(needs_probe(i), ProbeNeed::Probe("forced"));
    }

    #[test]
    fn disable_cache_refresh_always_probes() {
        let (a, st) = (account(false), fresh_state("plus", 40.0));
        let s = PatrolSettings {
            disable_cache_refresh: true,
            ..Default::default()
        };
        assert_eq!(
            needs_probe(input(&a, &st, &s, Activity::Idle, t0())),
            ProbeNeed::Probe("cache refresh disabled")
        );
    }

    #[test]
    fn no_snapshot_probes() {
        let (a, s) = (account(false), PatrolSettings::default());
        let st = ProbeState::default();
        assert_eq!(
            needs_probe(input(&a, &st, &s, Activity::Idle, t0())),
            ProbeNeed::Probe("no successful snapshot yet")
        );
    }

    #[test]
    fn the_real_refresh_age_forces_a_probe_exactly_at_its_due_time() {
        let (a, st, s) = (
            account(false),
            fresh_state("plus", 40.0),
            PatrolSettings::default(),
        );
        let due = t0() + Duration::minutes(8 * 60 + 98);
        let before = needs_probe(input(
            &a,
            &st,
            &s,
            Activity::Idle,
            due - Duration::seconds(1),
        ));
        assert!(matches!(before, ProbeNeed::Reuse(_)));
        assert_eq!(
            needs_probe(input(&a, &st, &s, Activity::Idle, due)),
            ProbeNeed::Probe("real-refresh age reached")
        );
    }

    #[test]
    fn activity_or_unobservable_activity_probes() {
        let (a, st, s) = (
            account(false),
            fresh_state("plus", 40.0),
            PatrolSettings::default(),
        );
        let now = t0() + Duration::hours(1);
        assert_eq!(
            needs_probe(input(&a, &st, &s, Activity::Used, now)),
            ProbeNeed::Probe("activity since the last probe")
        );
        assert_eq!(
            needs_probe(input(&a, &st, &s, Activity::Unobservable, now)),
            ProbeNeed::Probe("activity cannot be observed")
        );
    }

    #[test]
    fn passive_evidence_spares_only_activity_probes_and_never_the_age_rule() {
        // (case, activity, verdict, hours after the probe, expected)
        let spare = Some(PassiveVerdict::SpareProbe);
        let now_ = Some(PassiveVerdict::ProbeNow);
        let unused = Some(PassiveVerdict::Unused(crate::passive::Unused::Stale));
        let age = 8 * 60 + 98;
        let table: [(&str, Activity, Option<PassiveVerdict>, i64, ProbeNeed); 8] = [
            (
                "used, well below",
                Activity::Used,
                spare,
                60,
                ProbeNeed::Reuse(PASSIVE_SPARED),
            ),
            (
                "unobservable, well below",
                Activity::Unobservable,
                spare,
                60,
                ProbeNeed::Reuse(PASSIVE_SPARED),
            ),
            (
                "used, stale",
                Activity::Used,
                unused,
                60,
                ProbeNeed::Probe("activity since the last probe"),
            ),
            (
                "used, absent",
                Activity::Used,
                None,
                60,
                ProbeNeed::Probe("activity since the last probe"),
            ),
            (
                "idle, over a threshold",
                Activity::Idle,
                now_,
                60,
                ProbeNeed::Probe(PASSIVE_PROBE_NOW),
            ),
            (
                "used, over a threshold",
                Activity::Used,
                now_,
                60,
                ProbeNeed::Probe(PASSIVE_PROBE_NOW),
            ),
            (
                "idle, absent",
                Activity::Idle,
                None,
                60,
                ProbeNeed::Reuse("no activity since the last probe and no reset reached"),
            ),
            (
                "age reached, well below",
                Activity::Used,
                spare,
                age,
                ProbeNeed::Probe("real-refresh age reached"),
            ),
        ];
        let (a, st, s) = (
            account(false),
            fresh_state("plus", 40.0),
            PatrolSettings::default(),
        );
        for (case, activity, verdict, minutes, expected) in table {
            let mut i = input(&a, &st, &s, activity, t0() + Duration::minutes(minutes));
            i.passive = verdict;
            assert_eq!(needs_probe(i), expected, "{case}");
        }
        // Forced and back-off outrank passive evidence.
        let mut i = input(&a, &st, &s, Activity::Used, t0() + Duration::hours(1));
        i.passive = spare;
        i.forced = true;
        assert_eq!(needs_probe(i), ProbeNeed::Probe("forced"));
    }

    #[test]
    fn skipped_labels_name_why_no_probe_ran() {
        assert_eq!(
            skipped_label(&ProbeNeed::Reuse(PASSIVE_SPARED)),
            Some("passive")
        );
        assert_eq!(skipped_label(&ProbeNeed::Reuse("idle")), Some("reuse"));
        assert_eq!(skipped_label(&ProbeNeed::Known("k")), Some("known"));
        assert_eq!(skipped_label(&ProbeNeed::Skip("s")), Some("skip"));
        assert_eq!(skipped_label(&ProbeNeed::Probe(PASSIVE_PROBE_NOW)), None);
    }

    #[test]
    fn a_reached_reset_probes() {
        let (a, mut st, s) = (
            account(false),
            fresh_state("plus", 40.0),
            PatrolSettings::default(),
        );
        st.snapshot.as_mut().unwrap().windows[0].reset_at = Some(t0() + Duration::hours(1));
        let now = t0() + Duration::hours(1);
        assert_eq!(
            needs_probe(input(&a, &st, &s, Activity::Idle, now)),
            ProbeNeed::Probe("a window reached its reset time")
        );
    }

    #[test]
    fn a_disabled_free_account_is_known_exactly_while_the_one_rule_says_exhausted() {
        // Free five-hour window at 100 % (rule 3): exhausted until that window's reset, so the
        // account is known until then (the old long-window-only test probed it on activity).
        let five_reset = t0() + Duration::hours(2);
        let mut st = fresh_state("free", 10.0);
        st.snapshot
            .as_mut()
            .unwrap()
            .windows
            .push(window(WindowKind::FiveHour, 100.0, five_reset));
        let (a, s) = (account(true), PatrolSettings::default());
        let at = t0() + Duration::hours(1);
        assert!(matches!(
            needs_probe(input(&a, &st, &s, Activity::Used, at)),
            ProbeNeed::Known(_)
        ));
    }

    #[test]
    fn disabled_exhausted_free_account_is_skipped_until_its_weekly_reset() {
        let (a, st, s) = (
            account(true),
            fresh_state("free", 100.0),
            PatrolSettings::default(),
        );
        let need = needs_probe(input(
            &a,
            &st,
            &s,
            Activity::Used,
            t0() + Duration::hours(1),
        ));
        assert_eq!(
            need,
            ProbeNeed::Known("disabled free account, weekly window not reset yet")
        );
        // ... but the real-refresh age still applies.
        let need = needs_probe(input(
            &a,
            &st,
            &s,
            Activity::Idle,
            t0() + Duration::hours(10),
        ));
        assert_eq!(need, ProbeNeed::Probe("real-refresh age reached"));
    }

    #[test]
    fn an_account_without_auth_index_is_skipped_even_when_forced() {
        let mut a = account(false);
        a.auth_index = None;
        let (st, s) = (ProbeState::default(), PatrolSettings::default());
        let mut i = input(&a, &st, &s, Activity::Used, t0());
        i.forced = true;
        assert!(matches!(needs_probe(i), ProbeNeed::Skip(_)));
    }

    #[test]
    fn back_off_skips_until_its_time() {
        let (a, s) = (account(false), PatrolSettings::default());
        let st = ProbeState {
            retry_not_before: Some(t0() + Duration::minutes(2)),
            ..Default::default()
        };
        assert!(matches!(
            needs_probe(input(&a, &st, &s, Activity::Used, t0())),
            ProbeNeed::Skip(_)
        ));
        assert!(matches!(
            needs_probe(input(
                &a,
                &st,
                &s,
                Activity::Used,
                t0() + Duration::minutes(2)
            )),
            ProbeNeed::Probe(_)
        ));
    }

    #[test]
    fn activity_compares_counters() {
        assert_eq!(activity(Some(5), Some(5), false), Activity::Idle);
        assert_eq!(activity(Some(6), Some(5), false), Activity::Used);
        assert_eq!(
            activity(Some(1), Some(5), false),
            Activity::Used,
            "CPA restart resets counters"
        );
        assert_eq!(activity(None, Some(5), false), Activity::Unobservable);
        assert_eq!(activity(Some(5), None, false), Activity::Unobservable);
        assert_eq!(activity(Some(5), Some(5), true), Activity::Used);
    }

    #[test]
    fn failure_backoff_doubles_and_is_capped() {
        assert_eq!(failure_backoff(0, 1.0), Duration::zero());
        assert_eq!(failure_backoff(1, 0.0), Duration::minutes(1));
        assert_eq!(failure_backoff(2, 0.0), Duration::minutes(2));
        assert_eq!(failure_backoff(4, 0.0), Duration::minutes(8));
        assert_eq!(failure_backoff(40, 0.0), Duration::minutes(30));
        assert_eq!(
            failure_backoff(1, 1.0),
            Duration::seconds(54),
            "jitter takes 10 % off"
        );
    }

    #[test]
    fn paid_reset_check_waits_for_the_weekly_reset_not_the_five_hour_one() {
        let a = account(true);
        let five = window(WindowKind::FiveHour, 100.0, t0() + Duration::hours(2));
        let week = window(WindowKind::Weekly, 97.0, t0() + Duration::days(2));
        let st = ProbeState {
            snapshot: Some(snapshot("plus", vec![five, week], t0())),
            ..Default::default()
        };
        let at = reset_check_at(
            &a,
            Some(DisableReason::QuotaExhausted),
            &st,
            &QuotaPolicy::uniform(95),
            t0(),
        );
        assert_eq!(at, Some(t0() + Duration::days(2) + RESET_GRACE));
    }

    #[test]
    fn no_reset_check_for_manual_disables_or_enabled_accounts() {
        let st = fresh_state("free", 100.0);
        assert_eq!(
            reset_check_at(
                &account(true),
                Some(DisableReason::ManualDisabled),
                &st,
                &QuotaPolicy::uniform(95),
                t0()
            ),
            None
        );
        assert_eq!(
            reset_check_at(&account(false), None, &st, &QuotaPolicy::uniform(95), t0()),
            None
        );
        assert_eq!(
            reset_check_at(
                &account(true),
                Some(DisableReason::QuotaExhausted),
                &st,
                &QuotaPolicy::uniform(95),
                t0()
            ),
            Some(t0() + Duration::days(3) + RESET_GRACE)
        );
    }

    #[test]
    fn a_snapshot_older_than_a_failed_probe_is_not_reused() {
        let (a, mut st, s) = (
            account(true),
            fresh_state("plus", 40.0),
            PatrolSettings::default(),
        );
        st.last_probe_at = Some(t0() + Duration::minutes(30));
        let need = needs_probe(input(
            &a,
            &st,
            &s,
            Activity::Idle,
            t0() + Duration::hours(1),
        ));
        assert_eq!(need, ProbeNeed::Probe("the last probe failed"));
    }

    #[test]
    fn a_stale_snapshot_is_re_checked_within_minutes() {
        let mut st = fresh_state("free", 100.0);
        st.snapshot.as_mut().unwrap().windows[0].reset_at = Some(t0() - Duration::minutes(1));
        let at = reset_check_at(
            &account(true),
            Some(DisableReason::QuotaExhausted),
            &st,
            &QuotaPolicy::uniform(95),
            t0(),
        );
        assert_eq!(at, Some(t0() + STALE_RECHECK));
    }

    #[test]
    fn a_huge_spread_does_not_overflow() {
        // `spread + 1` would overflow; the modulus saturates instead of panicking.
        assert!(spread_offset_minutes("default", "account-1", u32::MAX) < u32::MAX);
    }

    #[test]
    fn a_401_awaiting_confirmation_is_probed_at_the_next_round_enabled_or_disabled() {
        let s = PatrolSettings::default(); // invalidConfirmations 2
        let st = ProbeState {
            consecutive_invalid: 1,
            last_probe_at: Some(t0()),
            ..Default::default()
        };
        for disabled in [false, true] {
            let a = account(disabled);
            assert_eq!(
                needs_probe(input(
                    &a,
                    &st,
                    &s,
                    Activity::Idle,
                    t0() + Duration::minutes(10)
                )),
                ProbeNeed::Probe("401 awaiting confirmation"),
                "disabled = {disabled}"
            );
            assert!(!parked(&a, &st, &s));
        }
        // Confirmed (streak reached N): parked again while disabled.
        let confirmed = ProbeState {
            consecutive_invalid: 2,
            ..st.clone()
        };
        assert!(parked(&account(true), &confirmed, &s));
        assert!(!awaiting_invalid_confirmation(&confirmed, &s));
        // N = 1: a single 401 is already confirmed, nothing awaits.
        let one = PatrolSettings {
            invalid_confirmations: 1,
            ..PatrolSettings::default()
        };
        assert!(!awaiting_invalid_confirmation(&st, &one));
        assert!(parked(&account(true), &st, &one));
    }

    #[test]
    fn an_account_disabled_after_a_401_is_left_alone_until_its_age() {
        let a = account(true);
        let s = PatrolSettings::default();
        let st = ProbeState {
            consecutive_invalid: 2,
            last_probe_at: Some(t0()),
            ..Default::default()
        };
        assert!(matches!(
            needs_probe(input(
                &a,
                &st,
                &s,
                Activity::Used,
                t0() + Duration::hours(1)
            )),
            ProbeNeed::Skip(_)
        ));
        assert_eq!(
            needs_probe(input(
                &a,
                &st,
                &s,
                Activity::Idle,
                t0() + Duration::hours(10)
            )),
            ProbeNeed::Probe("real-refresh age reached")
        );
    }
}
