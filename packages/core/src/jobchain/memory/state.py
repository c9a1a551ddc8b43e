"""The in-process state adapter: the reference model every other backend is compared with.

All state lives in process memory. Write transactions run concurrently, like PostgreSQL's:
each changes the live tables in place under exclusive row locks held until it ends, logs
every previous row so a rollback or savepoint rollback replays the log backwards, and
waits (or, for acquisition and reaping, skips) when it needs a row another transaction
holds. Every transaction sees committed data plus its own changes; read-only transactions
never wait. Each operation attempt is synchronous, so no other task observes it half done.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import TypeVar

from jobchain.contracts.capabilities import Capability
from jobchain.contracts.end_hooks import EndHooksRegister
from jobchain.contracts.lifecycle import cancel_dry_run
from jobchain.contracts.scheduling import (
    JobWait,
    JobWaited,
    PausedTypesList,
    SchedulesList,
    SchedulesRegister,
    TypesPause,
)
from jobchain.contracts.sessions import SessionRevoked, SessionsRevoke
from jobchain.contracts.state import (
    BlockedJobsList,
    ChainGet,
    ChainJobsList,
    ChainsCancel,
    ChainsCancelled,
    ChainsDelete,
    ChainsDeleted,
    ChainsList,
    ChainsPrune,
    ChainsPruned,
    JobBlockersGet,
    JobComplete,
    JobCompleted,
    JobCreated,
    JobFail,
    JobFailed,
    JobGet,
    JobNextAvailable,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsAcquired,
    JobsCreate,
    JobsList,
    JobsReapExpired,
    JobsRetried,
    JobsRetry,
    JobsTrigger,
    JobsTriggered,
    QueueStatsGet,
    StateTx,
    WorkerHeartbeat,
    WorkerHeartbeatResult,
    WorkersList,
)
from jobchain.entities import Chain, Job, Page, PausedType, ScheduleRecord, WorkerInfo, utcnow
from jobchain.errors import AdapterClosedError, InvalidArgumentError, TransientStateError
from jobchain.memory import (
    _claims,
    _deletion,
    _end_hooks,
    _lifecycle,
    _reads,
    _scheduling,
    _sessions,
    _stats,
    _waits,
    _workers,
    _writes,
)
from jobchain.memory._store import START, Blocked, Mark, Store, TxState
from jobchain.memory._views import View, view_for
from jobchain.stats import QueueStats

T = TypeVar("T")

__all__ = ["MemoryStateAdapter", "MemoryStateTx", "poison_memory_transaction"]


class MemoryStateAdapter:
    """State kept in process memory; declares every state capability.

    Guarantees (suite: StateAdapterSuite): writes commit atomically or not at all; a
    transaction never sees another's uncommitted changes; a row changed by an open
    transaction waits (or is skipped by acquisition) until it ends; read-only transactions
    never wait. A lock wait cycle raises TransientStateError. Data is lost when the process
    exits.
    """

    capabilities: frozenset[Capability] = frozenset(
        capability for capability in Capability if capability is not Capability.WAKE_HINTS
    )
    time_precision: timedelta = timedelta(microseconds=1)

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock or utcnow
        self._store = Store()
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._store.jobs)} jobs"
        return f"<MemoryStateAdapter {state}>"

    @property
    def closed(self) -> bool:
        return self._closed

    def transaction(
        self, *, read_only: bool = False, connection: object | None = None
    ) -> AbstractAsyncContextManager[MemoryStateTx]:
        """Open a transaction: committed on success, rolled back (and re-raised) on error.

        There is no driver connection to join, so ``connection`` must be None.
        """
        if connection is not None:
            raise InvalidArgumentError(
                "the memory state adapter cannot join a driver connection; call transaction() without it"
            )
        self._check_open()
        return self._read_transaction() if read_only else self._write_transaction()

    @asynccontextmanager
    async def _read_transaction(self) -> AsyncIterator[MemoryStateTx]:
        tx = MemoryStateTx(self, read_only=True)
        try:
            yield tx
        finally:
            tx._end(commit=False)

    @asynccontextmanager
    async def _write_transaction(self) -> AsyncIterator[MemoryStateTx]:
        tx = MemoryStateTx(self, read_only=False)
        committed = False
        try:
            yield tx
            if tx.poisoned:
                raise TransientStateError("transaction is poisoned; it was rolled back")
            committed = True
        finally:
            tx._end(commit=committed)

    async def migrate(self) -> None:
        """Nothing to migrate: the tables are Python dicts."""

    async def close(self) -> None:
        """Refuse new transactions. Idempotent; open transactions may still finish."""
        self._closed = True

    async def __aenter__(self) -> MemoryStateAdapter:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise AdapterClosedError()

    def _now(self, value: datetime | None) -> datetime:
        now = self._clock() if value is None else value
        if now.tzinfo is None:
            raise InvalidArgumentError("now must be timezone-aware (use datetime.now(timezone.utc))")
        return now


class MemoryStateTx:
    """One transaction of :class:`MemoryStateAdapter`; savepoints yield the same object."""

    def __init__(self, adapter: MemoryStateAdapter, *, read_only: bool) -> None:
        self._adapter = adapter
        self._store: Store = adapter._store
        self._read_only = read_only
        self._state: TxState | None = None if read_only else TxState()
        self._open = True
        self._depth = 0  # savepoints currently open
        self._poison_depth: int | None = None  # savepoint depth when poison() was called

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def poisoned(self) -> bool:
        return self._poison_depth is not None

    def poison(self) -> None:
        """Test hook: fail every later operation, as PostgreSQL does after a failed statement.

        Operations raise TransientStateError until a savepoint that is open now rolls back.
        """
        if self._poison_depth is None or self._depth < self._poison_depth:
            self._poison_depth = self._depth

    def savepoint(self) -> AbstractAsyncContextManager[MemoryStateTx]:
        """Nested unit of work: released on success, rolled back (and re-raised) on error."""
        return self._savepoint()

    @asynccontextmanager
    async def _savepoint(self) -> AsyncIterator[MemoryStateTx]:
        self._check(write=False)
        mark = self._state.mark() if self._state is not None else START
        self._depth += 1
        level = self._depth
        try:
            yield self
        except BaseException:
            self._rollback_savepoint(mark, level)
            raise
        else:
            if self._poison_depth is not None:  # releasing in an aborted tx fails, as in PostgreSQL
                self._rollback_savepoint(mark, level)
                raise TransientStateError("transaction is poisoned; the savepoint was rolled back")
        finally:
            self._depth = level - 1

    def _rollback_savepoint(self, mark: Mark, level: int) -> None:
        if self._state is not None:
            self._store.rollback_to(self._state, mark)
        if self._poison_depth is not None and self._poison_depth >= level:
            self._poison_depth = None

    def _end(self, *, commit: bool) -> None:
        self._open = False
        if self._state is not None:
            self._store.finish(self._state, commit=commit)

    def _check(self, *, write: bool) -> None:
        if not self._open:
            raise InvalidArgumentError("this transaction has ended; use it only inside its async with block")
        if self._poison_depth is not None:
            raise TransientStateError("transaction is poisoned")
        if write and self._read_only:
            raise InvalidArgumentError("a read-only transaction cannot write; open transaction() instead")

    def _view(self) -> View:
        self._check(write=False)
        return view_for(self._store, self._state)

    async def _write(self, operation: Callable[[_writes.Ctx, datetime], T], now: datetime | None) -> T:
        """Run one write operation: retried after each lock wait, undone if it raises."""
        self._check(write=True)
        state = self._state
        assert state is not None  # guaranteed by _check: only read-only transactions lack it
        moment = self._adapter._now(now)
        while True:
            mark = state.mark()
            try:
                return operation(_writes.Ctx(self._store, state, view_for(self._store, state)), moment)
            except Blocked as blocked:
                self._store.rollback_to(state, mark)
                await self._wait_for(state, blocked.holder)
            except BaseException:
                self._store.rollback_to(state, mark)  # a failed operation writes nothing
                raise

    async def _wait_for(self, state: TxState, holder: TxState) -> None:
        seen: set[int] = set()
        node: TxState | None = holder
        while node is not None and id(node) not in seen:
            if node is state:
                # As in PostgreSQL, the statement fails and the transaction is aborted.
                self.poison()
                raise TransientStateError("deadlock detected: transactions wait for each other's rows")
            seen.add(id(node))
            node = node.waiting_for
        state.waiting_for = holder
        try:
            await holder.ended.wait()
        finally:
            state.waiting_for = None

    # ------------------------------------------------------------ creation

    async def jobs_create(self, params: JobsCreate) -> list[JobCreated]:
        return await self._write(lambda ctx, now: _writes.jobs_create(ctx, params, now), params.now)

    # ------------------------------------------------------------ reads

    async def chain_get(self, params: ChainGet) -> Chain | None:
        if params.lock:
            return await self._write(lambda ctx, _: _writes.chain_get_locked(ctx, params.chain_id), None)
        return self._view().chain(params.chain_id)

    async def job_get(self, params: JobGet) -> Job | None:
        if params.lock:
            return await self._write(lambda ctx, _: _writes.job_get_locked(ctx, params.job_id), None)
        return self._view().job(params.job_id)

    async def job_blockers_get(self, params: JobBlockersGet) -> list[Chain]:
        return _reads.job_blockers(self._view(), params.job_id)

    async def job_next_available(self, params: JobNextAvailable) -> timedelta | None:
        view = self._view()
        paused = _scheduling.paused_types(self._store, self._state)
        type_names = [name for name in params.type_names if name not in paused]
        return _reads.job_next_available(view, type_names, self._adapter._now(params.now))

    async def queue_stats(self, params: QueueStatsGet) -> QueueStats:
        view = self._view()
        paused = _scheduling.paused_types(self._store, self._state)
        return _stats.queue_stats(view, params, self._adapter._now(params.now), paused)

    # ------------------------------------------------------------ worker transitions

    async def jobs_acquire(self, params: JobsAcquire) -> JobsAcquired:
        return await self._write(lambda ctx, now: _claims.jobs_acquire(ctx, params, now), params.now)

    async def job_renew_lease(self, params: JobRenewLease) -> Job:
        return await self._write(lambda ctx, now: _writes.job_renew_lease(ctx, params, now), params.now)

    async def job_reschedule(self, params: JobReschedule) -> Job:
        return await self._write(lambda ctx, now: _writes.job_reschedule(ctx, params, now), params.now)

    async def job_complete(self, params: JobComplete) -> JobCompleted:
        return await self._write(lambda ctx, now: _writes.job_complete(ctx, params, now), params.now)

    async def job_fail(self, params: JobFail) -> JobFailed:
        return await self._write(lambda ctx, now: _lifecycle.job_fail(ctx, params, now), params.now)

    async def jobs_reap_expired(self, params: JobsReapExpired) -> list[Job]:
        return await self._write(lambda ctx, now: _workers.jobs_reap_expired(ctx, params, now), params.now)

    # ------------------------------------------------------------ worker registry

    async def worker_heartbeat(self, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
        return await self._write(lambda ctx, now: _workers.worker_heartbeat(ctx, params, now), params.now)

    async def workers_list(self, params: WorkersList) -> list[WorkerInfo]:
        self._check(write=False)
        now = self._adapter._now(params.now)
        return _workers.workers_list(self._store.workers, self._state, params, now)

    # ------------------------------------------------------------ operator transitions

    async def jobs_trigger(self, params: JobsTrigger) -> JobsTriggered:
        return await self._write(lambda ctx, now: _writes.jobs_trigger(ctx, params, now), params.now)

    async def chains_delete(self, params: ChainsDelete) -> ChainsDeleted:
        return await self._write(lambda ctx, _: _deletion.chains_delete(ctx, params), None)

    async def chains_cancel(self, params: ChainsCancel) -> ChainsCancelled:
        if params.dry_run:
            return await cancel_dry_run(self, params)
        return await self._write(lambda ctx, now: _lifecycle.chains_cancel(ctx, params, now), params.now)

    async def jobs_retry(self, params: JobsRetry) -> JobsRetried:
        return await self._write(lambda ctx, now: _lifecycle.jobs_retry(ctx, params, now), params.now)

    async def chains_prune(self, params: ChainsPrune) -> ChainsPruned:
        """Retention; one transaction at a time prunes (a second call returns ``busy=True``)."""
        return await self._write(lambda ctx, _: _deletion.chains_prune(ctx, params), None)

    # ------------------------------------------------------------ scheduling controls

    async def job_wait(self, params: JobWait) -> JobWaited:
        return await self._write(lambda ctx, now: _waits.job_wait(ctx, params, now), params.now)

    async def types_pause(self, params: TypesPause) -> list[PausedType]:
        return await self._write(lambda ctx, now: _scheduling.types_pause(ctx, params, now), params.now)

    async def paused_types_list(self, params: PausedTypesList) -> list[PausedType]:
        self._check(write=False)
        return _scheduling.paused_types_list(self._store, self._state)

    async def schedules_register(self, params: SchedulesRegister) -> list[ScheduleRecord]:
        return await self._write(
            lambda ctx, now: _scheduling.schedules_register(ctx, params, now), params.now
        )

    async def schedules_list(self, params: SchedulesList) -> list[ScheduleRecord]:
        self._check(write=False)
        return _scheduling.schedules_list(self._store, self._state)

    # ------------------------------------------------------------ failure and cancel hooks

    async def end_hooks_register(self, params: EndHooksRegister) -> None:
        await self._write(lambda ctx, _: _end_hooks.end_hooks_register(ctx.store, ctx.tx, params), None)

    # ------------------------------------------------------------ revoked sessions (RevokesSessions)

    async def sessions_revoke(self, params: SessionsRevoke) -> None:
        await self._write(lambda ctx, now: _sessions.sessions_revoke(ctx, params, now), params.now)

    async def session_revoked(self, params: SessionRevoked) -> bool:
        self._check(write=False)
        return _sessions.session_revoked(self._store, self._state, params, self._adapter._now(params.now))

    # ------------------------------------------------------------ listings

    async def chains_list(self, params: ChainsList) -> Page[Chain]:
        return _reads.chains_list(self._view(), params)

    async def jobs_list(self, params: JobsList) -> Page[Job]:
        return _reads.jobs_list(self._view(), params)

    async def chain_jobs_list(self, params: ChainJobsList) -> Page[Job]:
        return _reads.chain_jobs_list(self._view(), params)

    async def blocked_jobs_list(self, params: BlockedJobsList) -> Page[Job]:
        return _reads.blocked_jobs_list(self._view(), params)


async def poison_memory_transaction(tx: StateTx) -> None:
    """The suites' ``poison_transaction`` hook for this adapter (a test hook, not contract)."""
    if not isinstance(tx, MemoryStateTx):
        raise TypeError(f"expected a MemoryStateTx, got {type(tx).__name__}")
    tx.poison()
