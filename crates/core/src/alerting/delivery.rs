//! Delivery of queued events (docs/rules/alerts.md §2): the record channels deliver, the channels,
//! where a queued message stands, and the retry back-off with its expiry. Pure: `now` and the
//! jitter come from the caller.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::details::AlertDetails;
use super::event::{EventKind, Severity};

/// A queued event as channels deliver it: the transition id is the idempotency key of every
/// message of the event (e-mail `Message-ID`, webhook `X-Quota-Patrol-Delivery`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertRecord {
    /// Transition id (UUID).
    pub id: String,
    pub site_id: String,
    pub site_name: String,
    pub kind: EventKind,
    pub at: DateTime<Utc>,
    pub reminder: bool,
    pub details: AlertDetails,
}

impl AlertRecord {
    /// Severity of the event.
    pub fn level(&self) -> Severity {
        self.kind.severity()
    }
}

/// A delivery channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    Email,
    Webhook,
}

impl ChannelKind {
    /// The API / database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Email => "email",
            ChannelKind::Webhook => "webhook",
        }
    }

    /// Parses the API / database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "email" => Some(ChannelKind::Email),
            "webhook" => Some(ChannelKind::Webhook),
            _ => None,
        }
    }
}

/// Where a queued message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Waiting for its (next) attempt.
    Pending,
    Delivered,
    /// Refused for good (e.g. SMTP 5xx, webhook 4xx): not retried.
    Failed,
    /// Not delivered within [`DELIVERY_EXPIRY_HOURS`].
    Expired,
}

impl DeliveryStatus {
    /// The API / database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Expired => "expired",
        }
    }

    /// Parses the API / database spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            DeliveryStatus::Pending,
            DeliveryStatus::Delivered,
            DeliveryStatus::Failed,
            DeliveryStatus::Expired,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
    }
}

/// What to do with a message after an attempt failed `failed_attempts` times in all: retry at
/// the returned instant, or `None` when the next try would fall after `expires_at`. `jitter`
/// as in [`retry_delay`].
pub fn next_attempt_at(
    failed_attempts: u32,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    jitter: f64,
) -> Option<DateTime<Utc>> {
    let at = now + retry_delay(failed_attempts, jitter);
    (at < expires_at).then_some(at)
}

/// A queued message that is not delivered within this many hours expires (docs/rules/alerts.md §2).
pub const DELIVERY_EXPIRY_HOURS: i64 = 24;

/// Wait before the next delivery attempt after `failed_attempts` failures: 1, 2, 4 … minutes,
/// at most one hour (docs/rules/alerts.md §2); `jitter` (0.0..=1.0, drawn by the caller from its
/// injected random source) takes off up to [`crate::retry::JITTER_SPREAD`] of it.
pub fn retry_delay(failed_attempts: u32, jitter: f64) -> Duration {
    crate::retry::Backoff::new(Duration::minutes(1), Duration::hours(1))
        .with_spread(crate::retry::JITTER_SPREAD)
        .delay(failed_attempts, jitter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn min(n: i64) -> Duration {
        Duration::minutes(n)
    }

    #[test]
    fn the_channel_and_status_names_round_trip() {
        for c in [ChannelKind::Email, ChannelKind::Webhook] {
            assert_eq!(ChannelKind::parse(c.as_str()), Some(c));
        }
        for d in [
            DeliveryStatus::Pending,
            DeliveryStatus::Delivered,
            DeliveryStatus::Failed,
            DeliveryStatus::Expired,
        ] {
            assert_eq!(DeliveryStatus::parse(d.as_str()), Some(d));
        }
    }

    #[test]
    fn a_retry_that_would_fall_after_the_expiry_is_not_scheduled() {
        let expires = t0() + Duration::hours(DELIVERY_EXPIRY_HOURS);
        assert_eq!(next_attempt_at(1, t0(), expires, 0.0), Some(t0() + min(1)));
        assert_eq!(
            next_attempt_at(9, expires - min(61), expires, 0.0),
            Some(expires - min(1))
        );
        assert_eq!(next_attempt_at(9, expires - min(60), expires, 0.0), None);
    }

    #[test]
    fn retries_back_off_from_one_minute_to_an_hour() {
        let got: Vec<i64> = (1..=9).map(|n| retry_delay(n, 0.0).num_minutes()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(
            retry_delay(9, 1.0),
            Duration::minutes(54),
            "jitter takes 10 % off"
        );
    }

    proptest! {
        #[test]
        fn backoff_is_capped_and_non_decreasing(n in 0u32..10_000, jitter in 0.0f64..=1.0) {
            let d = retry_delay(n, jitter);
            prop_assert!(d >= Duration::seconds(54) && d <= Duration::hours(1));
            prop_assert!(retry_delay(n + 1, jitter) >= d);
        }
    }
}
