-- sessions_revoke: record %(session_key)s (a session id's SHA-256) as revoked until
-- %(expires_at)s, keeping the later expiry of a session revoked twice (nothing when it expired
-- already), and delete every other revocation expired at %(now)s, in one statement. Returns the
-- stored expiry (no row when it expired already).
-- Plan: the primary key for the upsert; session_revocation_expires_idx for the delete.
WITH pruned AS (
    DELETE FROM {session_revocation} AS r
    WHERE r.expires_at <= COALESCE(%(now)s::timestamptz, statement_timestamp())
      AND r.session_key <> %(session_key)s::text
)
INSERT INTO {session_revocation} AS r (session_key, expires_at)
SELECT %(session_key)s::text, %(expires_at)s::timestamptz
WHERE %(expires_at)s::timestamptz > COALESCE(%(now)s::timestamptz, statement_timestamp())
ON CONFLICT (session_key) DO UPDATE SET expires_at = GREATEST(r.expires_at, excluded.expires_at)
RETURNING r.expires_at
