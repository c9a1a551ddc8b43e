"""Declaring failure and cancel hooks: what define() and the worker refuse, and the wake-ups a
failing or cancelling transaction buffers for the hook types."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pytest

import jobchain
from jobchain import InvalidArgumentError, JobEnded, JobStatus, JobTypes
from jobchain.completion import buffer_created
from jobchain.contracts import JobCreated, TypeEndHooks
from jobchain.end_hooks import EndHookWakes, end_hook_rows
from jobchain.entities import Job
from jobchain.testing import memory_client, run_until_idle
from jobchain.transactions import TransactionHooks
from jobchain.worker import Attempt, Completed, Processors, Worker

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Order:
    id: int


def _job(type_name: str, status: JobStatus, chain_type_name: str | None = None) -> Job:
    return Job(
        id="j",
        chain_id="c",
        type_name=type_name,
        chain_type_name=chain_type_name or type_name,
        chain_index=0,
        status=status,
        input=None,
        created_at=NOW,
        scheduled_at=NOW,
    )


def test_a_hook_must_take_job_ended_as_its_input() -> None:
    types = JobTypes()
    wrong = types.define("wrong", input=Order, output=None)
    refusal = r"order: on_failed hook 'wrong' must take jobchain\.JobEnded"
    with pytest.raises(InvalidArgumentError, match=refusal):
        types.define("order", input=Order, output=None, on_failed=wrong)
    assert "order" not in types


def test_a_chain_hook_needs_an_entry_type() -> None:
    types = JobTypes()
    hook = types.define("hook", input=JobEnded, output=None)
    with pytest.raises(InvalidArgumentError, match="on_chain_failed/on_chain_cancelled need entry=True"):
        types.define("step", input=Order, output=None, on_chain_failed=hook)
    types.define("order", input=Order, output=None, entry=True, on_chain_cancelled=hook)


@pytest.mark.parametrize("value", [3, object(), ["hook"]])
def test_a_hook_is_a_job_type_or_its_name(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="on_cancelled must be a job type"):
        JobTypes().define("order", input=Order, output=None, on_cancelled=value)  # type: ignore[call-overload]


def test_the_rows_give_every_type_its_hooks_and_priority() -> None:
    types = JobTypes()
    hook = types.define("hook", input=JobEnded, output=None, priority=5)
    types.define("order", input=Order, output=None, entry=True, on_failed=hook, on_chain_cancelled="hook")
    assert end_hook_rows(types) == [
        TypeEndHooks(type_name="hook", priority=5),
        TypeEndHooks(type_name="order", on_failed="hook", on_chain_cancelled="hook"),
    ]


def test_a_hook_named_but_not_defined_fails_the_worker_at_construction() -> None:
    types = JobTypes()
    order = types.define("order", input=Order, output=None, entry=True, on_failed="order.failed")
    processors = Processors()

    @processors.handler(order)
    async def handle(attempt: Attempt[Order, None]) -> Completed:
        return await attempt.complete(None)

    with pytest.raises(InvalidArgumentError, match=r"order: on_failed names job type 'order.failed'"):
        Worker(memory_client(types), processors)


def test_a_hook_named_with_the_wrong_input_fails_the_worker_at_construction() -> None:
    types = JobTypes()
    types.define("order.failed", input=Order, output=None)
    order = types.define("order", input=Order, output=None, entry=True, on_failed="order.failed")
    processors = Processors()

    @processors.handler(order)
    async def handle(attempt: Attempt[Order, None]) -> Completed:
        return await attempt.complete(None)

    with pytest.raises(InvalidArgumentError, match=r"must take jobchain\.JobEnded"):
        Worker(memory_client(types), processors)


def test_an_ended_job_buffers_a_wake_up_for_each_hook_type_it_started() -> None:
    types = JobTypes()
    hook = types.define("hook", input=JobEnded, output=None)
    chain_hook = types.define("chain.hook", input=JobEnded, output=None)
    types.define("order", input=Order, output=None, entry=True, on_failed=hook, on_chain_failed=chain_hook)
    types.define("ship", input=Order, output=None, on_cancelled=hook)
    hooks = TransactionHooks(end_hooks=EndHookWakes(types))
    hooks.job_ended(_job("order", JobStatus.FAILED))
    hooks.job_ended(_job("ship", JobStatus.FAILED, chain_type_name="order"))  # only the chain's
    hooks.job_ended(_job("ship", JobStatus.CANCELLED, chain_type_name="order"))  # only its own
    hooks.job_ended(_job("order", JobStatus.COMPLETED))
    hooks.job_ended(_job("unknown", JobStatus.FAILED))  # not in this registry: the poll finds it
    assert hooks.scheduled == {"hook": 2, "chain.hook": 2}


def test_without_a_registry_nothing_is_buffered() -> None:
    hooks = TransactionHooks()
    hooks.job_ended(replace(_job("order", JobStatus.FAILED)))
    assert hooks.scheduled == {}


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        ({"type_name": ""}, "type_name must be a non-empty string"),
        ({"type_name": "t", "priority": 101}, "t: priority must be an integer from -100 to 100"),
        ({"type_name": "t", "priority": True}, "t: priority must be an integer"),
        ({"type_name": "t", "on_cancelled": ""}, "t: on_cancelled must be a job type name or None"),
        ({"type_name": "t", "on_chain_failed": 3}, "t: on_chain_failed must be a job type name or None"),
    ],
)
def test_a_hook_row_that_no_backend_could_store_is_refused_when_built(
    fields: dict[str, object], refusal: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=refusal):
        TypeEndHooks(**fields)  # type: ignore[arg-type]


class _WithoutHooks:
    """A state adapter from before end_hooks_register: its transactions lack the method."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.capabilities = inner.capabilities
        self.time_precision = inner.time_precision

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @asynccontextmanager
    async def _open(self, **options: Any) -> AsyncIterator[Any]:
        async with self._inner.transaction(**options) as tx:
            yield _TxWithoutHooks(tx)

    def transaction(self, **options: Any) -> Any:
        return self._open(**options)


class _TxWithoutHooks:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "end_hooks_register":
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_backend_without_hook_registration_runs_jobs_and_says_hooks_will_not_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    types = JobTypes()
    hook = types.define("hook", input=JobEnded, output=None)
    order = types.define("order", input=Order, output=None, entry=True, on_failed=hook)
    processors = Processors()
    ran: list[int] = []

    @processors.handler(order)
    async def handle(attempt: Attempt[Order, None]) -> Completed:
        ran.append(attempt.input.id)
        return await attempt.complete(None)

    client = memory_client(types)
    old = jobchain.Client(_WithoutHooks(client.state), None, types)
    async with old.transaction() as tx:
        await old.start_chain(tx, order, Order(1))
    await run_until_idle(old, processors)
    assert ran == [1], "the worker must still run jobs"
    assert any("does not register failure and cancel hooks" in r.getMessage() for r in caplog.records)
    await client.close()


@pytest.mark.parametrize("record_events", [True, False])
def test_a_job_created_failed_wakes_its_hook_type_whether_events_are_recorded_or_not(
    record_events: bool,
) -> None:
    types = JobTypes()
    hook = types.define("hook", input=JobEnded, output=None)
    types.define("order", input=Order, output=None, entry=True, on_failed=hook)
    hooks = TransactionHooks(record_events=record_events, end_hooks=EndHookWakes(types))
    buffer_created(hooks, JobCreated(job=_job("order", JobStatus.FAILED)), new_chain=True)
    assert hooks.scheduled == {"hook": 1}


def test_hooks_that_lead_back_to_themselves_are_refused() -> None:
    types = JobTypes()
    with pytest.raises(InvalidArgumentError, match="alert: a type cannot be its own hook"):
        types.define("alert", input=JobEnded, output=None, on_failed="alert")
    types = JobTypes()
    types.define("a", input=JobEnded, output=None, on_failed="b")
    types.define("b", input=JobEnded, output=None, on_cancelled="a")
    with pytest.raises(InvalidArgumentError, match=r"a -> b -> a"):
        end_hook_rows(types)


def test_a_hook_with_a_hook_of_its_own_is_fine_without_a_cycle() -> None:
    types = JobTypes()
    page = types.define("page-oncall", input=JobEnded, output=None)
    types.define("order.failed", input=JobEnded, output=None, on_failed=page)
    types.define("order", input=Order, output=None, entry=True, on_failed="order.failed")
    assert [row.on_failed for row in end_hook_rows(types)] == [None, "page-oncall", "order.failed"]
