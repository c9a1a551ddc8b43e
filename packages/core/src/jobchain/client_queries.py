"""The client's read side: get, list and await chains and jobs.

Every query takes an optional ``tx`` (a :class:`~jobchain.transactions.Transaction` of the
same client) to read inside the caller's transaction; without it a read-only transaction
is opened for the call.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from jobchain.contracts.notify import ChecksDelivery, NotifyAdapter, NotifyDelivery
from jobchain.contracts.observe import Event, Observer
from jobchain.contracts.state import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    BlockedJobsList,
    ChainGet,
    ChainJobsList,
    ChainsList,
    JobBlockersGet,
    JobGet,
    JobsList,
    Order,
    QueueStatsGet,
    StateAdapter,
    StateTx,
    WorkersList,
)
from jobchain.entities import Chain, Job, JobStatus, Page, WorkerInfo, WorkerState, validate_id
from jobchain.error_groups import group_errors
from jobchain.errors import (
    AdapterClosedError,
    ChainCancelledError,
    ChainFailedError,
    ChainNotFoundError,
    InvalidArgumentError,
    JobTypeMismatchError,
    TransactionRequiredError,
    WaitChainTimeoutError,
)
from jobchain.job_types import JobType, JobTypes
from jobchain.polling import POLL_CAP, POLL_FIRST, Backoff, WaitForWake, wait_for_wake
from jobchain.stats import DURATION_SAMPLE, DURATION_WINDOW, ERROR_SAMPLE_MAX, STATS_WINDOWS, QueueStats
from jobchain.transactions import Transaction

Clock = Callable[[], datetime]
TypeRef = JobType[Any, Any] | str

logger = logging.getLogger("jobchain.client")


def type_name_of(job_type: TypeRef) -> str:
    """The name of a JobType or a type name string."""
    if isinstance(job_type, JobType):
        return job_type.name
    if isinstance(job_type, str) and job_type:
        return job_type
    raise InvalidArgumentError(f"expected a JobType or a job type name, got {job_type!r}")


def _names(what: str, values: Sequence[TypeRef]) -> list[str]:
    _require_list(what, values)
    return [type_name_of(v) for v in values]


def _ids(what: str, values: Sequence[str]) -> list[str]:
    _require_list(what, values)
    return [validate_id(v) for v in values]


def _statuses(values: Sequence[JobStatus | str]) -> list[str]:
    _require_list("statuses", values)
    try:
        return [JobStatus(v).value for v in values]
    except ValueError:
        valid = ", ".join(s.value for s in JobStatus)
        raise InvalidArgumentError(f"statuses must be among {valid}; got {list(values)!r}") from None


def error_type_names(values: Sequence[str]) -> list[str]:
    """``values`` as a list of error type names (non-empty strings), or InvalidArgumentError."""
    _require_list("error_types", values)
    for value in values:
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(
                f"error_types must list error type names such as 'TimeoutError', got {value!r}"
            )
    return list(values)


def _worker_states(values: Sequence[WorkerState | str]) -> list[str]:
    _require_list("states", values)
    try:
        return [WorkerState(v).value for v in values]
    except ValueError:
        valid = ", ".join(s.value for s in WorkerState)
        raise InvalidArgumentError(f"states must be among {valid}; got {list(values)!r}") from None


def _worker_ids(values: Sequence[str]) -> list[str]:
    _require_list("leased_by", values)
    for value in values:
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(f"leased_by holds worker ids (non-empty strings), got {value!r}")
    return list(values)


def _require_list(what: str, values: object) -> None:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidArgumentError(f"{what} must be a list, got {values!r}; wrap a single value in [...]")


def positive_seconds(name: str, value: object) -> float:
    """``value`` as a positive finite number of seconds, or InvalidArgumentError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(f"{name} must be a number of seconds, got {value!r}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive finite number of seconds, got {value!r}")
    return float(value)


class ClientQueries:
    """Read methods of :class:`~jobchain.client.Client` (see that class)."""

    state: StateAdapter
    notify: NotifyAdapter | None
    job_types: JobTypes
    observers: tuple[Observer, ...]
    clock: Clock | None

    def __init__(
        self,
        state: StateAdapter,
        notify: NotifyAdapter | None,
        job_types: JobTypes,
        observers: Sequence[Observer] = (),
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(job_types, JobTypes):
            raise InvalidArgumentError(f"job_types must be a JobTypes registry, got {job_types!r}")
        self.state = state
        self.notify = notify
        self.job_types = job_types
        self.observers = tuple(observers)
        self.clock = clock
        self._closed = False
        self._wait_for_wake: WaitForWake = wait_for_wake  # between two polls of await_chain (tests swap it)
        self._waiting: set[asyncio.Event] = set()  # the wake-up events of the await_chain calls running
        self._unwatch_delivery = (
            notify.watch_delivery(self._delivery_changed) if isinstance(notify, ChecksDelivery) else None
        )

    def _now(self) -> datetime | None:
        return self.clock() if self.clock is not None else None

    def _check_open(self) -> None:
        if self._closed:
            raise AdapterClosedError("this client is closed; connect a new one")

    def _tx(self, tx: object) -> Transaction:
        """``tx`` if it is an open transaction of this client, else TransactionRequiredError."""
        if not isinstance(tx, Transaction) or not tx.belongs_to(self):
            raise TransactionRequiredError(
                "this call writes: pass the transaction of `async with client.transaction() as tx` "
                f"opened on this client and still open, got {tx!r}"
            )
        return tx

    @asynccontextmanager
    async def _read(self, tx: Transaction | None) -> AsyncIterator[StateTx]:
        self._check_open()
        if tx is not None:
            yield self._tx(tx).state
            return
        async with self.state.transaction(read_only=True) as state_tx:
            yield state_tx

    @staticmethod
    def _check_type(expected: TypeRef | None, actual: str) -> None:
        if expected is not None and type_name_of(expected) != actual:
            raise JobTypeMismatchError(type_name_of(expected), actual)

    async def get_chain(
        self, chain_id: str, *, job_type: TypeRef | None = None, tx: Transaction | None = None
    ) -> Chain | None:
        """The chain, or None. JobTypeMismatchError if ``job_type`` is not the chain's type."""
        chain_id = validate_id(chain_id)
        async with self._read(tx) as state:
            chain = await state.chain_get(ChainGet(chain_id=chain_id))
        if chain is not None:
            self._check_type(job_type, chain.type_name)
        return chain

    async def get_job(
        self, job_id: str, *, job_type: TypeRef | None = None, tx: Transaction | None = None
    ) -> Job | None:
        """The job, or None. JobTypeMismatchError if ``job_type`` is not the job's type."""
        job_id = validate_id(job_id)
        async with self._read(tx) as state:
            job = await state.job_get(JobGet(job_id=job_id))
        if job is not None:
            self._check_type(job_type, job.type_name)
        return job

    async def list_chains(
        self,
        *,
        type_names: Sequence[TypeRef] = (),
        chain_ids: Sequence[str] = (),
        job_ids: Sequence[str] = (),
        statuses: Sequence[JobStatus | str] = (),
        root_only: bool = False,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        order: Order = "desc",
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        tx: Transaction | None = None,
    ) -> Page[Chain]:
        """Chains by root creation time (newest first by default); ``statuses`` match the last job
        (``failed`` and ``cancelled`` included).

        ``root_only`` leaves out chains used as a blocker; time bounds are inclusive.
        """
        params = ChainsList(
            type_names=_names("type_names", type_names),
            chain_ids=_ids("chain_ids", chain_ids),
            job_ids=_ids("job_ids", job_ids),
            statuses=_statuses(statuses),
            root_only=root_only,
            created_from=_aware("created_from", created_from),
            created_to=_aware("created_to", created_to),
            order=order,
            cursor=cursor,
            limit=limit,
        )
        async with self._read(tx) as state:
            return await state.chains_list(params)

    async def list_jobs(
        self,
        *,
        type_names: Sequence[TypeRef] = (),
        chain_type_names: Sequence[TypeRef] = (),
        chain_ids: Sequence[str] = (),
        job_ids: Sequence[str] = (),
        statuses: Sequence[JobStatus | str] = (),
        error_types: Sequence[str] = (),
        leased_by: Sequence[str] = (),
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        order: Order = "desc",
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        tx: Transaction | None = None,
    ) -> Page[Job]:
        """Jobs by creation time (newest first by default); time bounds are inclusive.

        ``statuses`` include ``failed`` and ``cancelled``; ``error_types`` matches the type of a
        job's last recorded error (``statuses=["failed"], error_types=["TimeoutError"]``: dead
        letters by error). ``leased_by`` lists the running jobs those workers hold. Each job
        carries its error history in ``attempt_errors``.
        """
        params = JobsList(
            type_names=_names("type_names", type_names),
            chain_type_names=_names("chain_type_names", chain_type_names),
            chain_ids=_ids("chain_ids", chain_ids),
            job_ids=_ids("job_ids", job_ids),
            statuses=_statuses(statuses),
            error_types=error_type_names(error_types),
            leased_by=_worker_ids(leased_by),
            created_from=_aware("created_from", created_from),
            created_to=_aware("created_to", created_to),
            order=order,
            cursor=cursor,
            limit=limit,
        )
        async with self._read(tx) as state:
            return await state.jobs_list(params)

    async def list_chain_jobs(
        self,
        chain_id: str,
        *,
        job_type: TypeRef | None = None,
        order: Order = "asc",
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        tx: Transaction | None = None,
    ) -> Page[Job]:
        """The jobs of one chain in chain order (root first by default)."""
        params = ChainJobsList(chain_id=validate_id(chain_id), order=order, cursor=cursor, limit=limit)
        async with self._read(tx) as state:
            if job_type is not None:
                chain = await state.chain_get(ChainGet(chain_id=params.chain_id))
                if chain is not None:
                    self._check_type(job_type, chain.type_name)
            return await state.chain_jobs_list(params)

    async def get_job_blockers(self, job_id: str, *, tx: Transaction | None = None) -> list[Chain]:
        """The chains blocking (or that blocked) a job, in declaration order."""
        params = JobBlockersGet(job_id=validate_id(job_id))
        async with self._read(tx) as state:
            return await state.job_blockers_get(params)

    async def list_blocked_jobs(
        self,
        chain_id: str,
        *,
        order: Order = "desc",
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        tx: Transaction | None = None,
    ) -> Page[Job]:
        """Jobs that declared ``chain_id`` as a blocker (newest first by default)."""
        params = BlockedJobsList(
            blocker_chain_id=validate_id(chain_id), order=order, cursor=cursor, limit=limit
        )
        async with self._read(tx) as state:
            return await state.blocked_jobs_list(params)

    async def list_workers(
        self, *, states: Sequence[WorkerState | str] = (), tx: Transaction | None = None
    ) -> list[WorkerInfo]:
        """The worker registry, most recently started first; ``states`` filters (``dead`` included).

        A row is ``dead`` once its worker missed its heartbeats (whether or not a live worker
        has released its jobs yet); dead and stopped rows are pruned after an hour.
        """
        params = WorkersList(states=_worker_states(states), now=self._now())
        async with self._read(tx) as state:
            return await state.workers_list(params)

    async def queue_stats(
        self,
        *,
        type_names: Sequence[TypeRef] = (),
        windows: Sequence[timedelta] = STATS_WINDOWS,
        duration_window: timedelta = DURATION_WINDOW,
        duration_sample: int = DURATION_SAMPLE,
        throughput_window: timedelta | None = None,
        throughput_step: timedelta = timedelta(minutes=1),
        error_sample: int = 0,
        tx: Transaction | None = None,
    ) -> QueueStats:
        """Queue health per job type in one read: counts by status, due and scheduled jobs, the
        oldest due job, expired leases, failures by error type, jobs finished over recent
        ``windows``, attempt-duration percentiles and (when ``throughput_window`` is given)
        completions and failures per ``throughput_step``; whether notify delivery is degraded.

        ``error_sample`` (0 to 10,000) also groups the last errors of the most recently created
        failed jobs, that many at most, by fingerprint (``error_groups``): a further read of
        those jobs in the same transaction, skipped when nothing failed.
        """
        _require_list("windows", windows)
        if (
            not isinstance(error_sample, int)
            or isinstance(error_sample, bool)
            or not 0 <= error_sample <= ERROR_SAMPLE_MAX
        ):
            raise InvalidArgumentError(
                f"error_sample must be an integer from 0 to {ERROR_SAMPLE_MAX:,}, got {error_sample!r}"
            )
        params = QueueStatsGet(
            type_names=_names("type_names", type_names),
            windows=tuple(windows),
            duration_window=duration_window,
            duration_sample=duration_sample,
            throughput_window=throughput_window,
            throughput_step=throughput_step,
            now=self._now(),
        )
        async with self._read(tx) as state:
            stats = await state.queue_stats(params)
            failed = (
                await _newest_failed(state, params.type_names, error_sample) if stats.total("failed") else []
            )
        degraded, reason = False, None
        if isinstance(self.notify, ChecksDelivery) and self.notify.degraded:
            # The last verdict of the backend's periodic self-check: no probe is sent here.
            degraded, reason = True, self.notify.degraded_reason
        return replace(
            stats,
            error_groups=tuple(group_errors(failed)),
            errors_read=len(failed),
            notify_degraded=degraded,
            notify_reason=reason,
        )

    async def await_chain(
        self,
        chain_id: str,
        *,
        job_type: TypeRef | None = None,
        timeout: float,  # noqa: ASYNC109 -- the wait owns its deadline so it can raise WaitChainTimeoutError
        poll_interval: float = 15.0,
    ) -> Chain:
        """Wait until the chain is completed and return it.

        Wakes on the chain-finished notification and re-checks every ``poll_interval``
        seconds in case a notification is lost. When no notification can wake it (no notify
        backend, listening failed, or the backend's delivery self-check reports it degraded)
        it polls instead: 50 ms, doubling to at most 1 s (or ``poll_interval`` if shorter).
        As soon as the chain is failed it raises ChainFailedError (``job``: its failed last
        job, ``error``: that job's last error), as soon as it is cancelled
        ChainCancelledError (``job``, ``reason``). Raises WaitChainTimeoutError after
        ``timeout`` seconds, ChainNotFoundError if the chain does not exist (or is deleted
        while waiting); cancelling the caller cancels the wait.
        """
        chain_id = validate_id(chain_id)
        timeout = positive_seconds("timeout", timeout)
        poll_interval = positive_seconds("poll_interval", poll_interval)
        self._check_open()
        woken = asyncio.Event()
        unsubscribe = None
        if self.notify is not None:
            # Subscribe before the first check so a completion in between is not missed.
            try:
                unsubscribe = await self.notify.listen_chain_completed(chain_id, lambda _id: woken.set())
            except Exception:
                # Notifications are hints: without them the wait still ends through polling.
                logger.warning(
                    "await_chain: cannot listen for chain completion; polling instead", exc_info=True
                )
        backoff = Backoff(POLL_FIRST, min(POLL_CAP, poll_interval))
        self._waiting.add(woken)  # a delivery that turns degraded wakes it: it then polls
        try:
            async with asyncio.timeout(timeout):
                while True:
                    woken.clear()
                    chain = await self.get_chain(chain_id, job_type=job_type)
                    if chain is None:
                        raise ChainNotFoundError(chain_id)
                    status = chain.status
                    if status is JobStatus.COMPLETED:
                        return chain
                    if status is JobStatus.FAILED:
                        raise ChainFailedError(chain_id, chain.last, chain.last.last_attempt_error)
                    if status is JobStatus.CANCELLED:
                        raise ChainCancelledError(chain_id, chain.last, chain.last.cancel_reason)
                    if unsubscribe is not None and not self._notify_degraded():
                        backoff.reset()  # notifications work: the completion wakes the wait
                        await self._wait_for_wake(woken, poll_interval)
                    elif await self._wait_for_wake(woken, backoff.next()):
                        backoff.reset()
        except TimeoutError:
            raise WaitChainTimeoutError(chain_id, timeout) from None
        finally:
            self._waiting.discard(woken)
            if unsubscribe is not None:
                try:
                    await unsubscribe()
                except Exception:
                    logger.warning("await_chain: unsubscribe failed", exc_info=True)

    # ------------------------------------------------------------ notify delivery

    def _notify_degraded(self) -> bool:
        """True when the notify backend's own delivery self-check says notifications are lost."""
        notify = self.notify
        return isinstance(notify, ChecksDelivery) and notify.degraded

    async def check_notify_delivery(self) -> NotifyDelivery:
        """Check now whether notifications reach their listeners (``jobchain health --check-notify``).

        With a backend that checks its own delivery (``ChecksDelivery``: PostgreSQL
        LISTEN/NOTIFY), it runs that check: a probe published and awaited on the backend's
        own subscription. Other backends are reported as not checked; without a notify
        backend, ``configured`` is False. Never raises for a failed check: that is
        ``degraded`` with its ``reason``.
        """
        self._check_open()
        return await check_delivery_of(self.notify)

    def _delivery_changed(self, degraded: bool, reason: str | None) -> None:
        """The notify backend's self-check changed its verdict: tell the observers once, and
        wake the waits of ``await_chain`` when notifications stopped (they then poll)."""
        if degraded:
            for woken in self._waiting:
                woken.set()
        attributes: dict[str, Any] = {"notify.adapter": type(self.notify).__name__}
        if degraded:
            attributes["reason"] = reason
        event = Event("notify_degraded" if degraded else "notify_recovered", attributes)
        for observer in self.observers:
            try:
                observer.on_event(event)
            except Exception:
                logger.exception("observer %r failed on event %s", observer, event.name)


async def _newest_failed(state: StateTx, type_names: Sequence[str], most: int) -> list[Job]:
    """The ``most`` most recently created failed jobs of ``type_names`` (every type: empty)."""
    read: list[Job] = []
    cursor: str | None = None
    while len(read) < most:
        page = await state.jobs_list(
            JobsList(
                statuses=[JobStatus.FAILED.value],
                type_names=type_names,
                cursor=cursor,
                limit=min(MAX_PAGE_SIZE, most - len(read)),
            )
        )
        read.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    return read


async def check_delivery_of(notify: NotifyAdapter | None) -> NotifyDelivery:
    """What :meth:`ClientQueries.check_notify_delivery` reports for ``notify`` (checked now)."""
    if notify is None:
        return NotifyDelivery(
            configured=False,
            checked=False,
            degraded=False,
            reason="no notify backend: workers and await_chain poll",
        )
    if not isinstance(notify, ChecksDelivery):
        return NotifyDelivery(
            configured=True,
            checked=False,
            degraded=False,
            reason=f"{type(notify).__name__} has no delivery self-check",
        )
    await notify.check_delivery()
    return NotifyDelivery(
        configured=True,
        checked=True,
        degraded=notify.degraded,
        reason=notify.degraded_reason if notify.degraded else None,
    )


def _aware(name: str, value: datetime | None) -> datetime | None:
    if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
        raise InvalidArgumentError(f"{name} must be a timezone-aware datetime, got {value!r}")
    return value
