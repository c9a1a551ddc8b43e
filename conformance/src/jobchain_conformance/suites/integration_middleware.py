"""Attempt middleware, processor slices and the checks made when a worker is built."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest

from jobchain import (
    DuplicateJobTypeError,
    InvalidArgumentError,
    JobStatus,
    JobTypes,
    UnknownJobTypeError,
)
from jobchain.transactions import Transaction
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Tag, recorded_error

Next = Any


class Recorder:
    """Middleware that logs when each phase enters and leaves, under its own name."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def wrap_handler(self, attempt: Attempt[Any, Any], call_next: Next) -> Any:
        self.log.append(f"{self.name}.handler>")
        try:
            return await call_next()
        finally:
            self.log.append(f"{self.name}.handler<")

    async def wrap_prepare(self, attempt: Attempt[Any, Any], tx: Transaction, call_next: Next) -> Any:
        self.log.append(f"{self.name}.prepare>")
        result = await call_next()
        self.log.append(f"{self.name}.prepare<")
        return result

    async def wrap_complete(self, attempt: Attempt[Any, Any], tx: Transaction, call_next: Next) -> Any:
        self.log.append(f"{self.name}.complete>")
        result = await call_next()
        self.log.append(f"{self.name}.complete<")
        return result


class Tenant:
    """Middleware that injects context the handler reads."""

    async def wrap_handler(self, attempt: Attempt[Any, Any], call_next: Next) -> Any:
        attempt.context["tenant"] = "acme"
        return await call_next()


class MiddlewareTests:
    """Middleware wraps handler, prepare and complete as an onion and can inject context."""

    async def test_middleware_composes_as_an_onion_around_every_phase(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        log: list[str] = []
        procs = Processors(middleware=[Recorder("outer", log), Recorder("inner", log)])

        async def prepared(tx: Transaction) -> None:
            log.append("prepare-callback")

        async def completing(tx: Transaction) -> None:
            log.append("complete-callback")

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            log.append("handler")
            await attempt.prepare("staged", prepared)
            return await attempt.complete(Tag(tag="ok"), callback=completing)

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, work, None)
            await env.await_chain(client, started.id)

        assert log == [
            "outer.handler>",
            "inner.handler>",
            "handler",
            "outer.prepare>",
            "inner.prepare>",
            "prepare-callback",
            "inner.prepare<",
            "outer.prepare<",
            "outer.complete>",
            "inner.complete>",
            "complete-callback",
            "inner.complete<",
            "outer.complete<",
            "inner.handler<",
            "outer.handler<",
        ]

    @pytest.mark.parametrize("setup", ["explicit-staged", "automatic", "implicit-atomic"])
    async def test_prepare_middleware_wraps_the_phase_even_without_a_callback(
        self, env: IntegrationEnv, setup: Literal["explicit-staged", "automatic", "implicit-atomic"]
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        log: list[str] = []
        procs = Processors(middleware=[Recorder("mw", log)])

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            if setup == "explicit-staged":
                await attempt.prepare("staged")
            elif setup == "automatic":
                await asyncio.sleep(0.001)  # any real suspension selects staged mode
            return await attempt.complete(Tag(tag="ok"))

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, work, None)
            await env.await_chain(client, started.id)

        assert log.count("mw.prepare>") == 1
        assert log.count("mw.prepare<") == 1
        assert log.index("mw.prepare<") < log.index("mw.complete>")

    @pytest.mark.parametrize("style", ["async", "sync"])
    async def test_middleware_injects_context_the_handler_reads(
        self, env: IntegrationEnv, style: str
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors(middleware=[Tenant()])

        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            return await attempt.complete(Tag(tag=attempt.context["tenant"]))

        def handle_sync(attempt: Attempt[None, Tag]) -> Tag:
            return Tag(tag=attempt.context["tenant"])

        procs.register(work, handle if style == "async" else handle_sync)
        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, work, None)
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"tag": "acme"}

    @pytest.mark.parametrize("mode", ["atomic", "staged"])
    async def test_complete_middleware_writes_in_the_attempt_transaction(
        self, env: IntegrationEnv, mode: Literal["atomic", "staged"]
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        audit = types.define("audit", input=Tag, output=None, entry=True)
        client = env.client(types)

        class Audit:
            async def wrap_complete(
                self, attempt: Attempt[Any, Any], tx: Transaction, call_next: Next
            ) -> Any:
                result = await call_next()
                await client.start_chain(
                    tx, audit, Tag(tag=f"{attempt.job.id} attempt {attempt.job.attempt}")
                )
                return result

        procs = Processors(middleware=[Audit()])

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            await attempt.prepare(mode)
            done = await attempt.complete(Tag(tag="ok"))
            if attempt.job.attempt == 1:
                raise RuntimeError("after complete: the audit row must vanish too")
            return done

        started = await env.start(client, work, None)
        failed = await env.run_until_failed(client, procs, started.id)
        assert "after complete" in recorded_error(failed)
        assert await env.chains_of_type(client, audit) == []

        await env.retry_now(client, procs, started.id, started.id)
        audits = await env.chains_of_type(client, audit)
        assert [c.root.input for c in audits] == [{"tag": f"{started.id} attempt 2"}]

    async def test_an_error_raised_by_middleware_fails_the_attempt_like_a_handler_error(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        seen: list[str] = []

        class Gate:
            async def wrap_handler(self, attempt: Attempt[Any, Any], call_next: Next) -> Any:
                if attempt.job.attempt == 1:
                    raise PermissionError("tenant suspended")
                try:
                    return await call_next()
                except Exception as error:
                    seen.append(type(error).__name__)
                    raise

        procs = Processors(middleware=[Gate()])
        calls: list[int] = []

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            calls.append(attempt.job.attempt)
            return await attempt.complete(Tag(tag="through"))

        client = env.client(types)
        started = await env.start(client, work, None)
        failed = await env.run_until_failed(client, procs, started.id)
        assert "tenant suspended" in recorded_error(failed)
        assert calls == []
        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"tag": "through"}
        assert calls == [2]
        assert seen == []

    async def test_slices_merge_and_each_keeps_its_own_middleware(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        billing = types.define("billing", input=None, output=Tag, entry=True)
        mail = types.define("mail", input=None, output=Tag, entry=True)
        log: list[str] = []
        billing_slice = Processors(middleware=[Recorder("billing-mw", log)])
        mail_slice = Processors(middleware=[Recorder("mail-mw", log)])

        @billing_slice.handler(billing)
        async def do_billing(attempt: Attempt[None, Tag]) -> Completed:
            return await attempt.complete(Tag(tag="billed"))

        @mail_slice.handler(mail)
        async def do_mail(attempt: Attempt[None, Tag]) -> Completed:
            return await attempt.complete(Tag(tag="mailed"))

        client = env.client(types)
        async with env.worker(client, [billing_slice, mail_slice]):
            first = await env.start(client, billing, None)
            await env.await_chain(client, first.id)
            billing_log = list(log)
            second = await env.start(client, mail, None)
            chain = await env.await_chain(client, second.id)

        assert chain.output == {"tag": "mailed"}
        mail_log = log[len(billing_log) :]
        assert billing_log
        assert all(entry.startswith("billing-mw.") for entry in billing_log)
        assert mail_log
        assert all(entry.startswith("mail-mw.") for entry in mail_log)

    async def test_required_middleware_is_enforced_when_the_worker_is_built(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        one = types.define("one", input=None, output=Tag, entry=True)
        two = types.define("two", input=None, output=Tag, entry=True)
        tracing, auth = Tenant(), Tenant()
        with_both = Processors(middleware=[tracing, auth])
        without = Processors(middleware=[auth])
        reversed_order = Processors(middleware=[auth, tracing])

        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            return await attempt.complete(Tag(tag=attempt.context.get("tenant", "none")))

        with_both.register(one, handle)
        without.register(two, handle)
        reversed_order.register(two, handle)
        client = env.client(types)
        pending = await env.start(client, two, None)

        with pytest.raises(InvalidArgumentError):
            env.worker(client, [with_both, without], required_middleware=[tracing, auth])
        with pytest.raises(InvalidArgumentError):
            env.worker(client, [with_both, reversed_order], required_middleware=[tracing, auth])
        untouched = await env.job(client, pending.id)
        assert untouched.status is JobStatus.PENDING
        assert untouched.attempt == 0

        fine = Processors(middleware=[tracing, Tenant(), auth])
        fine.register(two, handle)
        async with env.worker(client, [with_both, fine], required_middleware=[tracing, auth]):
            chain = await env.await_chain(client, pending.id)
        assert chain.output == {"tag": "acme"}

    async def test_a_type_handled_by_two_slices_is_rejected_at_construction(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        first, second = Processors(), Processors()

        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            return await attempt.complete(Tag(tag="x"))

        first.register(work, handle)
        second.register(work, handle)
        client = env.client(types)
        with pytest.raises(DuplicateJobTypeError) as duplicate:
            env.worker(client, [first, second])
        assert "work" in str(duplicate.value)

    async def test_a_processor_for_an_unknown_type_is_rejected_at_construction(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        types.define("known", input=None, output=Tag, entry=True)
        elsewhere = JobTypes()
        stranger = elsewhere.define("stranger", input=None, output=Tag, entry=True)
        procs = Processors()

        @procs.handler(stranger)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            return await attempt.complete(Tag(tag="x"))

        with pytest.raises(UnknownJobTypeError) as unknown:
            env.worker(env.client(types), procs)
        assert "stranger" in str(unknown.value)

    async def test_bad_worker_settings_are_rejected_at_construction(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            return await attempt.complete(Tag(tag="x"))

        client = env.client(types)
        for bad in ({"concurrency": 0}, {"name": "has spaces"}, {"poll_interval": -1}):
            with pytest.raises(InvalidArgumentError):
                env.worker(client, procs, **bad)
        with pytest.raises(InvalidArgumentError):
            env.worker(client, Processors())
