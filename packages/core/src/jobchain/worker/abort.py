"""The per-attempt abort signal: an asyncio-friendly cancellation token with a typed reason."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import StrEnum

from jobchain.errors import JobchainError


class AbortReason(StrEnum):
    """Why an attempt must stop."""

    TAKEN_BY_ANOTHER_WORKER = "taken_by_another_worker"
    NOT_FOUND = "not_found"
    ALREADY_COMPLETED = "already_completed"
    ERROR = "error"
    SHUTDOWN = "shutdown"
    CANCELLED = "cancelled"
    """The job's chain was cancelled (``client.cancel_chain``) while the attempt ran."""
    TIMEOUT = "timeout"
    """The handler ran past its job type's ``timeout``; it is cancelled after a short grace."""
    LEASE_EXPIRED = "lease_expired"
    """No renewal was confirmed by the attempt's local deadline (the lease less a safety margin,
    on the worker's monotonic clock): the database may have handed the job on. Fired even when
    the database cannot be reached; the job no longer counts against the worker's concurrency."""


class AttemptAbortedError(JobchainError):
    """The attempt was aborted; stop working on the job (the reason says why)."""

    def __init__(self, reason: AbortReason) -> None:
        self.reason = reason
        super().__init__(f"attempt aborted: {reason.value}")


class AbortSignal:
    """Fires at most once with a reason. Handlers poll ``aborted`` or ``await wait()``."""

    __slots__ = ("_event", "_expired", "_reason")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._reason: AbortReason | None = None
        self._expired: Callable[[], bool] | None = None

    def expire_when(self, expired: Callable[[], bool] | None) -> None:
        """Fire with ``lease_expired`` as soon as ``expired()`` says so when the signal is read,
        not only when the worker's lease watch next runs: a handler resumed after a stall reads
        the truth before its next side effect."""
        self._expired = expired

    def _check_expiry(self) -> None:
        expired = self._expired
        if self._reason is None and expired is not None and expired():
            self.abort(AbortReason.LEASE_EXPIRED)

    @property
    def aborted(self) -> bool:
        self._check_expiry()
        return self._reason is not None

    @property
    def reason(self) -> AbortReason | None:
        self._check_expiry()
        return self._reason

    @property
    def fired(self) -> AbortReason | None:
        """The reason the signal fired with so far, without checking its expiry (None: not
        fired): for the worker's own bookkeeping, which must not fire it by reading."""
        return self._reason

    def abort(self, reason: AbortReason) -> None:
        """Fire the signal; later calls keep the first reason."""
        if self._reason is None:
            self._reason = reason
            self._event.set()

    async def wait(self) -> AbortReason:
        """Wait until the signal fires and return its reason."""
        await self._event.wait()
        assert self._reason is not None
        return self._reason

    def raise_if_aborted(self) -> None:
        """Raise :class:`AttemptAbortedError` if the signal fired."""
        self._check_expiry()
        if self._reason is not None:
            raise AttemptAbortedError(self._reason)
