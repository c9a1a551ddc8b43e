"""Finishing a job: terminal output or continuation, shared by workerless completion and workers.

:func:`finish_job` validates first and writes second, so a validation error leaves the
transaction untouched. It buffers the resulting notifications and events in the
transaction's hooks: they go out only after commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, overload

from typing_extensions import TypeVar

from jobchain.contracts.observe import CreationScope, ObservesJobCreation
from jobchain.contracts.state import (
    COMPLETION_REFUSALS,
    MAX_PAGE_SIZE,
    ChainsList,
    CompletesJobsInBatches,
    JobComplete,
    JobCompleted,
    JobCreated,
    JobFailed,
    JobsCreate,
    NewJob,
    StateTx,
)
from jobchain.entities import Chain, Job, JobStatus, JsonValue, Schedule, new_id, validate_id
from jobchain.errors import (
    ChainNotFoundError,
    InvalidArgumentError,
    JobAlreadyCompletedError,
    JobchainError,
    JobFinishedError,
)
from jobchain.job_types import AnyContinuation, JobType, JobTypes
from jobchain.transactions import Transaction, TransactionHooks

log = logging.getLogger("jobchain.observe")

I = TypeVar("I")  # noqa: E741 -- conventional input/output type variable names
O = TypeVar("O")  # noqa: E741
# What the completion may continue with: the job type's ``continues_with`` tuple (default: any
# type, inputs still checked; see worker/attempt.py).
N = TypeVar("N", covariant=True, default=AnyContinuation)
# continue_with's overloads: the successor's input, output and own phantom parameters.
_NI = TypeVar("_NI")
_NO = TypeVar("_NO")
_NN = TypeVar("_NN")
_NE = TypeVar("_NE")


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuationSpec:
    """The next job of a chain: its type, input and optional id, schedule and blockers."""

    job_type: JobType[Any, Any]
    input: Any
    id: str | None = None
    schedule: Schedule | None = None
    blockers: Sequence[Chain | str] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFinished:
    """What finishing a job did: the adapter's result plus the continuation it created."""

    completed: JobCompleted
    continuation: Job | None = None
    continuation_deduplicated: bool = False

    @property
    def job(self) -> Job:
        """The completed job."""
        return self.completed.job

    @property
    def chain_completed(self) -> bool:
        return self.completed.chain_completed

    @property
    def unblocked_jobs(self) -> list[Job]:
        return self.completed.unblocked_jobs


def check_schedule(schedule: object) -> Schedule | None:
    """``schedule`` if it is a Schedule or None, else an InvalidArgumentError saying what to pass."""
    if schedule is None or isinstance(schedule, Schedule):
        return schedule
    raise InvalidArgumentError(
        f"schedule must be a Schedule (Schedule(at=...), Schedule(after=...) or Schedule.in_seconds(n)), "
        f"got {schedule!r}"
    )


def blocker_ids(blockers: Iterable[Chain | str]) -> list[str]:
    """Validated, de-duplicated blocker chain ids in declaration order."""
    if isinstance(blockers, (str, Chain)):
        raise InvalidArgumentError("blockers must be a list of chains or chain ids")
    ids: dict[str, None] = {}
    for blocker in blockers:
        chain_id = blocker.id if isinstance(blocker, Chain) else validate_id(blocker)
        ids[chain_id] = None
    return list(ids)


async def resolve_blockers(state: StateTx, ids: Sequence[str]) -> dict[str, Chain]:
    """Read the blocker chains (one listing per 500 ids); ChainNotFoundError for a missing one."""
    found: dict[str, Chain] = {}
    for start in range(0, len(ids), MAX_PAGE_SIZE):
        part = ids[start : start + MAX_PAGE_SIZE]
        page = await state.chains_list(ChainsList(chain_ids=part, limit=MAX_PAGE_SIZE))
        found.update((chain.id, chain) for chain in page.items)
    for chain_id in ids:
        if chain_id not in found:
            raise ChainNotFoundError(chain_id)
    return found


def buffer_created(hooks: TransactionHooks, created: JobCreated, *, new_chain: bool) -> None:
    """Buffer the events and wake-up of a job that ``jobs_create`` inserted (not deduplicated).

    A job inserted ``failed`` (a blocker chain had already failed or been cancelled) finished
    its chain at once: its waiters are woken.
    """
    if created.deduplicated:
        return
    job = created.job
    # An announced job's wake-up went out with its own transaction (see AnnouncesWithinState).
    wake = job.status is JobStatus.PENDING and not created.announced
    if not hooks.records_events:
        if wake:
            hooks.job_scheduled(job.type_name)
        elif job.status is JobStatus.FAILED:
            hooks.chain_completed(job.chain_id)
            hooks.job_ended(job)
        return
    attrs = _job_attrs(job)
    if new_chain:
        hooks.event("chain_created", chain_id=job.chain_id, chain_type_name=job.chain_type_name)
    hooks.event("job_created", **attrs)
    if job.status is JobStatus.BLOCKED:
        hooks.event("job_blocked", **attrs, blocker_chain_ids=list(created.incomplete_blocker_chain_ids))
    elif wake:
        hooks.job_scheduled(job.type_name)
    elif job.status is JobStatus.FAILED:
        buffer_propagation(hooks, [job], [])


def _job_attrs(job: Job) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "type_name": job.type_name,
        "chain_id": job.chain_id,
        "chain_type_name": job.chain_type_name,
    }


async def finish_job(
    tx: Transaction,
    job: Job,
    job_types: JobTypes,
    *,
    worker_id: str | None,
    lease_generation: int | None,
    output: Any = None,
    continuation: ContinuationSpec | None = None,
    now: datetime | None = None,
) -> JobFinished:
    """Complete ``job`` with ``output``, or hand its chain over to ``continuation``.

    Everything is validated before the first write. ``worker_id=None`` is a workerless
    completion: if the job was running, its worker is told it lost ownership.
    """
    status = job.status
    if status is JobStatus.COMPLETED:
        raise JobAlreadyCompletedError(job.id)
    if status is JobStatus.FAILED or status is JobStatus.CANCELLED:
        raise JobFinishedError(job.id, status.value)  # before a continuation is written
    job_type = job_types.get(job.type_name)
    new_job: NewJob | None = None
    encoded_output: Any = None
    if continuation is None:
        encoded_output = job_type.encode_output(output)
    else:
        if output is not None:
            raise InvalidArgumentError("pass either an output or a continuation, not both")
        new_job, blockers = await _continuation_job(tx.state, job, job_type, job_types, continuation)

    created: JobCreated | None = None
    if new_job is not None:
        params = JobsCreate(jobs=[new_job], now=now)
        # The client that opened tx (a continuation needs no client otherwise).
        observing: tuple[ObservesJobCreation, ...] = getattr(
            getattr(tx, "_owner", None), "creation_observers", ()
        )
        if observing:
            [created] = await create_observed(tx.state, params, observing, blockers, job)
        else:
            [created] = await tx.state.jobs_create(params)
    completed = await tx.state.job_complete(
        JobComplete(
            job_id=job.id,
            output=encoded_output,
            worker_id=worker_id,
            lease_generation=lease_generation,
            now=now,
        )
    )
    _buffer_finished(
        tx.hooks, completed, created, worker_id=worker_id, running=job.status is JobStatus.RUNNING
    )
    return JobFinished(
        completed=completed,
        continuation=created.job if created is not None else None,
        continuation_deduplicated=created.deduplicated if created is not None else False,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PlainCompletion:
    """A worker's completion of ``job`` with an output already encoded by its job type."""

    job: Job
    output: JsonValue
    worker_id: str
    now: datetime | None = None


async def complete_jobs(
    tx: Transaction, items: Sequence[PlainCompletion]
) -> list[JobFinished | JobchainError]:
    """Complete several claimed jobs in ``tx``, in one round trip where the adapter can.

    A refused completion is returned in its place and writes nothing; the others go ahead.
    """
    params = [
        JobComplete(
            job_id=item.job.id,
            output=item.output,
            worker_id=item.worker_id,
            lease_generation=item.job.lease_generation,
            now=item.now,
            running=item.job,
        )
        for item in items
    ]
    state = tx.state
    results: list[JobCompleted | JobchainError]
    if isinstance(state, CompletesJobsInBatches):
        results = await state.jobs_complete(params)
    else:
        results = []
        for one in params:
            try:
                results.append(await state.job_complete(one))
            except COMPLETION_REFUSALS as refused:
                results.append(refused)
    finished: list[JobFinished | JobchainError] = []
    for item, result in zip(items, results, strict=True):
        if isinstance(result, JobchainError):
            finished.append(result)
            continue
        running = item.job.status is JobStatus.RUNNING
        _buffer_finished(tx.hooks, result, None, worker_id=item.worker_id, running=running)
        finished.append(JobFinished(completed=result))
    return finished


async def _continuation_job(
    state: StateTx, job: Job, job_type: JobType[Any, Any], job_types: JobTypes, spec: ContinuationSpec
) -> tuple[NewJob, dict[str, Chain]]:
    if not isinstance(spec, ContinuationSpec):
        raise InvalidArgumentError(f"continuation must be a ContinuationSpec, got {spec!r}")
    next_type = job_types.resolve(spec.job_type)
    job_types.check_continuation(job_type, next_type)
    encoded_input = next_type.encode_input(spec.input)
    job_id = validate_id(spec.id) if spec.id is not None else new_id()
    schedule = check_schedule(spec.schedule)
    ids = blocker_ids(spec.blockers)
    chains: dict[str, Chain] = {}
    if ids:
        chains = await resolve_blockers(state, ids)
        job_types.check_blockers(next_type, [chains[i].type_name for i in ids])
    else:
        job_types.check_blockers(next_type, [])
    new_job = NewJob(
        id=job_id,
        type_name=next_type.name,
        chain_type_name=job.chain_type_name,
        chain_id=job.chain_id,
        chain_index=job.chain_index + 1,
        input=encoded_input,
        schedule=schedule,
        blocker_chain_ids=ids,
        runs_after_failed_blockers=next_type.runs_after_failed_blockers,
        # Its own type's default, not the chain's start override; ordering keys stay on roots.
        priority=next_type.priority,
        # The chain's trace context (its start's) follows the chain through every job.
        chain_trace_context=job.chain_trace_context,
    )
    return new_job, chains


async def create_observed(
    state: StateTx,
    params: JobsCreate,
    observers: Sequence[ObservesJobCreation],
    blockers: Mapping[str, Chain],
    parent: Job | None,
) -> list[JobCreated]:
    """``jobs_create`` inside the creation scopes of ``observers`` (see ``ObservesJobCreation``).

    Each new job gets the carrier the scopes fill as its ``trace_context``; a chain root
    also as its ``chain_trace_context``. An observer that fails is logged and left out.
    """
    jobs = params.jobs
    scopes: list[CreationScope] = []
    for observer in observers:
        try:
            scopes.append(observer.creation_scope(jobs, blockers, parent))
        except Exception:
            log.exception("observer %r failed to open a creation scope", observer)
    carried: list[NewJob] = []
    for index, new in enumerate(jobs):
        carrier: dict[str, str] = {}
        for scope in scopes:
            try:
                scope.inject(index, carrier)
            except Exception:
                log.exception("creation scope %r failed to inject", scope)
        if not carrier:
            carried.append(new)
        elif new.chain_id is None:
            carried.append(replace(new, trace_context=carrier, chain_trace_context=carrier))
        else:
            carried.append(replace(new, trace_context=carrier))
    try:
        created = await state.jobs_create(replace(params, jobs=carried))
    except BaseException as error:
        _end_scopes(scopes, None, error)
        raise
    _end_scopes(scopes, created, None)
    return list(created)


def _end_scopes(
    scopes: Sequence[CreationScope], created: Sequence[JobCreated] | None, error: BaseException | None
) -> None:
    for scope in scopes:
        try:
            scope.end(created, error)
        except Exception:
            log.exception("creation scope %r failed to end", scope)


def _buffer_finished(
    hooks: TransactionHooks,
    completed: JobCompleted,
    created: JobCreated | None,
    *,
    worker_id: str | None,
    running: bool,
) -> None:
    job = completed.job
    if worker_id is None and (running or completed.was_running):
        # A worker may still be running this job; tell it to stop at once.
        hooks.ownership_lost(job.id)
    if created is not None:
        buffer_created(hooks, created, new_chain=False)
    events = hooks.records_events
    if events:
        hooks.event(
            "job_completed",
            **_job_attrs(job),
            worker_id=worker_id,
            continued=created is not None,
        )
    if completed.chain_completed:
        hooks.chain_completed(job.chain_id)
        if events:
            hooks.event("chain_completed", chain_id=job.chain_id, chain_type_name=job.chain_type_name)
    for unblocked in completed.unblocked_jobs:
        if events:
            hooks.event("job_unblocked", **_job_attrs(unblocked), blocker_chain_id=job.chain_id)
        if unblocked.status is JobStatus.PENDING:
            hooks.job_scheduled(unblocked.type_name)


def buffer_propagation(
    hooks: TransactionHooks, failed_jobs: Sequence[Job], unblocked_jobs: Sequence[Job]
) -> None:
    """Buffer what a chain failing or being cancelled did downstream (after commit).

    Each job failed by propagation is its chain's last job, so its chain just finished: the
    "chain completed" channel (which means "chain finished") wakes its waiters, who then read
    it as failed. ``runs_after_failed_blockers`` jobs that became pending get a wake-up. The
    ``job_unblocked`` events carry ``blocker_chain_id=None``: the propagation may have run
    through several levels, so no single blocker resolved them.
    """
    events = hooks.records_events
    for job in failed_jobs:
        hooks.chain_completed(job.chain_id)
        hooks.job_ended(job)
        if events:
            hooks.event(
                "job_failed",
                **_job_attrs(job),
                worker_id=None,
                error=job.last_attempt_error,
                failed_by_chain_id=job.failed_by_chain_id,
            )
            hooks.event("chain_failed", chain_id=job.chain_id, chain_type_name=job.chain_type_name)
    for job in unblocked_jobs:
        if events:
            hooks.event("job_unblocked", **_job_attrs(job), blocker_chain_id=None)
        if job.status is JobStatus.PENDING:
            hooks.job_scheduled(job.type_name)


def buffer_failed(hooks: TransactionHooks, failed: JobFailed, *, worker_id: str | None) -> None:
    """Buffer the notifications and events of a ``job_fail`` (and its propagation).

    A failed job is its chain's last job: its chain finished, so its waiters are woken (they
    raise ChainFailedError). A workerless failure of a running job tells its worker to stop.
    """
    job = failed.job
    if worker_id is None and failed.was_running:
        hooks.ownership_lost(job.id)
    hooks.chain_completed(job.chain_id)
    hooks.job_ended(job)
    if hooks.records_events:
        hooks.event(
            "job_failed",
            **_job_attrs(job),
            worker_id=worker_id,
            error=job.last_attempt_error,
            failed_by_chain_id=job.failed_by_chain_id,
        )
        hooks.event("chain_failed", chain_id=job.chain_id, chain_type_name=job.chain_type_name)
    buffer_propagation(hooks, failed.failed_jobs, failed.unblocked_jobs)


def job_attrs(job: Job) -> dict[str, Any]:
    """The attributes every job event carries (id, type, chain id, chain type)."""
    return _job_attrs(job)


class Completion(Generic[I, O, N]):
    """Finishes one job exactly once: :meth:`complete` with an output or :meth:`continue_with`.

    Annotate ``Completion[Input, Output]``, or ``Completion[Input, Output, Next]`` with the job
    type's ``continues_with`` tuple as ``Next`` to have mypy check :meth:`continue_with`.

    ``job`` is the job being finished (for workerless completion, the chain's current last
    job). Workers pass their ``worker_id`` and ``lease_generation``; workerless completion
    passes None for both.
    """

    def __init__(
        self,
        tx: Transaction,
        job: Job,
        job_types: JobTypes,
        *,
        worker_id: str | None = None,
        lease_generation: int | None = None,
        now: datetime | None = None,
    ) -> None:
        self.job = job
        self.job_type: JobType[I, O] = job_types.get(job.type_name)
        self._tx = tx
        self._job_types = job_types
        self._worker_id = worker_id
        self._lease_generation = lease_generation
        self._now = now
        self._busy = False
        self._finished: JobFinished | None = None

    @property
    def input(self) -> I:
        """The job's input decoded into its declared type."""
        return self.job_type.decode_input(self.job.input)

    @property
    def finished(self) -> JobFinished | None:
        """The result of :meth:`complete`/:meth:`continue_with`, or None if not called yet."""
        return self._finished

    async def complete(self, output: O) -> JobFinished:
        """Complete the job (and its chain) with ``output``."""
        return await self._finish(output, None)

    @overload
    async def continue_with(
        self: Completion[Any, Any, tuple[JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        id: str | None = ...,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
    ) -> JobFinished: ...

    @overload
    async def continue_with(
        self: Completion[Any, Any, tuple[Any, JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        id: str | None = ...,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
    ) -> JobFinished: ...

    @overload
    async def continue_with(
        self: Completion[Any, Any, tuple[Any, Any, JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        id: str | None = ...,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
    ) -> JobFinished: ...

    @overload
    async def continue_with(
        self: Completion[Any, Any, tuple[Any, Any, Any, JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        id: str | None = ...,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
    ) -> JobFinished: ...

    @overload
    async def continue_with(
        self: Completion[Any, Any, tuple[Any, Any, Any, Any, JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        id: str | None = ...,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
    ) -> JobFinished: ...

    @overload
    async def continue_with(
        self: Completion[
            Any, Any, tuple[Any, Any, Any, Any, Any, JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]
        ],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        id: str | None = ...,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
    ) -> JobFinished: ...

    @overload
    async def continue_with(
        self: Completion[Any, Any, tuple[Any, Any, Any, Any, Any, Any, Any, *tuple[Any, ...]]],
        job_type: JobType[_NI, Any],
        input: _NI,
        *,
        id: str | None = ...,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
    ) -> JobFinished: ...

    @overload
    async def continue_with(
        self: Completion[Any, Any, AnyContinuation],
        job_type: JobType[_NI, Any],
        input: _NI,
        *,
        id: str | None = ...,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
    ) -> JobFinished: ...

    async def continue_with(
        self,
        job_type: JobType[Any, Any],
        input: Any,
        *,
        id: str | None = None,
        schedule: Schedule | None = None,
        blockers: Sequence[Chain | str] = (),
    ) -> JobFinished:
        """Complete the job by appending the next job of its chain.

        mypy checks ``job_type`` against the annotation ``Completion[I, O, Next]`` (``Next``:
        the job type's ``continues_with`` tuple) and ``input`` against ``job_type``'s input.
        """
        spec = ContinuationSpec(job_type=job_type, input=input, id=id, schedule=schedule, blockers=blockers)
        return await self._finish(None, spec)

    async def _finish(self, output: Any, continuation: ContinuationSpec | None) -> JobFinished:
        if self._finished is not None or self._busy:
            raise InvalidArgumentError(
                f"job {self.job.id} was already finished by this completion; "
                "call complete() or continue_with() only once"
            )
        self._busy = True
        try:
            self._finished = await finish_job(
                self._tx,
                self.job,
                self._job_types,
                worker_id=self._worker_id,
                lease_generation=self._lease_generation,
                output=output,
                continuation=continuation,
                now=self._now,
            )
        finally:
            self._busy = False
        return self._finished
