-- session_revoked: whether %(session_key)s (a session id's SHA-256) is revoked after %(now)s.
-- Plan: the primary key, one probe.
SELECT EXISTS (
    SELECT 1 FROM {session_revocation} AS r
    WHERE r.session_key = %(session_key)s::text
      AND r.expires_at > COALESCE(%(now)s::timestamptz, statement_timestamp())
)
