"""Chaos cells: the database goes away under the workers (backends terminated, the server
stopped and started again, its connection slots taken)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jobchain_postgres.testing import PrivateServer, StopMode

from .audit import Figures
from .cells import FULL, CellPlan, CellRun, assert_cell, run_cell
from .faults import ConnectionHog, terminate_backends

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900 if FULL else 240)]

RECOVERY_BOUND = 120.0
"""Seconds from the end of a database fault until every chain started before it completed.
Today the loop's recovery backoff grows (up to 40 s) through an outage and failed group
commits wait out the pool timeout; the bound is far above what the compact cells measure."""


async def test_terminated_backends_lose_nothing(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures]
) -> None:
    rounds, every = (40, 0.5) if FULL else (8, 2.5)
    plan = CellPlan(name="terminate-backends", duration=rounds * every + 6)

    async def schedule(run: CellRun) -> None:
        terminated = 0
        for _ in range(rounds):
            async with run.fault("terminate-backends"):
                terminated += await terminate_backends(chaos_server.port, run.database)
            await asyncio.sleep(every)
        run.figures.extra["backends_terminated"] = terminated

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    assert_cell(
        figures, max_other_re_executions=len(figures.faults) * plan.slots, recovery_bound=RECOVERY_BOUND
    )


OUTAGE_STARVATION = (
    "finding (full mode, baseline): a job whose reschedule failed during the outage 'returns "
    "when its lease expires', but with the backlog the outages built no claim comes back empty, "
    "so nobody reaps it until the queue drains: 126 s after a 10 s restart (bound 120 s). "
    "Issue 16 items 2-3 (timer reaper, group retry after outages) should make this pass."
)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
@pytest.mark.xfail(FULL, reason=OUTAGE_STARVATION, strict=False)
async def test_server_restarts_lose_nothing(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures], mode: StopMode
) -> None:
    restarts, outage, every = (4, 10.0, 15.0) if FULL else (2, 3.0, 7.0)
    plan = CellPlan(name=f"restart-{mode}", duration=restarts * (outage + every) + 4)

    async def schedule(run: CellRun) -> None:
        for _ in range(restarts):
            async with run.fault(f"restart-{mode}"):
                await asyncio.to_thread(chaos_server.stop, mode)
                await asyncio.sleep(outage)
                await asyncio.to_thread(chaos_server.start)
            await asyncio.sleep(every)

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    assert_cell(
        figures, max_other_re_executions=len(figures.faults) * plan.slots, recovery_bound=RECOVERY_BOUND
    )


@pytest.mark.parametrize("terminate", [False, True], ids=["hold", "terminate-then-hold"])
async def test_held_connections_lose_nothing(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures], terminate: bool
) -> None:
    """Another client takes all but two of the server's connection slots for a while. With
    ``terminate`` the workers' own connections are cut just after, so they must reconnect
    into a server with (almost) no free slots."""
    holds, hold_for, every = (3, 30.0, 10.0) if FULL else (2, 8.0, 5.0)
    name = "terminate-then-hold" if terminate else "hold-connections"
    plan = CellPlan(name=name, duration=holds * (hold_for + every) + 4)

    async def schedule(run: CellRun) -> None:
        hog = ConnectionHog(chaos_server.port, leave_free=2)
        held = []
        try:
            for _ in range(holds):
                async with run.fault(name, done_before=await run.done_jobs()):
                    count = await asyncio.to_thread(hog.grab)
                    if terminate:
                        await asyncio.to_thread(hog.terminate, run.database)
                        count = await asyncio.to_thread(hog.grab)  # the slots the workers just lost
                    held.append(count)
                    await asyncio.sleep(hold_for)
                    await asyncio.to_thread(hog.release)
                await asyncio.sleep(every)
        finally:
            hog.release()  # never leave the server full for the next cell
        run.figures.extra["connections_held"] = held

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    if terminate:  # the cut connections interrupt what was in flight, as in the terminate cell
        assert_cell(
            figures, max_other_re_executions=len(figures.faults) * plan.slots, recovery_bound=RECOVERY_BOUND
        )
    else:  # nothing crashes: a job may run again only if a worker could not finish it
        assert_cell(figures, max_other_re_executions=0, recovery_bound=RECOVERY_BOUND)
