-- 0012: banked rate-limit reset credits (docs/reset-credits.md, docs/rules/cpa.md §10).
-- The usage body's hint ({available, applicable}) travels inside the snapshot JSON
-- (`probe_states.state_json`, `snapshot_history.snapshot_json`: `resetCredits`, absent =
-- unknown). These tables hold what the snapshot cannot: the last credit list read per account,
-- and the redemption guard. Times are RFC 3339 UTC text.

-- The last `GET …/wham/rate-limit-reset-credits` of an account: the authoritative count and
-- the soonest expiry among its available, unexpired credits (NULL when none was listed).
CREATE TABLE reset_credit_lists (
    site_id             TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name                TEXT NOT NULL,
    listed_at           TEXT NOT NULL,
    available_count     INTEGER NOT NULL,
    soonest_expires_at  TEXT,
    PRIMARY KEY (site_id, name)
);

-- One redemption attempt per ChatGPT account and limited window, written BEFORE the consume
-- call. `outcome` stays NULL while the answer is unknown (crash, ambiguous answer): the next try
-- reuses `redeem_request_id`. Once set, that account is never redeemed again in that window.
-- Keyed by the ChatGPT account, not the site: the same account behind two sites is one account
-- upstream. Rows are never deleted by the patrol (one per window, a few per account per month).
CREATE TABLE reset_credit_guards (
    chatgpt_account_id  TEXT NOT NULL,
    window_reset_at     TEXT NOT NULL,
    site_id             TEXT NOT NULL,
    name                TEXT NOT NULL,
    redeem_request_id   TEXT NOT NULL,
    credit_id           TEXT,
    created_at          TEXT NOT NULL,
    tries               INTEGER NOT NULL DEFAULT 0,
    outcome             TEXT,
    detail              TEXT,
    settled_at          TEXT,
    PRIMARY KEY (chatgpt_account_id, window_reset_at)
);
CREATE INDEX reset_credit_guards_by_site ON reset_credit_guards (site_id, outcome);
