"""Chaos cell: the notify backend (Redis or NATS) goes away and comes back while PostgreSQL
keeps the state; workers must carry on by polling and pick the broker up again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobchain_postgres.testing import PrivateServer

from .audit import Figures
from .cells import FULL, CellPlan, CellRun, assert_cell, run_cell
from .faults import PrivateBroker
from .harness import Knobs

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900 if FULL else 240)]

RECOVERY_BOUND = 60.0
"""Seconds from the broker's return until every chain started before it completed. Workers
poll every 0.5 s here, so work goes on through the outage; the bound is generous."""


@pytest.fixture(params=["redis", "nats"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PrivateBroker]:
    server = PrivateBroker(request.param, tmp_path / "broker")
    server.directory.mkdir()
    server.start()
    yield server
    server.kill()


async def test_notify_broker_outages_lose_nothing(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures], broker: PrivateBroker
) -> None:
    outages, outage, every = (4, 15.0, 10.0) if FULL else (2, 5.0, 5.0)
    plan = CellPlan(
        name=f"{broker.kind}-away",
        duration=outages * (outage + every) + 4,
        notify=broker.url,
        # Polls far apart: latency after the outage shows whether wake-ups came back.
        knobs=Knobs(poll_interval=3.0),
    )

    async def schedule(run: CellRun) -> None:
        for _ in range(outages):
            async with run.fault(f"{broker.kind}-away"):
                await asyncio.to_thread(broker.kill)
                await asyncio.sleep(outage)
                await asyncio.to_thread(broker.start)
            await asyncio.sleep(every)

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    # No process and no database connection dies: nothing may run twice.
    assert_cell(figures, max_other_re_executions=0, recovery_bound=RECOVERY_BOUND)
