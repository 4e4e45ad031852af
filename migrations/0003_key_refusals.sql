-- 0003: a management key CPA refused, per site. CPA bans a client IP after 5 refused keys, so
-- this survives restarts and one-shot `inspect` runs: the refused key is never tried again
-- automatically more than once per 3 hours. Holds a fingerprint of the key, never the key.
CREATE TABLE key_refusals (
    site_id          TEXT PRIMARY KEY REFERENCES sites(site_id) ON DELETE CASCADE,
    key_fingerprint  TEXT NOT NULL,
    first_refused_at TEXT NOT NULL,
    refused_at       TEXT NOT NULL,
    -- Last try (claimed before the call): the next automatic try is 3 h after it.
    tried_at         TEXT NOT NULL,
    attempts         INTEGER NOT NULL,
    -- Refused attempts CPA still counts (each within 2 h of the previous one).
    window_attempts  INTEGER NOT NULL,
    status           INTEGER NOT NULL,
    message          TEXT NOT NULL,
    retry_requested  INTEGER NOT NULL DEFAULT 0
);
