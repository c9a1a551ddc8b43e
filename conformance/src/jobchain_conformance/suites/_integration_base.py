"""Fixtures and helpers of the integration suite: client + worker over one (state, notify) pair.

Adopters subclass ``IntegrationSuite`` and override two async fixtures::

    class TestMyPair(IntegrationSuite):
        @pytest.fixture
        async def state_adapter(self): ...   # a fresh, empty, migrated adapter
        @pytest.fixture
        async def notify_adapter(self): ...  # a notify adapter, or yield None (workers poll)

Every wait is bounded by ``wait_timeout``; workers use short polls, zero retry backoff and
leases a starved machine keeps (30 s, renewed every 5 s): a case never depends on a lease
holding, or running out, in wall-clock time. Where a lease must lapse, a deadline pass or
a rate window roll, the case drives a clock of its own (:meth:`IntegrationEnv.clock`):
every client and worker built with it reads time from it, through
:func:`jobchain.testing.clocked_state`, and the case moves it. Class attributes an adopter
may change are listed on :class:`IntegrationSuiteBase`; none asserts on wall-clock speed.

Liveness: every worker built here is watched (:mod:`._worker_errors`). A case fails at
teardown if one of its workers reported a loop error (a heartbeat, reap, claim, wake-up
subscription, schedule tick or prune that raised) the case did not declare with
:meth:`IntegrationEnv.expect_worker_errors`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from jobchain import Chain, ChainStart, Client, Job, JobStatus, JobType, JobTypes
from jobchain.contracts import Capability, NotifyAdapter, Observer, StateAdapter
from jobchain.entities import Deduplication, Schedule
from jobchain.testing import FrozenClock, clocked_state
from jobchain.worker import Backoff, LeaseConfig, Processors, Worker
from jobchain_conformance.capabilities import skip_unless
from jobchain_conformance.suites._base import PoisonTransaction
from jobchain_conformance.suites._worker_errors import WorkerErrorWatch

T = TypeVar("T")

# ---------------------------------------------------------------- payload types shared by the cases


@dataclass
class Num:
    """A job input carrying one number."""

    n: int


@dataclass
class Total:
    """A job output carrying one number."""

    total: int


@dataclass
class Tag:
    """An input or output carrying a label (used to tell attempts and workers apart)."""

    tag: str


def recorded_error(job: Job) -> str:
    """The error recorded on a job by its last failed attempt (which must exist)."""
    assert job.last_attempt_error is not None, f"job {job.id} has no recorded error"
    return job.last_attempt_error


ZERO_BACKOFF = Backoff(initial=timedelta(0), maximum=timedelta(0))
"""Retry at once: failing cases retry without waiting."""

PARKED = Backoff(initial=timedelta(hours=1), maximum=timedelta(hours=1))
"""Retry in an hour: a failed job stays pending so a case can inspect it, then trigger it."""

FAST_RECOVERY = Backoff(initial=timedelta(milliseconds=10), maximum=timedelta(milliseconds=50))
"""Worker-loop recovery backoff for cases that inject state failures."""


class IntegrationEnv:
    """Builds clients and workers over the pair under test and waits for outcomes (bounded)."""

    def __init__(
        self,
        state: StateAdapter,
        notify: NotifyAdapter | None,
        *,
        poll_interval: float,
        lease: LeaseConfig,
        renewing_lease: LeaseConfig,
        wait_timeout: float,
        heartbeat_interval: float = 5.0,
    ) -> None:
        self.state = state
        self.notify = notify
        self.poll_interval = poll_interval
        self.lease = lease
        self.renewing_lease = renewing_lease
        self.heartbeat_interval = heartbeat_interval
        self.wait_timeout = wait_timeout
        self._workers: list[Worker] = []
        self.worker_errors = WorkerErrorWatch()
        """The ``worker_error`` events of every worker built here (see :meth:`check_workers`)."""

    def clock(self) -> FrozenClock:
        """A clock for one case: it stands still until the case moves it.

        Pass it to :meth:`client` for every client whose workers or reads must see it: leases,
        renewals, reaps, heartbeats, rate windows and schedules then follow the clock, not the
        machine, so a lease runs out exactly when the case advances past it.
        """
        return FrozenClock()

    # ------------------------------------------------------------ building

    def client(
        self,
        job_types: JobTypes,
        *,
        state: StateAdapter | None = None,
        notify: NotifyAdapter | str | None = "pair",
        observers: Sequence[Observer] = (),
        clock: FrozenClock | None = None,
    ) -> Client:
        """A client over the pair (or over ``state``/``notify`` wrappers of it).

        With ``clock``, every state operation of the client and of its workers takes its time
        from that clock (see :meth:`clock`). Never close it in a case: closing a client
        closes the adapters, which the fixtures own.
        """
        chosen_notify = self.notify if notify == "pair" else notify
        assert not isinstance(chosen_notify, str)
        chosen_state = state or self.state
        if clock is not None:
            chosen_state = clocked_state(chosen_state, clock)
        return Client(chosen_state, chosen_notify, job_types, observers=observers, clock=clock)

    def worker(self, client: Client, processors: Processors | Sequence[Processors], **options: Any) -> Worker:
        """An unstarted worker with short poll, short lease and zero backoff unless overridden.

        Use it as ``async with env.worker(...)``; workers still running at teardown are stopped.
        """
        options.setdefault("poll_interval", self.poll_interval)
        options.setdefault("lease", self.lease)
        # Alive for 30 s of silence (the library's default is 6 s): a peer must never presume
        # a live but starved worker dead and release its jobs, which would run them twice.
        options.setdefault("heartbeat_interval", self.heartbeat_interval)
        options.setdefault("missed_heartbeats", 6)
        options.setdefault("retry", ZERO_BACKOFF)
        options.setdefault("recovery", FAST_RECOVERY)
        options.setdefault("shutdown_timeout", min(self.wait_timeout, 10.0))
        worker = Worker(client, processors, **options)
        self._workers.append(worker)
        # The worker emits to its client's observers: the watch joins them (once per client).
        if not any(o is self.worker_errors for o in client.observers):
            client.observers = (*client.observers, self.worker_errors)
        self.worker_errors.watch(worker.worker_id)
        return worker

    def expect_worker_errors(self, *operations: str, worker: Worker | None = None) -> None:
        """Declare the loop errors this case provokes on purpose, so they do not fail it.

        ``operations`` are the names the worker reports (``worker_heartbeat``,
        ``jobs_reap_expired``, ``claim_loop``, ``listen_job_scheduled``, ``periodic``,
        ``chains_prune``); none means all of them. ``worker`` limits the declaration to one
        worker (default: every worker of the case). Any other loop error fails the case at
        teardown.
        """
        self.worker_errors.expect(operations, worker.worker_id if worker is not None else None)

    def check_workers(self) -> None:
        """Fail the case if a worker built here reported a loop error nobody declared."""
        failure = self.worker_errors.failure()
        if failure is not None:
            pytest.fail(failure, pytrace=False)

    async def stop_all(self) -> None:
        """Stop every worker built here (stopping a stopped or unstarted worker is a no-op)."""
        for worker in self._workers:
            await worker.stop()

    # ------------------------------------------------------------ acting

    async def start(
        self,
        client: Client,
        job_type: JobType[Any, Any],
        input: Any,
        *,
        id: str | None = None,
        deduplication: Deduplication | None = None,
        schedule: Schedule | None = None,
        blockers: Sequence[Chain | str] = (),
    ) -> Chain:
        """Start one chain in its own transaction and return it (the existing one if deduplicated)."""
        async with client.transaction() as tx:
            started = await client.start_chain(
                tx,
                job_type,
                input,
                id=id,
                deduplication=deduplication,
                schedule=schedule,
                blockers=blockers,
            )
        return started.chain

    async def start_many(self, client: Client, starts: Sequence[ChainStart[Any]]) -> list[Chain]:
        """Start several chains in one transaction."""
        async with client.transaction() as tx:
            started = await client.start_chains(tx, starts)
        return [s.chain for s in started]

    async def trigger(self, client: Client, job_id: str) -> Job:
        """Make a scheduled job eligible now."""
        async with client.transaction() as tx:
            return await client.trigger_job(tx, job_id)

    # ------------------------------------------------------------ reading

    async def job(self, client: Client, job_id: str) -> Job:
        """The job, which must exist."""
        job = await client.get_job(job_id)
        assert job is not None, f"job {job_id} does not exist"
        return job

    async def chain(self, client: Client, chain_id: str) -> Chain:
        """The chain, which must exist."""
        chain = await client.get_chain(chain_id)
        assert chain is not None, f"chain {chain_id} does not exist"
        return chain

    async def chain_jobs(self, client: Client, chain_id: str) -> list[Job]:
        """Every job of a chain in chain order."""
        page = await client.list_chain_jobs(chain_id, limit=500)
        return page.items

    async def chains_of_type(self, client: Client, job_type: JobType[Any, Any]) -> list[Chain]:
        """Every chain of a type, oldest first."""
        page = await client.list_chains(type_names=[job_type], order="asc", limit=500)
        return page.items

    # ------------------------------------------------------------ waiting (bounded)

    async def await_chain(self, client: Client, chain_id: str) -> Chain:
        """Wait for a chain to complete (notification or short poll)."""
        return await client.await_chain(chain_id, timeout=self.wait_timeout, poll_interval=self.poll_interval)

    async def await_chains(self, client: Client, chain_ids: Sequence[str]) -> list[Chain]:
        """Wait for every chain to complete; results keep the input order."""
        return list(await asyncio.gather(*(self.await_chain(client, c) for c in chain_ids)))

    async def wait_for(self, probe: Callable[[], Awaitable[T | None]], what: str) -> T:
        """Re-run ``probe`` every poll interval until it returns something truthy; fail after the bound."""
        try:
            async with asyncio.timeout(self.wait_timeout):
                while True:
                    value = await probe()
                    if value:
                        return value
                    await asyncio.sleep(self.poll_interval / 2)
        except TimeoutError:
            pytest.fail(f"timed out after {self.wait_timeout:g} s waiting for {what}")

    async def wait_job(self, client: Client, job_id: str, check: Callable[[Job], bool], what: str) -> Job:
        """Wait until the job satisfies ``check`` and return it."""

        async def probe() -> Job | None:
            job = await client.get_job(job_id)
            return job if job is not None and check(job) else None

        return await self.wait_for(probe, what)

    async def wait_event(self, event: asyncio.Event, what: str) -> None:
        """Wait for an event set by a handler or middleware."""
        try:
            async with asyncio.timeout(self.wait_timeout):
                await event.wait()
        except TimeoutError:
            pytest.fail(f"timed out after {self.wait_timeout:g} s waiting for {what}")

    async def run_until_failed(
        self,
        client: Client,
        processors: Processors | Sequence[Processors],
        job_id: str,
        *,
        attempts: int = 1,
        **options: Any,
    ) -> Job:
        """Run a worker whose retries are an hour away until ``job_id`` failed ``attempts`` times.

        The failed job is then parked (pending, an hour ahead) for the case to inspect;
        :meth:`retry_now` runs it again.
        """
        options.setdefault("retry", PARKED)

        def failed(job: Job) -> bool:
            return (
                job.status is JobStatus.PENDING
                and job.attempt >= attempts
                and job.last_attempt_error is not None
            )

        async with self.worker(client, processors, **options):
            return await self.wait_job(client, job_id, failed, f"job {job_id} to fail {attempts} time(s)")

    async def retry_now(
        self, client: Client, processors: Processors | Sequence[Processors], job_id: str, chain_id: str
    ) -> Chain:
        """Trigger a parked job, run a worker and wait for ``chain_id`` to complete."""
        async with self.worker(client, processors):
            await self.trigger(client, job_id)
            return await self.await_chain(client, chain_id)

    async def run_until_idle(
        self, client: Client, processors: Processors | Sequence[Processors], **options: Any
    ) -> None:
        """Run one worker until none of its types has a running job or a pending job due now."""
        worker = self.worker(client, processors, **options)
        slices = [processors] if isinstance(processors, Processors) else list(processors)
        names = [p.job_type.name for piece in slices for p in piece.processors()]

        async def idle() -> bool:
            # One listing, so running and pending are read from the same snapshot.
            open_jobs = await client.list_jobs(
                type_names=names, statuses=[JobStatus.RUNNING, JobStatus.PENDING], limit=500
            )
            # A second of slack: a store's clock or rounding may put "now" a hair ahead.
            now = client.clock() if client.clock is not None else datetime.now(UTC)
            soon = now + timedelta(seconds=1)
            return not any(
                job.status is JobStatus.RUNNING or job.scheduled_at <= soon for job in open_jobs.items
            )

        async with worker:
            await self.wait_for(idle, "the worker to run out of due jobs")


class IntegrationSuiteBase:
    """Abstract fixtures of the integration suite (see the module docstring)."""

    pytestmark = [pytest.mark.integration]

    poll_interval: float = 0.05
    """Worker and await poll interval (seconds): the fallback when notifications are missing."""
    lease: LeaseConfig = LeaseConfig(duration=timedelta(seconds=30), renew_every=timedelta(seconds=5))
    """Lease of every worker unless a case says otherwise: long enough that a starved machine
    (an event loop that misses renewals for seconds) never loses a job it is running."""
    renewing_lease: LeaseConfig = LeaseConfig(
        duration=timedelta(seconds=30), renew_every=timedelta(milliseconds=50)
    )
    """Lease of the cases that watch renewals or let a lease lapse: renewed often, so a case
    sees a renewal soon, and still 30 s long, so it lapses only when the case's clock
    (:meth:`IntegrationEnv.clock`) moves past it."""
    heartbeat_interval: float = 5.0
    """Worker heartbeat interval (seconds) unless a case says otherwise; a worker silent for six
    of them (30 s) is presumed dead."""
    wait_timeout: float = 30.0
    """Upper bound of every wait; a passing case takes a small fraction of it."""

    @pytest.fixture
    async def state_adapter(self) -> AsyncIterator[StateAdapter]:
        raise NotImplementedError("override state_adapter in your Test… class")
        yield  # pragma: no cover

    @pytest.fixture
    async def notify_adapter(self) -> AsyncIterator[NotifyAdapter | None]:
        raise NotImplementedError("override notify_adapter in your Test… class (yield None to poll)")
        yield  # pragma: no cover

    @pytest.fixture
    def poison_transaction(self) -> PoisonTransaction | None:
        """Optionally override: make a state transaction fail every later statement (state suite hook)."""
        return None

    @pytest.fixture(autouse=True)
    def _skip_on_capabilities(self, request: pytest.FixtureRequest) -> None:
        if request.node.get_closest_marker("requires") is None:
            return
        state: StateAdapter = request.getfixturevalue("state_adapter")
        notify: NotifyAdapter | None = request.getfixturevalue("notify_adapter")
        declared: set[Capability] = set(state.capabilities)
        if notify is not None:
            declared |= set(notify.capabilities)
        skip_unless(request, declared)

    @pytest.fixture
    async def env(
        self, state_adapter: StateAdapter, notify_adapter: NotifyAdapter | None
    ) -> AsyncIterator[IntegrationEnv]:
        env = IntegrationEnv(
            state_adapter,
            notify_adapter,
            poll_interval=self.poll_interval,
            lease=self.lease,
            renewing_lease=self.renewing_lease,
            wait_timeout=self.wait_timeout,
            heartbeat_interval=self.heartbeat_interval,
        )
        try:
            yield env
        finally:
            await env.stop_all()
        # Only after every worker stopped (a stop's last heartbeat counts too), and not when
        # stopping failed (that error says more).
        env.check_workers()
