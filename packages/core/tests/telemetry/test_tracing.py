"""Traces: a publish span per job created, a process span per attempt, one trace per chain."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from opentelemetry.trace import SpanKind, StatusCode

from jobchain import ChainStart, Deduplication, JobStatus, JobTypes
from jobchain.contracts import Event
from jobchain.telemetry import Tracing
from jobchain.worker import Attempt, Backoff, Batch, Processors, Worker

from .support import Traces, memory_client, parent_of

ZERO = Backoff(initial=timedelta(0), maximum=timedelta(0))


def _chain_types() -> tuple[JobTypes, Any, Any]:
    types = JobTypes()
    ship = types.define("shop.ship", input=int, output=int)
    order = types.define("shop.order", input=int, output=None, entry=True, continues_with=[ship])
    return types, order, ship


async def test_the_request_that_starts_a_chain_and_every_attempt_of_it_form_one_trace(traces: Traces) -> None:
    types, order, ship = _chain_types()
    client = memory_client(types, Tracing(tracer_provider=traces.provider))
    tracer = traces.provider.get_tracer("app")
    with tracer.start_as_current_span("POST /orders"):
        async with client.transaction() as tx:
            started = await client.start_chain(tx, order, 7)
    processors = Processors()

    async def place(attempt: Attempt[int, None]) -> Any:
        return await attempt.continue_with(ship, attempt.input * 2)

    async def send(attempt: Attempt[int, int]) -> Any:
        return await attempt.complete(attempt.input + 1)

    processors.register(order, place)
    processors.register(ship, send)
    async with Worker(client, processors, poll_interval=0.05):
        chain = await client.await_chain(started.id, timeout=10, poll_interval=0.05)
    assert chain.output == 15

    request = traces.one("POST /orders")
    publish_order = traces.one("publish shop.order")
    process_order = traces.one("process shop.order")
    publish_ship = traces.one("publish shop.ship")
    process_ship = traces.one("process shop.ship")
    trace_ids = {
        s.context.trace_id for s in (request, publish_order, process_order, publish_ship, process_ship)
    }
    assert trace_ids == {request.context.trace_id}
    assert parent_of(publish_order) == request.context.span_id
    assert parent_of(process_order) == publish_order.context.span_id
    assert parent_of(publish_ship) == process_order.context.span_id
    assert parent_of(process_ship) == publish_ship.context.span_id
    assert publish_order.kind is SpanKind.PRODUCER
    assert process_order.kind is SpanKind.CONSUMER
    # The consumer also links to its message's creation context (messaging conventions).
    assert [link.context.span_id for link in process_ship.links] == [publish_ship.context.span_id]
    # What was stored: the W3C traceparent of each job's publish span; the chain's own context
    # (its start's) follows the chain.
    root = chain.root
    assert isinstance(root.trace_context, dict)
    assert root.trace_context["traceparent"].split("-")[2] == format(publish_order.context.span_id, "016x")
    assert root.chain_trace_context == root.trace_context
    last = chain.last
    assert isinstance(last.trace_context, dict)
    assert last.trace_context["traceparent"].split("-")[2] == format(publish_ship.context.span_id, "016x")
    assert last.chain_trace_context == root.trace_context


async def test_spans_carry_the_messaging_attributes(traces: Traces) -> None:
    types, order, ship = _chain_types()
    client = memory_client(types, Tracing(tracer_provider=traces.provider))
    async with client.transaction() as tx:
        started = await client.start_chain(tx, order, 1)
    processors = Processors()

    async def place(attempt: Attempt[int, None]) -> Any:
        return await attempt.continue_with(ship, 2)

    processors.register(order, place)
    processors.register(ship, lambda attempt: 3)
    async with Worker(client, processors, poll_interval=0.05) as worker:
        await client.await_chain(started.id, timeout=10, poll_interval=0.05)
    publish = traces.one("publish shop.order").attributes or {}
    assert publish["messaging.system"] == "jobchain"
    assert publish["messaging.operation.type"] == "send"
    assert publish["messaging.operation.name"] == "publish"
    assert publish["messaging.destination.name"] == "shop.order"
    assert publish["messaging.message.id"] == started.id
    assert publish["jobchain.chain.id"] == started.id
    assert publish["jobchain.job.status"] == "pending"
    process = traces.one("process shop.ship").attributes or {}
    assert process["messaging.operation.type"] == "process"
    assert process["messaging.destination.name"] == "shop.ship"
    assert process["messaging.message.conversation_id"] == started.id
    assert process["jobchain.chain.id"] == started.id
    assert process["jobchain.chain.type"] == "shop.order"
    assert process["jobchain.job.chain_index"] == 1
    assert process["jobchain.job.attempt"] == 1
    assert process["messaging.client.id"] == worker.worker_id
    assert process["jobchain.attempt.result"] == "completed"
    assert (traces.one("process shop.order").attributes or {})["jobchain.attempt.result"] == "continued"


async def test_a_failed_attempt_records_its_exception_and_the_retry(traces: Traces) -> None:
    types = JobTypes()
    flaky = types.define("flaky", input=None, output=str, entry=True)
    client = memory_client(types, Tracing(tracer_provider=traces.provider))
    async with client.transaction() as tx:
        started = await client.start_chain(tx, flaky, None)
    calls: list[int] = []
    processors = Processors()

    async def handle(attempt: Attempt[None, str]) -> Any:
        calls.append(attempt.job.attempt)
        if len(calls) == 1:
            raise ValueError("card declined")
        return await attempt.complete("ok")

    processors.register(flaky, handle, retry=ZERO)
    async with Worker(client, processors, poll_interval=0.05):
        await client.await_chain(started.id, timeout=10, poll_interval=0.05)
    first, second = sorted(traces.named("process flaky"), key=lambda s: s.start_time or 0)
    assert first.status.status_code is StatusCode.ERROR
    assert "card declined" in (first.status.description or "")
    attrs = first.attributes or {}
    assert attrs["error.type"] == "ValueError"
    assert attrs["jobchain.attempt.result"] == "retried"
    assert "jobchain.job.rescheduled_at" in attrs
    [exception] = [e for e in first.events if e.name == "exception"]
    assert (exception.attributes or {})["exception.type"] == "ValueError"
    assert second.status.status_code is StatusCode.UNSET
    assert (second.attributes or {})["jobchain.attempt.result"] == "completed"
    # Both attempts are children of the one publish span: the job's stored context.
    publish = traces.one("publish flaky")
    assert {s.parent.span_id for s in (first, second) if s.parent} == {publish.context.span_id}


async def test_a_final_failure_says_why(traces: Traces) -> None:
    types = JobTypes()
    doomed = types.define("doomed", input=None, output=None, entry=True)
    client = memory_client(types, Tracing(tracer_provider=traces.provider))
    async with client.transaction() as tx:
        started = await client.start_chain(tx, doomed, None)
    processors = Processors()

    async def handle(attempt: Attempt[None, None]) -> Any:
        raise RuntimeError("broken for good")

    processors.register(doomed, handle, max_attempts=1)
    async with Worker(client, processors, poll_interval=0.05):
        job = None
        for _ in range(500):
            chain = await client.get_chain(started.id)
            assert chain is not None
            job = chain.last
            if job.status is JobStatus.FAILED:
                break
            await asyncio.sleep(0.01)
    assert job is not None
    assert job.status is JobStatus.FAILED
    span = traces.one("process doomed")
    assert span.status.status_code is StatusCode.ERROR
    attrs = span.attributes or {}
    assert attrs["jobchain.attempt.result"] == "failed"
    assert attrs["jobchain.job.fail_reason"] == "attempts_exhausted"


async def test_spans_the_handler_opens_nest_under_its_attempt(traces: Traces) -> None:
    types = JobTypes()
    work = types.define("work", input=None, output=None, entry=True)
    client = memory_client(types, Tracing(tracer_provider=traces.provider))
    async with client.transaction() as tx:
        started = await client.start_chain(tx, work, None)
    tracer = traces.provider.get_tracer("app")
    processors = Processors()

    async def handle(attempt: Attempt[None, None]) -> Any:
        with tracer.start_as_current_span("charge card"):
            pass
        return await attempt.complete(None)

    processors.register(work, handle)
    async with Worker(client, processors, poll_interval=0.05):
        await client.await_chain(started.id, timeout=10, poll_interval=0.05)
    process = traces.one("process work")
    user = traces.one("charge card")
    assert parent_of(user) == process.context.span_id


async def test_a_synchronous_handler_s_spans_nest_too(traces: Traces) -> None:
    types = JobTypes()
    work = types.define("work.sync", input=None, output=None, entry=True)
    client = memory_client(types, Tracing(tracer_provider=traces.provider))
    async with client.transaction() as tx:
        started = await client.start_chain(tx, work, None)
    tracer = traces.provider.get_tracer("app")
    processors = Processors()

    def handle(attempt: Attempt[None, None]) -> None:
        with tracer.start_as_current_span("in a thread"):
            return None

    processors.register(work, handle)
    async with Worker(client, processors, poll_interval=0.05):
        await client.await_chain(started.id, timeout=10, poll_interval=0.05)
    user = traces.one("in a thread")
    assert parent_of(user) == traces.one("process work.sync").context.span_id


async def test_a_job_with_blockers_links_to_their_starts(traces: Traces) -> None:
    types = JobTypes()
    upstream = types.define("upstream", input=None, output=int, entry=True)
    downstream = types.define("downstream", input=None, output=None, entry=True, blockers=[upstream])
    client = memory_client(types, Tracing(tracer_provider=traces.provider))
    async with client.transaction() as tx:
        blocker = await client.start_chain(tx, upstream, None)
        await client.start_chain(tx, downstream, None, blockers=[blocker.chain])
    publish_up = traces.one("publish upstream")
    publish_down = traces.one("publish downstream")
    assert [link.context.span_id for link in publish_down.links] == [publish_up.context.span_id]
    assert (publish_down.attributes or {})["jobchain.job.status"] == "blocked"


async def test_a_deduplicated_start_is_marked(traces: Traces) -> None:
    types = JobTypes()
    once = types.define("once", input=None, output=None, entry=True)
    client = memory_client(types, Tracing(tracer_provider=traces.provider))
    dedup = Deduplication(key="k")
    async with client.transaction() as tx:
        first = await client.start_chain(tx, once, None, deduplication=dedup)
    async with client.transaction() as tx:
        again = await client.start_chain(tx, once, None, deduplication=dedup)
    assert again.deduplicated
    spans = sorted(traces.named("publish once"), key=lambda s: s.start_time or 0)
    assert [(s.attributes or {}).get("jobchain.deduplicated") for s in spans] == [None, True]
    assert (spans[1].attributes or {})["jobchain.chain.id"] == first.id


async def test_a_batch_is_one_span_linked_to_every_job(traces: Traces) -> None:
    types = JobTypes()
    item = types.define("item", input=int, output=int, entry=True)
    client = memory_client(types, Tracing(tracer_provider=traces.provider))
    async with client.transaction() as tx:
        started = await client.start_chains(tx, [ChainStart(job_type=item, input=i) for i in range(3)])
    processors = Processors()

    @processors.batch_handler(item, max_batch=10)
    async def handle(batch: Batch[int, int]) -> list[Any]:
        return [n if n != 1 else ValueError("odd one") for n in batch.inputs]

    async with Worker(client, processors, poll_interval=60):
        for s in (started[0], started[2]):
            await client.await_chain(s.id, timeout=10, poll_interval=0.05)
    [batch] = traces.named("process item")
    attrs = batch.attributes or {}
    assert attrs["messaging.batch.message_count"] == 3
    publish_ids = {s.context.span_id for s in traces.named("publish item")}
    assert {link.context.span_id for link in batch.links} == publish_ids
    results = sorted(e.name for e in batch.events)
    assert results == ["job completed", "job completed", "job retried"]


async def test_a_client_without_tracing_stores_no_trace_context(traces: Traces) -> None:
    types = JobTypes()
    plain = types.define("plain", input=None, output=None, entry=True)
    client = memory_client(types)
    tracer = traces.provider.get_tracer("app")
    with tracer.start_as_current_span("request"):
        async with client.transaction() as tx:
            started = await client.start_chain(tx, plain, None)
    assert started.chain.root.trace_context is None


async def test_a_failing_observer_never_breaks_the_attempt(traces: Traces) -> None:
    class Broken:
        def on_event(self, event: Event) -> None:
            raise RuntimeError("observer down")

        def attempt_scope(self, jobs: object, worker_id: str) -> object:
            raise RuntimeError("scope down")

        def creation_scope(self, jobs: object, blockers: object, parent: object) -> object:
            raise RuntimeError("scope down")

    types = JobTypes()
    work = types.define("work", input=None, output=int, entry=True)
    client = memory_client(types, Broken(), Tracing(tracer_provider=traces.provider))
    async with client.transaction() as tx:
        started = await client.start_chain(tx, work, None)
    processors = Processors()
    processors.register(work, lambda attempt: 5)
    async with Worker(client, processors, poll_interval=0.05):
        chain = await client.await_chain(started.id, timeout=10, poll_interval=0.05)
    assert chain.output == 5
    assert traces.one("process work").parent is not None
