-- 0006: per-account quota policy overrides (docs/rules/patrol.md §9; GET/PUT/DELETE
-- /api/accounts/{name}/policy). One row per account that overrides anything: the
-- core::policy::AccountPolicy as camelCase JSON (thresholds, fiveHourRule, neverAct). Like the
-- exception list it is the operator's configuration, so it is kept when the account leaves the
-- CPA listing and applies again if it comes back. Times are RFC 3339 UTC text.

CREATE TABLE account_policies (
    site_id     TEXT NOT NULL REFERENCES sites(site_id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    policy_json TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (site_id, name)
);
