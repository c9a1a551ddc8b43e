"""Adapter wrappers the integration cases use to misbehave on purpose, for any backend.

* :class:`StateProxy` delegates to a real state adapter and can hold transactions at a
  gate (a frozen worker), fail the next N transactions with TransientStateError (a flaky
  database), count operations and override single operations.
* :class:`DroppingNotify` loses every message (a broker that drops everything);
  :class:`UnreachableNotify` fails every call (a broker that is down).

Closing a wrapper never closes the wrapped adapter: the suite fixtures own it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any, cast

from jobchain.contracts import (
    Capability,
    JobGet,
    JobRenewLease,
    Listener,
    NotifyAdapter,
    StateAdapter,
    StateTx,
    Unsubscribe,
)
from jobchain.entities import Job
from jobchain.errors import BackendUnavailableError, JobNotFoundError, TransientStateError

Override = Callable[[StateTx, Any], Awaitable[Any]]
"""Replaces one ``StateTx`` operation: receives the real transaction and the params."""


class _TxProxy:
    """Delegates every operation to the real transaction, counting and applying overrides."""

    def __init__(self, inner: StateTx, owner: StateProxy) -> None:
        self._inner = inner
        self._owner = owner

    @asynccontextmanager
    async def _savepoint(self) -> AsyncIterator[StateTx]:
        async with self._inner.savepoint() as inner:
            yield cast(StateTx, _TxProxy(inner, self._owner))

    def savepoint(self) -> AbstractAsyncContextManager[StateTx]:
        return self._savepoint()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name.startswith("_") or not callable(target):
            return target
        owner = self._owner

        async def call(params: Any) -> Any:
            owner.calls[name] += 1
            override = owner.overrides.get(name)
            if override is not None:
                return await override(self._inner, params)
            return await target(params)

        return call


class StateProxy:
    """A state adapter that delegates to ``inner`` and misbehaves when told to."""

    def __init__(self, inner: StateAdapter) -> None:
        self.inner = inner
        self.capabilities: frozenset[Capability] = inner.capabilities
        self.time_precision: timedelta = inner.time_precision
        self.calls: Counter[str] = Counter()
        """Operations run through this proxy, by ``StateTx`` method name."""
        self.overrides: dict[str, Override] = {}
        self.failures_left = 0
        self.failures_injected = 0
        self._gate = asyncio.Event()
        self._gate.set()

    # ------------------------------------------------------------ misbehaviour switches

    def fail_next(self, count: int) -> None:
        """Make the next ``count`` transactions (read or write) raise TransientStateError on entry."""
        self.failures_left = count

    def freeze(self) -> None:
        """Hold every new transaction at the gate until :meth:`thaw` (a stalled process)."""
        self._gate.clear()

    def thaw(self) -> None:
        self._gate.set()

    def drop_lease_renewals(self) -> None:
        """Lease renewals report success but write nothing, so leases run out while work goes on."""

        async def unchanged(tx: StateTx, params: Any) -> Job:
            assert isinstance(params, JobRenewLease)
            job = await tx.job_get(JobGet(job_id=params.job_id))
            if job is None:
                raise JobNotFoundError(params.job_id)
            return job

        self.overrides["job_renew_lease"] = unchanged

    # ------------------------------------------------------------ StateAdapter

    @asynccontextmanager
    async def _transaction(self, read_only: bool, connection: object | None) -> AsyncIterator[StateTx]:
        await self._gate.wait()
        if self.failures_left > 0:
            self.failures_left -= 1
            self.failures_injected += 1
            raise TransientStateError("injected transient failure (integration suite)")
        async with self.inner.transaction(read_only=read_only, connection=connection) as tx:
            yield cast(StateTx, _TxProxy(tx, self))

    def transaction(
        self, *, read_only: bool = False, connection: object | None = None
    ) -> AbstractAsyncContextManager[StateTx]:
        return self._transaction(read_only, connection)

    async def migrate(self) -> None:
        await self.inner.migrate()

    async def close(self) -> None:
        """Leaves the wrapped adapter open (its fixture closes it)."""


class DroppingNotify:
    """A notify adapter that loses every message: publishes go nowhere, listeners never fire.

    Wake hints are not tracked, so ``consume_wake_hint`` says wake (the degradation rule).
    """

    capabilities: frozenset[Capability] = frozenset()

    def __init__(self) -> None:
        self.dropped = 0

    async def publish_job_scheduled(self, type_name: str) -> None:
        self.dropped += 1

    async def publish_chain_completed(self, chain_id: str) -> None:
        self.dropped += 1

    async def publish_job_ownership_lost(self, job_id: str) -> None:
        self.dropped += 1

    async def listen_job_scheduled(self, type_names: Sequence[str], listener: Listener) -> Unsubscribe:
        return _nothing

    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe:
        return _nothing

    async def listen_job_ownership_lost(self, job_id: str, listener: Listener) -> Unsubscribe:
        return _nothing

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        self.dropped += 1

    async def consume_wake_hint(self, type_name: str) -> bool:
        return True

    async def close(self) -> None:
        pass


class UnreachableNotify(DroppingNotify):
    """A notify adapter whose broker is down: every call raises BackendUnavailableError."""

    def _down(self) -> None:
        self.dropped += 1
        raise BackendUnavailableError("injected: the notify broker is unreachable (integration suite)")

    async def publish_job_scheduled(self, type_name: str) -> None:
        self._down()

    async def publish_chain_completed(self, chain_id: str) -> None:
        self._down()

    async def publish_job_ownership_lost(self, job_id: str) -> None:
        self._down()

    async def listen_job_scheduled(self, type_names: Sequence[str], listener: Listener) -> Unsubscribe:
        self._down()
        return _nothing

    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe:
        self._down()
        return _nothing

    async def listen_job_ownership_lost(self, job_id: str, listener: Listener) -> Unsubscribe:
        self._down()
        return _nothing

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        self._down()

    async def consume_wake_hint(self, type_name: str) -> bool:
        self._down()
        return True


async def _nothing() -> None:
    pass


def as_state(proxy: StateProxy) -> StateAdapter:
    """The proxy typed as the contract it implements."""
    return cast(StateAdapter, proxy)


def as_notify(notify: DroppingNotify) -> NotifyAdapter:
    """The wrapper typed as the contract it implements."""
    return cast(NotifyAdapter, notify)
