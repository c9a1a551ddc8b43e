"""The worker loop: claim in batches, run attempts, reap expired leases, wait for wake-ups."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import random
from collections import deque
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from jobchain.contracts import (
    Event,
    JobNextAvailable,
    JobReschedule,
    JobsAcquire,
    JobsReapExpired,
    RunsOperationsAlone,
    StateTx,
)
from jobchain.entities import Job, Schedule
from jobchain.errors import (
    InvalidArgumentError,
    JobchainError,
    SchemaNotMigratedError,
    UnknownJobTypeError,
)
from jobchain.worker.abort import AbortReason
from jobchain.worker.backoff import (
    DEFAULT_BACKOFF,
    DEFAULT_LEASE,
    DEFAULT_RECOVERY_BACKOFF,
    Backoff,
    LeaseConfig,
)
from jobchain.worker.batch import BatchRunner
from jobchain.worker.completer import CompletionGroups
from jobchain.worker.ids import make_worker_id
from jobchain.worker.processors import (
    Processor,
    Processors,
    check_required_middleware,
    merge_processors,
)
from jobchain.worker.runner import AttemptRunner, AttemptSettings

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.contracts import Unsubscribe

log = logging.getLogger("jobchain.worker")

SHUTDOWN_GRACE_SECONDS = 1.0
"""After the shutdown deadline, how long handlers whose signal fired may take to return."""


def _positive_seconds(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


class Worker:
    """Processes the job types of its processor slices with ``concurrency`` slots.

    ``async with Worker(...)`` starts it and stops it gracefully on exit; or call
    :meth:`start` and :meth:`stop` yourself. Settings resolve processor → job type →
    registry → worker → library default.

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
    database is slow).

    A batch processor (``Processors.register_batch``) takes up to its ``max_batch`` claimed
    jobs of its type in one slot; claims then ask for that many jobs per free slot.
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
    ) -> None:
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise InvalidArgumentError(f"concurrency must be a positive integer, got {concurrency!r}")
        if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 0:
            raise InvalidArgumentError(f"prefetch must be a non-negative integer, got {prefetch!r}")
        slices = [processors] if isinstance(processors, Processors) else list(processors)
        check_required_middleware(slices, required_middleware)
        self._processors: dict[str, Processor] = merge_processors(slices)
        if not self._processors:
            raise InvalidArgumentError("a worker needs at least one processor; register a handler")
        registered = client.job_types.names()
        for type_name in self._processors:
            if type_name not in registered:
                raise UnknownJobTypeError(type_name, registered)
        self.client = client
        self.worker_id = make_worker_id(name)
        self.concurrency = concurrency
        self.prefetch = prefetch
        self._groups = CompletionGroups(client) if group_commit else None
        # Batches always write their outputs together, group commit or not.
        self._batch_groups = self._groups or CompletionGroups(client)
        # Jobs one slot may take: a batch processor's max_batch, else one.
        self._slot_jobs = max(p.max_batch or 1 for p in self._processors.values())
        self.poll_interval = _positive_seconds("poll_interval", poll_interval)
        self.shutdown_timeout = _positive_seconds("shutdown_timeout", shutdown_timeout)
        self._retry = retry
        self._lease = lease
        self._recovery = recovery
        self._type_names = sorted(self._processors)
        self._inflight: dict[str, asyncio.Task[None]] = {}
        # In-flight attempts whose handler returned and whose commit is still being written.
        self._committing: set[str] = set()
        # Claimed jobs waiting for a slot, with the loop time of their claim (prefetch > 0).
        self._buffer: deque[tuple[Job, float]] = deque()
        self._runners: dict[str, AttemptRunner | BatchRunner] = {}
        # Jobs beyond the first of each running batch: they share their batch's slot.
        self._batched_extra = 0
        self._wake = asyncio.Event()
        self._stopping = False
        self._loop_task: asyncio.Task[None] | None = None
        self._unsubscribe: Unsubscribe | None = None
        self._listen_failures = 0
        self._listen_retry_at = 0.0
        self._pending_hint_checks: set[asyncio.Task[None]] = set()
        # Claims and look-ups are one operation each: run them without BEGIN/COMMIT round trips
        # where the adapter can.
        state = client.state
        self._open_operation = (
            state.autocommit if isinstance(state, RunsOperationsAlone) else state.transaction
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Subscribe to wake-ups and start the loop in the background."""
        if self._loop_task is not None:
            raise InvalidArgumentError("worker already started")
        self._emit("worker_started", {})
        self._loop_task = asyncio.create_task(self._run(), name=f"jobchain-worker-{self.worker_id}")
        # A loop that ended on its own error is reported by wait()/stop(); mark it retrieved so
        # asyncio does not also complain about it when nobody waits.
        self._loop_task.add_done_callback(_retrieve)

    async def stop(self) -> None:
        """Stop claiming, let in-flight attempts finish (up to ``shutdown_timeout``), release the rest."""
        if self._loop_task is None or self._stopping:
            if self._loop_task is not None:
                await asyncio.gather(self._loop_task, return_exceptions=True)
            return
        self._emit("worker_stopping", {})
        self._stopping = True
        self._wake.set()
        await asyncio.gather(self._loop_task, return_exceptions=True)
        await self._drain()
        buffered, self._buffer = [job.id for job, _ in self._buffer], deque()
        await self._release(buffered)
        await self._unlisten()
        for task in list(self._pending_hint_checks):
            task.cancel()
        await asyncio.gather(*self._pending_hint_checks, return_exceptions=True)
        self._emit("worker_stopped", {})

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
    def type_names(self) -> list[str]:
        """The job types this worker serves (its processors' types), sorted."""
        return list(self._type_names)

    @property
    def inflight_job_ids(self) -> list[str]:
        """Jobs this worker runs now: handlers running and attempts waiting for their commit."""
        return list(self._inflight)

    # ------------------------------------------------------------------ loop

    async def _run(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                await self._ensure_listening()
                await self._cycle()
                failures = 0
            except asyncio.CancelledError:
                raise
            except SchemaNotMigratedError as error:
                # No retry creates the tables: stop instead of backing off forever.
                log.error("worker %s stops: %s", self.worker_id, error)
                self._emit("worker_error", {"error": repr(error), "fatal": True})
                raise
            except Exception as error:
                # The database or broker failed: back off and try again, never die.
                failures += 1
                delay = self._recovery.delay(failures).total_seconds()
                log.warning("worker %s loop failed (%s); retrying in %.1f s", self.worker_id, error, delay)
                self._emit("worker_error", {"error": repr(error)})
                await self._sleep_or_wake(delay)

    async def _cycle(self) -> None:
        """Claim while there is work and room, reap, then wait for a reason to look again."""
        while not self._stopping:
            self._start_buffered()
            # With prefetch, refill only once the buffer ran down to half: claims then carry
            # several jobs each, and they happen while the slots are busy.
            if self._room() > 0 and len(self._buffer) <= self.prefetch // 2:
                jobs, has_more = await self._claim(self._room())
                now = asyncio.get_running_loop().time()
                self._buffer.extend((job, now) for job in jobs)
                self._start_buffered()
                if jobs and has_more and self._room() > 0:
                    continue
                if not jobs and not self._buffer and await self._reap_one():
                    continue
            await self._wait()
            return

    def _busy_slots(self) -> int:
        """Slots in use: running handlers, plus attempts committing beyond the free allowance."""
        return len(self._inflight) - self._batched_extra - min(len(self._committing), self.concurrency)

    def _room(self) -> int:
        """Jobs to claim: what the free slots take, plus the prefetch buffer's free places."""
        free_slots = self.concurrency - self._busy_slots()
        return free_slots * self._slot_jobs + self.prefetch - len(self._buffer)

    def _start_buffered(self) -> None:
        """Move buffered jobs into free slots; one that waited past half its lease renews first."""
        if not self._buffer:
            return
        now = asyncio.get_running_loop().time()
        stale_after = self._longest_lease(self._lease or DEFAULT_LEASE).total_seconds() / 2
        while self._buffer and self._busy_slots() < self.concurrency and not self._stopping:
            job, claimed_at = self._buffer.popleft()
            processor = self._processors.get(job.type_name)
            if processor is not None and processor.max_batch is not None:
                jobs = [job, *self._take_buffered(job.type_name, processor.max_batch - 1)]
                self._spawn_batch(processor, jobs, renew_first=now - claimed_at > stale_after)
            else:
                self._spawn(job, renew_first=now - claimed_at > stale_after)

    def _take_buffered(self, type_name: str, limit: int) -> list[Job]:
        """Up to ``limit`` buffered jobs of ``type_name``, oldest first, out of the buffer."""
        taken: list[Job] = []
        kept: deque[tuple[Job, float]] = deque()
        for entry in self._buffer:
            if len(taken) < limit and entry[0].type_name == type_name:
                taken.append(entry[0])
            else:
                kept.append(entry)
        self._buffer = kept
        return taken

    async def _claim(self, limit: int) -> tuple[list[Job], bool]:
        lease = self._lease or DEFAULT_LEASE
        async with self._operation() as tx:
            if self._stopping:
                # stop() came while the transaction was opening: a claim now would only hand
                # its jobs straight back, with an attempt recorded that never ran.
                return [], False
            acquired = await tx.jobs_acquire(
                JobsAcquire(
                    type_names=self._type_names,
                    worker_id=self.worker_id,
                    lease_for=self._longest_lease(lease),
                    limit=limit,
                )
            )
        return acquired.jobs, acquired.has_more

    def _operation(self, *, read_only: bool = False) -> AbstractAsyncContextManager[StateTx]:
        """A scope for one state operation: its own transaction, in autocommit where possible."""
        return self._open_operation(read_only=read_only)

    def _longest_lease(self, fallback: LeaseConfig) -> timedelta:
        # One claim covers several types; each attempt renews with its own lease later.
        durations = [self._settings_for(p).lease.duration for p in self._processors.values()]
        return max(durations, default=fallback.duration)

    async def _reap_one(self) -> bool:
        # One operation: in autocommit where the adapter can (no BEGIN and COMMIT round trips).
        # The reap runs in the idle cycle after every job, where a wake-up may land and wait.
        async with self.client.transaction(autocommit=True) as tx:
            reaped = await tx.state.jobs_reap_expired(
                JobsReapExpired(
                    type_names=self._type_names,
                    exclude_job_ids=[*self._inflight, *(job.id for job, _ in self._buffer)],
                    limit=1,
                )
            )
            for job in reaped:
                tx.hooks.job_scheduled(job.type_name)
                tx.hooks.ownership_lost(job.id)
        for job in reaped:
            self._emit("job_reaped", {"job.id": job.id, "job.type": job.type_name})
        return bool(reaped)

    async def _wait(self) -> None:
        timeout = self.poll_interval
        if self._busy_slots() < self.concurrency:
            async with self._operation(read_only=True) as tx:
                next_in = await tx.job_next_available(JobNextAvailable(type_names=self._type_names))
            if next_in is not None:
                timeout = min(timeout, next_in.total_seconds())
        # Jitter spreads the pollers of many workers apart.
        timeout += random.uniform(0, timeout / 10)
        await self._sleep_or_wake(timeout)

    async def _sleep_or_wake(self, seconds: float) -> None:
        if seconds <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    # ------------------------------------------------------------------ wake-ups

    async def _ensure_listening(self) -> None:
        """Subscribe to wake-ups if not subscribed yet; a broker outage only costs latency.

        Wake-ups are hints and the loop polls anyway, so a failed subscription must never
        stop claiming: it is logged and retried with the recovery backoff.
        """
        if self._unsubscribe is not None or self.client.notify is None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._listen_retry_at:
            return
        try:
            await self._listen()
        except Exception as error:
            self._listen_failures += 1
            delay = self._recovery.delay(self._listen_failures).total_seconds()
            self._listen_retry_at = loop.time() + delay
            log.warning(
                "worker %s cannot subscribe to wake-ups (%s); polling, next try in %.1f s",
                self.worker_id,
                error,
                delay,
            )
            self._emit("worker_error", {"error": repr(error)})
        else:
            self._listen_failures = 0

    async def _listen(self) -> None:
        notify = self.client.notify
        if notify is None:
            return
        self._unsubscribe = await notify.listen_job_scheduled(self._type_names, self._on_scheduled)

    async def _unlisten(self) -> None:
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            with contextlib.suppress(Exception):
                await unsubscribe()

    def _on_scheduled(self, type_name: str) -> None:
        if self._stopping or self._busy_slots() >= self.concurrency:
            return
        task = asyncio.get_running_loop().create_task(self._consume_hint(type_name))
        self._pending_hint_checks.add(task)
        task.add_done_callback(self._pending_hint_checks.discard)

    async def _consume_hint(self, type_name: str) -> None:
        notify = self.client.notify
        try:
            wake = notify is None or await notify.consume_wake_hint(type_name)
        except Exception:
            wake = True  # fail open: a needless wake-up is harmless, a missed one is not
        if wake:
            self._wake.set()

    # ------------------------------------------------------------------ attempts

    def _settings_for(self, processor: Processor) -> AttemptSettings:
        # The job type already carries its registry slice's defaults (JobTypes(retry=...)).
        job_type = processor.job_type
        retry = processor.retry or job_type.retry or self._retry or DEFAULT_BACKOFF
        lease = processor.lease or job_type.lease or self._lease or DEFAULT_LEASE
        return AttemptSettings(retry=retry, lease=lease, recovery=self._recovery)

    def _spawn(self, job: Job, *, renew_first: bool = False) -> None:
        processor = self._processors.get(job.type_name)
        if processor is None:  # claimed by type name, so this means a registry bug
            raise JobchainError(f"no processor for claimed job type {job.type_name!r}")
        runner = AttemptRunner(
            self.client,
            processor,
            job,
            self.worker_id,
            self._settings_for(processor),
            self._on_attempt_event,
            self._groups,
            on_handler_returned=functools.partial(self._committing_now, job.id),
        )
        work = runner.renew_then_run() if renew_first else runner.run()
        task = asyncio.create_task(work, name=f"jobchain-attempt-{job.id}")
        self._inflight[job.id] = task
        self._runners[job.id] = runner

        def done(_: asyncio.Task[None], job_id: str = job.id) -> None:
            self._inflight.pop(job_id, None)
            was_committing = job_id in self._committing
            over_allowance = len(self._committing) > self.concurrency
            self._committing.discard(job_id)
            self._runners.pop(job_id, None)
            # The next buffered job takes the slot now, not after a trip through the loop.
            self._start_buffered()
            # A committing attempt handed its slot on, and woke the loop, when its handler
            # returned; waking again now would only add an empty claim per job.
            if not was_committing or over_allowance:
                self._wake.set()
            if not _.cancelled() and _.exception() is not None:
                log.error("attempt of job %s crashed", job_id, exc_info=_.exception())

        task.add_done_callback(done)

    def _spawn_batch(self, processor: Processor, jobs: list[Job], *, renew_first: bool) -> None:
        runner = BatchRunner(
            self.client,
            processor,
            jobs,
            self.worker_id,
            self._settings_for(processor),
            self._on_attempt_event,
            self._batch_groups,
        )
        task = asyncio.create_task(runner.run(renew_first=renew_first), name=f"jobchain-batch-{jobs[0].id}")
        for job in jobs:
            self._inflight[job.id] = task
            self._runners[job.id] = runner
        self._batched_extra += len(jobs) - 1

        def done(_: asyncio.Task[None]) -> None:
            for job in jobs:
                self._inflight.pop(job.id, None)
                self._runners.pop(job.id, None)
            self._batched_extra -= len(jobs) - 1
            self._start_buffered()
            self._wake.set()
            if not _.cancelled() and _.exception() is not None:
                log.error(
                    "batch of %d %s jobs crashed", len(jobs), processor.job_type.name, exc_info=_.exception()
                )

        task.add_done_callback(done)

    def _committing_now(self, job_id: str) -> None:
        """The handler of ``job_id`` returned; only its commit is left: its slot may run another."""
        if job_id not in self._inflight:
            return
        self._committing.add(job_id)
        self._start_buffered()
        self._wake.set()

    async def _drain(self) -> None:
        if not self._inflight:
            return
        tasks = list(self._inflight.values())
        _, pending = await asyncio.wait(tasks, timeout=self.shutdown_timeout)
        if not pending:
            return
        job_ids = [job_id for job_id, task in self._inflight.items() if task in pending]
        # Past the deadline: ask handlers to stop (signal reason "shutdown"), give them a
        # moment to return, then cancel what is still running and hand its jobs back.
        for job_id in job_ids:
            runner = self._runners.get(job_id)
            if runner is not None and runner.attempt is not None:
                runner.attempt.signal.abort(AbortReason.SHUTDOWN)
        _, pending = await asyncio.wait(pending, timeout=min(SHUTDOWN_GRACE_SECONDS, self.shutdown_timeout))
        job_ids = [job_id for job_id, task in self._inflight.items() if task in pending]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await self._release(job_ids)

    async def _release(self, job_ids: list[str]) -> None:
        """Hand unfinished jobs back at once instead of waiting for their leases to expire."""
        for job_id in job_ids:
            try:
                async with self.client.transaction() as tx:
                    job = await tx.state.job_reschedule(
                        JobReschedule(
                            job_id=job_id,
                            schedule=Schedule(after=timedelta(0)),
                            error="released: the worker shut down before the attempt finished",
                            worker_id=self.worker_id,
                        )
                    )
                    tx.hooks.job_scheduled(job.type_name)
            except JobchainError as error:
                log.info("could not release job %s: %s", job_id, error)

    # ------------------------------------------------------------------ events

    def _on_attempt_event(self, name: str, job: Job, attributes: dict[str, Any]) -> None:
        if not self.client.observers and not log.isEnabledFor(_level(name)):
            return  # nobody reads it: skip building it (this runs several times per job)
        self._emit(
            name,
            {
                "job.id": job.id,
                "job.type": job.type_name,
                "chain.id": job.chain_id,
                "job.attempt": job.attempt,
            }
            | attributes,
        )

    def _emit(self, name: str, attributes: dict[str, Any]) -> None:
        event = Event(name=name, attributes={"worker.id": self.worker_id} | attributes)
        level = _level(name)
        if log.isEnabledFor(level):
            log.log(level, "%s %s", name, " ".join(f"{key}={value}" for key, value in attributes.items()))
        for observer in self.client.observers:
            try:
                observer.on_event(event)
            except Exception:
                log.exception("observer %r failed", observer)


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


def _level(event_name: str) -> int:
    """The log level of a worker event: failures warn, the rest is debug detail."""
    return logging.WARNING if event_name.endswith(("failed", "error")) else logging.DEBUG
