"""The state contract: the :class:`StateTx` and :class:`StateAdapter` protocols.

Every state transition and query is one ``StateTx`` method taking one frozen params object and
running in a single round trip wherever the engine allows it. Times are aware UTC datetimes;
``now=None`` means the adapter's own clock. Suite: ``jobchain_conformance``. The adapter docs
(``docs/adapters/writing-a-backend.md``, ``docs/adapters/state-semantics.md``) state every rule.

The params and result types live by area, one module each, and every one of them is importable
from here and from ``jobchain.contracts`` as well:

* :mod:`jobchain.contracts.creation` — ``jobs_create``;
* :mod:`jobchain.contracts.reads` — ``chain_get``, ``job_get``, ``job_blockers_get``,
  ``job_next_available``;
* :mod:`jobchain.contracts.claims` — ``jobs_acquire``, ``job_renew_lease``,
  ``job_reschedule``, ``job_complete``, ``jobs_reap_expired``;
* :mod:`jobchain.contracts.lifecycle` — ``job_fail``, ``chains_cancel``, ``jobs_retry``,
  ``jobs_trigger``; terminal statuses, fencing, propagation, the error history;
* :mod:`jobchain.contracts.deletion` — ``chains_delete``, ``chains_prune``;
* :mod:`jobchain.contracts.workers` — ``worker_heartbeat``, ``workers_list``;
* :mod:`jobchain.contracts.queue_stats` — ``queue_stats``;
* :mod:`jobchain.contracts.listings` — ``chains_list``, ``jobs_list``, ``chain_jobs_list``,
  ``blocked_jobs_list``;
* :mod:`jobchain.contracts.scheduling` — ``job_wait``, ``types_pause``,
  ``paused_types_list``, ``schedules_register``, ``schedules_list``; the claim rules;
* :mod:`jobchain.contracts.end_hooks` — ``end_hooks_register``; the jobs a failure or a
  cancellation starts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol, runtime_checkable

from jobchain.contracts._validation import _check_timedelta
from jobchain.contracts.capabilities import Capability
from jobchain.contracts.claims import (
    JobComplete,
    JobCompleted,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsAcquired,
    JobsReapExpired,
)
from jobchain.contracts.creation import JobCreated, JobsCreate, NewJob
from jobchain.contracts.deletion import ChainsDelete, ChainsDeleted, ChainsPrune, ChainsPruned, PrunedChain
from jobchain.contracts.end_hooks import EndHooksRegister, TypeEndHooks
from jobchain.contracts.lifecycle import (
    ChainsCancel,
    ChainsCancelled,
    JobFail,
    JobFailed,
    JobsRetried,
    JobsRetry,
    JobsTrigger,
    JobsTriggered,
)
from jobchain.contracts.listings import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    BlockedJobsList,
    ChainJobsList,
    ChainsList,
    JobsList,
    Order,
    _check_page,
)
from jobchain.contracts.queue_stats import QueueStatsGet
from jobchain.contracts.reads import ChainGet, JobBlockersGet, JobGet, JobNextAvailable
from jobchain.contracts.scheduling import (
    JobWait,
    JobWaited,
    PausedTypesList,
    SchedulesList,
    SchedulesRegister,
    TypesPause,
)
from jobchain.contracts.workers import (
    WORKER_REPORTED_STATES,
    WorkerHeartbeat,
    WorkerHeartbeatResult,
    WorkersList,
)
from jobchain.entities import (
    PRIORITY_AGING,
    AttemptError,
    Chain,
    Deduplication,
    Job,
    JsonValue,
    Page,
    PausedType,
    Schedule,
    ScheduleRecord,
    TypeLimits,
    WorkerInfo,
    WorkerState,
    _use_slot_setting_init,
)
from jobchain.errors import (
    BlockerReference,
    InvalidArgumentError,
    InvalidPageSizeError,
    JobAlreadyCompletedError,
    JobCancelledError,
    JobchainError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
)
from jobchain.stats import DURATION_SAMPLE, DURATION_WINDOW, STATS_WINDOWS, QueueStats

__all__ = [
    # the protocols and constants defined here
    "COMPLETION_REFUSALS",
    "CompletesJobsInBatches",
    "ObservesCallerCommits",
    "ReservesConnections",
    "RunsOperationsAlone",
    "StateAdapter",
    "StateTx",
    # re-exported from the area modules (importable from here as before the split)
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "WORKER_REPORTED_STATES",
    "BlockedJobsList",
    "ChainGet",
    "ChainJobsList",
    "ChainsCancel",
    "ChainsCancelled",
    "ChainsDelete",
    "ChainsDeleted",
    "ChainsList",
    "ChainsPrune",
    "ChainsPruned",
    "EndHooksRegister",
    "JobBlockersGet",
    "JobComplete",
    "JobCompleted",
    "JobCreated",
    "JobFail",
    "JobFailed",
    "JobGet",
    "JobNextAvailable",
    "JobRenewLease",
    "JobReschedule",
    "JobWait",
    "JobWaited",
    "JobsAcquire",
    "JobsAcquired",
    "JobsCreate",
    "JobsList",
    "JobsReapExpired",
    "JobsRetried",
    "JobsRetry",
    "JobsTrigger",
    "JobsTriggered",
    "NewJob",
    "Order",
    "PausedTypesList",
    "PrunedChain",
    "QueueStatsGet",
    "SchedulesList",
    "SchedulesRegister",
    "TypeEndHooks",
    "TypesPause",
    "WorkerHeartbeat",
    "WorkerHeartbeatResult",
    "WorkersList",
    # names this module imported before the split, still importable from it
    "PRIORITY_AGING",
    "DURATION_SAMPLE",
    "DURATION_WINDOW",
    "STATS_WINDOWS",
    "AbstractAsyncContextManager",
    "AttemptError",
    "Awaitable",
    "BlockerReference",
    "Callable",
    "Capability",
    "Chain",
    "Deduplication",
    "InvalidArgumentError",
    "InvalidPageSizeError",
    "Job",
    "JobAlreadyCompletedError",
    "JobCancelledError",
    "JobNotFoundError",
    "JobTakenByAnotherWorkerError",
    "JobchainError",
    "JsonValue",
    "Literal",
    "Mapping",
    "Page",
    "PausedType",
    "Protocol",
    "QueueStats",
    "Schedule",
    "ScheduleRecord",
    "Sequence",
    "TypeLimits",
    "WorkerInfo",
    "WorkerState",
    "_check_page",
    "_check_timedelta",
    "_use_slot_setting_init",
    "dataclass",
    "datetime",
    "field",
    "runtime_checkable",
    "timedelta",
]


@runtime_checkable
class StateTx(Protocol):
    """One open transaction (or savepoint) of a state adapter."""

    def savepoint(self) -> AbstractAsyncContextManager[StateTx]:
        """Nested unit of work: released on success, rolled back (and re-raised) on error.

        Guarantees (suite: SavepointTests): rollback leaves the outer tx usable, even a
        poisoned one.
        """
        ...

    async def jobs_create(self, params: JobsCreate) -> list[JobCreated]: ...
    async def chain_get(self, params: ChainGet) -> Chain | None: ...
    async def job_get(self, params: JobGet) -> Job | None: ...
    async def job_blockers_get(self, params: JobBlockersGet) -> list[Chain]: ...
    async def job_next_available(self, params: JobNextAvailable) -> timedelta | None: ...
    async def jobs_acquire(self, params: JobsAcquire) -> JobsAcquired: ...
    async def job_renew_lease(self, params: JobRenewLease) -> Job: ...
    async def job_reschedule(self, params: JobReschedule) -> Job: ...
    async def job_complete(self, params: JobComplete) -> JobCompleted: ...
    async def job_fail(self, params: JobFail) -> JobFailed: ...
    async def chains_cancel(self, params: ChainsCancel) -> ChainsCancelled: ...
    async def jobs_retry(self, params: JobsRetry) -> JobsRetried: ...
    async def chains_prune(self, params: ChainsPrune) -> ChainsPruned: ...
    async def jobs_reap_expired(self, params: JobsReapExpired) -> list[Job]: ...
    async def worker_heartbeat(self, params: WorkerHeartbeat) -> WorkerHeartbeatResult: ...
    async def workers_list(self, params: WorkersList) -> list[WorkerInfo]: ...
    async def queue_stats(self, params: QueueStatsGet) -> QueueStats: ...
    async def jobs_trigger(self, params: JobsTrigger) -> JobsTriggered: ...
    async def chains_delete(self, params: ChainsDelete) -> ChainsDeleted: ...
    async def chains_list(self, params: ChainsList) -> Page[Chain]: ...
    async def jobs_list(self, params: JobsList) -> Page[Job]: ...
    async def chain_jobs_list(self, params: ChainJobsList) -> Page[Job]: ...
    async def blocked_jobs_list(self, params: BlockedJobsList) -> Page[Job]: ...
    # scheduling controls (contracts.scheduling)
    async def job_wait(self, params: JobWait) -> JobWaited: ...
    async def types_pause(self, params: TypesPause) -> list[PausedType]: ...
    async def paused_types_list(self, params: PausedTypesList) -> list[PausedType]: ...
    async def schedules_register(self, params: SchedulesRegister) -> list[ScheduleRecord]: ...
    async def schedules_list(self, params: SchedulesList) -> list[ScheduleRecord]: ...
    # failure and cancel hooks (contracts.end_hooks)
    async def end_hooks_register(self, params: EndHooksRegister) -> None: ...


@runtime_checkable
class StateAdapter(Protocol):
    """A state backend: transactions over the job tables plus lifecycle.

    ``transaction(read_only=True)`` reads committed data and never waits for writers.
    ``migrate()`` is idempotent and safe to run from several processes at once.
    """

    capabilities: frozenset[Capability]
    time_precision: timedelta

    def transaction(
        self, *, read_only: bool = False, connection: object | None = None
    ) -> AbstractAsyncContextManager[StateTx]:
        """Open a transaction, or join the caller's own driver ``connection``.

        With ``connection`` (a provider-specific object such as a psycopg connection or an
        SQLAlchemy AsyncConnection/AsyncSession already inside a transaction) the adapter
        runs its statements there and neither commits nor rolls back: the caller's commit
        decides. Adapters that cannot join foreign connections raise InvalidArgumentError.
        """
        ...

    async def migrate(self) -> None: ...
    async def close(self) -> None: ...


@runtime_checkable
class ObservesCallerCommits(Protocol):
    """Optional: an adapter that can tell when a joined caller transaction commits."""

    def after_commit(
        self, connection: object, on_commit: Callable[[], Awaitable[None]], on_rollback: Callable[[], None]
    ) -> bool:
        """Arrange ``on_commit`` after ``connection``'s transaction commits (``on_rollback`` if
        it rolls back). Return False if this connection offers no way to observe that."""
        ...


@runtime_checkable
class RunsOperationsAlone(Protocol):
    """Optional: an adapter that can run an operation as its own transaction."""

    def autocommit(self, *, read_only: bool = False) -> AbstractAsyncContextManager[StateTx]:
        """A StateTx whose every operation commits on its own as it returns.

        For a unit of work that is a single operation (a claim, a look-up, a group of
        completions, a plain start): no BEGIN and no COMMIT round trips. What an operation
        wrote is durable when it returns. An operation the adapter runs as several
        statements may commit each one only where each step stands alone (a claim retried
        after losing candidates keeps what it claimed first); steps that must hold their
        locks together share one transaction (a pipeline or a transaction block).
        Savepoints raise InvalidArgumentError.
        An adapter that cannot run a given connection that way opens an ordinary transaction.
        """
        ...


@runtime_checkable
class ReservesConnections(Protocol):
    """Optional: an adapter whose transactions draw on a bounded set of connections (a pool)."""

    async def reserve_connections(self, count: int) -> int | None:
        """Make room for ``count`` transactions open at once; return how many can be.

        An adapter with a pool of its own grows it to at least ``count``; over a caller's
        pool, connection or engine it changes nothing (the caller sized it). Returns the
        number of connections available afterwards, or None when no pool bounds them.
        """
        ...


COMPLETION_REFUSALS = (
    JobNotFoundError,
    JobAlreadyCompletedError,
    JobTakenByAnotherWorkerError,
    JobCancelledError,
)
"""The errors with which a state adapter refuses a completion without writing anything."""


@runtime_checkable
class CompletesJobsInBatches(Protocol):
    """Optional: a state transaction that completes many jobs in one round trip."""

    async def jobs_complete(self, params: Sequence[JobComplete]) -> list[JobCompleted | JobchainError]:
        """Complete each job exactly as ``job_complete`` would, in order, in this transaction.

        A refusal (JobNotFoundError, JobAlreadyCompletedError, JobTakenByAnotherWorkerError,
        JobCancelledError) changes nothing and is returned in that job's place; any other error
        fails the call.
        """
        ...
