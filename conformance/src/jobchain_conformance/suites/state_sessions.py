"""Revoked dashboard sessions (``sessions_revoke``, ``session_revoked``): the optional
``RevokesSessions`` capability of a state transaction.

A revoked id reads as revoked until its expiry and not after; other ids never do; a revocation
that rolls back never happened; revoking again keeps the later expiry; and the next
``sessions_revoke`` deletes the expired ones (seen through the contract: asked about a moment
before its expiry, a pruned revocation is gone). Every case skips when the adapter's
transactions lack the capability.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import datetime, timedelta

import pytest

from jobchain.contracts import RevokesSessions, SessionRevoked, SessionsRevoke, StateAdapter
from jobchain.errors import InvalidArgumentError
from jobchain_conformance.suites.state_transactions import RollbackError

HOUR = timedelta(hours=1)
SECOND = timedelta(seconds=1)


@asynccontextmanager
async def sessions_tx(
    state_adapter: StateAdapter, *, read_only: bool = False
) -> AsyncIterator[RevokesSessions]:
    """A transaction offering the capability, or skip the case."""
    async with state_adapter.transaction(read_only=read_only) as tx:
        if not isinstance(tx, RevokesSessions):
            pytest.skip("adapter transactions do not offer sessions_revoke (RevokesSessions)")
        yield tx


async def revoke(state_adapter: StateAdapter, session_id: str, expires_at: datetime, now: datetime) -> None:
    async with sessions_tx(state_adapter) as tx:
        await tx.sessions_revoke(SessionsRevoke(session_id=session_id, expires_at=expires_at, now=now))


async def revoked(state_adapter: StateAdapter, session_id: str, now: datetime) -> bool:
    async with sessions_tx(state_adapter, read_only=True) as tx:
        return await tx.session_revoked(SessionRevoked(session_id=session_id, now=now))


class SessionRevocationTests:
    """A revoked session stays revoked until its expiry, across transactions."""

    async def test_a_revoked_session_reads_as_revoked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await revoke(state_adapter, "session-a", now + 12 * HOUR, now)
        assert await revoked(state_adapter, "session-a", now) is True
        assert await revoked(state_adapter, "session-a", now + 12 * HOUR - SECOND) is True

    async def test_another_session_is_not_revoked(self, state_adapter: StateAdapter, now: datetime) -> None:
        assert await revoked(state_adapter, "session-a", now) is False
        await revoke(state_adapter, "session-a", now + HOUR, now)
        assert await revoked(state_adapter, "session-b", now) is False
        assert await revoked(state_adapter, "session-A", now) is False
        assert await revoked(state_adapter, "session-a ", now) is False

    async def test_a_revocation_ends_at_its_expiry(self, state_adapter: StateAdapter, now: datetime) -> None:
        await revoke(state_adapter, "session-a", now + HOUR, now)
        assert await revoked(state_adapter, "session-a", now + HOUR) is False
        assert await revoked(state_adapter, "session-a", now + 2 * HOUR) is False

    async def test_the_next_revoke_deletes_expired_revocations(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await revoke(state_adapter, "old", now + HOUR, now)
        await revoke(state_adapter, "live", now + 5 * HOUR, now)
        await revoke(state_adapter, "other", now + 5 * HOUR, now + 2 * HOUR)
        # Asked about a moment before its expiry, a kept revocation would still answer True.
        assert await revoked(state_adapter, "old", now + HOUR / 2) is False
        assert await revoked(state_adapter, "live", now + HOUR / 2) is True
        assert await revoked(state_adapter, "other", now + 3 * HOUR) is True

    async def test_a_revocation_expiring_exactly_now_is_deleted(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await revoke(state_adapter, "old", now + HOUR, now)
        await revoke(state_adapter, "other", now + 5 * HOUR, now + HOUR)
        assert await revoked(state_adapter, "old", now) is False

    async def test_revoking_again_keeps_the_later_expiry(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await revoke(state_adapter, "session-a", now + 3 * HOUR, now)
        await revoke(state_adapter, "session-a", now + HOUR, now + SECOND)
        assert await revoked(state_adapter, "session-a", now + 2 * HOUR) is True
        await revoke(state_adapter, "session-a", now + 4 * HOUR, now + 2 * SECOND)
        assert await revoked(state_adapter, "session-a", now + 3 * HOUR + SECOND) is True
        assert await revoked(state_adapter, "session-a", now + 4 * HOUR) is False

    async def test_a_revocation_rolled_back_never_happened(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        with suppress(RollbackError):
            async with sessions_tx(state_adapter) as tx:
                await tx.sessions_revoke(
                    SessionsRevoke(session_id="session-a", expires_at=now + HOUR, now=now)
                )
                assert await tx.session_revoked(SessionRevoked(session_id="session-a", now=now)) is True
                raise RollbackError
        assert await revoked(state_adapter, "session-a", now) is False

    async def test_a_revocation_is_seen_by_a_later_transaction_only_once_committed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        async with sessions_tx(state_adapter) as tx:
            await tx.sessions_revoke(SessionsRevoke(session_id="session-a", expires_at=now + HOUR, now=now))
        async with sessions_tx(state_adapter) as tx:
            assert await tx.session_revoked(SessionRevoked(session_id="session-a", now=now)) is True

    async def test_many_sessions_are_revoked_independently(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        for n in range(5):
            await revoke(state_adapter, f"session-{n}", now + (n + 1) * HOUR, now)
        at = now + 2 * HOUR + SECOND
        assert [await revoked(state_adapter, f"session-{n}", at) for n in range(6)] == [
            False,
            False,
            True,
            True,
            True,
            False,
        ]

    def test_bad_arguments_are_refused_before_anything_is_sent(self, now: datetime) -> None:
        for session_id in ("", "x" * 256, "a\nb", "ü", 7):
            with pytest.raises(InvalidArgumentError):
                SessionsRevoke(session_id=session_id, expires_at=now)  # type: ignore[arg-type]  # 7 on purpose
            with pytest.raises(InvalidArgumentError):
                SessionRevoked(session_id=session_id)  # type: ignore[arg-type]  # 7 on purpose
        with pytest.raises(InvalidArgumentError):
            SessionsRevoke(session_id="s", expires_at=now.replace(tzinfo=None))
        with pytest.raises(InvalidArgumentError):
            SessionRevoked(session_id="s", now=now.replace(tzinfo=None))


__all__ = ["SessionRevocationTests", "revoke", "revoked", "sessions_tx"]
