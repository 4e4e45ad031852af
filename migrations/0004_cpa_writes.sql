-- 0004: confirmed CPA writes (docs/rules/patrol.md §11.2–§11.3). The last value quota-patrol wrote to each
-- CPA field of an account (`disabled` through the status patch, `priority` through the fields
-- patch), so every round can tell a value CPA itself lost (token refresh, CPA #5465/#5528) from
-- a person's change; and the CPA cooldown episode for which `reset-quota` was already called,
-- so it is called once per episode. Times are RFC 3339 UTC text.

CREATE TABLE cpa_writes (
    site_id    TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    -- disabled | priority
    kind       TEXT NOT NULL,
    -- disabled: 1/0; priority: the priority (0 = none)
    value      INTEGER NOT NULL,
    written_at TEXT NOT NULL,
    PRIMARY KEY (site_id, name, kind)
);

CREATE TABLE cpa_cooldown_resets (
    site_id  TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name     TEXT NOT NULL,
    -- the episode (core::writes::cooldown_episode) reset-quota was called for
    episode  TEXT NOT NULL,
    reset_at TEXT NOT NULL,
    PRIMARY KEY (site_id, name)
);
