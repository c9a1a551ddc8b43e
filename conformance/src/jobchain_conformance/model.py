"""A hypothesis state machine: the adapter under test must agree with the in-process reference.

:func:`make_state_machine` drives random sequences of state operations — chains created
with and without deduplication and blockers, acquisition, completion with and without a
continuation, reschedule, renewal, reaping, trigger, deletion, worker heartbeats that
register workers and release the jobs of dead ones, and the lifecycle (fail, cancel, retry,
prune; rules in ``model_lifecycle``) — against the adapter
under test and a fresh :class:`jobchain.memory.state.MemoryStateAdapter`, with the same
explicit ``now`` values and the same ids. After every step both must hold the same jobs
and chains, the same queue_stats figures and leased_by listings (``model_stats``, an
invariant that ``LifecycleRules`` carries); every step must return the same result or raise
the same error class.

The machine only asserts what the contract specifies, so it keeps away from unspecified
tie-breaks and boundaries: the clock moves in whole seconds while leases, ``alive_for``
and deduplication windows end on half seconds (and ``prune_after`` is whole, so a prune
cutoff is never a half second either), an acquisition's limit never splits a group of
jobs with equal ``scheduled_at``, and acquisitions are compared as sets.

Every example works in its own namespace of type names and worker ids, so the adapter
under test need not be fresh per example: :class:`ModelTests` reuses the suite's
``state_adapter``. Heartbeat results and the registry are compared within that namespace.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from jobchain.contracts import (
    MAX_PAGE_SIZE,
    ChainsDelete,
    ChainsList,
    JobComplete,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsCreate,
    JobsList,
    JobsReapExpired,
    JobsTrigger,
    NewJob,
    StateAdapter,
    StateTx,
    WorkerHeartbeat,
    WorkersList,
)
from jobchain.entities import AttemptError, Deduplication, Job, JobStatus, Schedule, WorkerState
from jobchain_conformance.model_lifecycle import LifecycleRules, project

T = TypeVar("T")
AdapterFactory = Callable[[], Coroutine[Any, Any, StateAdapter]]
"""Returns the adapter under test (it may return the same adapter every time)."""

STEP_TIMEOUT = 30.0
LEASE = timedelta(seconds=30.5)  # half seconds: an expiry never equals a whole-second clock
TYPE_B_LEASE = timedelta(seconds=60.5)
"""The per-type lease some acquisitions give the second type (``type_leases``)."""
WORKERS = ("worker-1", "worker-2", "worker-3")
"""Worker names; each example prefixes them with its namespace."""
RECENT = st.integers(0, 3)
"""Which of the most recent jobs or chains an operation targets (0 = the newest)."""
MODEL_SETTINGS = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    database=None,  # keep adopters' checkouts free of a .hypothesis directory
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class Runner(Protocol):
    """Runs a coroutine to completion from synchronous code and returns its result."""

    def __call__(self, coro: Coroutine[Any, Any, T], /) -> T: ...


def loop_runner(loop: asyncio.AbstractEventLoop) -> Runner:
    """A runner that submits coroutines to ``loop``, which runs in another thread."""

    def run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(STEP_TIMEOUT)

    return run


def background_runner() -> Runner:
    """A runner backed by a private event loop in a daemon thread."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="jobchain-model-loop", daemon=True).start()
    return loop_runner(loop)


@dataclasses.dataclass(frozen=True)
class Raised:
    """An operation's outcome when it raised."""

    error: type[BaseException]


async def _outcome(adapter: StateAdapter, op: Callable[[StateTx], Awaitable[T]]) -> T | Raised:
    try:
        async with adapter.transaction() as tx:
            return await op(tx)
    except Exception as error:  # compared by class with the reference's outcome
        return Raised(type(error))


async def _snapshot(
    adapter: StateAdapter, type_names: Sequence[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    jobs: dict[str, Any] = {}
    chains: dict[str, Any] = {}
    async with adapter.transaction(read_only=True) as tx:
        cursor: str | None = None
        while True:
            page = await tx.jobs_list(JobsList(type_names=type_names, limit=MAX_PAGE_SIZE, cursor=cursor))
            jobs.update((job.id, project(job)) for job in page.items)
            if (cursor := page.next_cursor) is None:
                break
        while True:
            chain_page = await tx.chains_list(
                ChainsList(type_names=type_names, limit=MAX_PAGE_SIZE, cursor=cursor)
            )
            chains.update((c.id, (c.root.id, c.last.id, c.status)) for c in chain_page.items)
            if (cursor := chain_page.next_cursor) is None:
                break
    return jobs, chains


async def _registry(adapter: StateAdapter, worker_ids: Sequence[str], now: datetime) -> list[dict[str, Any]]:
    """The example's registry rows as listed at ``now``, in listing order."""
    async with adapter.transaction(read_only=True) as tx:
        rows = await tx.workers_list(WorkersList(now=now))
    return [project(row) for row in rows if row.id in worker_ids]


def make_state_machine(
    adapter_factory: AdapterFactory,
    *,
    run: Runner | None = None,
    start: datetime | None = None,
    reference_factory: AdapterFactory | None = None,
) -> type[RuleBasedStateMachine]:
    """Build the machine class comparing ``adapter_factory``'s adapter with the reference.

    ``run`` executes the adapters' coroutines (default: a private loop in a background
    thread, so ``make_state_machine(f).TestCase`` works as a plain unittest). ``start`` is
    the first ``now`` (a whole second). The machine never closes the adapter under test.
    """
    runner = run or background_runner()
    first_now = (start or datetime.now(UTC)).replace(microsecond=0)

    async def memory_reference() -> StateAdapter:
        from jobchain.memory.state import MemoryStateAdapter  # the reference lives in core

        return MemoryStateAdapter()

    make_reference = reference_factory or memory_reference

    class AdapterAgreesWithReference(LifecycleRules, RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.subject = runner(adapter_factory())
            self.reference = runner(make_reference())
            self.now = first_now
            token = uuid.uuid4().hex[:8]
            self.types = (f"model-{token}-a", f"model-{token}-b")
            self.workers = tuple(f"model-{token}-{name}" for name in WORKERS)
            self.chain_ids: list[str] = []
            self.job_ids: list[str] = []

        def teardown(self) -> None:
            runner(self.reference.close())

        # ------------------------------------------------------------ plumbing

        def both(self, op: Callable[[StateTx], Awaitable[T]]) -> tuple[T | Raised, T | Raised]:
            return runner(_outcome(self.subject, op)), runner(_outcome(self.reference, op))

        def agree(self, label: str, outcomes: tuple[Any, Any], summary: Callable[[Any], Any]) -> Any:
            """Require equal outcomes; return the reference's result (or None if it raised)."""
            subject, reference = outcomes
            if isinstance(subject, Raised) or isinstance(reference, Raised):
                assert subject == reference, (
                    f"{label}: adapter gave {subject!r}, reference gave {reference!r}"
                )
                return None
            assert summary(subject) == summary(reference), (
                f"{label}: adapter gave {summary(subject)!r}, reference gave {summary(reference)!r}"
            )
            return reference

        def reference_job(self, index: int, statuses: Sequence[JobStatus]) -> Job | None:
            """A known job whose reference status is in ``statuses`` (None if there is none)."""
            snapshot = runner(_snapshot(self.reference, self.types))[0]
            candidates = [
                snapshot[job_id]
                for job_id in self.job_ids
                if job_id in snapshot and snapshot[job_id]["status"] in statuses
            ]
            if not candidates:  # fall back to any job the operation may legally target
                candidates = [
                    job
                    for job_id, job in snapshot.items()
                    if job_id in self.job_ids and job["status"] != JobStatus.BLOCKED
                ]
            return Job(**candidates[-1 - index % len(candidates)]) if candidates else None

        def pick(self, items: Sequence[str], index: int) -> str:
            """The ``index``-th most recent item: operations cluster on recent rows, so
            create → complete → create-again sequences are likely within one example."""
            return items[-1 - index % len(items)]

        def reference_read(self, op: Callable[[StateTx], Awaitable[T]]) -> T:
            """Read the reference's committed state (to aim an operation, never to compare)."""

            async def read() -> T:
                async with self.reference.transaction(read_only=True) as tx:
                    return await op(tx)

            return runner(read())

        # ------------------------------------------------------------ rules

        @initialize(count=st.integers(1, 4))
        def seed_chains(self, count: int) -> None:
            for n in range(count):
                self.create_chains(n % 2, None, [], None, 1, False)

        @rule(seconds=st.sampled_from([1, 10, 30, 31, 61, 300]))
        def advance_clock(self, seconds: int) -> None:
            self.now += timedelta(seconds=seconds)

        @rule(
            type_index=st.sampled_from([0, 0, 0, 1]),
            dedup=st.sampled_from(
                [
                    None,
                    ("incomplete", 0, False),
                    ("incomplete", 0, False),
                    ("any", 0, False),
                    ("incomplete", 1, True),
                ]
            ),
            blockers=st.sampled_from([(), (), (0,), (0, 1), (1, 2)]),
            delay=st.sampled_from([None, 0, 20]),
            batch=st.integers(1, 2),
            opt_in=st.sampled_from([False, False, True]),
        )
        def create_chains(
            self,
            type_index: int,
            dedup: tuple[str, int, bool] | None,
            blockers: Sequence[int],
            delay: int | None,
            batch: int,
            opt_in: bool,
        ) -> None:
            blocker_ids = list(
                dict.fromkeys(self.pick(self.chain_ids, i) for i in blockers if self.chain_ids)
            )
            deduplication = None
            if dedup is not None:
                scope, key, exclude = dedup
                deduplication = Deduplication(
                    key=f"key-{key}",
                    scope="any" if scope == "any" else "incomplete",
                    window=timedelta(seconds=60.5) if scope == "any" else None,
                    exclude_chain_ids=self.chain_ids[-1:] if exclude else (),
                )
            jobs = [
                NewJob(
                    id=str(uuid.uuid4()),
                    type_name=self.types[type_index],
                    chain_type_name=self.types[type_index],
                    input={"n": len(self.job_ids) + n},
                    deduplication=deduplication,
                    schedule=None if delay is None else Schedule(after=timedelta(seconds=delay)),
                    blocker_chain_ids=blocker_ids,
                    runs_after_failed_blockers=opt_in,
                )
                for n in range(batch)
            ]
            params = JobsCreate(jobs=jobs, now=self.now)
            created = self.agree(
                "jobs_create",
                self.both(lambda tx: tx.jobs_create(params)),
                lambda results: [
                    (r.deduplicated, project(r.job), sorted(r.incomplete_blocker_chain_ids)) for r in results
                ],
            )
            for result in created or ():
                if not result.deduplicated:
                    self.chain_ids.append(result.job.chain_id)
                    self.job_ids.append(result.job.id)
            # Distinct creation times keep "newest deduplication match" free of ties.
            self.now += timedelta(seconds=1)

        @rule(
            type_index=st.integers(0, 2),
            limit=st.integers(1, 3),
            worker_index=st.integers(0, 1),
            per_type=st.booleans(),
            register=st.booleans(),
        )
        def acquire(
            self, type_index: int, limit: int, worker_index: int, per_type: bool, register: bool
        ) -> None:
            if register:  # as a worker does: heartbeat (so it can be found dead later), then claim
                self.heartbeat(worker_index, False, WorkerState.RUNNING, 10.5, 3600)
            type_names = list(self.types) if type_index == 2 else [self.types[type_index]]
            snapshot = runner(_snapshot(self.reference, self.types))[0]
            eligible = sorted(
                job["scheduled_at"]
                for job in snapshot.values()
                if job["status"] == JobStatus.PENDING
                and job["type_name"] in type_names
                and job["scheduled_at"] <= self.now
            )
            # Ties in scheduled_at may be broken either way: never let the limit split one.
            while limit < len(eligible) and eligible[limit - 1] == eligible[limit]:
                limit += 1
            params = JobsAcquire(
                type_names=type_names,
                worker_id=self.workers[worker_index],
                lease_for=LEASE,
                type_leases={self.types[1]: TYPE_B_LEASE} if per_type else {},
                limit=limit,
                now=self.now,
            )
            self.agree(
                "jobs_acquire",
                self.both(lambda tx: tx.jobs_acquire(params)),
                lambda acquired: (
                    sorted((job.id, tuple(project(job).items())) for job in acquired.jobs),
                    acquired.has_more,
                ),
            )

        @rule(
            index=RECENT,
            status=st.sampled_from(
                [JobStatus.RUNNING, JobStatus.RUNNING, JobStatus.PENDING, JobStatus.COMPLETED]
            ),
            as_worker=st.sampled_from(["owner", "owner", "other", "none"]),
            continue_with=st.sampled_from([None, None, None, 0, 1]),
            current_generation=st.booleans(),
        )
        def complete(
            self,
            index: int,
            status: JobStatus,
            as_worker: str,
            continue_with: int | None,
            current_generation: bool,
        ) -> None:
            # Blocked jobs are never completed: the contract promises nothing about that.
            job = self.reference_job(index, [status])
            if job is None:
                return
            worker = {"owner": job.leased_by, "other": "worker-stranger", "none": None}[as_worker]
            generation = job.lease_generation if current_generation and worker is not None else None
            follower = (
                None
                if continue_with is None
                else NewJob(
                    id=str(uuid.uuid4()),
                    type_name=self.types[continue_with],
                    chain_type_name=job.chain_type_name,
                    chain_id=job.chain_id,
                    chain_index=job.chain_index + 1,
                    input={"after": job.id},
                )
            )
            params = JobComplete(
                job_id=job.id,
                output=None if follower else {"done": job.id},
                worker_id=worker,
                lease_generation=generation,
                now=self.now,
            )

            async def op(tx: StateTx) -> Any:
                if follower is not None:
                    await tx.jobs_create(JobsCreate(jobs=[follower], now=self.now))
                return await tx.job_complete(params)

            completed = self.agree(
                "job_complete",
                self.both(op),
                lambda r: (
                    project(r.job),
                    r.chain_completed,
                    sorted(j.id for j in r.unblocked_jobs),
                    r.previous_leased_by,
                    r.was_running,
                ),
            )
            if completed is not None and follower is not None:
                self.job_ids.append(follower.id)

        @rule(
            index=RECENT,
            status=st.sampled_from([JobStatus.RUNNING, JobStatus.PENDING, JobStatus.COMPLETED]),
            delay=st.sampled_from([0, 10, 45]),
            as_owner=st.booleans(),
            with_entry=st.booleans(),
        )
        def reschedule(
            self, index: int, status: JobStatus, delay: int, as_owner: bool, with_entry: bool
        ) -> None:
            # Blocked jobs are never rescheduled: the contract promises nothing about that.
            job = self.reference_job(index, [status])
            if job is None:
                return
            params = JobReschedule(
                job_id=job.id,
                schedule=Schedule(after=timedelta(seconds=delay)),
                error=f"failure at {self.now.isoformat()}",
                worker_id=(job.leased_by or self.workers[0]) if as_owner else None,
                attempt_error=(
                    AttemptError(
                        attempt=job.attempt,
                        worker_id=job.leased_by,
                        error_type="Retry",
                        message="x",
                        at=self.now,
                    )
                    if with_entry
                    else None
                ),
                now=self.now,
            )
            self.agree("job_reschedule", self.both(lambda tx: tx.job_reschedule(params)), project)

        @rule(index=RECENT, running=st.booleans(), as_owner=st.booleans())
        def renew_lease(self, index: int, running: bool, as_owner: bool) -> None:
            job = self.reference_job(index, [JobStatus.RUNNING] if running else list(JobStatus))
            if job is None:
                return
            worker = (job.leased_by or self.workers[0]) if as_owner else self.workers[1]
            params = JobRenewLease(job_id=job.id, worker_id=worker, lease_for=LEASE, now=self.now)
            self.agree("job_renew_lease", self.both(lambda tx: tx.job_renew_lease(params)), project)

        @rule(exclude=st.lists(RECENT, max_size=1))
        def reap(self, exclude: list[int]) -> None:
            excluded = [self.pick(self.job_ids, i) for i in exclude if self.job_ids]
            params = JobsReapExpired(
                type_names=self.types, exclude_job_ids=excluded, limit=MAX_PAGE_SIZE, now=self.now
            )
            self.agree(
                "jobs_reap_expired",
                self.both(lambda tx: tx.jobs_reap_expired(params)),
                lambda jobs: sorted((job.id, tuple(project(job).items())) for job in jobs),
            )

        @rule(
            worker_index=st.integers(0, 2),
            release_dead=st.sampled_from([True, True, False]),
            state=st.sampled_from(
                [WorkerState.RUNNING, WorkerState.RUNNING, WorkerState.DRAINING, WorkerState.STOPPED]
            ),
            alive_for=st.sampled_from([10.5, 45.5]),
            prune_after=st.sampled_from([100, 3600]),
        )
        def heartbeat(
            self,
            worker_index: int,
            release_dead: bool,
            state: WorkerState,
            alive_for: float,
            prune_after: int,
        ) -> None:
            params = WorkerHeartbeat(
                worker_id=self.workers[worker_index],
                name=f"name-{self.now.second}",
                host="host",
                pid=1000 + worker_index,
                version="1",
                type_names=self.types,
                concurrency=2,
                inflight=worker_index,
                state=state,
                alive_for=timedelta(seconds=alive_for),
                release_dead=release_dead,
                prune_after=timedelta(seconds=prune_after),
                now=self.now,
            )
            mine, types = set(self.workers), set(self.types)  # earlier examples' rows may linger
            self.agree(
                "worker_heartbeat",
                self.both(lambda tx: tx.worker_heartbeat(params)),
                lambda r: (
                    r.was_dead,
                    sorted(
                        (job.id, tuple(project(job).items()))
                        for job in r.released_jobs
                        if job.type_name in types
                    ),
                    sorted(worker for worker in r.dead_worker_ids if worker in mine),
                    r.next_lease_expiry,
                ),
            )

        @rule(indexes=st.lists(RECENT, min_size=1, max_size=2), missing=st.booleans())
        def trigger(self, indexes: list[int], missing: bool) -> None:
            if not self.job_ids:
                return
            job_ids = list(dict.fromkeys(self.pick(self.job_ids, i) for i in indexes))
            if missing:
                job_ids.append(str(uuid.uuid4()))
            params = JobsTrigger(job_ids=job_ids, now=self.now)
            self.agree(
                "jobs_trigger",
                self.both(lambda tx: tx.jobs_trigger(params)),
                lambda r: ([project(job) for job in r.triggered], r.not_found, sorted(r.not_triggerable)),
            )

        @rule(indexes=st.lists(RECENT, min_size=1, max_size=2), cascade=st.booleans())
        def delete(self, indexes: list[int], cascade: bool) -> None:
            if not self.chain_ids:
                return
            chain_ids = list(dict.fromkeys(self.pick(self.chain_ids, i) for i in indexes))
            params = ChainsDelete(chain_ids=chain_ids, cascade=cascade)
            deleted = self.agree(
                "chains_delete",
                self.both(lambda tx: tx.chains_delete(params)),
                lambda r: (
                    sorted(c.id for c in r.chains),
                    sorted(r.running_job_ids),
                    sorted((b.chain_id, b.referenced_by_job_id) for b in r.blocker_references),
                ),
            )
            gone = {chain.id for chain in deleted.chains} if deleted is not None else set()
            self.chain_ids = [chain_id for chain_id in self.chain_ids if chain_id not in gone]

        # ------------------------------------------------------------ invariant

        @invariant()
        def stores_agree(self) -> None:
            subject_jobs, subject_chains = runner(_snapshot(self.subject, self.types))
            reference_jobs, reference_chains = runner(_snapshot(self.reference, self.types))
            assert subject_jobs == reference_jobs, "stored jobs differ from the reference"
            assert subject_chains == reference_chains, "chains differ from the reference"
            subject_workers = runner(_registry(self.subject, self.workers, self.now))
            reference_workers = runner(_registry(self.reference, self.workers, self.now))
            assert subject_workers == reference_workers, "the worker registry differs from the reference"

    return AdapterAgreesWithReference


class ModelTests:
    """The adapter agrees with the in-process reference on random operation sequences.

    Reuses the suite's ``state_adapter`` fixture: each example namespaces its type names,
    so earlier examples' rows never interfere. The machine runs in a worker thread and
    submits every adapter call to the test's own event loop. Override ``model_settings``
    to explore more (for example ``settings(MODEL_SETTINGS, max_examples=500)`` nightly).
    """

    @pytest.fixture
    def model_settings(self) -> settings:
        return MODEL_SETTINGS

    # A fixed amount of work (examples x steps, each a round trip from a worker thread): on a
    # starved machine it has taken 100 s, near pytest-timeout's usual 120 s (used if installed).
    @pytest.mark.timeout(600)
    async def test_adapter_agrees_with_reference_model(
        self, state_adapter: StateAdapter, now: datetime, model_settings: settings
    ) -> None:
        loop = asyncio.get_running_loop()

        async def subject() -> StateAdapter:
            return state_adapter

        machine = make_state_machine(subject, run=loop_runner(loop), start=now)
        await asyncio.to_thread(run_state_machine_as_test, machine, settings=model_settings)
