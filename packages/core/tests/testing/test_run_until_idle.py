"""run_until_idle on memory://, SQLite and PostgreSQL: continuations, blockers, retries, limits,
schedules and periodic ticks, all moved by a FrozenClock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobchain import JobStatus, Schedule
from jobchain.errors import InvalidArgumentError
from jobchain.testing import FrozenClock, RunLimitError, RunOutcome, run_until_idle

from .conftest import START, Connect
from .jobs import Log, Order, build


async def test_a_continuation_runs_in_the_same_call(connect: Connect) -> None:
    log = Log()
    types, processors = build(log)
    client = await connect(types)
    async with client.transaction() as tx:
        started = await client.start_chain(tx, types.resolve("charge"), Order(1))

    ran = await run_until_idle(client, processors)

    assert [(r.type_name, r.outcome) for r in ran] == [
        ("charge", RunOutcome.CONTINUED),
        ("ship", RunOutcome.COMPLETED),
    ]
    assert all(r.chain_id == started.id for r in ran)
    assert ran[0].job_id == started.id
    assert ran[1].job is not None
    assert ran[1].job.status is JobStatus.COMPLETED
    chain = await client.get_chain(started.id)
    assert chain is not None
    assert chain.status is JobStatus.COMPLETED
    assert types.resolve("ship").decode_output(chain.output) == "shipped 1"
    assert log.calls == ["charge 1", "ship 1"]
    assert await run_until_idle(client, processors) == []


async def test_a_dependent_runs_once_its_blocker_chain_completes(connect: Connect) -> None:
    log = Log()
    types, processors = build(log)
    client = await connect(types)
    async with client.transaction() as tx:
        blocker = await client.start_chain(tx, types.resolve("charge"), Order(7))
        dependent = await client.start_chain(tx, types.resolve("invoice"), Order(7), blockers=[blocker.id])
    assert (await client.get_job(dependent.id)).status is JobStatus.BLOCKED  # type: ignore[union-attr]

    ran = await run_until_idle(client, processors)

    assert [r.type_name for r in ran] == ["charge", "ship", "invoice"]
    assert log.calls[-1] == "invoice 7 after ['completed']"
    chain = await client.get_chain(dependent.id)
    assert chain is not None
    assert chain.status is JobStatus.COMPLETED


async def test_a_failure_is_retried_only_once_the_clock_passes_its_backoff(
    connect: Connect, clock: FrozenClock
) -> None:
    log = Log(fail_first=2)
    types, processors = build(log)
    client = await connect(types)
    async with client.transaction() as tx:
        started = await client.start_chain(tx, types.resolve("flaky"), Order(3))

    first = await run_until_idle(client, processors)
    assert [(r.outcome, r.attempt) for r in first] == [(RunOutcome.RETRIED, 1)]
    assert first[0].error is not None
    assert "carrier API down" in first[0].error
    job = first[0].job
    assert job is not None
    assert job.status is JobStatus.PENDING
    assert job.scheduled_at == START + timedelta(seconds=10)  # the default backoff, on the clock

    assert await run_until_idle(client, processors) == []  # not due yet: time stands still
    clock.advance(seconds=9)
    assert await run_until_idle(client, processors) == []
    clock.advance(seconds=1)
    second = await run_until_idle(client, processors)
    assert [(r.outcome, r.attempt) for r in second] == [(RunOutcome.RETRIED, 2)]
    assert second[0].job is not None
    assert second[0].job.scheduled_at == clock() + timedelta(seconds=20)

    clock.advance(timedelta(seconds=20))
    third = await run_until_idle(client, processors)
    assert [(r.outcome, r.attempt) for r in third] == [(RunOutcome.COMPLETED, 3)]
    assert log.calls == ["flaky attempt 1", "flaky attempt 2", "flaky attempt 3"]
    chain = await client.get_chain(started.id)
    assert chain is not None
    assert chain.status is JobStatus.COMPLETED


async def test_the_last_allowed_attempt_fails_the_job(connect: Connect, clock: FrozenClock) -> None:
    types, processors = build(Log())
    client = await connect(types)
    async with client.transaction() as tx:
        started = await client.start_chain(tx, types.resolve("broken"), Order(4))

    assert [r.outcome for r in await run_until_idle(client, processors)] == [RunOutcome.RETRIED]
    clock.advance(minutes=1)
    last = await run_until_idle(client, processors)
    assert [(r.outcome, r.attempt) for r in last] == [(RunOutcome.FAILED, 2)]
    assert last[0].error is not None
    assert "no such warehouse" in last[0].error
    clock.advance(minutes=10)
    assert await run_until_idle(client, processors) == []
    chain = await client.get_chain(started.id)
    assert chain is not None
    assert chain.status is JobStatus.FAILED


async def test_a_scheduled_chain_waits_for_the_clock(connect: Connect, clock: FrozenClock) -> None:
    log = Log()
    types, processors = build(log)
    client = await connect(types)
    async with client.transaction() as tx:
        await client.start_chain(
            tx, types.resolve("report"), Order(5), schedule=Schedule(after=timedelta(hours=1))
        )

    assert await run_until_idle(client, processors) == []
    clock.advance(minutes=59, seconds=59)
    assert await run_until_idle(client, processors) == []
    clock.advance(seconds=1)
    ran = await run_until_idle(client, processors)
    assert [(r.type_name, r.outcome) for r in ran] == [("report", RunOutcome.COMPLETED)]
    assert log.calls == ["report 5"]  # the synchronous handler ran (in a thread, as in a worker)


async def test_now_runs_what_is_due_then_without_moving_the_clock(
    connect: Connect, clock: FrozenClock
) -> None:
    types, processors = build(Log())
    client = await connect(types)
    async with client.transaction() as tx:
        await client.start_chain(
            tx, types.resolve("report"), Order(6), schedule=Schedule(after=timedelta(days=1))
        )

    ran = await run_until_idle(client, processors, now=START + timedelta(days=1))
    assert [r.type_name for r in ran] == ["report"]
    assert ran[0].job is not None
    assert ran[0].job.completed_at == START + timedelta(days=1)
    assert clock() == START


async def test_periodic_ticks_start_when_the_clock_reaches_them(connect: Connect, clock: FrozenClock) -> None:
    log = Log()
    types, processors = build(log, periodic=True)
    client = await connect(types)

    assert await run_until_idle(client, processors) == []  # 12:01: the test worker "starts"
    clock.set(START.replace(minute=4, second=59))
    assert await run_until_idle(client, processors) == []
    clock.advance(seconds=1)  # 12:05
    ran = await run_until_idle(client, processors)
    assert [(r.type_name, r.outcome) for r in ran] == [("report", RunOutcome.COMPLETED)]
    assert await run_until_idle(client, processors) == []  # one chain per tick
    clock.set(START.replace(minute=22))  # 12:10, 12:15 and 12:20 passed: the latest only
    assert len(await run_until_idle(client, processors)) == 1
    assert log.calls == ["report 0", "report 0"]
    schedules = await client.list_schedules()
    assert [s.last_tick_at for s in schedules] == [START.replace(minute=20)]


async def test_a_batch_processor_takes_the_due_jobs_of_its_type_together(connect: Connect) -> None:
    log = Log()
    types, processors = build(log)
    client = await connect(types)
    async with client.transaction() as tx:
        for order in (1, 2, 3):
            await client.start_chain(tx, types.resolve("label"), Order(order))

    ran = await run_until_idle(client, processors)
    assert [(r.type_name, r.outcome) for r in ran] == [("label", RunOutcome.COMPLETED)] * 3
    assert log.calls == ["labels [1, 2, 3]"]


async def test_a_chain_that_never_ends_stops_at_max_jobs(connect: Connect) -> None:
    types, processors = build(Log())
    client = await connect(types)
    async with client.transaction() as tx:
        await client.start_chain(tx, types.resolve("charge"), Order(9))
    # Exactly max_jobs jobs is not an error when nothing more is due.
    assert len(await run_until_idle(client, processors, max_jobs=2)) == 2

    async with client.transaction() as tx:
        await client.start_chain(tx, types.resolve("forever"), Order(0))
    with pytest.raises(RunLimitError, match="max_jobs=5") as raised:
        await run_until_idle(client, processors, max_jobs=5)
    assert [r.outcome for r in raised.value.ran] == [RunOutcome.CONTINUED] * 5


async def test_jobs_run_in_claim_order(connect: Connect, clock: FrozenClock) -> None:
    """FIFO by creation as a worker claims: older due jobs first, then what the run wrote."""
    types, processors = build(Log())
    client = await connect(types)
    async with client.transaction() as tx:
        for order, name in enumerate(["report", "report", "charge", "report"]):
            await client.start_chain(tx, types.resolve(name), Order(order))
            clock.advance(seconds=0.001)  # distinct creation times: ids break ties randomly

    ran = await run_until_idle(client, processors)

    assert [(r.type_name, r.job.input if r.job else None) for r in ran] == [
        ("report", {"id": 0}),
        ("report", {"id": 1}),
        ("charge", {"id": 2}),
        ("report", {"id": 3}),
        ("ship", {"id": 2}),  # the continuation, written during the run
    ]


async def test_bad_arguments_are_refused() -> None:
    from jobchain.testing import memory_client

    types, processors = build(Log())
    client = memory_client(types)
    with pytest.raises(InvalidArgumentError, match="max_jobs"):
        await run_until_idle(client, processors, max_jobs=0)
    with pytest.raises(InvalidArgumentError, match="aware"):
        await run_until_idle(client, processors, now=START.replace(tzinfo=None))
    with pytest.raises(InvalidArgumentError, match="Client"):
        await run_until_idle(object(), processors)  # type: ignore[arg-type]
    await client.close()
