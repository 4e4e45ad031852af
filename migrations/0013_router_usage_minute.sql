-- The router's usage per UTC minute (docs/rules/router.md §5 "Usage", docs/decisions.md §20).
-- The usage writer sums the client requests of each minute in memory and adds the sums here
-- about once a second, with the daily aggregate in the same transaction. One row per minute and
-- (api, requested model, pool, model, account, status, ok); '' stands for "none" in pool, model
-- and account. Per-request rows (`router_usage`) are written only with
-- `[router] usage_request_rows = true`.
CREATE TABLE router_usage_minute (
    -- UTC minute, RFC 3339 like every stored instant (e.g. 2026-05-21T03:07:00.000000Z).
    minute            TEXT NOT NULL,
    -- chatCompletions | responses | responsesCompact
    api               TEXT NOT NULL,
    requested_model   TEXT NOT NULL,
    pool_id           TEXT NOT NULL,
    model             TEXT NOT NULL,
    account_id        TEXT NOT NULL,
    status            INTEGER NOT NULL,
    ok                INTEGER NOT NULL,
    requests          INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    attempts          INTEGER NOT NULL,
    duration_ms_sum   INTEGER NOT NULL,
    duration_ms_max   INTEGER NOT NULL,
    ttfb_ms_sum       INTEGER NOT NULL,
    ttfb_count        INTEGER NOT NULL,
    PRIMARY KEY (minute, pool_id, account_id, api, requested_model, model, status, ok)
) WITHOUT ROWID;
