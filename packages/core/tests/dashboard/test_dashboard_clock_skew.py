"""Times of past events never read as future: a worker's clock, or the database's, may run a
little ahead of the dashboard's, and "Last seen: in 2.3 s" is skew, not news. Moments that
are ahead by nature (alive until, next tick, a scheduled run) still read "in ..."."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from jobchain import Client
from jobchain.cli.common import ago as cli_ago
from jobchain.contracts.state import WorkerHeartbeat
from jobchain.dashboard.formatting import ago, since
from jobchain.entities import WorkerState, utcnow

from .conftest import Browser

pytestmark = pytest.mark.timeout(120)

T0 = datetime(2026, 11, 26, 6, 50, 1, tzinfo=UTC)
SKEW = timedelta(minutes=2)
"""How far the worker's clock runs ahead of the dashboard's in the page tests: far enough that
a starved machine still renders the page before the dashboard's clock catches up (before the
fix, 3 s ahead read "in 3.0 s")."""


def test_since_reads_a_moment_ahead_as_just_now() -> None:
    assert since(T0 - timedelta(seconds=5), T0) == "5.0 s ago"
    assert since(T0 - timedelta(minutes=3), T0) == "3 min 0 s ago"
    assert since(T0, T0) == "just now"
    for ahead in (timedelta(milliseconds=1), timedelta(seconds=2.3), timedelta(hours=5)):
        assert since(T0 + ahead, T0) == "just now", ahead
    assert since(None, T0) == "—"


def test_ago_still_reads_a_future_moment_as_future() -> None:
    assert ago(T0 + timedelta(seconds=2.3), T0) == "in 2.3 s"
    assert ago(T0 + timedelta(minutes=3), T0) == "in 3 min 0 s"
    assert ago(T0 - timedelta(seconds=5), T0) == "5.0 s ago"


def test_the_cli_age_of_a_past_event_is_never_from_now() -> None:
    assert cli_ago(T0 - timedelta(seconds=192), T0) == "3m12s ago"
    assert cli_ago(T0 - timedelta(seconds=4.2), T0) == "4.2s ago"
    for ahead in (timedelta(0), timedelta(seconds=2.3), timedelta(days=2)):
        assert cli_ago(T0 + ahead, T0) == "just now", ahead


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def _element(page: str, worker_id: str) -> str:
    found = re.search(rf'<(tr|section)[^>]*data-worker="{re.escape(worker_id)}".*?</\1>', page, re.S)
    assert found, f"no element for worker {worker_id} on the page"
    return found.group(0)


def _fact(section: str, name: str) -> str:
    found = re.search(rf"<dt>{re.escape(name)}</dt><dd[^>]*>(.*?)</dd>", section, re.S)
    assert found, f"no {name!r} in {section}"
    return _text(found.group(1))


async def _heartbeat_ahead(client: Client, worker_id: str) -> None:
    async with client.state.transaction() as stx:
        await stx.worker_heartbeat(
            WorkerHeartbeat(
                worker_id=worker_id,
                name="skewed",
                host="host-ahead",
                pid=11,
                version="0.1.0",
                type_names=["send_email"],
                concurrency=2,
                inflight=0,
                buffered=0,
                committing=0,
                capacity=2,
                state=WorkerState.RUNNING,
                alive_for=timedelta(hours=1),
                now=utcnow() + SKEW,
            )
        )


async def test_a_worker_clock_ahead_reads_just_now_on_the_overview(browser: Browser, client: Client) -> None:
    await _heartbeat_ahead(client, "w-ahead")
    page = await browser.get("/")
    assert page.status_code == 200
    row = _element(page.text, "w-ahead")
    cells = [_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    last_seen, started = cells[-2:]
    assert (last_seen, started) == ("just now", "just now"), f"the overview row reads {cells}"


async def test_a_worker_clock_ahead_reads_just_now_on_the_workers_page(
    browser: Browser, client: Client
) -> None:
    await _heartbeat_ahead(client, "w-ahead")
    page = await browser.get("/workers")
    assert page.status_code == 200
    section = _element(page.text, "w-ahead")
    assert _fact(section, "Last seen") == "just now"
    assert _fact(section, "Started") == "just now"
    # Alive until is ahead by nature (an hour plus the skew): it still says so.
    alive_until = _fact(section, "Alive until")
    assert re.fullmatch(r"in 1 h [12] min", alive_until), alive_until
