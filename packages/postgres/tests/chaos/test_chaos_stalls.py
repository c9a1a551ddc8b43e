"""Chaos cells: a worker that stalls or is cut off lives on (issue 35).

- *stall*: SIGSTOP a busy worker past its lease and past the dead-worker bound, then SIGCONT;
- *partition*: a loopback TCP proxy between one worker and PostgreSQL (state and notify) is
  frozen past the dead-worker bound and then thawed, once with what was sent held and
  delivered late, once with it dropped and the connections cut;
- *slow network*: every worker talks to PostgreSQL through the proxy, 20 ms late each way.

Besides what every cell asserts (nothing lost, no double completion), these assert that no
handler began a job its worker no longer held (``stale_starts``: after the job's completion,
or after a later attempt had begun), that ``chaos.limited`` (``max_running=2``, a cooperative
handler) never had more executions at work at once than its limit, and that the victim of a
stall or partition logged the documented *presumed dead* WARNING and completed jobs again
(``victim_resumed_after``: its rejoin time).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobchain.worker.heartbeat import DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_MISSED_HEARTBEATS
from jobchain_postgres.testing import PrivateServer

from . import chaos_app
from .audit import Fault, Figures, read_executions
from .audit_limits import CONFIRMED_AGAIN, PRESUMED_DEAD, count_lines, first_line_after
from .cells import FULL, CellPlan, CellRun, assert_cell, run_cell
from .harness import Knobs
from .partition import PartitionProxy

pytestmark = [pytest.mark.chaos, pytest.mark.xdist_group("chaos"), pytest.mark.timeout(900 if FULL else 240)]

ALIVE_FOR = DEFAULT_HEARTBEAT_INTERVAL * DEFAULT_MISSED_HEARTBEATS
DEAD_BOUND = ALIVE_FOR + 2 * DEFAULT_HEARTBEAT_INTERVAL
"""Seconds after which a silent worker has surely been marked dead by a peer's heartbeat: its
row's ``alive_for``, then a peer's next beat, with one beat of slack."""
OUTAGE = 30.0 if FULL else DEAD_BOUND + 2.0
"""How long a stall or partition lasts (30 s, as in the issue; compact: past the bound)."""
REJOIN_LIMIT = 60.0
"""Seconds after the fault's end within which the victim must have said it was presumed dead."""
KNOBS = Knobs(
    lease=3.0,
    types=(chaos_app.TYPE_NAME, chaos_app.LIMITED_TYPE_NAME),
    limit=2,
    steps=5,
    step=0.1,
)
"""A 3 s lease (shorter than the 6 s dead-worker bound: both rescues happen), and half the
jobs of the ``max_running=2`` type, each 5 steps of 0.1 s."""


@pytest.fixture
def proxy(chaos_server: PrivateServer) -> Iterator[PartitionProxy]:
    with PartitionProxy(chaos_server.port) as running:
        yield running


def _through(proxy: PartitionProxy, *indexes: int) -> Callable[[CellRun], None]:
    def prepare(run: CellRun) -> None:
        for index in indexes:
            worker = run.workers[index]
            worker.state = worker.notify = proxy.url(run.database)

    return prepare


async def _wait_for_rejoin(run: CellRun, index: int, fault: Fault) -> None:
    """Until the victim has logged the presumed-dead WARNING and begun a job after the fault
    ended (the assertions say if it never does); note when it said it claims again."""
    victim = run.workers[index]
    deadline = time.monotonic() + REJOIN_LIMIT
    while time.monotonic() < deadline:
        warned = count_lines(victim.log_file, PRESUMED_DEAD) > 0
        begun = any(e.pid == victim.pid and e.started > fault.ended for e in read_executions(run.exec_log))
        if warned and begun:
            break
        await asyncio.sleep(0.2)
    rejoined = first_line_after(victim.log_file, CONFIRMED_AGAIN, fault.ended - 0.001)
    if rejoined is not None:
        # The log has milliseconds; a line written as the fault ended may read as just before.
        fault.victim_rejoined_after = round(max(rejoined - fault.ended, 0.0), 3)


def assert_held_limits(figures: Figures, plan: CellPlan, *, victim: bool = True) -> None:
    details = f"figures: {figures.as_json()}"
    assert figures.extra["stale_starts"] == 0, f"a handler began a job it no longer held; {details}"
    assert figures.extra.get("limited_steps", 0) > 0, f"no limited job ran; {details}"
    at_once = figures.extra["limited_at_once_max"]
    assert at_once <= plan.knobs.limit, f"{at_once} limited executions worked at once; {details}"
    if victim:
        assert figures.extra["presumed_dead_warnings"] >= 1, (
            f"the victim never said it was presumed dead; {details}"
        )
        for fault in figures.faults:
            assert fault.victim_rejoined_after is not None, f"the victim never claimed again; {details}"
            assert fault.victim_resumed_after is not None, (
                f"the victim completed nothing afterwards; {details}"
            )


async def test_a_stalled_worker_starts_nothing_stale_and_the_limit_holds(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures]
) -> None:
    what = (
        f"SIGSTOP a busy worker for {OUTAGE:.0f} s (past its lease and the dead-worker bound), then SIGCONT"
    )
    plan = CellPlan(name="stall-sigstop", what=what, workers=3, rate=6.0, knobs=KNOBS, tail=4.0)

    async def schedule(run: CellRun) -> None:
        victim = run.workers[0]
        await run._wait_busy(victim, {chaos_app.LIMITED_TYPE_NAME})
        async with run.fault("sigstop") as fault:
            fault.victim_pid = victim.pid
            victim.pause()
            await asyncio.sleep(OUTAGE)
            victim.resume()
        await _wait_for_rejoin(run, 0, fault)

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    assert_cell(figures, plan, max_other_re_executions=plan.slots)
    assert_held_limits(figures, plan)


@pytest.mark.parametrize("hold", [pytest.param(True, id="held"), pytest.param(False, id="dropped")])
async def test_a_partitioned_worker_starts_nothing_stale_and_the_limit_holds(
    chaos_server: PrivateServer,
    tmp_path: Path,
    record_figures: list[Figures],
    proxy: PartitionProxy,
    hold: bool,
) -> None:
    kind = "held" if hold else "dropped"
    what = f"one worker's connections frozen for {OUTAGE:.0f} s, then thawed; " + (
        "what was sent delivered late" if hold else "what was sent lost, the connections cut"
    )
    plan = CellPlan(name=f"partition-{kind}", what=what, workers=3, rate=6.0, knobs=KNOBS, tail=4.0)

    async def schedule(run: CellRun) -> None:
        victim = run.workers[0]
        await run._wait_busy(victim, {chaos_app.LIMITED_TYPE_NAME})
        async with run.fault(f"partition-{kind}") as fault:
            fault.victim_pid = victim.pid
            proxy.freeze(hold=hold)
            await asyncio.sleep(OUTAGE)
            run.figures.extra["partition_seconds"] = round(proxy.thaw(), 3)
        await _wait_for_rejoin(run, 0, fault)
        run.figures.extra["proxy"] = {
            "chunks_held": proxy.chunks_held,
            "chunks_dropped": proxy.chunks_dropped,
            "connections_cut": proxy.connections_cut,
        }

    figures = await run_cell(plan, chaos_server, tmp_path, schedule, prepare=_through(proxy, 0))
    record_figures.append(figures)
    assert_cell(figures, plan, max_other_re_executions=plan.slots)
    assert_held_limits(figures, plan)


SLOW = 0.02
"""Seconds each chunk waits in the proxy, each way."""


async def test_a_slow_network_loses_nothing_and_starts_nothing_stale(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures], proxy: PartitionProxy
) -> None:
    duration = 30.0 if FULL else 8.0
    what = f"every worker's connections {SLOW * 1000:.0f} ms late each way, for {duration:.0f} s"
    plan = CellPlan(name="slow-network", what=what, workers=2, rate=6.0, knobs=KNOBS)
    proxy.delay = SLOW

    async def schedule(run: CellRun) -> None:
        async with run.fault("slow-network"):
            await asyncio.sleep(duration)

    figures = await run_cell(plan, chaos_server, tmp_path, schedule, prepare=_through(proxy, 0, 1))
    record_figures.append(figures)
    figures.extra["delay_each_way_s"] = SLOW
    assert_cell(figures, plan, max_other_re_executions=0)
    assert_held_limits(figures, plan, victim=False)
