"""Chaos cells: the database goes away under the workers (backends terminated, the server
stopped and started again, its connection slots taken).

Every job logged while a fault lasted may run again (its attempt's connection was cut), at
most one per slot per fault; the backlog a fault leaves drains within
``CellPlan.recovery_bound``: twice the fault's length, the loop's longest recovery backoff, a
lease and the backlog's drain time at the spare capacity, plus 10 s (extended to the recovery of
the last of a series of faults that follow each other closer than that).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jobchain_postgres.testing import PrivateServer, StopMode

from .audit import Figures
from .cells import FULL, CellPlan, CellRun, assert_cell, run_cell
from .faults import ConnectionHog, terminate_backends

pytestmark = [pytest.mark.chaos, pytest.mark.xdist_group("chaos"), pytest.mark.timeout(900 if FULL else 180)]


async def test_terminated_backends_lose_nothing(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures]
) -> None:
    rounds, every = (40, 0.5) if FULL else (4, 1.5)
    what = f"pg_terminate_backend on every worker connection, {rounds}x every {every} s"
    plan = CellPlan(name="terminate-backends", what=what)

    async def schedule(run: CellRun) -> None:
        terminated = 0
        for _ in range(rounds):
            async with run.fault("terminate-backends"):
                terminated += await terminate_backends(chaos_server.port, run.database)
            await asyncio.sleep(every)
        run.figures.extra["backends_terminated"] = terminated

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    assert_cell(figures, plan, max_other_re_executions=len(figures.faults) * plan.slots)


@pytest.mark.parametrize(
    "mode", [pytest.param("fast", marks=pytest.mark.chaos_extra), pytest.param("immediate")]
)
async def test_server_restarts_lose_nothing(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures], mode: StopMode
) -> None:
    """``fast`` disconnects clients cleanly; ``immediate`` is a crash (recovery on start)."""
    restarts, outage, every = (4, 10.0, 15.0) if FULL else (1, 2.0, 3.0)
    plan = CellPlan(
        name=f"restart-{mode}",
        what=f"server stopped ({mode}) for {outage:.0f} s and started, {restarts}x",
        tail=every,
    )

    async def schedule(run: CellRun) -> None:
        for index in range(restarts):
            if index:
                await asyncio.sleep(every)
            async with run.fault(f"restart-{mode}"):
                await asyncio.to_thread(chaos_server.stop, mode)
                await asyncio.sleep(outage)
                await asyncio.to_thread(chaos_server.start)

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    assert_cell(figures, plan, max_other_re_executions=len(figures.faults) * plan.slots)


@pytest.mark.parametrize(
    "terminate",
    [
        pytest.param(False, id="hold", marks=pytest.mark.chaos_extra),
        pytest.param(True, id="terminate-then-hold"),
    ],
)
async def test_held_connections_lose_nothing(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures], terminate: bool
) -> None:
    """Another client takes all but two of the server's connection slots for a while. With
    ``terminate`` the workers' own connections are cut just after, so they must reconnect
    into a server with (almost) no free slots."""
    holds, hold_for, every = (3, 30.0, 10.0) if FULL else (1, 4.0, 3.0)
    name = "terminate-then-hold" if terminate else "hold-connections"
    cut = "workers' connections terminated, then " if terminate else ""
    plan = CellPlan(
        name=name, what=f"{cut}all but 2 connection slots held for {hold_for:.0f} s, {holds}x", tail=every
    )

    async def schedule(run: CellRun) -> None:
        hog = ConnectionHog(chaos_server.port, leave_free=2)
        held = []
        try:
            for index in range(holds):
                if index:
                    await asyncio.sleep(every)
                async with run.fault(name, done_before=await run.done_jobs()):
                    count = await asyncio.to_thread(hog.grab)
                    if terminate:
                        await asyncio.to_thread(hog.terminate, run.database)
                        count = await asyncio.to_thread(hog.grab)  # the slots the workers just lost
                    held.append(count)
                    await asyncio.sleep(hold_for)
                    await asyncio.to_thread(hog.release)
        finally:
            hog.release()  # never leave the server full for the next cell
        run.figures.extra["connections_held"] = held

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    if terminate:  # the cut connections interrupt what was in flight, as in the terminate cell
        assert_cell(figures, plan, max_other_re_executions=len(figures.faults) * plan.slots)
    else:  # nothing crashes: a job may run again only if a worker could not finish it
        assert_cell(figures, plan, max_other_re_executions=0)
