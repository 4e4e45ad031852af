-- 0007: the daily digest (docs/rules/alerts.md §4, docs/rules/alerts.md §1 `daily_digest`). Per site, the
-- local date (in `[alerts] timezone`) of the last digest, written in the same transaction as
-- its event and outbox messages, so a restart neither resends nor forgets the day's digest.
-- The pool_low family needs no table: its state is a row of alert_states (family 'pool_low').

CREATE TABLE alert_digests (
    site_id    TEXT PRIMARY KEY REFERENCES sites(site_id) ON DELETE CASCADE,
    -- YYYY-MM-DD, local date of the last digest.
    local_date TEXT NOT NULL,
    event_id   TEXT NOT NULL,
    sent_at    TEXT NOT NULL
);
