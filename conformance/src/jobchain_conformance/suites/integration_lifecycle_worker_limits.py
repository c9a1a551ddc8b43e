"""Worker lifecycle cases: attempt limits, failing at once, abandoned attempts, handler deadlines."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from jobchain import FailJob, Job, JobStatus, JobTypes
from jobchain.contracts import JobReschedule, JobsAcquire
from jobchain.entities import Schedule
from jobchain.worker import AbortReason, Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import (
    PARKED,
    IntegrationEnv,
    IntegrationSuiteBase,
    Num,
    Total,
)

TINY_TIMEOUT = 0.05
"""A handler deadline the cases only ever see pass (they never assert how soon). Only attempts
that must time out run under it: a retry that must succeed runs under a processor without it."""


NO_DEADLINE = 3600.0
"""A handler deadline no case reaches: it overrides a type's tiny one for a retry that must succeed."""


def _is_failed(job: Job) -> bool:
    return job.status is JobStatus.FAILED


def _failed_attempt(attempt: int) -> Callable[[Job], bool]:
    """A job check: attempt ``attempt`` failed and the job is pending again (parked)."""

    def check(job: Job) -> bool:
        return (
            job.status is JobStatus.PENDING and job.attempt == attempt and job.last_attempt_error is not None
        )

    return check


def _always_failing(types: JobTypes, name: str, **define: Any) -> tuple[Any, list[int]]:
    job_type = types.define(name, input=Num, output=Total, entry=True, **define)
    attempts: list[int] = []

    async def handle(attempt: Attempt[Num, Total]) -> Completed:
        attempts.append(attempt.job.attempt)
        raise ValueError(f"{name} broke on attempt {attempt.job.attempt}")

    return (job_type, handle), attempts


class WorkerLimitTests(IntegrationSuiteBase):
    """Attempt limits end in ``failed`` (never ``pending``); deadlines fail an attempt."""

    async def test_exhausted_attempts_fail_the_job_with_its_error_history(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        (job_type, handle), attempts = _always_failing(types, "doomed", max_attempts=3)
        procs = Processors()
        procs.register(job_type, handle)
        client = env.client(types)
        started = await env.start(client, job_type, Num(n=1))
        worker = env.worker(client, procs)
        async with worker:
            failed = await env.wait_job(client, started.id, _is_failed, "the job to fail for good")

        assert attempts == [1, 2, 3]
        assert failed.attempt == 3
        assert failed.attempts_used == 3
        assert failed.failed_at is not None
        assert failed.leased_by is None
        assert failed.last_attempt_error is not None
        assert "doomed broke on attempt 3" in failed.last_attempt_error
        assert [e.attempt for e in failed.attempt_errors] == [1, 2, 3]
        assert {e.error_type for e in failed.attempt_errors} == {"ValueError"}
        assert {e.worker_id for e in failed.attempt_errors} == {worker.worker_id}
        assert failed.attempt_errors[-1].message == "doomed broke on attempt 3"
        assert failed.attempt_errors[-1].traceback is not None
        assert "ValueError" in failed.attempt_errors[-1].traceback
        chain = await env.chain(client, started.id)
        assert chain.status is JobStatus.FAILED

    async def test_max_attempts_resolve_processor_then_slice_then_type_then_worker(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        registry = JobTypes(max_attempts=3)
        by_processor, seen_processor = _always_failing(types, "by_processor", max_attempts=4)
        by_slice, seen_slice = _always_failing(types, "by_slice", max_attempts=4)
        by_type, seen_type = _always_failing(types, "by_type", max_attempts=2)
        by_registry, seen_registry = _always_failing(registry, "by_registry")
        by_worker, seen_worker = _always_failing(types, "by_worker")
        own = Processors()
        own.register(*by_processor, max_attempts=1)
        sliced = Processors(max_attempts=2)
        sliced.register(*by_slice)
        plain = Processors()
        for job_type, handle in (by_type, by_registry, by_worker):
            plain.register(job_type, handle)
        client = env.client(JobTypes.merge(types, registry))
        chains = [
            await env.start(client, job_type, Num(n=0))
            for job_type, _ in (by_processor, by_slice, by_type, by_registry, by_worker)
        ]
        async with env.worker(client, [own, sliced, plain], max_attempts=4):
            for chain in chains:
                await env.wait_job(client, chain.id, _is_failed, f"chain {chain.id} to fail")

        assert len(seen_processor) == 1
        assert len(seen_slice) == 2
        assert len(seen_type) == 2
        assert len(seen_registry) == 3
        assert len(seen_worker) == 4

    async def test_unlimited_attempts_keep_retrying(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        job_type = types.define("stubborn", input=Num, output=Total, entry=True, max_attempts=None)
        procs = Processors()

        @procs.handler(job_type)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            if attempt.job.attempt <= 3:
                raise ValueError("not yet")
            return await attempt.complete(Total(total=attempt.job.attempt))

        client = env.client(types)
        async with env.worker(client, procs, max_attempts=1):
            started = await env.start(client, job_type, Num(n=0))
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"total": 4}
        job = await env.job(client, started.id)
        assert [e.attempt for e in job.attempt_errors] == [1, 2, 3]  # kept after the success
        assert job.last_attempt_error is None

    async def test_fail_job_fails_at_once(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        job_type = types.define("refuses", input=Num, output=Total, entry=True)
        procs = Processors()
        calls: list[int] = []

        @procs.handler(job_type)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            calls.append(attempt.job.attempt)
            raise FailJob("input can never work")

        client = env.client(types)
        started = await env.start(client, job_type, Num(n=0))
        async with env.worker(client, procs):
            failed = await env.wait_job(client, started.id, _is_failed, "the job to fail")
        assert calls == [1]
        assert failed.attempt == 1
        assert [(e.error_type, e.message) for e in failed.attempt_errors] == [
            ("FailJob", "input can never work")
        ]
        assert failed.last_attempt_error is not None
        assert "input can never work" in failed.last_attempt_error

    async def test_fail_on_types_fail_at_once_and_others_retry(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        strict = types.define("strict", input=Num, output=Total, entry=True, fail_on=(KeyError,))
        procs = Processors()
        calls: list[tuple[int, int]] = []

        @procs.handler(strict)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            calls.append((attempt.input.n, attempt.job.attempt))
            if attempt.input.n == 0:
                raise KeyError("missing")  # listed: fails at once
            if attempt.job.attempt == 1:
                raise LookupError("transient")  # KeyError's base class: retried
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        doomed = await env.start(client, strict, Num(n=0))
        retried = await env.start(client, strict, Num(n=5))
        async with env.worker(client, procs):
            failed = await env.wait_job(client, doomed.id, _is_failed, "the KeyError job to fail")
            chain = await env.await_chain(client, retried.id)
        assert chain.output == {"total": 5}
        assert failed.attempt == 1
        assert failed.attempt_errors[-1].error_type == "KeyError"
        assert sorted(calls) == [(0, 1), (5, 1), (5, 2)]

    async def test_a_job_claimed_past_its_limit_fails_without_running(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        job_type = types.define("once", input=Num, output=Total, entry=True, max_attempts=1)
        procs = Processors()
        calls: list[int] = []

        @procs.handler(job_type)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            calls.append(attempt.job.attempt)
            return await attempt.complete(Total(total=1))

        client = env.client(types)
        started = await env.start(client, job_type, Num(n=0))
        # A worker claims the job and vanishes: its one attempt is abandoned.
        async with env.state.transaction() as tx:
            acquired = await tx.jobs_acquire(
                JobsAcquire(type_names=["once"], worker_id="ghost", lease_for=timedelta(seconds=30), limit=1)
            )
            assert [job.id for job in acquired.jobs] == [started.id]
            await tx.job_reschedule(
                JobReschedule(
                    job_id=started.id, schedule=Schedule(after=timedelta(0)), error="abandoned by ghost"
                )
            )
        async with env.worker(client, procs):
            failed = await env.wait_job(client, started.id, _is_failed, "the job to fail unrun")
        assert calls == []
        assert failed.attempt == 2
        assert failed.attempt_errors[-1].error_type == "AttemptsExhausted"

    async def test_a_timed_out_handler_aborts_with_reason_timeout_and_is_retried(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        job_type = types.define("slow", input=Num, output=Total, entry=True, timeout=TINY_TIMEOUT)
        reasons: list[AbortReason | None] = []
        # The type's tiny deadline governs the first worker; the retry runs under a second
        # worker whose processor sets a deadline no attempt reaches (a processor's deadline
        # wins over its type's), so a slow machine cannot time the retry out too.
        timed = Processors()

        @timed.handler(job_type)
        async def wait_out(attempt: Attempt[Num, Total]) -> Completed:
            async with asyncio.timeout(env.wait_timeout):
                reasons.append(await attempt.signal.wait())
            # Carries on past its deadline: the completion is refused.
            return await attempt.complete(Total(total=-1))

        patient = Processors()

        @patient.handler(job_type, timeout=NO_DEADLINE)
        async def finish(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.job.attempt))

        client = env.client(types)
        started = await env.start(client, job_type, Num(n=0))
        failed = await env.run_until_failed(client, timed, started.id)
        assert reasons == [AbortReason.TIMEOUT]
        assert [(e.attempt, e.error_type) for e in failed.attempt_errors] == [(1, "JobTimeoutError")]
        chain = await env.retry_now(client, patient, started.id, started.id)
        assert chain.output == {"total": 2}
        job = await env.job(client, started.id)
        assert [(e.attempt, e.error_type) for e in job.attempt_errors] == [(1, "JobTimeoutError")]

    async def test_a_handler_that_ignores_its_deadline_is_cancelled(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        job_type = types.define("stuck", input=Num, output=Total, entry=True)
        procs = Processors()
        cancelled = asyncio.Event()

        @procs.handler(job_type, timeout=TINY_TIMEOUT, max_attempts=2)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            try:
                await asyncio.sleep(env.wait_timeout * 2)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return await attempt.complete(Total(total=0))

        client = env.client(types)
        started = await env.start(client, job_type, Num(n=0))
        async with env.worker(client, procs):
            failed = await env.wait_job(client, started.id, _is_failed, "both attempts to time out")
        assert cancelled.is_set()
        # Timed-out attempts count toward max_attempts.
        assert [(e.attempt, e.error_type) for e in failed.attempt_errors] == [
            (1, "JobTimeoutError"),
            (2, "JobTimeoutError"),
        ]

    async def test_a_sync_handler_past_its_deadline_fails_its_attempt(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        job_type = types.define("blocking", input=Num, output=Total, entry=True)
        release = threading.Event()

        def block(attempt: Attempt[Num, Total]) -> Total:
            release.wait(env.wait_timeout)  # Python cannot stop this thread
            return Total(total=-1)  # ignored: the attempt already failed

        def finish(attempt: Attempt[Num, Total]) -> Total:
            return Total(total=attempt.job.attempt)

        # The first worker's processor has the tiny deadline; the retry runs under a second
        # worker whose processor has none, so a slow machine cannot time the retry out too.
        timed = Processors()
        timed.register(job_type, block, timeout=TINY_TIMEOUT)
        untimed = Processors()
        untimed.register(job_type, finish)
        client = env.client(types)
        started = await env.start(client, job_type, Num(n=0))
        try:
            async with env.worker(client, timed, retry=PARKED):
                # The attempt fails while its thread still blocks: the deadline does not wait.
                failed = await env.wait_job(
                    client, started.id, _failed_attempt(1), "the blocked attempt to time out"
                )
                release.set()  # the thread may end now; the worker stops without waiting on it
        finally:
            release.set()
        assert [(e.attempt, e.error_type) for e in failed.attempt_errors] == [(1, "JobTimeoutError")]
        chain = await env.retry_now(client, untimed, started.id, started.id)
        assert chain.output == {"total": 2}
        job = await env.job(client, started.id)
        assert [(e.attempt, e.error_type) for e in job.attempt_errors] == [(1, "JobTimeoutError")]
