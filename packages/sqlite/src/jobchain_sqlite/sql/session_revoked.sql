-- session_revoked: 1 when :session_key (a session id's SHA-256) is revoked after :now.
-- Plan: the primary key, one probe.
SELECT 1 AS revoked FROM {p}session_revocation WHERE session_key = :session_key AND expires_at > :now
