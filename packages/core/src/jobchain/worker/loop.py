"""The worker: claims in batches and runs attempts, beside its heartbeat and reaper tasks.

Four tasks share one worker, each with one purpose, so none can starve another:

* the claim loop (here): claim while there is room, then wait for a wake-up, the next
  scheduled job or the poll interval;
* the heartbeat (:mod:`jobchain.worker.heartbeat`): keeps the registry row alive, releases
  dead workers' jobs, and after an outage wakes the loop the moment the database answers;
* the reaper (:mod:`jobchain.worker.reaper`): returns expired leases to pending when due;
* wake-ups (:mod:`jobchain.worker.wakeups`): turn *job scheduled* notifications into claims.

Attempts run in slots (:mod:`jobchain.worker.slots`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import TYPE_CHECKING

from jobchain.contracts import (
    EndHooksRegister,
    RunsOperationsAlone,
    StateTx,
    TypeEndHooks,
    WorkerHeartbeatResult,
)
from jobchain.end_hooks import HOOK_FIELDS, end_hook_rows
from jobchain.entities import PRIORITY_AGING, Job, WorkerState
from jobchain.errors import InvalidArgumentError, SchemaNotMigratedError, UnknownJobTypeError
from jobchain.job_types import UNSET, MaxAttempts, validate_max_attempts, validate_timeout
from jobchain.worker.abort import AbortReason
from jobchain.worker.backoff import DEFAULT_RECOVERY_BACKOFF, Backoff, LeaseConfig
from jobchain.worker.claims import Claims, type_limits_of
from jobchain.worker.completer import CompletionGroups
from jobchain.worker.connections import reserve_connections
from jobchain.worker.emitter import WorkerEvents
from jobchain.worker.event_log import EventLog
from jobchain.worker.failures import now_of
from jobchain.worker.heartbeat import (
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_MISSED_HEARTBEATS,
    Heartbeat,
    WorkerIdentity,
)
from jobchain.worker.ids import make_worker_id
from jobchain.worker.liveness import Liveness
from jobchain.worker.outage import FailureStreak, wait_or_timeout
from jobchain.worker.periodic import Scheduler
from jobchain.worker.processors import (
    Processor,
    Processors,
    SyncHandlerWrapper,
    check_required_middleware,
    merge_processors,
    merge_schedules,
)
from jobchain.worker.reaper import Reaper
from jobchain.worker.retention import Pruner, Retention
from jobchain.worker.settings import (
    WorkerSettings,
    aging_setting,
    count_setting,
    positive_seconds,
    wrapper_setting,
)
from jobchain.worker.slots import Slots, WorkerLoad
from jobchain.worker.wakeups import WakeUps

if TYPE_CHECKING:
    from jobchain.client import Client

log = logging.getLogger("jobchain.worker")


class Worker(WorkerEvents):
    """Processes the job types of its processor slices with ``concurrency`` slots.

    ``async with Worker(...)`` starts it and stops it gracefully on exit; or call
    :meth:`start` and :meth:`stop` yourself. Settings resolve processor → job type →
    registry → worker → library default; each job is leased for its own type's lease.

    ``prefetch`` keeps up to that many claimed jobs in a local buffer beyond the free slots
    (as Graphile Worker's local queue does): a slot that frees starts the next job at once,
    without a database round trip, and the buffer is refilled in batches while handlers run.
    The cost: buffered jobs are leased to this worker and wait for a slot (a job that waited
    more than half its lease is renewed before it starts), and jobs still buffered at
    :meth:`stop` are handed back with a recorded attempt. 0 (the default) claims only for free
    slots.

    ``group_commit`` (on by default) writes plain completions — ``complete(output)`` with no
    callback, continuation or middleware — of attempts finishing at about the same time in
    one transaction (one commit, one fsync) instead of one each; see
    :mod:`jobchain.worker.completer`. ``completed_at`` is then the worker's clock.

    A slot counts a running handler: once a handler has returned, its slot takes the next job
    while the attempt's commit is still being written. At most ``concurrency`` attempts wait
    for their commit that way; beyond that they keep their slots (backpressure when the
    database is slow). :attr:`load` says what the worker holds — running and buffered jobs
    (never more than ``concurrency + prefetch``, times ``max_batch`` per slot for a batch
    processor) and, beside them, attempts waiting for their commit; its registry row reports
    the same.

    A batch processor (``Processors.register_batch``) takes up to its ``max_batch`` claimed
    jobs of its type in one slot; claims then ask for that many jobs per free slot.

    The worker heartbeats its registry row every ``heartbeat_interval`` seconds; one silent
    for ``heartbeat_interval * missed_heartbeats`` seconds is dead, and a live worker returns
    its running jobs to pending (see :mod:`jobchain.worker.heartbeat`). ``recovery`` is the
    loop's backoff after a database or broker failure; a heartbeat that succeeds again ends
    it at once.

    ``max_attempts`` (default :data:`~jobchain.job_types.DEFAULT_MAX_ATTEMPTS`; None:
    unlimited) and ``timeout`` (a handler deadline; default none) apply to the types whose
    processor, slice and job type set none: a job whose last attempt fails becomes ``failed``
    (see :mod:`jobchain.worker.failures`, :mod:`jobchain.worker.deadline`). ``retention``
    deletes old finished chains (see :mod:`jobchain.worker.retention`).

    Claims enforce the served types' fleet-wide limits (``JobTypes.define(max_running=,
    rate_limit=)``) and take higher priorities first; a job due for ``priority_aging`` (default
    :data:`~jobchain.entities.PRIORITY_AGING`) is taken before any younger job whatever its
    priority (see :mod:`jobchain.worker.claims`). The periodic schedules of the processor
    slices (``Processors.periodic``) run in every worker that declares them, one chain per
    tick between them (:attr:`scheduler`, :mod:`jobchain.worker.periodic`).

    ``sync_handler_wrapper`` runs in the thread of every sync handler call and calls it (see
    :data:`~jobchain.worker.processors.SyncHandlerWrapper`): per-thread setup such as Django's
    ``close_old_connections()`` (``jobchain.contrib.django`` passes one).
    """

    def __init__(
        self,
        client: Client,
        processors: Processors | Sequence[Processors],
        *,
        name: str = "worker",
        concurrency: int = 1,
        prefetch: int = 0,
        group_commit: bool = True,
        poll_interval: float = 60.0,
        retry: Backoff | None = None,
        lease: LeaseConfig | None = None,
        recovery: Backoff = DEFAULT_RECOVERY_BACKOFF,
        required_middleware: Sequence[object] = (),
        shutdown_timeout: float = 30.0,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        missed_heartbeats: int = DEFAULT_MISSED_HEARTBEATS,
        max_attempts: MaxAttempts = UNSET,
        timeout: timedelta | float | None = None,
        retention: Retention | None = None,
        priority_aging: timedelta | float = PRIORITY_AGING,
        sync_handler_wrapper: SyncHandlerWrapper | None = None,
    ) -> None:
        self.concurrency = count_setting("concurrency", concurrency, 1)
        self.prefetch = count_setting("prefetch", prefetch, 0)
        slices = [processors] if isinstance(processors, Processors) else list(processors)
        check_required_middleware(slices, required_middleware)
        self._processors: dict[str, Processor] = merge_processors(slices)
        schedules = merge_schedules(slices)
        if not self._processors:
            raise InvalidArgumentError("a worker needs at least one processor; register a handler")
        registered = client.job_types.names()
        for type_name in self._processors:
            if type_name not in registered:
                raise UnknownJobTypeError(type_name, registered)
        for schedule in schedules.values():
            client.job_types.resolve(schedule.job_type)  # the client's own registry's type
        # Checked here, registered by the loop before its first claim (a database that is away
        # must not fail the constructor); every type gets its row, so removed hooks go too.
        self._end_hooks: list[TypeEndHooks] | None = end_hook_rows(client.job_types)
        self.client = client
        self.name = name
        self.worker_id = make_worker_id(name)
        self.poll_interval = positive_seconds("poll_interval", poll_interval)
        self.shutdown_timeout = positive_seconds("shutdown_timeout", shutdown_timeout)
        self.heartbeat_interval = positive_seconds("heartbeat_interval", heartbeat_interval)
        # One missed heartbeat must never be enough: a slow round trip is not a death.
        self.missed_heartbeats = count_setting("missed_heartbeats", missed_heartbeats, 2)
        self._recovery = recovery
        self._settings = WorkerSettings(
            self._processors,
            retry=retry,
            lease=lease,
            recovery=recovery,
            max_attempts=validate_max_attempts(max_attempts, "Worker(max_attempts=...)"),
            timeout=validate_timeout(timeout, "Worker(timeout=...)"),
            sync_handler_wrapper=wrapper_setting(sync_handler_wrapper),
        )
        if retention is not None and not isinstance(retention, Retention):
            raise InvalidArgumentError(f"retention must be a jobchain.Retention, got {retention!r}")
        self._pruner = (
            Pruner(client, retention, self.worker_id, emit=self._emit, recovery=recovery)
            if retention
            else None
        )
        self._type_names = sorted(self._processors)
        self.priority_aging = aging_setting(priority_aging)
        self._scheduler = (
            Scheduler(client, schedules, name, self.worker_id, emit=self._emit, recovery=recovery)
            if schedules
            else None
        )
        self._events = EventLog(log)
        self._wake = asyncio.Event()
        self._stopping = False
        self._loop_task: asyncio.Task[None] | None = None
        self._loop_streak = FailureStreak(log, f"worker {self.worker_id} loop")
        # Failures counted for the loop's backoff; a heartbeat that succeeds again resets it.
        self._backoff_step = 0
        self._fatal: BaseException | None = None
        groups = CompletionGroups(client) if group_commit else None
        self._slots = Slots(
            client,
            self._processors,
            self.worker_id,
            self._settings,
            concurrency=self.concurrency,
            prefetch=self.prefetch,
            groups=groups,
            # Batches always write their outputs together, group commit or not.
            batch_groups=groups or CompletionGroups(client),
            on_event=self._on_attempt_event,
            wake=self._wake.set,
        )
        # Claims and look-ups are one operation each: run them without BEGIN/COMMIT round trips
        # where the adapter can.
        state = client.state
        self._open_operation = (
            state.autocommit if isinstance(state, RunsOperationsAlone) else state.transaction
        )
        self._claims = Claims(
            type_names=self._type_names,
            worker_id=self.worker_id,
            lease_for=self._settings.claim_lease,
            type_leases=self._settings.type_leases(),
            type_limits=type_limits_of([p.job_type for p in self._processors.values()]),
            priority_aging=self.priority_aging,
            open_operation=self._open_operation,
            # A rate window's end is the state's time: a test clock must move it too.
            now=functools.partial(now_of, client),
        )
        self._slots.freed_capped = self._claims.capped_types
        self._wakeups = WakeUps(
            client,
            self._type_names,
            self.worker_id,
            wake=self._wake.set,
            wanted=lambda: not self._stopping and not self._slots.full(),
            recovery=recovery,
            emit=self._emit,
        )
        self._liveness = Liveness(
            self.worker_id,
            self.heartbeat_interval * self.missed_heartbeats,
            on_lapsed=self._liveness_lapsed,
            on_restored=self._wake.set,
        )
        self._slots.lapsed = self._liveness.lapsed
        self._heartbeat = Heartbeat(
            client,
            WorkerIdentity.of_this_process(self.worker_id, name, tuple(self._type_names), self.concurrency),
            interval=self.heartbeat_interval,
            missed=self.missed_heartbeats,
            load=self._slots.load,
            on_beat=self._heartbeat_succeeded,
            on_fatal=self._heartbeat_fatal,
            emit=self._emit,
            on_presumed_dead=self._presumed_dead,
            liveness=self._liveness,
        )
        self._reaper = Reaper(
            client,
            self._type_names,
            self.worker_id,
            exclude=self._slots.leased_ids,
            on_reaped=self._wake.set,
            emit=self._emit,
            safety_interval=self.poll_interval,
            recovery=recovery,
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the heartbeat, the reaper and the claim loop in the background."""
        if self._loop_task is not None:
            raise InvalidArgumentError("worker already started")
        try:
            # Before anything runs: attempts, claims and heartbeats all need connections. Sizing
            # touches no server (a pool resize), so it cannot hang on a database that is away.
            await reserve_connections(self.client, self.concurrency, self.worker_id)
        except Exception:  # sizing is advice: the worker runs with the pool it has
            log.warning("worker %s could not size the state connection pool", self.worker_id, exc_info=True)
        self._emit("worker_started", {})
        self._loop_task = asyncio.create_task(self._run(), name=f"jobchain-worker-{self.worker_id}")
        # A loop that ended on its own error is reported by wait()/stop(); mark it retrieved so
        # asyncio does not also complain about it when nobody waits.
        self._loop_task.add_done_callback(_retrieve)
        self._liveness.start()
        self._heartbeat.start()
        self._reaper.start()
        if self._pruner is not None:
            self._pruner.start()
        if self._scheduler is not None:
            self._scheduler.start()

    async def stop(self) -> None:
        """Stop claiming, let in-flight attempts finish (up to ``shutdown_timeout``), release the rest.

        The registry row says ``draining`` meanwhile (heartbeats go on, so a long drain is not
        mistaken for a death) and ``stopped`` at the end.
        """
        if self._loop_task is None or self._stopping:
            if self._loop_task is not None:
                await asyncio.gather(self._loop_task, return_exceptions=True)
            return
        self._emit("worker_stopping", {})
        self._stopping = True
        self._slots.closed = True
        self._heartbeat.set_state(WorkerState.DRAINING)
        self._wake.set()
        await self._reaper.stop()
        if self._pruner is not None:
            await self._pruner.stop()
        if self._scheduler is not None:
            await self._scheduler.stop()
        await asyncio.gather(self._loop_task, return_exceptions=True)
        await self._slots.drain(self.shutdown_timeout)
        await self._slots.watch.stop()
        await self._slots.release_buffered()
        await self._wakeups.close()
        await self._heartbeat.stop()
        await self._liveness.stop()
        self._emit("worker_stopped", {})
        self._events.close()

    async def wait(self) -> None:
        """Wait until the worker's loop ends: after :meth:`stop`, or on its own.

        The loop ends on its own only for an error no retry can fix — the state backend's
        tables are missing (SchemaNotMigratedError) — and that error is raised here. Call
        :meth:`stop` afterwards to finish in-flight attempts and release buffered jobs.
        """
        if self._loop_task is None:
            raise InvalidArgumentError("worker not started; call start() first")
        await asyncio.shield(self._loop_task)

    async def run_until_stopped(self) -> None:
        """Run in the foreground until cancelled (then stop gracefully).

        Raises SchemaNotMigratedError (after stopping) if the loop ended on its own.
        """
        await self.start()
        try:
            assert self._loop_task is not None
            await asyncio.shield(self._loop_task)
        finally:
            await self.stop()

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def monotonic(self) -> Callable[[], float] | None:
        """The clock of local lease deadlines (None: the event loop's); tests inject one."""
        return self._slots.clock

    @monotonic.setter
    def monotonic(self, clock: Callable[[], float] | None) -> None:
        self._slots.clock = clock
        self._claims.monotonic = clock
        self._liveness.clock = clock

    @property
    def expired_claims(self) -> int:
        """Claimed jobs not started because their claim was older than the lease allows."""
        return self._slots.expired_claims

    @property
    def type_names(self) -> list[str]:
        """The job types this worker serves (its processors' types), sorted."""
        return list(self._type_names)

    @property
    def scheduler(self) -> Scheduler | None:
        """The periodic scheduler (None without schedules): ``run_due(now)`` starts due ticks."""
        return self._scheduler

    @property
    def end_hooks_registered(self) -> bool:
        """Whether the worker has registered its registry's failure and cancel hooks (its loop
        does before its first claim; until some worker has, a failure starts no hook job)."""
        return self._end_hooks is None

    @property
    def inflight_job_ids(self) -> list[str]:
        """Jobs whose attempts run now: handlers running, attempts waiting for their commit, and
        attempts still finishing (a job they lost, or whose outcome committed, included)."""
        return list(self._slots.inflight)

    @property
    def load(self) -> WorkerLoad:
        """The jobs this worker holds now (what its heartbeat reports), claimed and leased to it
        with their outcome not yet written: ``inflight`` running or buffered (never more than
        ``capacity`` = ``concurrency``, times ``max_batch`` for a batch processor, ``+
        prefetch``), and ``committing``, attempts whose commit is being written."""
        return self._slots.load()

    # ------------------------------------------------------------------ loop

    async def _run(self) -> None:
        while not self._stopping:
            try:
                if self._fatal is not None:
                    raise self._fatal
                await self._wakeups.ensure_listening()
                if self._end_hooks is not None:
                    await self._register_end_hooks(self._end_hooks)
                await self._cycle()
                self._loop_streak.succeeded()
                self._backoff_step = 0
            except asyncio.CancelledError:
                raise
            except SchemaNotMigratedError as error:
                # No retry creates the tables: stop instead of backing off forever.
                log.error("worker %s stops: %s", self.worker_id, error)
                self._emit("worker_error", {"error": repr(error), "fatal": True}, log_line=False)
                raise
            except Exception as error:
                # The database or broker failed: back off and try again, never die. A heartbeat
                # that gets through again wakes the loop before the backoff ends.
                self._backoff_step += 1
                delay = self._recovery.delay(self._backoff_step).total_seconds()
                self._loop_streak.failed(error, f"retrying in {delay:.1f} s or when a heartbeat gets through")
                self._emit("worker_error", {"error": repr(error)}, log_line=False)
                await self._sleep_or_wake(delay)

    async def _cycle(self) -> None:
        """Claim while there is work and room, then wait for a reason to look again."""
        slots = self._slots
        while not self._stopping:
            slots.start_buffered()
            if slots.wants_claim():
                jobs, has_more = await self._claim(slots.room())
                slots.add_claimed(jobs, self._claims.sent_at)
                if jobs and has_more and slots.room() > 0:
                    continue
            await self._wait()
            return

    async def _register_end_hooks(self, rows: list[TypeEndHooks]) -> None:
        async with self._operation() as tx:
            register = getattr(tx, "end_hooks_register", None)
            if register is None:
                # A backend written before the hooks: its jobs still run, its hooks never do.
                declared = sorted(r.type_name for r in rows if any(getattr(r, f) for f in HOOK_FIELDS))
                if declared:
                    log.warning(
                        "worker %s: the state backend %s does not register failure and cancel hooks "
                        "(no end_hooks_register); the hooks of %s will not run: upgrade the backend",
                        self.worker_id,
                        type(self.client.state).__name__,
                        ", ".join(declared),
                    )
            else:
                await register(EndHooksRegister(types=rows, now=now_of(self.client)))
        self._end_hooks = None

    async def _claim(self, limit: int) -> tuple[list[Job], bool]:
        return await self._claims.claim(limit, lambda: self._stopping)

    def _operation(self, *, read_only: bool = False) -> AbstractAsyncContextManager[StateTx]:
        """A scope for one state operation: its own transaction, in autocommit where possible."""
        return self._open_operation(read_only=read_only)

    async def _wait(self) -> None:
        timeout = self.poll_interval
        if not self._slots.full():
            timeout = await self._claims.seconds_to_next(timeout)
        # Jitter spreads the pollers of many workers apart.
        timeout += random.uniform(0, timeout / 10)
        await self._sleep_or_wake(timeout)

    async def _sleep_or_wake(self, seconds: float) -> None:
        if seconds <= 0:
            # Still a yield: on a state that answers without suspending, the next round would
            # otherwise spin and starve the attempt whose ending frees the slot it waits for.
            await asyncio.sleep(0)
            return
        await wait_or_timeout(self._wake, seconds)
        self._wake.clear()

    # ------------------------------------------------------------------ heartbeat results

    def _heartbeat_succeeded(self, result: WorkerHeartbeatResult, recovered: bool) -> None:
        self._reaper.lease_expires_in(result.next_lease_expiry)
        if recovered:
            # The database answers again: claim now, not when the loop's backoff ends.
            self._backoff_step = 0
            self._wake.set()
        if result.released_jobs:
            self._wake.set()

    @property
    def liveness_lapses(self) -> int:
        """Times the worker went past its liveness deadline (no heartbeat confirmed in time)."""
        return self._liveness.lapses

    def _liveness_lapsed(self) -> None:
        self._emit("worker_liveness_lapsed", {"running": len(self._slots.inflight)})
        self._slots.abort_all(AbortReason.LEASE_EXPIRED)
        self._heartbeat.poke()  # the sooner one gets through, the sooner work resumes

    def _presumed_dead(self) -> None:
        self._slots.forget_all(AbortReason.TAKEN_BY_ANOTHER_WORKER)
        self._wake.set()

    def _heartbeat_fatal(self, error: BaseException) -> None:
        self._fatal = error
        self._wake.set()


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()
