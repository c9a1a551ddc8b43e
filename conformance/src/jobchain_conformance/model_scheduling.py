"""The model extended with the scheduling controls: the adapter under test must agree with the
in-process reference on random sequences that mix the base machine's operations
(``model.make_state_machine``) with priorities, ordered keys, limited claims, pause and
``job_wait``.

A separate machine (a subclass of the base one), so the base machine's derandomized runs —
which the broken-variant tests rely on — explore what they explored before. Like the base
machine it keeps away from boundaries the contract leaves open: ``priority_aging`` ends on
half seconds (the clock and every schedule move in whole seconds), claims are compared as
sets, and the result of a wait that fails its job is compared without the job itself in
``failed_jobs``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from jobchain.contracts import JobsAcquire, JobsCreate, NewJob, StateAdapter, StateTx
from jobchain.contracts.scheduling import JobWait, PausedTypesList, TypesPause
from jobchain.entities import Job, JobStatus, RateLimit, Schedule, TypeLimits
from jobchain_conformance.model import MODEL_SETTINGS, RECENT, AdapterFactory, Runner, loop_runner
from jobchain_conformance.model import make_state_machine as make_base_machine
from jobchain_conformance.model_lifecycle import project

T = TypeVar("T")

LEASE = timedelta(seconds=30.5)
RATE_PER = timedelta(minutes=1)
SCHEDULING_MODEL_SETTINGS = settings(MODEL_SETTINGS, max_examples=15)
"""Half the base model's examples: its machine has more rules, and over a server backend on a
busy machine 30 examples came near the 120 s per-case timeout (86 s alone)."""


def _projected(jobs: Sequence[Job]) -> list[Any]:
    return sorted((job.id, tuple(project(job).items())) for job in jobs)


class SchedulingRules:
    """Rules for priorities, ordered keys, limited claims, pause and job_wait.

    Mixed in after the base machine, whose plumbing (``both``, ``agree``, ``reference_job``,
    ``pick``, ``runner``) it uses.
    """

    now: datetime
    types: tuple[str, str]
    chain_ids: list[str]
    job_ids: list[str]
    workers: tuple[str, ...]

    def both(self, op: Callable[[StateTx], Awaitable[T]]) -> tuple[Any, Any]:
        raise NotImplementedError

    def agree(self, label: str, outcomes: tuple[Any, Any], summary: Callable[[Any], Any]) -> Any:
        raise NotImplementedError

    def reference_job(self, index: int, statuses: Sequence[JobStatus]) -> Job | None:
        raise NotImplementedError

    def pick(self, items: Sequence[str], index: int) -> str:
        raise NotImplementedError

    @rule(
        type_index=st.sampled_from([0, 0, 1]),
        key=st.sampled_from([None, 0, 0, 1]),
        priority=st.sampled_from([-5, 0, 0, 5]),
        delay=st.sampled_from([None, None, 20]),
        blockers=st.sampled_from([(), (), (0,)]),
    )
    def create_scheduled(
        self, type_index: int, key: int | None, priority: int, delay: int | None, blockers: Sequence[int]
    ) -> None:
        blocker_ids = list(dict.fromkeys(self.pick(self.chain_ids, i) for i in blockers if self.chain_ids))
        job = NewJob(
            id=str(uuid.uuid4()),
            type_name=self.types[type_index],
            chain_type_name=self.types[type_index],
            input={"n": len(self.job_ids)},
            schedule=None if delay is None else Schedule(after=timedelta(seconds=delay)),
            blocker_chain_ids=blocker_ids,
            priority=priority,
            ordering_key=None if key is None else f"{self.types[0]}-key-{key}",
        )
        params = JobsCreate(jobs=[job], now=self.now)
        created = self.agree(
            "jobs_create (scheduling)",
            self.both(lambda tx: tx.jobs_create(params)),
            lambda results: [
                (r.deduplicated, project(r.job), sorted(r.incomplete_blocker_chain_ids), r.ordered_after)
                for r in results
            ],
        )
        for result in created or ():
            self.chain_ids.append(result.job.chain_id)
            self.job_ids.append(result.job.id)
        self.now += timedelta(seconds=1)

    @rule(
        type_index=st.integers(0, 2),
        limit=st.integers(1, 3),
        max_running=st.sampled_from([None, 1, 2]),
        rate=st.sampled_from([None, None, 1, 2]),
        aging=st.sampled_from([10.5, 60.5, 600.5]),
        worker_index=st.integers(0, 1),
    )
    def acquire_scheduled(
        self,
        type_index: int,
        limit: int,
        max_running: int | None,
        rate: int | None,
        aging: float,
        worker_index: int,
    ) -> None:
        type_names = list(self.types) if type_index == 2 else [self.types[type_index]]
        limits = {}
        if max_running is not None or rate is not None:
            rate_limit = None if rate is None else RateLimit(limit=rate, per=RATE_PER)
            limits[self.types[0]] = TypeLimits(max_running=max_running, rate_limit=rate_limit)
        params = JobsAcquire(
            type_names=type_names,
            worker_id=self.workers[worker_index],
            lease_for=LEASE,
            limit=limit,
            type_limits=limits,
            priority_aging=timedelta(seconds=aging),
            now=self.now,
        )
        self.agree(
            "jobs_acquire (scheduling)",
            self.both(lambda tx: tx.jobs_acquire(params)),
            lambda r: (_projected(r.jobs), r.has_more, r.held_back, r.retry_at),
        )

    @rule(type_index=st.integers(0, 1), paused=st.sampled_from([True, True, False]))
    def pause(self, type_index: int, paused: bool) -> None:
        params = TypesPause(type_names=[self.types[type_index]], paused=paused, now=self.now)
        self.agree(
            "types_pause",
            self.both(lambda tx: tx.types_pause(params)),
            lambda result: [(item.type_name, item.paused_at) for item in result],
        )

    @rule(
        index=RECENT,
        chains=st.sampled_from([(0,), (1,), (0, 1)]),
        runs_after_failed=st.booleans(),
        as_owner=st.sampled_from([True, True, True, False]),
    )
    def wait(self, index: int, chains: Sequence[int], runs_after_failed: bool, as_owner: bool) -> None:
        job = self.reference_job(index, [JobStatus.RUNNING])
        if job is None or job.status is not JobStatus.RUNNING or not self.chain_ids:
            return
        chain_ids = list(dict.fromkeys(self.pick(self.chain_ids, i) for i in chains))
        params = JobWait(
            job_id=job.id,
            worker_id=(job.leased_by or self.workers[0]) if as_owner else "worker-stranger",
            blocker_chain_ids=chain_ids,
            lease_generation=job.lease_generation,
            runs_after_failed=runs_after_failed,
            now=self.now,
        )
        self.agree(
            "job_wait",
            self.both(lambda tx: tx.job_wait(params)),
            lambda r: (
                project(r.job),
                sorted(r.incomplete_blocker_chain_ids),
                sorted(j.id for j in r.failed_jobs if j.id != job.id),
                sorted(j.id for j in r.unblocked_jobs),
            ),
        )

    @invariant()
    def paused_types_agree(self) -> None:
        mine = set(self.types)
        listed = self.both(lambda tx: tx.paused_types_list(PausedTypesList()))
        self.agree(
            "paused_types_list",
            listed,
            lambda result: [(item.type_name, item.paused_at) for item in result if item.type_name in mine],
        )


def make_scheduling_machine(
    adapter_factory: AdapterFactory,
    *,
    run: Runner | None = None,
    start: datetime | None = None,
    reference_factory: AdapterFactory | None = None,
) -> type[RuleBasedStateMachine]:
    """The base machine (``model.make_state_machine``, same arguments) plus :class:`SchedulingRules`."""
    base: Any = make_base_machine(adapter_factory, run=run, start=start, reference_factory=reference_factory)

    class SchedulingAgreesWithReference(base, SchedulingRules):  # type: ignore[misc]
        pass

    return SchedulingAgreesWithReference


class SchedulingModelTests:
    """The adapter agrees with the reference on random sequences with the scheduling controls.

    Reuses the suite's ``state_adapter`` (each example namespaces its types, keys and workers).
    Override ``scheduling_model_settings`` to explore more (``SCHEDULING_MODEL_SETTINGS`` by
    default: 15 examples).
    """

    @pytest.fixture
    def scheduling_model_settings(self) -> settings:
        return SCHEDULING_MODEL_SETTINGS

    # A fixed amount of work (examples x steps, each a round trip from a worker thread): on a
    # starved machine it has taken 100 s, near pytest-timeout's usual 120 s (used if installed).
    @pytest.mark.timeout(600)
    async def test_adapter_agrees_with_reference_on_scheduling(
        self, state_adapter: StateAdapter, now: datetime, scheduling_model_settings: settings
    ) -> None:
        loop = asyncio.get_running_loop()

        async def subject() -> StateAdapter:
            return state_adapter

        machine = make_scheduling_machine(subject, run=loop_runner(loop), start=now)
        await asyncio.to_thread(run_state_machine_as_test, machine, settings=scheduling_model_settings)
