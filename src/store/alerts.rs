//! Alerts (tables `alert_states`, `alert_events`, `alert_messages`, `alert_attempts`): the
//! persisted state of each (site, event family), the events raised by its transitions, the outbox
//! of messages with their delivery attempts, and the history the API shows. Callers write a state
//! change and its events and messages in one transaction (docs/rules/alerts.md §2).

use chrono::{DateTime, NaiveDate, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::stored::{StoredAlertDetails, StoredFamilyState};
use super::{StoreError, parse_opt_ts, parse_ts, ts};
use crate::core::alerting::{
    AlertDetails, AlertRecord, ChannelKind, DeliveryStatus, EventKind, Family, FamilyState,
    Severity, SiteAlertState,
};

/// The alert state of a site (families never stored start from their default).
pub fn load_state(c: &Connection, site_id: &str) -> Result<SiteAlertState, StoreError> {
    let mut stmt = c.prepare("SELECT family, state_json FROM alert_states WHERE site_id=?1")?;
    let rows = stmt.query_map([site_id], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut state = SiteAlertState::default();
    for row in rows {
        let (family, json) = row?;
        if let Some(f) = Family::parse(&family) {
            *state.get_mut(f) = serde_json::from_str::<StoredFamilyState>(&json)?.into();
        }
    }
    Ok(state)
}

/// Stores the state of one (site, family).
pub fn save_state(
    c: &Connection,
    site_id: &str,
    family: Family,
    state: &FamilyState,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO alert_states (site_id, family, state_json, updated_at) VALUES (?1,?2,?3,?4) \
         ON CONFLICT(site_id, family) DO UPDATE SET state_json=excluded.state_json, updated_at=excluded.updated_at",
        params![
            site_id,
            family.as_str(),
            serde_json::to_string(&StoredFamilyState::from(state))?,
            ts(now)
        ],
    )?;
    Ok(())
}

/// The local date of the site's last daily digest (`None`: never sent).
pub fn last_digest_date(c: &Connection, site_id: &str) -> Result<Option<NaiveDate>, StoreError> {
    let text: Option<String> = c
        .query_row(
            "SELECT local_date FROM alert_digests WHERE site_id=?1",
            [site_id],
            |r| r.get(0),
        )
        .optional()?;
    text.map(|t| {
        NaiveDate::parse_from_str(&t, "%Y-%m-%d")
            .map_err(|e| StoreError::Time(format!("alert_digests.local_date {t:?}: {e}")))
    })
    .transpose()
}

/// Records that the digest of `local_date` went out as event `event_id` (same transaction as
/// the event and its messages).
pub fn record_digest(
    c: &Connection,
    site_id: &str,
    local_date: NaiveDate,
    event_id: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO alert_digests (site_id, local_date, event_id, sent_at) VALUES (?1,?2,?3,?4) \
         ON CONFLICT(site_id) DO UPDATE SET local_date=excluded.local_date, event_id=excluded.event_id, sent_at=excluded.sent_at",
        params![site_id, local_date.format("%Y-%m-%d").to_string(), event_id, ts(now)],
    )?;
    Ok(())
}

/// Records an event raised by a transition.
pub fn insert_event(c: &Connection, r: &AlertRecord) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO alert_events (event_id, site_id, site_name, event, reminder, at, details_json) \
         VALUES (?1,?2,?3,?4,?5,?6,?7)",
        params![
            r.id,
            r.site_id,
            r.site_name,
            r.kind.as_str(),
            r.reminder,
            ts(r.at),
            serde_json::to_string(&StoredAlertDetails::from(&r.details))?
        ],
    )?;
    Ok(())
}

/// Queues the event's message on `channel`, due now; a second call for the same event and
/// channel changes nothing (one message per transition and channel).
pub fn enqueue(
    c: &Connection,
    event_id: &str,
    channel: ChannelKind,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT OR IGNORE INTO alert_messages (event_id, channel, status, attempts, created_at, next_attempt_at, expires_at) \
         VALUES (?1,?2,'pending',0,?3,?3,?4)",
        params![event_id, channel.as_str(), ts(now), ts(expires_at)],
    )?;
    Ok(())
}

/// A queued message whose attempt is due.
#[derive(Debug, Clone, PartialEq)]
pub struct DueMessage {
    pub message_id: i64,
    pub channel: ChannelKind,
    /// Attempts made so far.
    pub attempts: u32,
    pub expires_at: DateTime<Utc>,
    pub record: AlertRecord,
}

const EVENT_COLUMNS: &str =
    "e.event_id, e.site_id, e.site_name, e.event, e.reminder, e.at, e.details_json";

fn record_from(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<RawRecord> {
    Ok(RawRecord {
        id: r.get(at)?,
        site_id: r.get(at + 1)?,
        site_name: r.get(at + 2)?,
        kind: r.get(at + 3)?,
        reminder: r.get(at + 4)?,
        at: r.get(at + 5)?,
        details: r.get(at + 6)?,
    })
}

struct RawRecord {
    id: String,
    site_id: String,
    site_name: String,
    kind: String,
    reminder: bool,
    at: String,
    details: String,
}

impl RawRecord {
    /// The record; `None` for an event this build does not know (left untouched).
    fn parse(self) -> Result<Option<AlertRecord>, StoreError> {
        let Some(kind) = EventKind::parse(&self.kind) else {
            return Ok(None);
        };
        Ok(Some(AlertRecord {
            kind,
            id: self.id,
            site_id: self.site_id,
            site_name: self.site_name,
            reminder: self.reminder,
            at: parse_ts(&self.at)?,
            details: serde_json::from_str::<StoredAlertDetails>(&self.details)?.into(),
        }))
    }
}

/// Pending messages due at `now`, oldest first.
pub fn due(c: &Connection, now: DateTime<Utc>, limit: u32) -> Result<Vec<DueMessage>, StoreError> {
    let mut stmt = c.prepare(&format!(
        "SELECT m.message_id, m.channel, m.attempts, m.expires_at, {EVENT_COLUMNS} \
         FROM alert_messages m JOIN alert_events e ON e.event_id = m.event_id \
         WHERE m.status='pending' AND m.next_attempt_at <= ?1 ORDER BY m.message_id LIMIT ?2"
    ))?;
    let rows = stmt
        .query_map(params![ts(now), limit], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, u32>(2)?,
                r.get::<_, String>(3)?,
                record_from(r, 4)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::with_capacity(rows.len());
    for (id, channel, attempts, expires, raw) in rows {
        // A channel or event this build does not know stays queued, untouched.
        let (Some(channel), Some(record)) = (ChannelKind::parse(&channel), raw.parse()?) else {
            continue;
        };
        out.push(DueMessage {
            message_id: id,
            channel,
            attempts,
            expires_at: parse_ts(&expires)?,
            record,
        });
    }
    Ok(out)
}

/// Claims a due message for one attempt by moving its next attempt to `lease_until`, so no
/// other delivery pass (another task, or a process sharing the file) takes it meanwhile; if the
/// attempt is never recorded (a crash), the message is due again after the lease. `false` when
/// the message is no longer pending and due (someone else took it).
pub fn claim(
    c: &Connection,
    message_id: i64,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
) -> Result<bool, StoreError> {
    Ok(c.execute(
        "UPDATE alert_messages SET next_attempt_at=?3 \
         WHERE message_id=?1 AND status='pending' AND next_attempt_at <= ?2",
        params![message_id, ts(now), ts(lease_until)],
    )? == 1)
}

/// Result of one delivery attempt (or of giving up).
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptResult {
    /// Accepted: SMTP answer or HTTP status in `detail`.
    Delivered { detail: String },
    /// Failed transiently; the next attempt is at `next_at`.
    Retry {
        detail: String,
        next_at: DateTime<Utc>,
    },
    /// Refused for good (SMTP 5xx, HTTP 4xx): not retried.
    Failed { detail: String },
    /// The message expired: not attempted (`None`), or this attempt failed and no retry fits
    /// before the expiry (`Some`).
    Expired { detail: Option<String> },
}

/// Records an attempt on a pending message and moves its status; a message that is no longer
/// pending is left alone (returns `false`), so an attempt is never recorded twice as delivered.
pub fn record_attempt(
    c: &mut Connection,
    message_id: i64,
    at: DateTime<Utc>,
    result: &AttemptResult,
) -> Result<bool, StoreError> {
    let tx = c.transaction()?;
    let pending: Option<u32> = tx
        .query_row(
            "SELECT attempts FROM alert_messages WHERE message_id=?1 AND status='pending'",
            [message_id],
            |r| r.get(0),
        )
        .optional()?;
    if pending.is_none() {
        return Ok(false);
    }
    let now = ts(at);
    let (success, detail) = match result {
        AttemptResult::Delivered { detail } => (true, Some(detail)),
        AttemptResult::Retry { detail, .. } | AttemptResult::Failed { detail } => {
            (false, Some(detail))
        }
        AttemptResult::Expired { detail } => (false, detail.as_ref()),
    };
    if let Some(d) = detail {
        tx.execute(
            "INSERT INTO alert_attempts (message_id, at, success, detail) VALUES (?1,?2,?3,?4)",
            params![message_id, now, success, d],
        )?;
    }
    match result {
        AttemptResult::Delivered { .. } => tx.execute(
            "UPDATE alert_messages SET status='delivered', attempts=attempts+1, delivered_at=?2, last_error=NULL WHERE message_id=?1",
            params![message_id, now],
        )?,
        AttemptResult::Retry { detail, next_at } => tx.execute(
            "UPDATE alert_messages SET attempts=attempts+1, next_attempt_at=?2, last_error=?3 WHERE message_id=?1",
            params![message_id, ts(*next_at), detail],
        )?,
        AttemptResult::Failed { detail } => tx.execute(
            "UPDATE alert_messages SET status='failed', attempts=attempts+1, last_error=?2 WHERE message_id=?1",
            params![message_id, detail],
        )?,
        AttemptResult::Expired { detail: None } => tx.execute(
            "UPDATE alert_messages SET status='expired', last_error=COALESCE(last_error, 'expired before a delivery attempt') WHERE message_id=?1",
            params![message_id],
        )?,
        AttemptResult::Expired { detail: Some(d) } => tx.execute(
            "UPDATE alert_messages SET status='expired', attempts=attempts+1, last_error=?2 WHERE message_id=?1",
            params![message_id, d],
        )?,
    };
    tx.commit()?;
    Ok(true)
}

/// One delivery attempt (`GET /api/alerts`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryAttemptView {
    pub at: DateTime<Utc>,
    pub success: bool,
    /// SMTP answer, HTTP status or the error.
    pub detail: String,
}

/// One queued message of an event (`GET /api/alerts`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertMessageView {
    pub channel: ChannelKind,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub created_at: DateTime<Utc>,
    /// Next attempt (pending messages only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub expires_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// Attempts, oldest first.
    pub deliveries: Vec<DeliveryAttemptView>,
}

/// One alert event with its messages (`GET /api/alerts`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertEventView {
    /// Transition id: the idempotency key of the event's messages.
    pub event_id: String,
    pub site_id: String,
    pub site_name: String,
    pub event: EventKind,
    pub level: Severity,
    /// A `repeatHours` reminder of a condition already told.
    pub reminder: bool,
    pub at: DateTime<Utc>,
    pub details: AlertDetails,
    pub messages: Vec<AlertMessageView>,
}

/// Events newest first (of one site, or of all), each with its messages and their attempts.
pub fn history(
    c: &Connection,
    site_id: Option<&str>,
    limit: u32,
) -> Result<Vec<AlertEventView>, StoreError> {
    let mut stmt = c.prepare(&format!(
        "SELECT {EVENT_COLUMNS} FROM alert_events e WHERE (?1 IS NULL OR e.site_id = ?1) \
         ORDER BY e.at DESC, e.rowid DESC LIMIT ?2"
    ))?;
    let raws = stmt
        .query_map(params![site_id, limit], |r| record_from(r, 0))?
        .collect::<Result<Vec<_>, _>>()?;
    let mut messages = c.prepare(
        "SELECT message_id, channel, status, attempts, created_at, next_attempt_at, expires_at, delivered_at, last_error \
         FROM alert_messages WHERE event_id=?1 ORDER BY message_id",
    )?;
    let mut attempts = c.prepare(
        "SELECT at, success, detail FROM alert_attempts WHERE message_id=?1 ORDER BY attempt_id",
    )?;
    let mut out = Vec::with_capacity(raws.len());
    for raw in raws {
        let Some(r) = raw.parse()? else { continue };
        let rows = messages
            .query_map([&r.id], |m| {
                Ok((
                    m.get::<_, i64>(0)?,
                    m.get::<_, String>(1)?,
                    m.get::<_, String>(2)?,
                    m.get::<_, u32>(3)?,
                    m.get::<_, String>(4)?,
                    m.get::<_, String>(5)?,
                    m.get::<_, String>(6)?,
                    m.get::<_, Option<String>>(7)?,
                    m.get::<_, Option<String>>(8)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let mut views = Vec::with_capacity(rows.len());
        for (id, channel, status, n, created, next, expires, delivered, error) in rows {
            let (Some(channel), Some(status)) =
                (ChannelKind::parse(&channel), DeliveryStatus::parse(&status))
            else {
                continue;
            };
            let deliveries = attempts
                .query_map([id], |a| {
                    Ok((
                        a.get::<_, String>(0)?,
                        a.get::<_, bool>(1)?,
                        a.get::<_, String>(2)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .map(|(at, success, detail)| {
                    Ok(DeliveryAttemptView {
                        at: parse_ts(&at)?,
                        success,
                        detail,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            views.push(AlertMessageView {
                channel,
                status,
                attempts: n,
                created_at: parse_ts(&created)?,
                next_attempt_at: (status == DeliveryStatus::Pending)
                    .then(|| parse_ts(&next))
                    .transpose()?,
                expires_at: parse_ts(&expires)?,
                delivered_at: parse_opt_ts(delivered)?,
                last_error: error,
                deliveries,
            });
        }
        out.push(AlertEventView {
            level: r.level(),
            event_id: r.id,
            site_id: r.site_id,
            site_name: r.site_name,
            event: r.kind,
            reminder: r.reminder,
            at: r.at,
            details: r.details,
            messages: views,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::settings::PatrolSettings;
    use crate::core::site::Site;
    use crate::store::Store;
    use chrono::{Duration, TimeZone};

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn store_with_site() -> Store {
        let store = Store::open_in_memory().unwrap();
        store
            .run_blocking(|c| {
                crate::store::sites::insert(
                    c,
                    &Site {
                        site_id: "s".into(),
                        site_name: "S".into(),
                        site_enabled: true,
                        cpa_base_url: "http://127.0.0.1:9".into(),
                        management_key: None,
                        management_key_env: None,
                        provider: "codex".into(),
                        usage_url: "http://127.0.0.1:9/u".into(),
                        user_agent: "ua".into(),
                        settings: PatrolSettings::default(),
                        account_policies: Default::default(),
                    },
                    t0(),
                )
            })
            .unwrap();
        store
    }

    fn record(id: &str, at: DateTime<Utc>) -> AlertRecord {
        AlertRecord {
            id: id.into(),
            site_id: "s".into(),
            site_name: "S".into(),
            kind: EventKind::AllExhausted,
            at,
            reminder: false,
            details: AlertDetails {
                total_accounts: Some(2),
                earliest_reset_at: Some(at + Duration::hours(3)),
                ..Default::default()
            },
        }
    }

    #[test]
    fn states_round_trip_per_family() {
        let store = store_with_site();
        let st = FamilyState {
            raised: true,
            raised_at: Some(t0()),
            pending_accounts: vec!["a".into()],
            ..Default::default()
        };
        let loaded = store
            .run_blocking(|c| {
                save_state(c, "s", Family::Reachability, &st, t0())?;
                save_state(c, "s", Family::Reachability, &st, t0())?;
                load_state(c, "s")
            })
            .unwrap();
        assert_eq!(loaded.reachability, st);
        assert_eq!(loaded.exhaustion, FamilyState::default());
    }

    #[test]
    fn a_message_is_queued_once_per_event_and_channel_and_delivered_once() {
        let store = store_with_site();
        let expires = t0() + Duration::hours(24);
        store
            .run_blocking(|c| {
                insert_event(c, &record("e1", t0()))?;
                enqueue(c, "e1", ChannelKind::Email, t0(), expires)?;
                enqueue(c, "e1", ChannelKind::Email, t0(), expires)?;
                enqueue(c, "e1", ChannelKind::Webhook, t0(), expires)
            })
            .unwrap();
        let due_now = store.run_blocking(|c| due(c, t0(), 10)).unwrap();
        assert_eq!(due_now.len(), 2);
        assert_eq!(due_now[0].record, record("e1", t0()));
        let email = due_now[0].message_id;
        let lease = t0() + Duration::seconds(30);
        assert!(
            store
                .run_blocking(|c| claim(c, email, t0(), lease))
                .unwrap()
        );
        assert!(
            !store
                .run_blocking(|c| claim(c, email, t0(), lease))
                .unwrap(),
            "a claimed message is nobody else's"
        );
        assert_eq!(store.run_blocking(|c| due(c, t0(), 10)).unwrap().len(), 1);
        let retry_at = t0() + Duration::minutes(1);
        store
            .run_blocking(|c| {
                record_attempt(
                    c,
                    email,
                    t0(),
                    &AttemptResult::Retry {
                        detail: "421 busy".into(),
                        next_at: retry_at,
                    },
                )
            })
            .unwrap();
        let later = store.run_blocking(|c| due(c, t0(), 10)).unwrap();
        assert_eq!(later.len(), 1, "the e-mail waits for its retry");
        let at_retry = store.run_blocking(|c| due(c, retry_at, 10)).unwrap();
        assert_eq!(at_retry[0].attempts, 1);
        let delivered = AttemptResult::Delivered {
            detail: "250 OK".into(),
        };
        assert!(
            store
                .run_blocking(|c| record_attempt(c, email, retry_at, &delivered))
                .unwrap()
        );
        assert!(
            !store
                .run_blocking(|c| record_attempt(c, email, retry_at, &delivered))
                .unwrap(),
            "a delivered message is never delivered again"
        );
        let h = store.run_blocking(|c| history(c, Some("s"), 10)).unwrap();
        let m = &h[0].messages[0];
        assert_eq!(m.status, DeliveryStatus::Delivered);
        assert_eq!(m.attempts, 2);
        assert_eq!(m.next_attempt_at, None);
        assert_eq!(
            m.deliveries
                .iter()
                .map(|d| (d.success, d.detail.as_str()))
                .collect::<Vec<_>>(),
            vec![(false, "421 busy"), (true, "250 OK")]
        );
        assert_eq!(h[0].messages[1].status, DeliveryStatus::Pending);
        assert_eq!(h[0].level, Severity::Critical);
    }

    #[test]
    fn history_is_newest_first_limited_and_filtered_by_site() {
        let store = store_with_site();
        store
            .run_blocking(|c| {
                for i in 0..3 {
                    insert_event(c, &record(&format!("e{i}"), t0() + Duration::minutes(i)))?;
                }
                Ok(())
            })
            .unwrap();
        let h = store.run_blocking(|c| history(c, None, 2)).unwrap();
        assert_eq!(
            h.iter().map(|e| e.event_id.as_str()).collect::<Vec<_>>(),
            vec!["e2", "e1"]
        );
        assert!(
            store
                .run_blocking(|c| history(c, Some("other"), 10))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn expiry_and_permanent_failures_end_the_message() {
        let store = store_with_site();
        store
            .run_blocking(|c| {
                insert_event(c, &record("e1", t0()))?;
                enqueue(c, "e1", ChannelKind::Email, t0(), t0())?;
                enqueue(c, "e1", ChannelKind::Webhook, t0(), t0())
            })
            .unwrap();
        let ids: Vec<i64> = store
            .run_blocking(|c| due(c, t0(), 10))
            .unwrap()
            .iter()
            .map(|m| m.message_id)
            .collect();
        store
            .run_blocking(|c| {
                record_attempt(c, ids[0], t0(), &AttemptResult::Expired { detail: None })?;
                record_attempt(
                    c,
                    ids[1],
                    t0(),
                    &AttemptResult::Failed {
                        detail: "HTTP 404".into(),
                    },
                )
            })
            .unwrap();
        assert!(store.run_blocking(|c| due(c, t0(), 10)).unwrap().is_empty());
        let h = store.run_blocking(|c| history(c, None, 10)).unwrap();
        assert_eq!(h[0].messages[0].status, DeliveryStatus::Expired);
        assert!(h[0].messages[0].deliveries.is_empty());
        assert_eq!(h[0].messages[1].status, DeliveryStatus::Failed);
        assert_eq!(h[0].messages[1].last_error.as_deref(), Some("HTTP 404"));
    }

    #[test]
    fn deleting_a_site_takes_its_alerts() {
        let store = store_with_site();
        store
            .run_blocking(|c| {
                insert_event(c, &record("e1", t0()))?;
                enqueue(c, "e1", ChannelKind::Email, t0(), t0())?;
                save_state(c, "s", Family::Exhaustion, &FamilyState::default(), t0())?;
                crate::store::sites::delete(c, "s")
            })
            .unwrap();
        let n: i64 = store
            .run_blocking(|c| {
                Ok(c.query_row(
                    "SELECT (SELECT COUNT(*) FROM alert_events) + (SELECT COUNT(*) FROM alert_messages) + (SELECT COUNT(*) FROM alert_states)",
                    [],
                    |r| r.get(0),
                )?)
            })
            .unwrap();
        assert_eq!(n, 0);
    }
}
