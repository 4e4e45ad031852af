//! ADAPTER for alert delivery (docs/rules/alerts.md): the [`Channel`] trait every sender
//! implements, e-mail through lettre ([`email`]), the JSON webhook ([`webhook`]) and the templates
//! ([`render`]). Channels send one already-queued [`AlertRecord`]; deciding *what* to send
//! (core::alerting) and the outbox with its retries (jobs::alerts) live elsewhere.

pub mod email;
pub mod render;
pub mod webhook;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::AlertsConfig;
use crate::core::alerting::{AlertRecord, ChannelKind};

/// A boxed future (object-safe async methods).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a message was not delivered; errors know whether a retry may help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SendError {
    /// What the server said or what failed (never a secret, never the webhook URL).
    pub message: String,
    /// Transient (connection refused, timeout, SMTP 4xx, HTTP 5xx/429): retry later.
    pub retryable: bool,
}

impl SendError {
    /// A failure a later attempt may overcome.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }

    /// A refusal that will not change by retrying.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }
}

/// A delivery channel: sends one alert now, answers what the other side said.
pub trait Channel: Send + Sync {
    /// Which channel this is.
    fn kind(&self) -> ChannelKind;

    /// Delivers `alert`; `now` is the delivery time (relative times, the e-mail `Date`).
    /// `Ok` carries the server's answer (SMTP reply, HTTP status).
    fn send<'a>(
        &'a self,
        alert: &'a AlertRecord,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<String, SendError>>;
}

/// A channel could not be built from the config.
#[derive(Debug, thiserror::Error)]
pub enum AlertsError {
    #[error("alerts.email: {0}")]
    Email(String),
    #[error("alerts.webhook: {0}")]
    Webhook(String),
}

/// The configured channels.
#[derive(Clone, Default)]
pub struct Channels {
    list: Vec<Arc<dyn Channel>>,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.list.iter().map(|c| c.kind()))
            .finish()
    }
}

impl Channels {
    /// The channels of `[alerts.email]` and `[alerts.webhook]` (either may be absent).
    pub fn from_config(cfg: &AlertsConfig) -> Result<Self, AlertsError> {
        let renderer = Arc::new(render::Renderer::new());
        let mut list: Vec<Arc<dyn Channel>> = Vec::new();
        if let Some(e) = &cfg.email {
            list.push(Arc::new(email::EmailChannel::new(
                e,
                renderer.clone(),
                cfg.timezone,
            )?));
        }
        if let Some(w) = &cfg.webhook {
            list.push(Arc::new(webhook::WebhookChannel::new(w)?));
        }
        Ok(Self { list })
    }

    /// Given channels (tests).
    pub fn new(list: Vec<Arc<dyn Channel>>) -> Self {
        Self { list }
    }

    /// Every channel, e-mail first.
    pub fn all(&self) -> &[Arc<dyn Channel>] {
        &self.list
    }

    /// The channel of `kind`, if configured.
    pub fn get(&self, kind: ChannelKind) -> Option<&Arc<dyn Channel>> {
        self.list.iter().find(|c| c.kind() == kind)
    }

    /// Kinds of the configured channels.
    pub fn kinds(&self) -> Vec<ChannelKind> {
        self.list.iter().map(|c| c.kind()).collect()
    }
}
