"""Retries and backoff, and the typed errors a misbehaving handler leaves on its job."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from jobchain import Job, JobStatus, JobTypes, RescheduleJobError, Schedule
from jobchain.worker import Attempt, Backoff, Completed, Continue, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Tag, Total, recorded_error


class Unusual(BaseException):
    """Not an Exception: handlers may raise it anyway, and it must not kill the worker."""


def _gap(job: Job) -> timedelta:
    """How far after the failure the retry was scheduled."""
    assert job.last_attempt_at is not None
    return job.scheduled_at - job.last_attempt_at


def _failed_attempt(attempt: int) -> Callable[[Job], bool]:
    """A job check: attempt ``attempt`` failed and the job waits for its retry."""

    def check(job: Job) -> bool:
        return (
            job.status is JobStatus.PENDING and job.attempt == attempt and job.last_attempt_error is not None
        )

    return check


def _close(env: IntegrationEnv, actual: timedelta, expected: timedelta) -> bool:
    return abs(actual - expected) <= env.state.time_precision * 2


def _hours(hours: int) -> Backoff:
    return Backoff(initial=timedelta(hours=hours), maximum=timedelta(hours=hours))


def _flaky(types: JobTypes, failures: int, **register: Any) -> tuple[Processors, list[Job]]:
    """Type ``flaky`` fails its first ``failures`` attempts, then completes; records every claim."""
    flaky = types.define("flaky", input=Num, output=Total, entry=True)
    procs = Processors()
    seen: list[Job] = []

    async def handle(attempt: Attempt[Num, Total]) -> Completed:
        seen.append(attempt.job)
        if attempt.job.attempt <= failures:
            raise ValueError(f"disk full on attempt {attempt.job.attempt}")
        return await attempt.complete(Total(total=attempt.job.attempt))

    procs.register(flaky, handle, **register)
    return procs, seen


class RetryTests:
    """A failed attempt is rescheduled with backoff and its error recorded; success clears it."""

    async def test_failures_are_retried_until_success(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, seen = _flaky(types, failures=2)
        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, types.get("flaky"), Num(n=1))
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"total": 3}
        assert [j.attempt for j in seen] == [1, 2, 3]
        assert seen[0].last_attempt_error is None
        assert "disk full on attempt 1" in recorded_error(seen[1])
        assert "disk full on attempt 2" in recorded_error(seen[2])
        job = await env.job(client, started.id)
        assert job.attempt == 3
        assert job.last_attempt_error is None
        assert job.last_attempt_at is not None

    async def test_a_failing_continuation_is_retried_alone(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        procs = Processors()
        calls: list[tuple[str, int]] = []

        @procs.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            calls.append(("head", attempt.job.attempt))
            return await attempt.continue_with(tail, attempt.input)

        @procs.handler(tail)
        async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
            calls.append(("tail", attempt.job.attempt))
            if attempt.job.attempt == 1:
                raise ValueError("tail failed once")
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, head, Num(n=6))
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"total": 6}
        assert calls == [("head", 1), ("tail", 1), ("tail", 2)]
        jobs = await env.chain_jobs(client, started.id)
        assert [(j.type_name, j.attempt) for j in jobs] == [("head", 1), ("tail", 2)]

    async def test_the_error_is_recorded_on_the_pending_job(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, _ = _flaky(types, failures=1)
        client = env.client(types)
        started = await env.start(client, types.get("flaky"), Num(n=1))
        failed = await env.run_until_failed(client, procs, started.id)

        assert failed.status is JobStatus.PENDING
        assert failed.attempt == 1
        assert failed.leased_by is None
        assert failed.last_attempt_error is not None
        assert "ValueError" in failed.last_attempt_error
        assert "disk full on attempt 1" in failed.last_attempt_error
        assert _close(env, _gap(failed), timedelta(hours=1))

        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"total": 2}
        assert (await env.job(client, started.id)).last_attempt_error is None

    async def test_backoff_grows_exponentially_up_to_its_cap(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        backoff = Backoff(initial=timedelta(seconds=20), multiplier=2, maximum=timedelta(seconds=50))
        procs, seen = _flaky(types, failures=4)
        # Retries come due on the case's frozen clock only: each is measured in the store
        # (scheduled_at - last_attempt_at), then the case moves the clock to it.
        clock = env.clock()
        client = env.client(types, clock=clock)
        expected = [timedelta(seconds=s) for s in (20, 40, 50, 50)]
        gaps: list[timedelta] = []
        async with env.worker(client, procs, retry=backoff):
            started = await env.start(client, types.get("flaky"), Num(n=1))
            for attempt, want in enumerate(expected, start=1):
                failed = await env.wait_job(
                    client, started.id, _failed_attempt(attempt), f"attempt {attempt} to fail"
                )
                gaps.append(_gap(failed))
                assert _close(env, gaps[-1], want), (gaps, expected)
                # Not due before its backoff: no attempt started while the clock stood still.
                assert len(seen) == attempt
                clock.set(failed.scheduled_at)
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"total": 5}
        assert [job.attempt for job in seen] == [1, 2, 3, 4, 5]
        # Each retry was claimed at (never before) the time its backoff scheduled it.
        for job in seen[1:]:
            assert job.attempt_started_at is not None
            assert job.attempt_started_at >= job.scheduled_at, job

    async def test_retry_settings_resolve_processor_then_type_then_registry_then_worker(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        slice_defaults = JobTypes(retry=_hours(3))
        by_processor = types.define("by_processor", input=None, output=None, entry=True, retry=_hours(2))
        by_type = types.define("by_type", input=None, output=None, entry=True, retry=_hours(2))
        by_registry = slice_defaults.define("by_registry", input=None, output=None, entry=True)
        by_worker = types.define("by_worker", input=None, output=None, entry=True)
        merged = JobTypes.merge(types, slice_defaults)
        procs = Processors()

        async def fail(attempt: Attempt[None, None]) -> Completed:
            raise RuntimeError("always")

        procs.register(by_processor, fail, retry=_hours(1))
        for job_type in (by_type, by_registry, by_worker):
            procs.register(job_type, fail)
        client = env.client(merged)
        every = (by_processor, by_type, by_registry, by_worker)
        chains = {t.name: await env.start(client, t, None) for t in every}
        async with env.worker(client, procs, retry=_hours(4), concurrency=4):
            failed = {
                name: await env.wait_job(
                    client, chain.id, lambda j: j.attempt == 1 and j.status is JobStatus.PENDING, name
                )
                for name, chain in chains.items()
            }
        gaps = {name: _gap(job) for name, job in failed.items()}
        want = {"by_processor": 1, "by_type": 2, "by_registry": 3, "by_worker": 4}
        for name, h in want.items():
            assert _close(env, gaps[name], timedelta(hours=h)), gaps

    async def test_reschedule_job_error_sets_the_exact_schedule_and_reason(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        poll = types.define("poll", input=None, output=Tag, entry=True)
        procs = Processors()

        @procs.handler(poll)
        async def do_poll(attempt: Attempt[None, Tag]) -> Completed:
            if attempt.job.attempt == 1:
                raise RescheduleJobError(Schedule(after=timedelta(minutes=30)), "upstream not ready")
            return await attempt.complete(Tag(tag="ready"))

        client = env.client(types)
        started = await env.start(client, poll, None)
        # Zero backoff would retry at once; the handler's own schedule must win.
        failed = await env.run_until_failed(
            client, procs, started.id, retry=Backoff(initial=timedelta(0), maximum=timedelta(0))
        )
        assert failed.last_attempt_error == "upstream not ready"
        assert _close(env, _gap(failed), timedelta(minutes=30))
        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"tag": "ready"}

    async def test_reschedule_without_a_reason_records_a_readable_one(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        poll = types.define("poll", input=None, output=None, entry=True)
        procs = Processors()

        @procs.handler(poll)
        async def do_poll(attempt: Attempt[None, None]) -> Completed:
            raise RescheduleJobError(Schedule(after=timedelta(minutes=30)))

        client = env.client(types)
        started = await env.start(client, poll, None)
        failed = await env.run_until_failed(client, procs, started.id)
        assert failed.last_attempt_error
        assert failed.last_attempt_error not in ("None", "undefined")

    async def test_sync_handler_failures_are_retried(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        flaky = types.define("flaky", input=Num, output=Total, entry=True)
        procs = Processors()

        @procs.handler(flaky)
        def handle(attempt: Attempt[Num, Total]) -> Total:
            if attempt.job.attempt == 1:
                raise OSError("network down")
            return Total(total=attempt.job.attempt)

        client = env.client(types)
        started = await env.start(client, flaky, Num(n=1))
        failed = await env.run_until_failed(client, procs, started.id)
        assert "network down" in recorded_error(failed)
        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"total": 2}


class HandlerErrorTests:
    """Bad handler behaviour fails the attempt with a typed error on the job, then retries."""

    @pytest.mark.parametrize("how", ["immediately", "after-atomic-prepare", "after-staged-prepare", "sync"])
    async def test_returning_without_completing_is_a_typed_error_and_retried(
        self, env: IntegrationEnv, how: str
    ) -> None:
        types = JobTypes()
        lazy = types.define("lazy", input=None, output=Tag, entry=True)
        procs = Processors()

        async def handle(attempt: Attempt[None, Tag]) -> Any:
            if attempt.job.attempt > 1:
                return await attempt.complete(Tag(tag="done"))
            if how == "after-atomic-prepare":
                await attempt.prepare("atomic")
            elif how == "after-staged-prepare":
                await attempt.prepare("staged")
            return None

        def handle_sync(attempt: Attempt[None, Tag]) -> Any:
            return Tag(tag="done") if attempt.job.attempt > 1 else None

        procs.register(lazy, handle_sync if how == "sync" else handle)
        client = env.client(types)
        started = await env.start(client, lazy, None)
        failed = await env.run_until_failed(client, procs, started.id)
        assert failed.last_attempt_error is not None
        expected = "JobTypeValidationError" if how == "sync" else "HandlerDidNotCompleteError"
        assert expected in failed.last_attempt_error
        assert failed.leased_by is None
        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"tag": "done"}

    @pytest.mark.parametrize("style", ["async", "sync"])
    async def test_wrong_output_shape_is_a_validation_error_and_retried(
        self, env: IntegrationEnv, style: str
    ) -> None:
        types = JobTypes()
        shaped = types.define("shaped", input=None, output=Total, entry=True)
        procs = Processors()
        wrong: Any = {"total": "not a number"}

        async def handle(attempt: Attempt[None, Total]) -> Completed:
            return await attempt.complete(wrong if attempt.job.attempt == 1 else Total(total=1))

        def handle_sync(attempt: Attempt[None, Total]) -> Any:
            return wrong if attempt.job.attempt == 1 else Total(total=1)

        procs.register(shaped, handle if style == "async" else handle_sync)
        client = env.client(types)
        started = await env.start(client, shaped, None)
        failed = await env.run_until_failed(client, procs, started.id)
        assert failed.last_attempt_error is not None
        assert "JobTypeValidationError" in failed.last_attempt_error
        assert "invalid_output" in failed.last_attempt_error
        assert failed.output is None
        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"total": 1}

    @pytest.mark.parametrize("style", ["async", "sync"])
    async def test_continuing_with_a_type_not_allowed_is_an_error_and_nothing_is_written(
        self, env: IntegrationEnv, style: str
    ) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["allowed"])
        allowed = types.define("allowed", input=Num, output=Total)
        forbidden = types.define("forbidden", input=Num, output=Total)
        procs = Processors()

        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            target = forbidden if attempt.job.attempt == 1 else allowed
            return await attempt.continue_with(target, attempt.input)

        def do_head_sync(attempt: Attempt[Num, None]) -> Continue:
            return Continue(forbidden if attempt.job.attempt == 1 else allowed, attempt.input)

        procs.register(head, do_head if style == "async" else do_head_sync)

        @procs.handler(allowed)
        async def do_allowed(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        @procs.handler(forbidden)
        async def do_forbidden(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=-1))

        client = env.client(types)
        started = await env.start(client, head, Num(n=8))
        failed = await env.run_until_failed(client, procs, started.id)
        assert failed.last_attempt_error is not None
        assert "invalid_continuation" in failed.last_attempt_error
        assert len(await env.chain_jobs(client, started.id)) == 1
        assert not (await client.list_jobs(type_names=[forbidden])).items

        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"total": 8}
        assert [j.type_name for j in await env.chain_jobs(client, started.id)] == ["head", "allowed"]

    async def test_continuing_with_bad_input_is_a_validation_error(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        procs = Processors()

        @procs.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            bad: Any = Tag(tag="not a Num")
            return await attempt.continue_with(tail, bad if attempt.job.attempt == 1 else attempt.input)

        @procs.handler(tail)
        async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        started = await env.start(client, head, Num(n=3))
        failed = await env.run_until_failed(client, procs, started.id)
        assert "invalid_input" in recorded_error(failed)
        assert len(await env.chain_jobs(client, started.id)) == 1
        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"total": 3}

    @pytest.mark.parametrize("style", ["async", "sync"])
    async def test_a_base_exception_that_is_not_an_exception_is_recorded_and_retried(
        self, env: IntegrationEnv, style: str
    ) -> None:
        types = JobTypes()
        odd = types.define("odd", input=None, output=Tag, entry=True)
        procs = Processors()

        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            if attempt.job.attempt == 1:
                raise Unusual("not an Exception subclass")
            return await attempt.complete(Tag(tag="recovered"))

        def handle_sync(attempt: Attempt[None, Tag]) -> Tag:
            if attempt.job.attempt == 1:
                raise Unusual("not an Exception subclass")
            return Tag(tag="recovered")

        procs.register(odd, handle if style == "async" else handle_sync)
        client = env.client(types)
        started = await env.start(client, odd, None)
        failed = await env.run_until_failed(client, procs, started.id)
        assert failed.last_attempt_error is not None
        assert "Unusual" in failed.last_attempt_error
        assert "not an Exception subclass" in failed.last_attempt_error
        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"tag": "recovered"}

    async def test_completing_twice_fails_the_attempt_and_keeps_nothing(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        twice = types.define("twice", input=None, output=Tag, entry=True)
        procs = Processors()

        @procs.handler(twice)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            done = await attempt.complete(Tag(tag=f"attempt {attempt.job.attempt}"))
            if attempt.job.attempt == 1:
                await attempt.complete(Tag(tag="again"))
            return done

        client = env.client(types)
        started = await env.start(client, twice, None)
        failed = await env.run_until_failed(client, procs, started.id)
        assert "AttemptMisuseError" in recorded_error(failed)
        assert failed.output is None
        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"tag": "attempt 2"}
