//! Webhook alerts: a JSON `POST` of `{event, siteId, level, at, earliestResetAt, accounts, ...}`
//! (times RFC 3339 UTC, as in the API), signed with `X-Quota-Patrol-Signature:
//! sha256=<hex HMAC-SHA256 of the body>` when a shared secret is configured. The transition id
//! travels as `X-Quota-Patrol-Delivery` so receivers can drop a repeated delivery. The URL is
//! never logged or stored: webhook URLs often carry a token.

use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use sha2::Sha256;

use super::{AlertsError, BoxFuture, Channel, SendError};
use crate::config::WebhookConfig;
use crate::core::alerting::{AlertDetails, AlertRecord, ChannelKind, EventKind, Severity};

/// Header carrying the body's HMAC-SHA256.
pub const SIGNATURE_HEADER: &str = "X-Quota-Patrol-Signature";
/// Header carrying the transition id (idempotency key).
pub const DELIVERY_HEADER: &str = "X-Quota-Patrol-Delivery";
/// Header carrying the event name.
pub const EVENT_HEADER: &str = "X-Quota-Patrol-Event";

/// The JSON body of a webhook call.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookPayload<'a> {
    pub event: EventKind,
    /// Transition id (also in `X-Quota-Patrol-Delivery`).
    pub id: &'a str,
    pub site_id: &'a str,
    pub site_name: &'a str,
    pub level: Severity,
    pub at: DateTime<Utc>,
    pub reminder: bool,
    /// `earliestResetAt`, `accounts`, counts, invalid accounts, CPA contact times.
    #[serde(flatten)]
    pub details: &'a AlertDetails,
}

impl<'a> WebhookPayload<'a> {
    /// The body of `alert`.
    pub fn of(alert: &'a AlertRecord) -> Self {
        Self {
            event: alert.kind,
            id: &alert.id,
            site_id: &alert.site_id,
            site_name: &alert.site_name,
            level: alert.level(),
            at: alert.at,
            reminder: alert.reminder,
            details: &alert.details,
        }
    }
}

/// `sha256=<lower-case hex of HMAC-SHA256(secret, body)>`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any size");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The webhook channel.
pub struct WebhookChannel {
    client: reqwest::Client,
    url: String,
    secret: Option<SecretString>,
}

impl WebhookChannel {
    /// A client with the configured timeout.
    pub fn new(cfg: &WebhookConfig) -> Result<Self, AlertsError> {
        let client = reqwest::Client::builder()
            .timeout(StdDuration::from_secs(cfg.timeout_seconds.max(1)))
            .user_agent(concat!("quota-patrol/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| AlertsError::Webhook(e.without_url().to_string()))?;
        Ok(Self {
            client,
            url: cfg.url.clone(),
            secret: cfg.secret.clone(),
        })
    }

    async fn deliver(&self, alert: &AlertRecord) -> Result<String, SendError> {
        let body = serde_json::to_vec(&WebhookPayload::of(alert))
            .map_err(|e| SendError::permanent(format!("cannot encode the payload: {e}")))?;
        let mut req = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(DELIVERY_HEADER, &alert.id)
            .header(EVENT_HEADER, alert.kind.as_str());
        if let Some(s) = &self.secret {
            req = req.header(
                SIGNATURE_HEADER,
                signature(s.expose_secret().as_bytes(), &body),
            );
        }
        let resp = req.body(body).send().await.map_err(|e| {
            // Without the URL: it may carry a token.
            SendError::transient(format!("webhook request failed: {}", e.without_url()))
        })?;
        let status = resp.status();
        let text = format!("HTTP {}", status.as_u16());
        if status.is_success() {
            Ok(text)
        } else if status.is_server_error()
            || status == reqwest::StatusCode::TOO_MANY_REQUESTS
            || status == reqwest::StatusCode::REQUEST_TIMEOUT
        {
            Err(SendError::transient(text))
        } else {
            Err(SendError::permanent(text))
        }
    }
}

impl Channel for WebhookChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Webhook
    }

    fn send<'a>(
        &'a self,
        alert: &'a AlertRecord,
        _now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(self.deliver(alert))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::alerting::AccountLine;
    use chrono::TimeZone;

    #[test]
    fn the_signature_is_the_hex_hmac_sha256_of_the_body() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn the_payload_has_the_documented_camel_case_fields() {
        let at = Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap();
        let a = AlertRecord {
            id: "t-1".into(),
            site_id: "main".into(),
            site_name: "Main".into(),
            kind: EventKind::AllExhausted,
            at,
            reminder: false,
            details: AlertDetails {
                earliest_reset_at: Some(at),
                accounts: vec![AccountLine {
                    name: "a.json".into(),
                    display_name: "a@example.com".into(),
                    plan: Some("plus".into()),
                    disabled: true,
                    usable: false,
                    exhausted: true,
                    weekly_used_percent: Some(97.0),
                    long_window: None,
                    five_hour_used_percent: None,
                    reset_at: Some(at),
                }],
                ..Default::default()
            },
        };
        let v = serde_json::to_value(WebhookPayload::of(&a)).unwrap();
        assert_eq!(v["event"], "all_exhausted");
        assert_eq!(v["siteId"], "main");
        assert_eq!(v["level"], "critical");
        assert_eq!(v["at"], "2026-05-21T03:00:00Z");
        assert_eq!(v["earliestResetAt"], "2026-05-21T03:00:00Z");
        assert_eq!(v["accounts"][0]["displayName"], "a@example.com");
        assert_eq!(v["accounts"][0]["weeklyUsedPercent"], 97.0);
    }
}
