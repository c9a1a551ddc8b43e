"""The dashboard's worker figures: the jobs each worker holds, of the most it may hold (issue 36,
deliver 3).

A shop's dashboard said "Busy 15 of 8 slots": it put the jobs a worker held (running and
prefetched, and attempts whose commit was still being written) over its slots. Now both views
say how many jobs a worker holds of the most it may hold (``concurrency + prefetch``), and
how many of those run and how many wait in its buffer. Handlers wait on an event; the
heartbeat is sent by hand; over memory:// and SQLite (see conftest).
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

import pytest

from jobchain import Client, WorkerInfo
from jobchain.contracts.state import WorkerHeartbeat
from jobchain.entities import WorkerState
from jobchain.worker import Attempt, Completed, Processors, Worker

from .conftest import BOUND, Browser

pytestmark = pytest.mark.timeout(120)


def _section(page: str, worker_id: str) -> str:
    found = re.search(rf'<(tr|section)[^>]*data-worker="{re.escape(worker_id)}".*?</\1>', page, re.S)
    assert found, f"no element for worker {worker_id} on the page"
    return found.group(0)


def _load(html_part: str) -> tuple[int, int]:
    """The ``N of M`` (or ``N / M``) a worker's busy or in-flight figure shows."""
    text = re.sub(r"<[^>]+>", " ", html_part)
    found = re.search(r"(?:Busy|In flight|Holds)\s+(\d+)\s+(?:of|/)\s+(\d+)", text)
    if found is None:  # the overview's table cell: "N / M"
        found = re.search(r"(\d+)\s*/\s*(\d+)", text)
    assert found, f"no load figure in {text!r}"
    return int(found.group(1)), int(found.group(2))


async def test_a_worker_never_shows_more_jobs_than_it_may_hold(browser: Browser, client: Client) -> None:
    procs = Processors()
    running = 0
    two_running = asyncio.Event()
    release = asyncio.Event()

    @procs.handler(client.job_types.get("send_email"))
    async def slow(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
        nonlocal running
        await attempt.prepare("staged")
        running += 1
        if running == 2:
            two_running.set()
        async with asyncio.timeout(BOUND):
            await release.wait()
        return await attempt.complete({"sent": True})

    async with client.transaction() as tx:
        for n in range(6):
            await client.start_chain(tx, "send_email", {"to": f"user-{n}@example.com"})
    # Two slots, two more jobs prefetched: it holds four, of the four it may hold.
    worker = Worker(
        client, procs, name="mailer", concurrency=2, prefetch=2, poll_interval=0.05, heartbeat_interval=86400
    )
    async with worker:
        try:
            async with asyncio.timeout(BOUND):
                await two_running.wait()
            assert await worker._heartbeat.beat() is not None
            rows: list[WorkerInfo] = [w for w in await client.list_workers() if w.id == worker.worker_id]
            [info] = rows
            assert info.inflight == 4

            section = _section((await browser.get("/workers")).text, info.id)
            shown, most = _load(section)
            assert shown <= most, f"the workers page shows {shown} of {most}"
            assert (shown, most) == (4, 4)
            text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", section))
            assert "2 running" in text
            assert "2 buffered" in text
            assert "2 slots" in text

            overview_row = _section((await browser.get("/")).text, info.id)
            shown, most = _load(overview_row)
            assert shown <= most, f"the overview shows {shown} / {most}"
            assert (shown, most) == (4, 4)
        finally:
            release.set()


async def test_attempts_being_committed_are_shown_apart(browser: Browser, client: Client) -> None:
    # A slow database: 3 attempts whose commit is being written beside 4 jobs in flight. They
    # gave their slots on, so they are not over the capacity; the page says they are there.
    async with client.state.transaction() as stx:
        await stx.worker_heartbeat(
            WorkerHeartbeat(
                worker_id="w-slow-db",
                name="charger",
                host="host-1",
                pid=7,
                version="0.1.0",
                type_names=["send_email"],
                concurrency=4,
                inflight=4,
                buffered=0,
                committing=3,
                capacity=6,
                state=WorkerState.RUNNING,
                alive_for=timedelta(hours=1),
            )
        )
    section = _section((await browser.get("/workers")).text, "w-slow-db")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", section))
    assert _load(section) == (4, 6)
    assert "4 running, 0 buffered; 3 committing" in text
    overview_row = _section((await browser.get("/")).text, "w-slow-db")
    assert "3 committing" in overview_row
