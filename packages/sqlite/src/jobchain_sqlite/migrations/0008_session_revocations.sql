-- 0008_session_revocations: revoked dashboard sessions (issue 34, finding 10). Same names as
-- PostgreSQL's 0010_session_revocations.
--
-- A new table only: existing tables and rows are untouched. One row per revoked session,
-- keyed by the SHA-256 (hex) of its id, never the id; kept until the session would have
-- expired, and deleted by the first revocation after that.
CREATE TABLE {p}session_revocation (
    session_key TEXT NOT NULL PRIMARY KEY,
    expires_at  TEXT NOT NULL
) WITHOUT ROWID;

-- sessions_prune: the expired revocations, oldest first.
CREATE INDEX {p}session_revocation_expires_idx ON {p}session_revocation (expires_at);
