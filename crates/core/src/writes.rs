//! Confirming quota-patrol's writes to CPA: how a value CPA lists now compares with the value
//! quota-patrol last wrote (in sync, reverted by CPA itself, or changed by a person), and CPA's
//! cooldown episodes of an account. Pure; the jobs layer reads, repairs, persists and logs.
//! Why: CPA's token refresh has rewritten auth files and lost fields set through the management
//! API (CPA issues #5465, #5528), and a patch has answered "ok" without applying (#5967).

use chrono::{DateTime, Utc};

use super::account::Account;

/// Which CPA field a write set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// `disabled` through `PATCH /auth-files/status` (value 1 = disabled, 0 = enabled).
    Disabled,
    /// `priority` through `PATCH /auth-files/fields` (value = the priority, 0 = none).
    Priority,
}

impl WriteKind {
    /// Database and metric-label spelling: `disabled` | `priority`.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteKind::Disabled => "disabled",
            WriteKind::Priority => "priority",
        }
    }

    /// Parses [`WriteKind::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "disabled" => Some(WriteKind::Disabled),
            "priority" => Some(WriteKind::Priority),
            _ => None,
        }
    }

    /// The value of this field in a listing entry (`disabled` as 0/1; absent priority = 0).
    pub fn listed(self, account: &Account) -> i64 {
        match self {
            WriteKind::Disabled => i64::from(account.disabled),
            WriteKind::Priority => account.cpa_priority,
        }
    }
}

/// The last value quota-patrol wrote to one field of one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastWrite {
    pub account_name: String,
    pub kind: WriteKind,
    /// Same encoding as [`WriteKind::listed`].
    pub value: i64,
    pub written_at: DateTime<Utc>,
}

/// How CPA's listed value relates to our last write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drift {
    /// CPA lists what we wrote.
    InSync,
    /// CPA itself lost the value: it went back to CPA's default (priority absent/0, `disabled`
    /// false) and the entry's `last_refresh` is later than our write (a token refresh rewrote
    /// the file). Repaired by writing the value again.
    ByCpa,
    /// Anything else: a person (or another tool) changed it in CPA. Adopted, never overridden.
    External,
}

/// Classifies `account` (as CPA lists it now) against `write` (docs/decisions.md §5: the drift
/// rule).
///
/// Only a `priority` can be CPA's own drift: that is the field token refreshes lost (CPA
/// #5465, #5528). A `disabled` that differs is always a person's change: a person enabling an
/// account in CPA's UI is often followed at once by a token refresh (CPA refreshes no
/// disabled account), so the refresh cannot tell the two apart, and a person's change is
/// never overridden. (An exhausted account enabled by anyone is disabled again by the
/// decision table anyway.)
pub fn classify(write: &LastWrite, account: &Account) -> Drift {
    let listed = write.kind.listed(account);
    if listed == write.value {
        return Drift::InSync;
    }
    if write.kind == WriteKind::Disabled {
        return Drift::External;
    }
    let back_to_default = listed == 0;
    let refreshed_since = account.last_refresh.is_some_and(|at| at > write.written_at);
    if back_to_default && refreshed_since {
        Drift::ByCpa
    } else {
        Drift::External
    }
}

/// Whether CPA's listing shows the account in its own cooldown: `unavailable`, or a
/// `next_retry_after` later than `now` (docs/rules/cpa.md §2.1).
pub fn cooling_down(account: &Account, now: DateTime<Utc>) -> bool {
    account.unavailable || account.next_retry_after.is_some_and(|t| t > now)
}

/// Identifies one CPA cooldown episode of the account, so `reset-quota` is called once per
/// episode: the `next_retry_after` instant when it lies ahead, else `unavailable` while that flag
/// is set; `None` when the account is not cooling down (the episode is over).
pub fn cooldown_episode(account: &Account, now: DateTime<Utc>) -> Option<String> {
    match account.next_retry_after {
        Some(t) if t > now => Some(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        _ if account.unavailable => Some("unavailable".to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn at(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, h, 0, 0).unwrap()
    }

    fn write(kind: WriteKind, value: i64) -> LastWrite {
        LastWrite {
            account_name: "a.json".into(),
            kind,
            value,
            written_at: at(10),
        }
    }

    fn listed(disabled: bool, priority: i64, refreshed: Option<u32>) -> Account {
        Account {
            name: "a.json".into(),
            disabled,
            cpa_priority: priority,
            last_refresh: refreshed.map(at),
            ..Default::default()
        }
    }

    #[test]
    fn the_value_we_wrote_is_in_sync() {
        assert_eq!(
            classify(&write(WriteKind::Disabled, 1), &listed(true, 0, None)),
            Drift::InSync
        );
        assert_eq!(
            classify(&write(WriteKind::Priority, 3), &listed(false, 3, Some(12))),
            Drift::InSync
        );
    }

    #[test]
    fn a_priority_reset_after_a_token_refresh_is_cpa_drift_an_enable_never_is() {
        assert_eq!(
            classify(&write(WriteKind::Disabled, 1), &listed(false, 0, Some(11))),
            Drift::External,
            "a person's enable followed by a refresh looks the same"
        );
        assert_eq!(
            classify(&write(WriteKind::Priority, 5), &listed(false, 0, Some(11))),
            Drift::ByCpa
        );
    }

    #[test]
    fn a_reset_without_a_later_refresh_is_a_persons_change() {
        assert_eq!(
            classify(&write(WriteKind::Disabled, 1), &listed(false, 0, Some(9))),
            Drift::External
        );
        assert_eq!(
            classify(&write(WriteKind::Disabled, 1), &listed(false, 0, None)),
            Drift::External
        );
        assert_eq!(
            classify(&write(WriteKind::Priority, 5), &listed(false, 0, Some(10))),
            Drift::External
        );
    }

    #[test]
    fn a_non_default_value_is_a_persons_change_even_after_a_refresh() {
        // We enabled it; someone disabled it again: never undone.
        assert_eq!(
            classify(&write(WriteKind::Disabled, 0), &listed(true, 0, Some(12))),
            Drift::External
        );
        assert_eq!(
            classify(&write(WriteKind::Priority, 5), &listed(false, 9, Some(12))),
            Drift::External
        );
    }

    #[test]
    fn cooldown_episodes_follow_next_retry_after_and_unavailable() {
        let now = at(10);
        let mut a = listed(false, 0, None);
        assert!(!cooling_down(&a, now));
        assert_eq!(cooldown_episode(&a, now), None);
        a.next_retry_after = Some(now + Duration::minutes(30));
        assert!(cooling_down(&a, now));
        let first = cooldown_episode(&a, now);
        assert!(first.is_some());
        a.next_retry_after = Some(now + Duration::minutes(90));
        assert_ne!(
            cooldown_episode(&a, now),
            first,
            "a new retry time is a new episode"
        );
        a.next_retry_after = Some(now - Duration::minutes(1));
        assert!(!cooling_down(&a, now), "a retry time in the past is over");
        a.unavailable = true;
        assert_eq!(cooldown_episode(&a, now).as_deref(), Some("unavailable"));
    }
}
