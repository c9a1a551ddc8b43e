-- 0010_session_revocations: revoked dashboard sessions (issue 34, finding 10).
--
-- A new table only: existing tables and rows are untouched and nothing waits on them. One row
-- per revoked session, keyed by the SHA-256 (hex) of its id, never the id; kept until the
-- session would have expired, and deleted by the first revocation after that.
CREATE TABLE {session_revocation} (
    session_key text PRIMARY KEY,
    expires_at  timestamptz NOT NULL
);

-- sessions_revoke: the expired revocations it deletes.
CREATE INDEX {session_revocation_expires_idx} ON {session_revocation} (expires_at);
