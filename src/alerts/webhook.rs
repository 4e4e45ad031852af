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
use crate::core::alerting::pool::AccountLine;
use crate::core::alerting::{AlertDetails, AlertRecord, ChannelKind, EventKind, Severity};
use crate::core::digest::Digest;
use crate::core::quota::WindowKind;

/// Header carrying the body's HMAC-SHA256.
pub const SIGNATURE_HEADER: &str = "X-Quota-Patrol-Signature";
/// Header carrying the transition id (idempotency key).
pub const DELIVERY_HEADER: &str = "X-Quota-Patrol-Delivery";
/// Header carrying the event name.
pub const EVENT_HEADER: &str = "X-Quota-Patrol-Event";

/// The JSON body of a webhook call, version 1 (the only one so far): what receivers parse, so
/// its field names are kept here apart from the core types (a core rename does not change
/// it). `fixtures/webhook/*.json` pin it.
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
    pub details: WebhookDetails<'a>,
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
            details: WebhookDetails::of(&alert.details),
        }
    }
}

/// The part of a [`WebhookPayload`] that depends on the event (flattened into it); fields an
/// event does not use are `null`, `0` or `[]`. Times RFC 3339 UTC.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDetails<'a> {
    pub total_accounts: Option<usize>,
    pub usable_accounts: Option<usize>,
    pub earliest_reset_at: Option<DateTime<Utc>>,
    /// Soonest reset first.
    pub accounts: Vec<WebhookAccount<'a>>,
    /// Accounts left out of `accounts` (table size limit).
    pub omitted_accounts: usize,
    /// `invalid_accounts`: the accounts deleted or disabled as invalid.
    pub invalid_accounts: &'a [String],
    /// `below_min_active`: the configured minimum.
    pub min_active: Option<u32>,
    pub last_contact_at: Option<DateTime<Utc>>,
    pub failing_since: Option<DateTime<Utc>>,
    pub cause: Option<&'a str>,
    /// Clearing events: when the condition was told.
    pub raised_at: Option<DateTime<Utc>>,
    pub projected_dry_at: Option<DateTime<Utc>>,
    pub forecast_reset_at: Option<DateTime<Utc>>,
    /// Percent per hour.
    pub burn_per_hour: Option<f64>,
    pub early_warning_minutes: Option<i64>,
    pub low_capacity_accounts: Option<u32>,
    /// `daily_digest`: the summary of the last 24 h (the core's serde form, pinned by
    /// `fixtures/webhook/daily_digest.json`).
    pub digest: Option<&'a Digest>,
}

impl<'a> WebhookDetails<'a> {
    fn of(d: &'a AlertDetails) -> Self {
        Self {
            total_accounts: d.total_accounts,
            usable_accounts: d.usable_accounts,
            earliest_reset_at: d.earliest_reset_at,
            accounts: d.accounts.iter().map(WebhookAccount::of).collect(),
            omitted_accounts: d.omitted_accounts,
            invalid_accounts: &d.invalid_accounts,
            min_active: d.min_active,
            last_contact_at: d.last_contact_at,
            failing_since: d.failing_since,
            cause: d.cause.as_deref(),
            raised_at: d.raised_at,
            projected_dry_at: d.projected_dry_at,
            forecast_reset_at: d.forecast_reset_at,
            burn_per_hour: d.burn_per_hour,
            early_warning_minutes: d.early_warning_minutes,
            low_capacity_accounts: d.low_capacity_accounts,
            digest: d.digest.as_ref(),
        }
    }
}

/// One row of `accounts` in a [`WebhookDetails`].
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAccount<'a> {
    /// Auth-file name.
    pub name: &'a str,
    pub display_name: &'a str,
    pub plan: Option<&'a str>,
    pub disabled: bool,
    pub usable: bool,
    pub exhausted: bool,
    /// Main weekly (or monthly) used percent.
    pub weekly_used_percent: Option<f64>,
    /// `weekly` or `monthly`: the kind of that window.
    pub long_window: Option<WindowKind>,
    pub five_hour_used_percent: Option<f64>,
    pub reset_at: Option<DateTime<Utc>>,
}

impl<'a> WebhookAccount<'a> {
    fn of(l: &'a AccountLine) -> Self {
        Self {
            name: &l.name,
            display_name: &l.display_name,
            plan: l.plan.as_deref(),
            disabled: l.disabled,
            usable: l.usable,
            exhausted: l.exhausted,
            weekly_used_percent: l.weekly_used_percent,
            long_window: l.long_window,
            five_hour_used_percent: l.five_hour_used_percent,
            reset_at: l.reset_at,
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
    use crate::store::stored::tests as stored;
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
    /// A record of `kind` at the fixtures' instant with `details`.
    fn record(kind: EventKind, details: AlertDetails) -> AlertRecord {
        AlertRecord {
            id: "7f1c2d3e-0000-4000-8000-000000000001".into(),
            site_id: "main".into(),
            site_name: "Main CPA".into(),
            kind,
            at: stored::t0(),
            reminder: false,
            details,
        }
    }

    /// The golden bodies, one per main event kind.
    fn golden_records() -> Vec<AlertRecord> {
        let at = stored::t0();
        vec![
            record(EventKind::AllExhausted, stored::fixed_details()),
            record(
                EventKind::InvalidAccounts,
                AlertDetails {
                    total_accounts: Some(2),
                    usable_accounts: Some(1),
                    invalid_accounts: vec!["codex-bob@example.com-free.json".into()],
                    ..Default::default()
                },
            ),
            record(
                EventKind::SiteUnreachable,
                AlertDetails {
                    last_contact_at: Some(at - chrono::Duration::minutes(20)),
                    failing_since: Some(at - chrono::Duration::minutes(18)),
                    cause: Some("CPA answered HTTP 502".into()),
                    ..Default::default()
                },
            ),
            record(EventKind::DailyDigest, stored::fixed_digest_details()),
        ]
    }

    #[test]
    fn the_bodies_match_their_golden_files() {
        for a in golden_records() {
            let rel = format!("webhook/{}.json", a.kind.as_str());
            crate::golden::check(&rel, &crate::golden::pretty(&WebhookPayload::of(&a)));
        }
    }
}
