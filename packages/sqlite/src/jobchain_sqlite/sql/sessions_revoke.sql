-- sessions_revoke: record :session_key (a session id's SHA-256) as revoked until :expires_at,
-- keeping the later expiry of a session revoked twice; nothing when it expired already.
INSERT INTO {p}session_revocation (session_key, expires_at)
SELECT :session_key, :expires_at
WHERE :expires_at > :now
ON CONFLICT (session_key)
DO UPDATE SET expires_at = max({p}session_revocation.expires_at, excluded.expires_at)
