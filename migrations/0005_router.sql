-- 0005: the request router (docs/rules/router.md §5, docs/rules/router.md §4–§5). The admin API's part of the
-- router spec (pools, upstream accounts, chains declared through the API; the config file's
-- `[router]` part is never stored), the router's client keys (stored hashed: SHA-256 hex, plus
-- the last 4 characters for display; never the key), and usage: one row per client request
-- (`core::router::UsageRecord`, kept 30 days) and a per-account per-day aggregate upserted in
-- the same transaction (kept). Times are RFC 3339 UTC text; days are UTC `YYYY-MM-DD`.

CREATE TABLE router_pools (
    pool_id     TEXT PRIMARY KEY,
    -- JSON array of model names
    models_json TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

-- No foreign key to router_pools: an API account may join a pool of the config file. The
-- merged spec is validated (RouterSpec::problems) before anything is stored.
CREATE TABLE router_accounts (
    pool_id     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    base_url    TEXT NOT NULL,
    -- The upstream API key in clear: the router must send it. Never returned by the API.
    api_key     TEXT,
    -- Or the environment variable holding it (read when the spec is loaded).
    api_key_env TEXT,
    tier        INTEGER NOT NULL,
    weight      INTEGER,
    -- JSON array; empty = every model of the pool
    models_json TEXT NOT NULL,
    site_id     TEXT,
    enabled     INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (pool_id, account_id)
);

CREATE TABLE router_chains (
    name       TEXT PRIMARY KEY,
    -- JSON array of {"pool", "model"}
    legs_json  TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE TABLE router_keys (
    key_id     TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    key_hash   TEXT NOT NULL UNIQUE,
    last4      TEXT NOT NULL,
    created_at TEXT NOT NULL,
    -- Set once revoked; revoked keys stay listed and are never loaded into the router.
    revoked_at TEXT
);

CREATE TABLE router_usage (
    id                INTEGER PRIMARY KEY,
    at                TEXT NOT NULL,
    -- chatCompletions | responses
    api               TEXT NOT NULL,
    requested_model   TEXT NOT NULL,
    pool_id           TEXT,
    model             TEXT,
    account_id        TEXT,
    session_key_hash  TEXT,
    ok                INTEGER NOT NULL,
    status            INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    attempts          INTEGER NOT NULL,
    duration_ms       INTEGER NOT NULL,
    ttfb_ms           INTEGER
);
-- Retention (delete by age) and "recent requests of an account" queries.
CREATE INDEX router_usage_at ON router_usage (at);
CREATE INDEX router_usage_account_at ON router_usage (pool_id, account_id, at);

-- One row per UTC day and (pool, account); '' when the request reached no account.
CREATE TABLE router_usage_daily (
    day               TEXT NOT NULL,
    pool_id           TEXT NOT NULL,
    account_id        TEXT NOT NULL,
    requests          INTEGER NOT NULL,
    ok                INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    attempts          INTEGER NOT NULL,
    duration_ms_sum   INTEGER NOT NULL,
    -- Sum and count of the requests that had a first byte (ttfb_ms not null).
    ttfb_ms_sum       INTEGER NOT NULL,
    ttfb_count        INTEGER NOT NULL,
    PRIMARY KEY (day, pool_id, account_id)
);
