-- 0009: one row per site per round with the pool's size and remaining capacity (docs/rules/api.md §7 item
-- 1, the status page's 7-day chart). Written after each round's publish from the published
-- counts and the site forecast; rows older than 8 days are deleted when a new one is written.

CREATE TABLE pool_samples (
    site_id           TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    at                TEXT NOT NULL,
    total             INTEGER NOT NULL,
    usable            INTEGER NOT NULL,
    active            INTEGER NOT NULL,
    exhausted         INTEGER NOT NULL,
    invalid           INTEGER NOT NULL,
    -- Sum of the usable accounts' headroom to their threshold on the long window, percentage
    -- points (100 = one whole account's window).
    remaining_percent REAL NOT NULL
);
CREATE INDEX pool_samples_by_site ON pool_samples (site_id, at);
