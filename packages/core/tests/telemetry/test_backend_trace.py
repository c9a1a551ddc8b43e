"""End to end over SQLite and PostgreSQL: the stored trace context round-trips through a real backend.

PostgreSQL is ``JOBCHAIN_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
in a fresh schema dropped afterwards; unreachable, the test skips, except under ``CI=true``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobchain
from jobchain import JobTypes
from jobchain.telemetry import Tracing
from jobchain.worker import Attempt, Processors, Worker

from .support import Traces, parent_of


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
        return
    server = request.getfixturevalue("postgres_server")
    drop = request.getfixturevalue("drop_postgres_schema")  # not during teardown: deprecated
    schema = f"jc_tel_{uuid.uuid4().hex[:12]}"
    yield f"{server}{'&' if '?' in server else '?'}schema={schema}"
    drop(schema)


@pytest.mark.pg_connections(6)  # measured 5 at once (the shared PostgreSQL connection budget)
async def test_a_chain_started_in_a_request_is_one_trace(traces: Traces, state_url: str) -> None:
    types = JobTypes()
    charge = types.define("billing.charge", input=int, output=str)
    invoice = types.define("billing.invoice", input=int, output=None, entry=True, continues_with=[charge])
    url = state_url
    tracing = Tracing(tracer_provider=traces.provider)
    producer = await jobchain.connect(url, notify="none", job_types=types, observers=[tracing], migrate=True)
    consumer = await jobchain.connect(url, notify="none", job_types=types, observers=[tracing])
    try:
        with traces.provider.get_tracer("web").start_as_current_span("POST /invoices"):
            async with producer.transaction() as tx:
                started = await producer.start_chain(tx, invoice, 42)
        processors = Processors()

        async def make(attempt: Attempt[int, None]) -> Any:
            return await attempt.continue_with(charge, attempt.input)

        processors.register(invoice, make)
        processors.register(charge, lambda attempt: f"charged {attempt.input}")
        async with Worker(consumer, processors, poll_interval=0.05):
            chain = await producer.await_chain(started.id, timeout=10, poll_interval=0.05)
        stored = await consumer.get_chain(started.id)
    finally:
        await producer.close()
        await consumer.close()
    assert chain.output == "charged 42"
    assert stored is not None
    request = traces.one("POST /invoices")
    publish = traces.one("publish billing.invoice")
    process = traces.one("process billing.invoice")
    publish_next = traces.one("publish billing.charge")
    process_next = traces.one("process billing.charge")
    assert {s.context.trace_id for s in traces.spans()} == {request.context.trace_id}
    assert parent_of(publish) == request.context.span_id
    assert parent_of(process) == publish.context.span_id
    assert parent_of(publish_next) == process.context.span_id
    assert parent_of(process_next) == publish_next.context.span_id
    # Read back from the database: the W3C carrier of each job's publish span.
    root_context = stored.root.trace_context
    assert isinstance(root_context, dict)
    version, trace_id, span_id, _flags = root_context["traceparent"].split("-")
    assert (version, trace_id, span_id) == (
        "00",
        f"{request.context.trace_id:032x}",
        f"{publish.context.span_id:016x}",
    )
    assert stored.root.chain_trace_context == root_context
    last_context = stored.last.trace_context
    assert isinstance(last_context, dict)
    assert last_context["traceparent"].split("-")[2] == f"{publish_next.context.span_id:016x}"
    assert stored.last.chain_trace_context == root_context
