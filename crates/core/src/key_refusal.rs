//! The refused-management-key rule (docs/rules/patrol.md §11; docs/rules/cpa.md §1.2): CPA counts wrong management
//! keys per client IP, bans the IP for 30 minutes after 5 of them and forgets the count only
//! after 2 h without activity. A key CPA refused is therefore never tried again automatically,
//! except once per [`AUTO_RETRY_EVERY`] (longer than CPA's 2 h purge, so every automatic try is
//! the first failure CPA counts), and never because settings were saved with the same key.
//! This module owns the decision; the store persists [`KeyRefusal`], the jobs ask [`gate`].

use chrono::{DateTime, Duration, Utc};
use sha2::{Digest, Sha256};

/// How often a refused key is tried again without an operator (3 h: CPA purges a client's
/// failure count after 2 h idle, `handler.go` v7.1.19 and v7.2.140).
pub const AUTO_RETRY_EVERY: Duration = Duration::hours(3);
/// CPA forgets a client's failures after this long without one (`handler.go`).
pub const CPA_FORGETS_AFTER: Duration = Duration::hours(2);
/// CPA bans a client IP at this many failures it still counts (docs/rules/cpa.md §1.2).
pub const CPA_BANS_AT: u32 = 5;

/// A stored refusal of one site's management key. Never holds the key, only its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRefusal {
    /// [`fingerprint`] of the refused key.
    pub fingerprint: String,
    /// First refusal of this key.
    pub first_refused_at: DateTime<Utc>,
    /// Latest refusal.
    pub refused_at: DateTime<Utc>,
    /// Latest try, refused or not answered (automatic tries count from here); claimed before
    /// the call is made.
    pub tried_at: DateTime<Utc>,
    /// Refused attempts with this key (each one is a failure CPA counted).
    pub attempts: u32,
    /// Refused attempts CPA still counts: each within [`CPA_FORGETS_AFTER`] of the previous.
    pub window_attempts: u32,
    /// CPA's HTTP status (401 wrong/missing key, 403 IP banned or remote management off).
    pub status: u16,
    /// CPA's error text, e.g. `invalid management key` (never contains the key).
    pub message: String,
    /// An operator asked for one try (`retry-connection`, `inspect --retry-key`).
    pub retry_requested: bool,
}

impl KeyRefusal {
    /// When the key is tried again without an operator.
    pub fn next_automatic_try_at(&self) -> DateTime<Utc> {
        self.tried_at.max(self.refused_at) + AUTO_RETRY_EVERY
    }

    /// Refused attempts CPA still counts against this host at `now` (0 once it forgot them).
    pub fn counted_by_cpa(&self, now: DateTime<Utc>) -> u32 {
        if now - self.refused_at >= CPA_FORGETS_AFTER {
            0
        } else {
            self.window_attempts
        }
    }

    /// Whether one more refused attempt at `now` would get this host banned by CPA; then an
    /// operator's retry is refused until [`KeyRefusal::safe_retry_at`].
    pub fn retry_would_ban(&self, now: DateTime<Utc>) -> bool {
        self.counted_by_cpa(now) + 1 >= CPA_BANS_AT
    }

    /// When CPA has forgotten the counted failures.
    pub fn safe_retry_at(&self) -> DateTime<Utc> {
        self.refused_at + CPA_FORGETS_AFTER
    }

    /// The operator-facing sentence: "management key refused at …, next automatic try at …".
    pub fn detail(&self) -> String {
        format!(
            "management key refused at {} (CPA {}: {}; {} refused attempt(s)), next automatic try at {}",
            self.refused_at.to_rfc3339(),
            self.status,
            self.message,
            self.attempts,
            self.next_automatic_try_at().to_rfc3339()
        )
    }

    /// The refusal after one more refused attempt at `now` with the same key.
    pub fn again(&self, status: u16, message: &str, now: DateTime<Utc>) -> Self {
        Self {
            refused_at: now,
            tried_at: now,
            attempts: self.attempts.saturating_add(1),
            window_attempts: self.counted_by_cpa(now).saturating_add(1),
            status,
            message: message.to_string(),
            retry_requested: false,
            ..self.clone()
        }
    }

    /// The first refusal of the key with `fingerprint`.
    pub fn first(fingerprint: &str, status: u16, message: &str, now: DateTime<Utc>) -> Self {
        Self {
            fingerprint: fingerprint.to_string(),
            first_refused_at: now,
            refused_at: now,
            tried_at: now,
            attempts: 1,
            window_attempts: 1,
            status,
            message: message.to_string(),
            retry_requested: false,
        }
    }
}

/// Whether CPA may be called with the current key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyGate {
    /// No refusal on record for this key.
    Open,
    /// The stored refusal was for another key: the key changed (API, config or environment);
    /// the refusal is to be cleared and the new key tried.
    NewKey,
    /// The refused key may be tried once: an operator asked, or the automatic interval passed.
    TryOnce { why: TryReason },
    /// No call with this key until `next_try_at` (or a new key, or an operator's retry).
    Closed { next_try_at: DateTime<Utc> },
}

/// Why a refused key is tried once more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryReason {
    Operator,
    Automatic,
}

/// Decides whether the key with `current` fingerprint may be used at `now`.
pub fn gate(refusal: Option<&KeyRefusal>, current: &str, now: DateTime<Utc>) -> KeyGate {
    match refusal {
        None => KeyGate::Open,
        Some(r) if r.fingerprint != current => KeyGate::NewKey,
        Some(r) if r.retry_requested => KeyGate::TryOnce {
            why: TryReason::Operator,
        },
        Some(r) if now >= r.next_automatic_try_at() => KeyGate::TryOnce {
            why: TryReason::Automatic,
        },
        Some(r) => KeyGate::Closed {
            next_try_at: r.next_automatic_try_at(),
        },
    }
}

/// A stable fingerprint of a management key: 16 hex characters of a domain-separated SHA-256.
/// Enough to tell keys apart; the key itself is never stored with a refusal.
pub fn fingerprint(key: &str) -> String {
    let digest = Sha256::digest(format!("quota-patrol management key v1\n{key}").as_bytes());
    hex::encode(&digest[..8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    #[test]
    fn a_refused_key_waits_three_hours_and_a_new_key_goes_through_at_once() {
        let fp = fingerprint("wrong");
        let r = KeyRefusal::first(&fp, 401, "invalid management key", t0());
        assert_eq!(gate(None, &fp, t0()), KeyGate::Open);
        assert_eq!(
            gate(Some(&r), &fp, t0() + Duration::minutes(179)),
            KeyGate::Closed {
                next_try_at: t0() + Duration::hours(3)
            }
        );
        assert_eq!(
            gate(Some(&r), &fp, t0() + Duration::hours(3)),
            KeyGate::TryOnce {
                why: TryReason::Automatic
            }
        );
        assert_eq!(gate(Some(&r), &fingerprint("right"), t0()), KeyGate::NewKey);
    }

    #[test]
    fn an_operator_retry_opens_once_and_a_new_refusal_closes_again() {
        let fp = fingerprint("wrong");
        let mut r = KeyRefusal::first(&fp, 401, "invalid management key", t0());
        r.retry_requested = true;
        assert_eq!(
            gate(Some(&r), &fp, t0() + Duration::minutes(1)),
            KeyGate::TryOnce {
                why: TryReason::Operator
            }
        );
        let again = r.again(401, "invalid management key", t0() + Duration::minutes(1));
        assert_eq!(again.attempts, 2);
        assert_eq!(again.window_attempts, 2);
        assert!(!again.retry_requested);
        assert_eq!(again.first_refused_at, t0());
        assert_eq!(
            gate(Some(&again), &fp, t0() + Duration::minutes(2)),
            KeyGate::Closed {
                next_try_at: t0() + Duration::minutes(181)
            }
        );
    }

    #[test]
    fn a_retry_that_would_be_cpas_fifth_counted_failure_is_refused_until_cpa_forgets() {
        let fp = fingerprint("wrong");
        let mut r = KeyRefusal::first(&fp, 401, "invalid management key", t0());
        for m in 1..=3 {
            assert!(!r.retry_would_ban(t0() + Duration::minutes(m)));
            r = r.again(401, "invalid management key", t0() + Duration::minutes(m));
        }
        assert_eq!((r.attempts, r.window_attempts), (4, 4));
        assert!(r.retry_would_ban(t0() + Duration::minutes(10)));
        assert_eq!(r.safe_retry_at(), t0() + Duration::minutes(123));
        assert!(!r.retry_would_ban(r.safe_retry_at()));
        // After CPA forgot, the count starts again at one.
        let later = r.again(401, "invalid management key", r.safe_retry_at());
        assert_eq!((later.attempts, later.window_attempts), (5, 1));
        // The automatic try counts from the last try, even one that was never answered.
        let claimed = KeyRefusal {
            tried_at: t0() + Duration::hours(4),
            ..KeyRefusal::first(&fp, 401, "x", t0())
        };
        assert_eq!(claimed.next_automatic_try_at(), t0() + Duration::hours(7));
    }

    #[test]
    fn fingerprints_differ_per_key_and_never_contain_it() {
        let a = fingerprint("mk-SECRET-1");
        assert_eq!(a.len(), 16);
        assert_ne!(a, fingerprint("mk-SECRET-2"));
        assert_eq!(a, fingerprint("mk-SECRET-1"));
        assert!(!a.contains("SECRET"));
        let r = KeyRefusal::first(&a, 401, "invalid management key", t0());
        assert!(
            r.detail()
                .contains("next automatic try at 2026-05-21T06:00:00+00:00")
        );
    }
}
