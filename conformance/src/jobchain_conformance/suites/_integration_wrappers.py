"""Adapter wrappers the integration cases use to misbehave on purpose, for any backend.

* :class:`StateProxy` delegates to a real state adapter and can hold transactions at a
  gate (a frozen worker, whose last transactions a case can wait out), fail the next N
  transactions with TransientStateError (a flaky database), count operations and override
  single operations.
* :class:`DroppingNotify` loses every message (a broker that drops everything);
  :class:`UnreachableNotify` fails every call (a broker that is down).

Closing a wrapper never closes the wrapped adapter: the suite fixtures own it.
"""

from __future__ import annotations

import asyncio
import inspect
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
    """Delegates every operation to the real transaction, counting and applying overrides.

    Built per class of real transaction (:func:`_tx_proxy`) with a real method for each of its
    operations, so wrappers that read a class's methods (``jobchain.testing.clocked_state``)
    and runtime protocol checks see the same operations as on the real transaction.
    """

    def __init__(self, inner: StateTx, owner: StateProxy) -> None:
        self._inner = inner
        self._owner = owner

    @asynccontextmanager
    async def _savepoint(self) -> AsyncIterator[StateTx]:
        async with self._inner.savepoint() as inner:
            yield _tx_proxy(inner, self._owner)

    def savepoint(self) -> AbstractAsyncContextManager[StateTx]:
        return self._savepoint()

    async def _call(self, name: str, params: Any) -> Any:
        owner = self._owner
        owner.calls[name] += 1
        override = owner.overrides.get(name)
        if override is not None:
            return await override(self._inner, params)
        return await getattr(self._inner, name)(params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # data, and anything set on the instance only


_tx_proxy_classes: dict[type, type[_TxProxy]] = {}


def _tx_proxy(inner: StateTx, owner: StateProxy) -> StateTx:
    """``inner`` behind a :class:`_TxProxy` with a method for each operation of its class."""
    inner_class = type(inner)
    proxy_class = _tx_proxy_classes.get(inner_class)
    if proxy_class is None:
        # Operations (coroutine methods) are counted; any other method is left to __getattr__.
        operations = {
            name: _counted(name)
            for name in dir(inner_class)
            if not name.startswith("_")
            and name != "savepoint"
            and inspect.iscoroutinefunction(getattr(inner_class, name))
        }
        proxy_class = type(f"_TxProxyOf{inner_class.__name__}", (_TxProxy,), operations)
        _tx_proxy_classes[inner_class] = proxy_class
    return cast(StateTx, proxy_class(inner, owner))


def _counted(name: str) -> Callable[[_TxProxy, Any], Awaitable[Any]]:
    async def operation(self: _TxProxy, params: Any) -> Any:
        return await self._call(name, params)

    operation.__name__ = name
    return operation


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
        self.open_transactions = 0
        self.idle = asyncio.Event()
        """Set while no transaction that got past the gate is open. After :meth:`freeze`, wait
        for it to know the frozen process has stopped writing: a renewal already under way
        has landed (or failed), and nothing else gets through until :meth:`thaw`."""
        self.idle.set()
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
        # Checked again after waking: a freeze() right after a thaw() holds the waiters too.
        while not self._gate.is_set():
            await self._gate.wait()
        if self.failures_left > 0:
            self.failures_left -= 1
            self.failures_injected += 1
            raise TransientStateError("injected transient failure (integration suite)")
        self.open_transactions += 1
        self.idle.clear()
        try:
            async with self.inner.transaction(read_only=read_only, connection=connection) as tx:
                yield _tx_proxy(tx, self)
        finally:
            self.open_transactions -= 1
            if self.open_transactions == 0:
                self.idle.set()

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
