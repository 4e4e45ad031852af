-- 0008: sign-in sessions of the status page (docs/rules/api.md §7). A session is created when the
-- admin token is typed into the sign-in form; its cookie holds a random id, this table only the
-- id's SHA-256 (a copy of the database lets nobody in). `token_digest` is a digest of the admin
-- token the session was opened with: a changed token ends every session opened before.

CREATE TABLE web_sessions (
    id_hash      TEXT PRIMARY KEY,
    token_digest TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    expires_at   TEXT NOT NULL
);
CREATE INDEX web_sessions_by_expiry ON web_sessions (expires_at);
