"""Batch processors: one handler call for many claimed jobs of one type.

The worker hands a batch handler up to ``max_batch`` claimed jobs of its type at once (one
slot for the whole batch). The handler runs outside any transaction while the worker renews
every job's lease, and returns one entry per job, in order: the job's output, or an
exception to reschedule that job alone. The outputs are then written in one group
completion (one statement where the adapter batches completions), in which each job is
decided on its own: a job whose lease was lost meanwhile is refused without undoing the
others, as a savepoint per job would. A handler that raises reschedules every job of the
batch with that error.

A batch learns that its jobs were lost (cancelled, deleted, taken) as a single attempt does:
at the latest from the lease renewal that follows, and, with a notify backend, from the
ownership-lost notification once the batch has run ``WATCH_AFTER_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from jobchain.contracts import MAX_PAGE_SIZE, JobRenewLease, JobsList
from jobchain.entities import Job
from jobchain.errors import JobchainError, JobTimeoutError
from jobchain.worker.abort import AbortReason, AbortSignal
from jobchain.worker.deadline import Deadline
from jobchain.worker.emitter import AttemptScopes
from jobchain.worker.failures import fail_over_limit, now_of, over_limit, record_failure
from jobchain.worker.ownership import OWNERSHIP_LOSSES, reason_for, reason_for_error
from jobchain.worker.processors import call_in_thread
from jobchain.worker.runner import WATCH_AFTER_SECONDS, AttemptSettings

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.contracts import Unsubscribe
    from jobchain.worker.completer import CompletionGroups
    from jobchain.worker.processors import Processor

log = logging.getLogger("jobchain.worker")

I = TypeVar("I")  # noqa: E741 -- conventional input/output type variable names
O = TypeVar("O")  # noqa: E741


class BatchResultError(JobchainError):
    """A batch handler must return a sequence with one output (or exception) per job, in order."""


class Batch(Generic[I, O]):
    """What a batch handler receives: claimed jobs of one type and their decoded inputs.

    ``jobs[i]`` goes with ``inputs[i]``; return a sequence whose ``i``-th entry is that job's
    output, or an exception to reschedule that job alone (``RescheduleJobError`` chooses
    when). ``signal`` fires when the worker shuts down or every job was lost, with the
    reason of the loss that left none (``cancelled`` when the last chains were cancelled).
    """

    __slots__ = ("context", "inputs", "jobs", "signal", "worker_id")

    def __init__(self, jobs: list[Job], inputs: list[I], worker_id: str) -> None:
        self.jobs = jobs
        self.inputs = inputs
        self.worker_id = worker_id
        self.signal = AbortSignal()
        self.context: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.jobs)


class BatchRunner:
    """Runs one batch to its end: renew the leases, call the handler, complete or reschedule each job."""

    def __init__(
        self,
        client: Client,
        processor: Processor,
        jobs: list[Job],
        worker_id: str,
        settings: AttemptSettings,
        on_event: Callable[[str, Job, dict[str, Any]], None],
        groups: CompletionGroups,
    ) -> None:
        self.client = client
        self.processor = processor
        self.jobs = jobs
        self.worker_id = worker_id
        self.settings = settings
        self.on_event = on_event
        self.groups = groups
        self.attempt: Batch[Any, Any] | None = None  # named as AttemptRunner's: the worker aborts it
        self._lost: dict[str, AbortReason | None] = {}
        """Jobs no longer this batch's to write: why they were lost (None: failed over their limit)."""
        self._watching: list[asyncio.Task[None]] = []
        self._unsubscribes: list[Unsubscribe] = []
        self._stopped = False  # the outcome is being written: no more checks

    async def run(self, *, renew_first: bool = False) -> None:
        """Run the batch; never raises except on cancellation.

        Inside the scopes of the client's ``ObservesAttempts`` observers (one for the batch).
        """
        observing = self.client.attempt_observers
        if not observing:
            await self._run(renew_first, None)
            return
        scope = AttemptScopes(observing, self.jobs, self.worker_id)
        try:
            await self._run(renew_first, scope)
        finally:
            scope.exit()

    async def _run(self, renew_first: bool, scope: AttemptScopes | None) -> None:
        for job in self.jobs:
            self.on_event("job_attempt_started", job, {})
        if renew_first:
            await self._renew_all()
        jobs: list[Job] = []
        inputs: list[Any] = []
        undecodable: list[tuple[Job, BaseException]] = []
        spent = [job for job in self.jobs if job.id not in self._lost and over_limit(job, self.settings)]
        if spent:
            await asyncio.gather(
                *(
                    fail_over_limit(self.client, job, self.worker_id, self.settings, self.on_event)
                    for job in spent
                )
            )
            self._lost.update((job.id, None) for job in spent)
        for job in self.jobs:
            if job.id in self._lost:
                continue
            try:
                inputs.append(self.processor.job_type.decode_input(job.input))
            except Exception as error:  # stored input no longer matches the type: retry later
                undecodable.append((job, error))
                continue
            jobs.append(job)
        await self._reschedule_each(undecodable)
        if not jobs:
            return
        batch: Batch[Any, Any] = Batch(jobs, inputs, self.worker_id)
        self.attempt = batch
        self._watching = [
            asyncio.create_task(self._renew_forever(batch)),
            asyncio.create_task(self._watch(batch)),
        ]
        deadline: Deadline | None = None
        timeout = self.settings.timeout
        if timeout is not None:
            deadline = Deadline(batch.jobs[0].id, timeout, batch.signal)
        try:
            outputs = await self._call_in_time(batch, deadline)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            if scope is not None:
                scope.error(error)
            overran: float | None = None
            if deadline is not None and deadline.failed and isinstance(error, JobTimeoutError):
                overran = deadline.seconds  # every job of the batch timed out with it
            # Stopped first: the reschedules below would read as losses to a check or renewal.
            await self._stop_watching()
            await self._reschedule_each(
                [(job, error) for job in jobs if job.id not in self._lost], timed_out=overran
            )
            return
        finally:
            await self._stop_watching()
        await self._finish(jobs, outputs)

    async def _call_in_time(self, batch: Batch[Any, Any], deadline: Deadline | None) -> list[Any]:
        """The handler's outputs; past the type's ``timeout`` the whole batch times out (the
        deadline measures the handler call; the group completion after it is not part of it)."""
        if deadline is None:
            return await self._call(batch, None)
        outputs: list[list[Any]] = []

        async def call() -> None:
            outputs.append(await self._call(batch, deadline))

        await deadline.run(call(), lambda: True)
        return outputs[0]

    async def _call(self, batch: Batch[Any, Any], deadline: Deadline | None) -> list[Any]:
        handler = self.processor.handler
        if self.processor.is_async:
            result = await (handler(batch) if deadline is None else deadline.timed(handler(batch)))
        elif deadline is None:
            result = await call_in_thread(self.settings.sync_wrapper, handler, batch)
        else:
            try:
                result = await call_in_thread(
                    self.settings.sync_wrapper, deadline.timed_in_thread(handler), batch
                )
            finally:
                deadline.stop()
        if isinstance(result, (str, bytes)) or not isinstance(result, Sequence) or len(result) != len(batch):
            got = f"{len(result)} entries" if isinstance(result, Sequence) else type(result).__name__
            raise BatchResultError(
                f"the batch handler for {self.processor.job_type.name!r} got {len(batch)} jobs and "
                f"returned {got}; return a list with one output (or exception) per job, in order"
            )
        return list(result)

    async def _finish(self, jobs: list[Job], outputs: list[Any]) -> None:
        job_type = self.processor.job_type
        completions: list[tuple[Job, Any]] = []
        failures: list[tuple[Job, BaseException]] = []
        for job, output in zip(jobs, outputs, strict=True):
            if job.id in self._lost:
                continue  # its renewal was refused, and said why then
            if isinstance(output, BaseException):
                failures.append((job, output))
            else:
                try:
                    completions.append((job, job_type.encode_output(output)))
                except Exception as error:
                    failures.append((job, error))
        now = now_of(self.client)
        results = await self.groups.complete_many(completions, worker_id=self.worker_id, now=now)
        for (job, _output), result in zip(completions, results, strict=True):
            if isinstance(result, OWNERSHIP_LOSSES):
                self.on_event("job_attempt_" + reason_for_error(result).value, job, {})
            elif isinstance(result, BaseException):
                failures.append((job, result))
            else:
                self.on_event("job_attempt_completed", job, {"continued": False})
        await self._reschedule_each(failures)

    async def _reschedule_each(
        self, failures: list[tuple[Job, BaseException]], *, timed_out: float | None = None
    ) -> None:
        """``timed_out``: the deadline that failed them all (each reports ``job_timed_out``)."""
        if failures:
            await asyncio.gather(
                *(
                    record_failure(
                        self.client,
                        job,
                        self.worker_id,
                        self.settings,
                        self.on_event,
                        error,
                        timed_out=timed_out,
                    )
                    for job, error in failures
                )
            )

    async def _renew_all(self) -> None:
        """Extend the lease of every job still ours, in one transaction; note the ones lost."""
        async with self.client.state.transaction() as tx:
            for job in self.jobs:
                if job.id in self._lost:
                    continue
                try:
                    await tx.job_renew_lease(
                        JobRenewLease(
                            job_id=job.id,
                            worker_id=self.worker_id,
                            lease_for=self.settings.lease.duration,
                            lease_generation=job.lease_generation,
                        )
                    )
                except OWNERSHIP_LOSSES as lost:
                    # A refused renewal changes nothing, so the transaction carries on.
                    self._lose(job, reason_for_error(lost))

    async def _renew_forever(self, batch: Batch[Any, Any]) -> None:
        lease = self.settings.lease
        loop = asyncio.get_running_loop()
        expires = loop.time() + lease.duration.total_seconds()
        while not batch.signal.aborted:
            await asyncio.sleep(lease.renew_every.total_seconds())
            try:
                await self._renew_all()
                expires = loop.time() + lease.duration.total_seconds()
            except Exception:
                # A transient failure: keep trying until the leases would have run out.
                log.warning("lease renewal of a batch of %d jobs failed", len(batch), exc_info=True)
                if loop.time() >= expires:
                    batch.signal.abort(AbortReason.ERROR)
                    return
            if batch.signal.fired is not None:
                return  # every job lost: _lose fired the signal with the reason

    def _lose(self, job: Job, reason: AbortReason) -> None:
        """Note that ``job`` is no longer this batch's (once); the last job lost fires the
        batch's signal with its reason, so a cancelled batch stops as ``cancelled``."""
        if job.id in self._lost:
            return
        self._lost[job.id] = reason
        self.on_event("job_attempt_" + reason.value, job, {})
        batch = self.attempt
        if batch is not None and all(j.id in self._lost for j in batch.jobs):
            batch.signal.abort(reason)

    async def _watch(self, batch: Batch[Any, Any]) -> None:
        """Listen for the ownership loss of the batch's jobs once it has run a while (quick
        batches pay for no subscription), then read them once for losses published before."""
        notify = self.client.notify
        if notify is None:
            return  # the renewals tell
        await asyncio.sleep(WATCH_AFTER_SECONDS)
        if batch.signal.fired is not None:
            return
        for job in batch.jobs:
            if job.id in self._lost:
                continue
            try:
                self._unsubscribes.append(
                    await notify.listen_job_ownership_lost(job.id, self._on_ownership_lost)
                )
            except Exception:  # notifications are hints; renewal still detects the loss
                log.warning("could not listen for ownership loss of job %s", job.id, exc_info=True)
                return
        await self._check_ownership([job.id for job in batch.jobs])

    def _on_ownership_lost(self, job_id: str) -> None:
        batch = self.attempt
        if self._stopped or batch is None or batch.signal.fired is not None or job_id in self._lost:
            return
        task = asyncio.get_running_loop().create_task(self._check_ownership([job_id]))
        self._watching.append(task)

    async def _check_ownership(self, job_ids: list[str]) -> None:
        """Read the jobs ``job_ids`` still held and note the ones lost meanwhile."""
        held = {job.id: job for job in self.jobs if job.id in job_ids and job.id not in self._lost}
        if not held:
            return
        ids = list(held)
        current: dict[str, Job] = {}
        try:
            async with self.client.state.transaction(read_only=True) as tx:
                for start in range(0, len(ids), MAX_PAGE_SIZE):
                    page = ids[start : start + MAX_PAGE_SIZE]
                    found = await tx.jobs_list(JobsList(job_ids=page, limit=len(page)))
                    current.update((job.id, job) for job in found.items)
        except Exception:  # a hint only: the batch's own writes are fenced anyway
            log.debug("could not read the jobs of a batch to check their ownership", exc_info=True)
            return
        for job_id, job in held.items():
            reason = reason_for(current.get(job_id), self.worker_id, job.lease_generation)
            if reason is not None:
                self._lose(job, reason)

    async def _stop_watching(self) -> None:
        """Stop renewing and listening (idempotent): the batch's outcome is being written."""
        self._stopped = True
        tasks, self._watching = self._watching, []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        unsubscribes, self._unsubscribes = self._unsubscribes, []
        for unsubscribe in unsubscribes:
            try:
                await unsubscribe()
            except Exception:
                log.debug("unsubscribe failed", exc_info=True)
