//! E-mail alerts through lettre: SMTP (`smtp://`, `smtps://`, STARTTLS with `?tls=required`;
//! rustls, never native TLS) or, for the demo, `.eml` files in a folder. One multipart/alternative
//! message (plain text + HTML) per alert; its `Message-ID` is derived from the transition id so
//! a receiver can drop a copy sent again after a crash between SMTP's answer and our record.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::Error as SmtpError;
use lettre::{AsyncFileTransport, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use secrecy::ExposeSecret;

use super::render::Renderer;
use super::{AlertsError, BoxFuture, Channel, SendError};
use crate::config::{EmailConfig, EmailTransport};
use crate::core::alerting::{AlertRecord, ChannelKind};

enum Transport {
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
    Directory {
        files: AsyncFileTransport<Tokio1Executor>,
        dir: std::path::PathBuf,
    },
}

/// The e-mail channel.
pub struct EmailChannel {
    transport: Transport,
    from: Mailbox,
    to: Vec<Mailbox>,
    renderer: Arc<Renderer>,
    tz: Tz,
    timeout: StdDuration,
}

impl EmailChannel {
    /// Builds the transport from `[alerts.email]` (no connection is made here).
    pub fn new(cfg: &EmailConfig, renderer: Arc<Renderer>, tz: Tz) -> Result<Self, AlertsError> {
        let timeout = StdDuration::from_secs(cfg.timeout_seconds.max(1));
        let transport = match &cfg.transport {
            EmailTransport::Smtp { url, password } => {
                let mut url = reqwest::Url::parse(url)
                    .map_err(|e| AlertsError::Email(format!("smtp_url: {e}")))?;
                if let Some(pw) = password {
                    // lettre reads user and password from the URL and percent-decodes both.
                    url.set_password(Some(pw.expose_secret())).map_err(|()| {
                        AlertsError::Email("smtp_url cannot carry credentials".into())
                    })?;
                }
                let builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(url.as_str())
                    .map_err(|e| AlertsError::Email(format!("smtp_url: {e}")))?;
                Transport::Smtp(builder.timeout(Some(timeout)).build())
            }
            EmailTransport::Directory(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    AlertsError::Email(format!("cannot create {}: {e}", dir.display()))
                })?;
                Transport::Directory {
                    files: AsyncFileTransport::new(dir),
                    dir: dir.clone(),
                }
            }
        };
        Ok(Self {
            transport,
            from: cfg.from.clone(),
            to: cfg.to.clone(),
            renderer,
            tz,
            timeout,
        })
    }

    /// The message for `alert` as it would be sent at `now`.
    pub fn message(&self, alert: &AlertRecord, now: DateTime<Utc>) -> Result<Message, SendError> {
        let r = self
            .renderer
            .render(alert, self.tz, now)
            .map_err(|e| SendError::permanent(e.to_string()))?;
        let mut b = Message::builder()
            .from(self.from.clone())
            .subject(r.subject)
            .date(now.into())
            .message_id(Some(format!(
                "<{}.{}@{}>",
                alert.id,
                if alert.reminder { "reminder" } else { "alert" },
                self.from.email.domain()
            )));
        for to in &self.to {
            b = b.to(to.clone());
        }
        b.multipart(MultiPart::alternative_plain_html(r.text, r.html))
            .map_err(|e| SendError::permanent(format!("cannot build the message: {e}")))
    }

    async fn deliver(&self, alert: &AlertRecord, now: DateTime<Utc>) -> Result<String, SendError> {
        let msg = self.message(alert, now)?;
        match &self.transport {
            Transport::Smtp(t) => {
                let sent = tokio::time::timeout(self.timeout, t.send(msg))
                    .await
                    .map_err(|_| {
                        SendError::transient(format!(
                            "SMTP timed out after {} s",
                            self.timeout.as_secs()
                        ))
                    })?;
                match sent {
                    Ok(resp) => Ok(format!(
                        "{} {}",
                        resp.code(),
                        resp.message().collect::<Vec<_>>().join(" ")
                    )
                    .trim()
                    .to_string()),
                    Err(e) => Err(classify(&e)),
                }
            }
            Transport::Directory { files, dir } => files
                .send(msg)
                .await
                .map(|id| format!("written to {}", dir.join(format!("{id}.eml")).display()))
                .map_err(|e| SendError::transient(format!("cannot write the message: {e}"))),
        }
    }
}

/// SMTP 5xx refusals are permanent; everything else (4xx, connection, TLS, timeouts) transient.
fn classify(e: &SmtpError) -> SendError {
    let code = e.status().map(|c| c.to_string());
    let text = match code {
        Some(c) if !e.to_string().contains(&c) => format!("SMTP {c}: {e}"),
        _ => format!("SMTP: {e}"),
    };
    if e.is_permanent() {
        SendError::permanent(text)
    } else {
        SendError::transient(text)
    }
}

impl Channel for EmailChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Email
    }

    fn send<'a>(
        &'a self,
        alert: &'a AlertRecord,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(self.deliver(alert, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::alerting::{AlertDetails, EventKind};
    use chrono::TimeZone;

    fn cfg(transport: EmailTransport) -> EmailConfig {
        EmailConfig {
            transport,
            from: "quota-patrol <patrol@example.com>".parse().unwrap(),
            to: vec![
                "ops@example.com".parse().unwrap(),
                "Oncall <oncall@example.com>".parse().unwrap(),
            ],
            timeout_seconds: 2,
        }
    }

    fn alert() -> AlertRecord {
        AlertRecord {
            id: "e-1".into(),
            site_id: "main".into(),
            site_name: "Main".into(),
            kind: EventKind::AllExhausted,
            at: Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap(),
            reminder: false,
            details: AlertDetails::default(),
        }
    }

    #[test]
    fn the_message_names_every_recipient_and_carries_the_transition_id() {
        let ch = EmailChannel::new(
            &cfg(EmailTransport::Smtp {
                url: "smtp://127.0.0.1:2525".into(),
                password: None,
            }),
            Arc::new(Renderer::new()),
            chrono_tz::UTC,
        )
        .unwrap();
        let a = alert();
        let raw = String::from_utf8(ch.message(&a, a.at).unwrap().formatted()).unwrap();
        assert!(raw.contains("Message-ID: <e-1.alert@example.com>"), "{raw}");
        assert!(
            raw.contains("To: ops@example.com, Oncall <oncall@example.com>"),
            "{raw}"
        );
        assert!(raw.contains("multipart/alternative"), "{raw}");
        assert!(
            raw.contains("Date: Thu, 21 May 2026 03:00:00 +0000"),
            "{raw}"
        );
    }

    #[test]
    fn credentials_from_the_environment_do_not_break_the_url() {
        let ch = EmailChannel::new(
            &cfg(EmailTransport::Smtp {
                url: "smtps://patrol%40example.com@mail.example.com".into(),
                password: Some("p@ss:/w?rd".to_string().into()),
            }),
            Arc::new(Renderer::new()),
            chrono_tz::UTC,
        );
        assert!(ch.is_ok());
        let starttls = EmailChannel::new(
            &cfg(EmailTransport::Smtp {
                url: "smtp://mail.example.com:587?tls=required".into(),
                password: None,
            }),
            Arc::new(Renderer::new()),
            chrono_tz::UTC,
        );
        assert!(starttls.is_ok());
    }

    #[tokio::test]
    async fn the_directory_sink_writes_one_eml_file_per_message() {
        let dir = tempfile::tempdir().unwrap();
        let ch = EmailChannel::new(
            &cfg(EmailTransport::Directory(dir.path().join("mail"))),
            Arc::new(Renderer::new()),
            chrono_tz::UTC,
        )
        .unwrap();
        let a = alert();
        let answer = ch.send(&a, a.at).await.unwrap();
        assert!(answer.starts_with("written to "), "{answer}");
        let files: Vec<_> = std::fs::read_dir(dir.path().join("mail"))
            .unwrap()
            .collect();
        assert_eq!(files.len(), 1);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_transient_failure() {
        // Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
        let ch = EmailChannel::new(
            &cfg(EmailTransport::Smtp {
                url: "smtp://127.0.0.1:9".into(),
                password: None,
            }),
            Arc::new(Renderer::new()),
            chrono_tz::UTC,
        )
        .unwrap();
        let a = alert();
        let err = ch.send(&a, a.at).await.unwrap_err();
        assert!(err.retryable, "{err:?}");
    }
}
