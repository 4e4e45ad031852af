-- 0001: initial schema. Sites and their settings, accounts as last listed by CPA, probe state
-- (last good snapshot + errors) and snapshot history, disable reasons with owner, exceptions,
-- the priority list, the operation log, inspection runs and handled quota resets.
-- Times are RFC 3339 UTC text. Append-only: later changes go in new files.

CREATE TABLE sites (
    site_id         TEXT PRIMARY KEY,
    site_name       TEXT NOT NULL,
    site_enabled    INTEGER NOT NULL DEFAULT 1,
    cpa_base_url    TEXT NOT NULL,
    -- Plaintext management key set through the API; NULL when it comes from the environment.
    management_key  TEXT,
    -- Name of the environment variable holding the key (config bootstrap).
    management_key_env TEXT,
    provider        TEXT NOT NULL DEFAULT 'codex',
    usage_url       TEXT NOT NULL,
    user_agent      TEXT NOT NULL,
    settings_json   TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    last_run_started_at  TEXT,
    last_run_finished_at TEXT,
    last_cpa_contact_at  TEXT,
    cpa_version     TEXT
);

CREATE TABLE accounts (
    site_id       TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    account_json  TEXT NOT NULL,
    first_seen_at TEXT NOT NULL,
    last_seen_at  TEXT NOT NULL,
    PRIMARY KEY (site_id, name)
);

CREATE TABLE probe_states (
    site_id    TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    state_json TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (site_id, name)
);

CREATE TABLE snapshot_history (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    site_id       TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    at            TEXT NOT NULL,
    status_code   INTEGER NOT NULL,
    success       INTEGER NOT NULL,
    snapshot_json TEXT,
    error         TEXT
);
CREATE INDEX snapshot_history_by_account ON snapshot_history (site_id, name, at DESC);

CREATE TABLE disable_reasons (
    site_id TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name    TEXT NOT NULL,
    reason  TEXT NOT NULL,
    owner   TEXT NOT NULL,
    set_at  TEXT NOT NULL,
    PRIMARY KEY (site_id, name)
);

CREATE TABLE exceptions (
    site_id TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name    TEXT NOT NULL,
    PRIMARY KEY (site_id, name)
);

CREATE TABLE priorities (
    site_id  TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name     TEXT NOT NULL,
    position INTEGER NOT NULL,
    pending_first_inspection INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (site_id, name)
);

CREATE TABLE operation_log (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    at             TEXT NOT NULL,
    site_id        TEXT,
    category       TEXT NOT NULL,
    operation_type TEXT NOT NULL,
    source         TEXT NOT NULL,
    level          TEXT NOT NULL,
    message        TEXT NOT NULL,
    account_name   TEXT
);
CREATE INDEX operation_log_by_time ON operation_log (at DESC);
CREATE INDEX operation_log_by_site ON operation_log (site_id, at DESC);

CREATE TABLE inspection_runs (
    run_id      TEXT PRIMARY KEY,
    site_id     TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    source      TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    status      TEXT NOT NULL,
    result_json TEXT
);
CREATE INDEX inspection_runs_by_site ON inspection_runs (site_id, started_at DESC);

CREATE TABLE handled_resets (
    site_id    TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    reset_at   TEXT NOT NULL,
    handled_at TEXT NOT NULL,
    PRIMARY KEY (site_id, name, reset_at)
);
