-- 0002: alerts (docs/rules/alerts.md). The alert state of each (site, event family), the events its
-- transitions raised, the outbox (one message per event and channel, written in the same
-- transaction as the state change) and every delivery attempt. The event id is the transition id:
-- the idempotency key of its messages. Times are RFC 3339 UTC text.

CREATE TABLE alert_states (
    site_id    TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    -- exhaustion | min_active | invalid_accounts | reachability
    family     TEXT NOT NULL,
    state_json TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (site_id, family)
);

CREATE TABLE alert_events (
    event_id     TEXT PRIMARY KEY,
    site_id      TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    site_name    TEXT NOT NULL,
    -- all_exhausted | recovered | below_min_active | invalid_accounts | site_unreachable | site_reachable
    event        TEXT NOT NULL,
    reminder     INTEGER NOT NULL DEFAULT 0,
    at           TEXT NOT NULL,
    -- Accounts table, earliest reset, invalid accounts, CPA contact times (AlertDetails).
    details_json TEXT NOT NULL
);
CREATE INDEX alert_events_by_time ON alert_events (at DESC);
CREATE INDEX alert_events_by_site ON alert_events (site_id, at DESC);

CREATE TABLE alert_messages (
    message_id      INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL REFERENCES alert_events(event_id) ON DELETE CASCADE,
    -- email | webhook
    channel         TEXT NOT NULL,
    -- pending | delivered | failed | expired
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    next_attempt_at TEXT NOT NULL,
    expires_at      TEXT NOT NULL,
    delivered_at    TEXT,
    last_error      TEXT,
    UNIQUE (event_id, channel)
);
CREATE INDEX alert_messages_due ON alert_messages (status, next_attempt_at);

CREATE TABLE alert_attempts (
    attempt_id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id INTEGER NOT NULL REFERENCES alert_messages(message_id) ON DELETE CASCADE,
    at         TEXT NOT NULL,
    success    INTEGER NOT NULL,
    -- SMTP answer, HTTP status or the error (never a secret).
    detail     TEXT NOT NULL
);
CREATE INDEX alert_attempts_by_message ON alert_attempts (message_id, attempt_id);
