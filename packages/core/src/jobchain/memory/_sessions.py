"""Revoked dashboard sessions of the in-process state backend (``contracts.sessions``).

``Store.sessions`` maps ``session_key(session_id)`` (never the id) to the revocation's expiry,
a keyed table under the job table's transaction rules: a revocation that rolls back is undone,
and other transactions see it once it commits.
"""

from __future__ import annotations

from datetime import datetime

from jobchain.contracts.sessions import SessionRevoked, SessionsRevoke, session_key
from jobchain.memory._store import Store, TxState
from jobchain.memory._writes import Ctx


def sessions_revoke(ctx: Ctx, params: SessionsRevoke, now: datetime) -> None:
    """Upsert the revocation (keeping the later expiry), then delete the expired ones."""
    table = ctx.store.sessions
    key = session_key(params.session_id)
    expired = sorted(name for name, until in table.visible(ctx.tx).items() if until <= now and name != key)
    for name in sorted({key, *expired}):  # one lock order: concurrent revocations never deadlock
        ctx.store.lock_table(ctx.tx, table, name)
    current = table.rows.get(key)
    until = params.expires_at if current is None else max(current, params.expires_at)
    table.put(ctx.tx, key, None if until <= now else until)
    for name in expired:
        stored = table.rows.get(name)
        if stored is not None and stored <= now:
            table.put(ctx.tx, name, None)


def session_revoked(store: Store, viewer: TxState | None, params: SessionRevoked, now: datetime) -> bool:
    """Whether the session's revocation (as ``viewer`` sees it) expires after ``now``."""
    until = store.sessions.get(viewer, session_key(params.session_id))
    return until is not None and until > now


__all__ = ["session_revoked", "sessions_revoke"]
