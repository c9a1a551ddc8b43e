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
from .faults import PrivateBroker, missing
from .harness import Knobs

pytestmark = [pytest.mark.chaos, pytest.mark.xdist_group("chaos"), pytest.mark.timeout(900 if FULL else 180)]


@pytest.fixture(params=["redis", "nats"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PrivateBroker]:
    try:
        server = PrivateBroker(request.param, tmp_path / "broker")
    except RuntimeError as error:
        missing(str(error))
    server.directory.mkdir()
    server.start()
    yield server
    server.kill()


async def test_notify_broker_outages_lose_nothing(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures], broker: PrivateBroker
) -> None:
    outages, outage, every = (4, 15.0, 10.0) if FULL else (1, 3.0, 3.0)
    plan = CellPlan(
        name=f"{broker.kind}-away",
        what=f"notify broker ({broker.kind}) SIGKILLed for {outage:.0f} s and restarted, {outages}x",
        notify=broker.url,
        tail=every,
        # Polls far apart: latency after the outage shows whether wake-ups came back.
        knobs=Knobs(poll_interval=3.0),
    )

    async def schedule(run: CellRun) -> None:
        for index in range(outages):
            if index:
                await asyncio.sleep(every)
            async with run.fault(f"{broker.kind}-away"):
                await asyncio.to_thread(broker.kill)
                await asyncio.sleep(outage)
                await asyncio.to_thread(broker.start)

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    # No process and no database connection dies: nothing may run twice.
    assert_cell(figures, plan, max_other_re_executions=0)
