-- 0011: passive quota evidence, the second kind of evidence beside a probe's snapshot
-- (docs/rules/patrol.md §4.7, docs/rules/cpa.md §9): per account, the newest usable reading of
-- the `quota` signals CPA lists (windows as a probe gives them), when CPA saw it, and when the
-- patrol last read it. Kept only while the account is listed. Times are RFC 3339 UTC text.

CREATE TABLE passive_snapshots (
    site_id       TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    observed_at   TEXT NOT NULL,
    snapshot_json TEXT NOT NULL,
    read_at       TEXT NOT NULL,
    PRIMARY KEY (site_id, name)
);
