-- 0010: the quota reset an operation-log entry of a state flip names (docs/patrol.md "How a
-- decision is made", operation log): a quota disable's reset the account waits for, a re-enable's
-- reset that passed. NULL for every other entry and for entries written before. RFC 3339 UTC text.

ALTER TABLE operation_log ADD COLUMN reset_at TEXT;
