-- sessions_prune: delete the revocations that expired at or before :now (their cookies are
-- refused by their own expiry). Plan: session_revocation_expires_idx.
DELETE FROM {p}session_revocation WHERE expires_at <= :now
