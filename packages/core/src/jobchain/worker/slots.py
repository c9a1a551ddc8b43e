"""The worker's slots: attempts running, the prefetch buffer, and handing jobs back at stop.

A slot counts a running handler: once a handler has returned, its slot takes the next job
while the attempt's commit is still being written. At most ``concurrency`` attempts wait for
their commit that way; beyond that they keep their slots (backpressure when the database is
slow). A batch takes one slot for all its jobs.

What the heartbeat reports (:meth:`Slots.load`) counts the jobs the worker holds — claimed,
leased to it, their outcome not yet written — in two parts: ``inflight``, the jobs it is
running or about to run (handlers running, and buffered jobs), never more than its
:attr:`Slots.capacity` (``concurrency`` slots, times the jobs a slot takes, plus
``prefetch``); and ``committing``, attempts whose handler returned and whose commit is being
written (they gave their slot on). An attempt whose outcome committed (its task still
unsubscribing, say), whose job it lost (cancelled, taken by another worker, deleted) or whose
lease expired locally counts in neither, although its task may still run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from jobchain.contracts import JobReschedule
from jobchain.entities import Job, Schedule
from jobchain.errors import JobchainError
from jobchain.worker.abort import AbortReason
from jobchain.worker.batch import BatchRunner
from jobchain.worker.failures import RELEASED_ERROR
from jobchain.worker.local_deadline import local_deadline
from jobchain.worker.runner import AttemptRunner
from jobchain.worker.settings import WorkerSettings
from jobchain.worker.watch import AttemptWatch

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.worker.completer import CompletionGroups
    from jobchain.worker.processors import Processor

log = logging.getLogger("jobchain.worker")

SHUTDOWN_GRACE_SECONDS = 1.0
"""After the shutdown deadline, how long handlers whose signal fired may take to return."""

AttemptEvent = Callable[[str, Job, dict[str, Any]], None]

LOST = frozenset(
    {
        AbortReason.TAKEN_BY_ANOTHER_WORKER,
        AbortReason.NOT_FOUND,
        AbortReason.ALREADY_COMPLETED,
        AbortReason.CANCELLED,
    }
)
"""Abort reasons that say the job is no longer this worker's: its attempt stops counting."""


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """The jobs a worker holds now, as its heartbeat reports them (see
    :class:`~jobchain.entities.WorkerInfo`): ``inflight`` running or buffered (never more than
    ``capacity``), ``buffered`` of those waiting for a slot, and ``committing``, attempts whose
    handler returned and whose commit is being written."""

    inflight: int
    buffered: int
    committing: int
    capacity: int

    @property
    def running(self) -> int:
        """Jobs whose handler runs now: ``inflight - buffered``."""
        return self.inflight - self.buffered


class Slots:
    """Runs claimed jobs in ``concurrency`` slots, buffering up to ``prefetch`` more."""

    def __init__(
        self,
        client: Client,
        processors: dict[str, Processor],
        worker_id: str,
        settings: WorkerSettings,
        *,
        concurrency: int,
        prefetch: int,
        groups: CompletionGroups | None,
        batch_groups: CompletionGroups,
        on_event: AttemptEvent,
        wake: Callable[[], None],
    ) -> None:
        self._client = client
        self._processors = processors
        self._worker_id = worker_id
        self._settings = settings
        self.concurrency = concurrency
        self.prefetch = prefetch
        self._groups = groups
        self._batch_groups = batch_groups
        self._on_event = on_event
        self._wake = wake
        # Jobs one slot may take: a batch processor's max_batch, else one.
        self.slot_jobs = max(p.max_batch or 1 for p in processors.values())
        self.capacity = concurrency * self.slot_jobs + prefetch
        """The most jobs this worker runs or buffers at once: its slots' jobs plus the prefetch
        buffer (attempts waiting for their commit are beside it)."""
        self.inflight: dict[str, asyncio.Task[None]] = {}
        # In-flight attempts whose handler returned and whose commit is still being written.
        self._committing: set[str] = set()
        # Claimed jobs waiting for a slot, with the monotonic time their claim was sent.
        self.buffer: deque[tuple[Job, float]] = deque()
        self.clock: Callable[[], float] | None = None
        """The monotonic clock of local deadlines (None: the event loop's)."""
        self._runners: dict[str, AttemptRunner | BatchRunner] = {}
        # Jobs beyond the first of each running batch: they share their batch's slot.
        self._batched_extra = 0
        self.closed = False
        """Set when the worker stops: buffered jobs no longer start."""
        self.watch = AttemptWatch(self._runners.values)
        """Long attempts that are not staged listen for cancellation (see its module)."""
        self.freed_capped: frozenset[str] = frozenset()
        """Types with a fleet-wide ``max_running``: an attempt of one that ends frees a place,
        announced to every worker (see :mod:`jobchain.worker.claims`)."""
        self._announcing: set[asyncio.Task[None]] = set()
        self._abandoned: set[str] = set()
        """In-flight jobs whose lease expired locally: their handlers may still run, but they
        hold no slot (see :class:`~jobchain.worker.abort.AbortReason` ``LEASE_EXPIRED``)."""
        self._settled: set[str] = set()
        """In-flight jobs whose attempt's outcome is written: their tasks are finishing (events,
        unsubscribing) but the jobs are no longer held."""
        self.expired_claims = 0
        """Claimed jobs dropped unstarted because their local deadline had passed."""
        self.lapsed: Callable[[], bool] = _never
        """Whether the worker's liveness deadline passed (:mod:`jobchain.worker.liveness`):
        then nothing is claimed or started, and attempts read their abort signal as fired."""

    # ------------------------------------------------------------------ counting

    def busy(self) -> int:
        """Slots in use: running handlers, plus attempts committing beyond the free allowance
        (an attempt whose lease expired locally no longer counts)."""
        return (
            len(self.inflight)
            - self._batched_extra
            - min(len(self._committing), self.concurrency)
            - len(self._abandoned)
        )

    def full(self) -> bool:
        """Whether every slot is in use."""
        return self.busy() >= self.concurrency

    def room(self) -> int:
        """Jobs to claim: what the free slots take, plus the prefetch buffer's free places."""
        free_slots = self.concurrency - self.busy()
        return free_slots * self.slot_jobs + self.prefetch - len(self.buffer)

    def wants_claim(self) -> bool:
        """Room to claim, and (with prefetch) the buffer ran down to half.

        With prefetch, refilling only at half makes claims carry several jobs each, and they
        happen while the slots are busy.
        """
        if self.lapsed():
            return False
        return self.room() > 0 and len(self.buffer) <= self.prefetch // 2

    def _holds(self, job_id: str) -> bool:
        """Whether the in-flight ``job_id`` is still held (see the module's docstring)."""
        if job_id in self._abandoned or job_id in self._settled:
            return False
        if job_id in self._committing:
            return True  # its commit, being written, decides
        runner = self._runners.get(job_id)
        attempt = runner.attempt if runner is not None else None
        return attempt is None or attempt.signal.fired not in LOST

    def held_started(self) -> list[str]:
        """The held jobs that have started: handlers running, or their commit being written."""
        return [job_id for job_id in self.inflight if self._holds(job_id)]

    def leased_ids(self) -> list[str]:
        """Every job this worker holds: running, committing or buffered (not those whose lease
        expired locally, nor those it lost: the reaper may hand them on)."""
        return [*self.held_started(), *(job.id for job, _ in self.buffer)]

    def load(self) -> WorkerLoad:
        """The jobs this worker holds now, as its heartbeat reports them."""
        started = self.held_started()
        committing = sum(1 for job_id in started if job_id in self._committing)
        buffered = len(self.buffer)
        return WorkerLoad(
            inflight=len(started) - committing + buffered,
            buffered=buffered,
            committing=committing,
            capacity=self.capacity,
        )

    def leased_count(self) -> int:
        """How many jobs this worker holds: running, committing or buffered."""
        return len(self.leased_ids())

    # ------------------------------------------------------------------ starting

    def _now(self) -> float:
        return self.clock() if self.clock is not None else asyncio.get_running_loop().time()

    def add_claimed(self, jobs: list[Job], sent_at: float | None = None) -> None:
        """Buffer freshly claimed jobs and start what the free slots take.

        ``sent_at``: the monotonic time the claim was sent (default: now), from which each
        job's local deadline counts (:mod:`jobchain.worker.local_deadline`).
        """
        claimed_at = self._now() if sent_at is None else sent_at
        self.buffer.extend((job, claimed_at) for job in jobs)
        self.start_buffered()

    def start_buffered(self) -> None:
        """Move buffered jobs into free slots; one that waited past half its lease renews first,
        one past its local deadline is dropped (it may be someone else's by now)."""
        if not self.buffer or self.lapsed():
            return
        now = self._now()
        while self.buffer and self.busy() < self.concurrency and not self.closed:
            job, claimed_at = self.buffer.popleft()
            # Each type's own lease: a job claimed with a 12 s lease is stale after 6 s.
            lease = self._settings.lease_of(job.type_name).total_seconds()
            if now >= local_deadline(claimed_at, lease):
                self._expired(job, now - claimed_at)
                continue
            stale = now - claimed_at > lease / 2
            processor = self._processors.get(job.type_name)
            if processor is not None and processor.max_batch is not None:
                jobs = [job, *self._take_buffered(job.type_name, processor.max_batch - 1, now)]
                self._spawn_batch(processor, jobs, renew_first=stale)
            else:
                self._spawn(job, renew_first=stale, deadline=local_deadline(claimed_at, lease))

    def _expired(self, job: Job, waited: float) -> None:
        """Drop ``job``: its lease runs out in the database and the reaper hands it on."""
        self.expired_claims += 1
        # The event is the DEBUG line: "job_claim_expired job.id=... waited_seconds=31.2".
        self._on_event("job_claim_expired", job, {"waited_seconds": round(waited, 3)})

    def _take_buffered(self, type_name: str, limit: int, now: float) -> list[Job]:
        """Up to ``limit`` buffered jobs of ``type_name``, oldest first, out of the buffer
        (those past their local deadline are dropped on the way)."""
        taken: list[Job] = []
        kept: deque[tuple[Job, float]] = deque()
        for entry in self.buffer:
            job, claimed_at = entry
            if len(taken) < limit and job.type_name == type_name:
                lease = self._settings.lease_of(type_name).total_seconds()
                if now >= local_deadline(claimed_at, lease):
                    self._expired(job, now - claimed_at)
                else:
                    taken.append(job)
            else:
                kept.append(entry)
        self.buffer = kept
        return taken

    def _spawn(self, job: Job, *, renew_first: bool = False, deadline: float | None = None) -> None:
        processor = self._processors.get(job.type_name)
        if processor is None:  # claimed by type name, so this means a registry bug
            raise JobchainError(f"no processor for claimed job type {job.type_name!r}")
        runner = AttemptRunner(
            self._client,
            processor,
            job,
            self._worker_id,
            self._settings.of(job.type_name),
            self._on_event,
            self._groups,
            on_handler_returned=functools.partial(self._committing_now, job.id),
            clock=self.clock,
            lease_deadline=deadline,
            on_lease_expired=functools.partial(self._abandon, job.id),
            lapsed=self.lapsed,
            on_settled=functools.partial(self._settle, job.id),
        )
        if renew_first:
            held = None if deadline is None else functools.partial(self._before, deadline)
            work = runner.renew_then_run(held)
        else:
            work = runner.run()
        task = asyncio.create_task(work, name=f"jobchain-attempt-{job.id}")
        self.inflight[job.id] = task
        self._runners[job.id] = runner
        self.watch.poke()

        def done(_: asyncio.Task[None], job_id: str = job.id, type_name: str = job.type_name) -> None:
            self._announce_freed(type_name)
            self.inflight.pop(job_id, None)
            was_committing = job_id in self._committing
            over_allowance = len(self._committing) > self.concurrency
            self._committing.discard(job_id)
            self._abandoned.discard(job_id)
            self._settled.discard(job_id)
            self._runners.pop(job_id, None)
            # The next buffered job takes the slot now, not after a trip through the loop.
            self.start_buffered()
            # A committing attempt handed its slot on, and woke the loop, when its handler
            # returned; waking again now would only add an empty claim per job — unless the
            # type has a max_running: its place in the fleet-wide count is free only now that
            # the outcome committed, so a claim the limit capped at the first wake-up may
            # succeed now (otherwise it would wait for the limits poll).
            if not was_committing or over_allowance or type_name in self.freed_capped:
                self._wake()
            if not _.cancelled() and _.exception() is not None:
                log.error("attempt of job %s crashed", job_id, exc_info=_.exception())

        task.add_done_callback(done)

    def _spawn_batch(self, processor: Processor, jobs: list[Job], *, renew_first: bool) -> None:
        runner = BatchRunner(
            self._client,
            processor,
            jobs,
            self._worker_id,
            self._settings.of(processor.job_type.name),
            self._on_event,
            self._batch_groups,
        )
        task = asyncio.create_task(runner.run(renew_first=renew_first), name=f"jobchain-batch-{jobs[0].id}")
        for job in jobs:
            self.inflight[job.id] = task
            self._runners[job.id] = runner
        self._batched_extra += len(jobs) - 1

        def done(_: asyncio.Task[None]) -> None:
            self._announce_freed(processor.job_type.name)
            for job in jobs:
                self.inflight.pop(job.id, None)
                self._runners.pop(job.id, None)
                self._abandoned.discard(job.id)
                self._settled.discard(job.id)
            self._batched_extra -= len(jobs) - 1
            self.start_buffered()
            self._wake()
            if not _.cancelled() and _.exception() is not None:
                log.error(
                    "batch of %d %s jobs crashed", len(jobs), processor.job_type.name, exc_info=_.exception()
                )

        task.add_done_callback(done)

    def _before(self, deadline: float) -> bool:
        return self._now() < deadline

    def _announce_freed(self, type_name: str) -> None:
        """An attempt of a ``max_running`` type ended (its outcome committed): wake the workers
        that a claim capped, here and elsewhere."""
        if type_name not in self.freed_capped or self._client.notify is None:
            return
        task = asyncio.get_running_loop().create_task(self._publish_freed(type_name))
        self._announcing.add(task)
        task.add_done_callback(self._announcing.discard)

    async def _publish_freed(self, type_name: str) -> None:
        notify = self._client.notify
        if notify is None:
            return
        try:
            # The hint first, so a woken worker finds the budget it may consume.
            await notify.provide_wake_hint(type_name, 1)
            await notify.publish_job_scheduled(type_name)
        except Exception:  # a hint only: capped workers poll within a second anyway
            log.debug("could not announce a freed place of %s", type_name, exc_info=True)

    def _abandon(self, job_id: str) -> None:
        """``job_id``'s lease expired locally: its slot may run another job."""
        if job_id not in self.inflight or job_id in self._committing or job_id in self._settled:
            return
        self._abandoned.add(job_id)
        self.start_buffered()
        self._wake()

    def _settle(self, job_id: str) -> None:
        """The outcome of ``job_id``'s attempt is written: the worker no longer holds the job,
        though its task still finishes (its slot, if it kept one, frees when the task ends)."""
        if job_id in self.inflight and job_id not in self._abandoned:
            self._settled.add(job_id)

    def forget_all(self, reason: AbortReason) -> None:
        """Every job this worker held was handed on (it was presumed dead): abort the running
        attempts with ``reason`` and drop the buffer, whose jobs are no longer leased to it."""
        self.buffer.clear()
        self.abort_all(reason)

    def abort_all(self, reason: AbortReason) -> None:
        """Fire every running attempt's abort signal with ``reason`` (buffered jobs stay)."""
        for runner in list(self._runners.values()):
            signal = runner.attempt.signal if runner.attempt is not None else None
            if signal is not None:
                signal.abort(reason)

    def _committing_now(self, job_id: str) -> None:
        """The handler of ``job_id`` returned; only its commit is left: its slot may run another."""
        if job_id not in self.inflight or job_id in self._abandoned:
            return
        self._committing.add(job_id)
        self.start_buffered()
        self._wake()

    # ------------------------------------------------------------------ stopping

    async def drain(self, deadline: float) -> None:
        """Wait up to ``deadline`` seconds for in-flight attempts; then signal, cancel, hand back the rest.

        Last, the freed-place announcements the attempts made are settled: none outlives stop().
        """
        await self._drain_attempts(deadline)
        await self._settle_announcements()

    async def _drain_attempts(self, deadline: float) -> None:
        if not self.inflight:
            return
        tasks = list(self.inflight.values())
        _, pending = await asyncio.wait(tasks, timeout=deadline)
        if not pending:
            return
        job_ids = [job_id for job_id, task in self.inflight.items() if task in pending]
        # Past the deadline: ask handlers to stop (signal reason "shutdown"), give them a
        # moment to return, then cancel what is still running and hand its jobs back.
        for job_id in job_ids:
            runner = self._runners.get(job_id)
            if runner is not None and runner.attempt is not None:
                runner.attempt.signal.abort(AbortReason.SHUTDOWN)
        _, pending = await asyncio.wait(pending, timeout=min(SHUTDOWN_GRACE_SECONDS, deadline))
        job_ids = [job_id for job_id, task in self.inflight.items() if task in pending]
        # A job whose attempt ignored its cancellation is handed back all the same; what the
        # attempt writes later is fenced (its lease is gone), as after any lost lease.
        stuck = await _cancel_bounded(pending)
        if stuck:
            log.warning(
                "worker %s stops without %d attempt(s) that ignored their cancellation: jobs %s",
                self._worker_id,
                len(stuck),
                ", ".join(sorted(job_id for job_id, task in self.inflight.items() if task in stuck)),
            )
        await self.release(job_ids)

    async def _settle_announcements(self) -> None:
        """Give freed-place announcements still in flight a moment, then cancel them.

        An announcement left running would outlive the worker: it would publish on adapters its
        owner closes next (or keep the event loop from closing, with a broker that does not
        answer). Cancelling one loses little: capped workers elsewhere also poll their limits.
        """
        if not self._announcing:
            return
        _, pending = await asyncio.wait(set(self._announcing), timeout=SHUTDOWN_GRACE_SECONDS)
        stuck = await _cancel_bounded(pending)
        if stuck:
            log.warning("%d freed-place announcement(s) still running after their cancellation", len(stuck))

    async def release_buffered(self) -> None:
        """Hand back every job still waiting in the buffer."""
        buffered, self.buffer = [job.id for job, _ in self.buffer], deque()
        await self.release(buffered)

    async def release(self, job_ids: list[str]) -> None:
        """Hand unfinished jobs back at once instead of waiting for their leases to expire."""
        for job_id in job_ids:
            try:
                async with self._client.transaction() as tx:
                    job = await tx.state.job_reschedule(
                        JobReschedule(
                            job_id=job_id,
                            schedule=Schedule(after=timedelta(0)),
                            error=RELEASED_ERROR,
                            worker_id=self._worker_id,
                            released=True,
                        )
                    )
                    tx.hooks.job_scheduled(job.type_name)
            except JobchainError as error:
                log.info("could not release job %s: %s", job_id, error)


async def _cancel_bounded(tasks: set[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
    """Cancel ``tasks`` and wait for them at most :data:`SHUTDOWN_GRACE_SECONDS`; return those
    still running. Bounded: a task (or a driver under it) that swallows its cancellation would
    otherwise keep stop() waiting for ever."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return set()
    _, stuck = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_SECONDS)
    return stuck


def _never() -> bool:
    return False
