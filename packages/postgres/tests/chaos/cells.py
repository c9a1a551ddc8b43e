"""One chaos cell from start to audit: a fresh database on the private server, workers, the
producer, a fault schedule running beside it, the drain, and the figures; and the bounds a
cell asserts, derived from its settings."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

import psycopg
from psycopg import sql

from jobchain.worker.backoff import DEFAULT_LEASE, DEFAULT_RECOVERY_BACKOFF
from jobchain.worker.heartbeat import DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_MISSED_HEARTBEATS
from jobchain_postgres.testing import PrivateServer

from . import chaos_app
from .audit import Fault, Figures, audit, job_details, read_executions, wait_drained
from .audit_limits import (
    LIVENESS_LAPSED,
    PRESUMED_DEAD,
    count_lines,
    most_at_once,
    ran_again_after_a_lapse,
    read_lapses,
    read_steps,
)
from .faults import conninfo
from .harness import Knobs, Producer, WorkerProcess

FULL = os.environ.get("JOBCHAIN_CHAOS_FULL", "") not in ("", "0")
MODE = "full" if FULL else "compact"
TEMPLATE: Final = "chaos_template"
"""A migrated database with the audit table; every cell's database is a copy of it."""

DEFAULT_LEASE_SECONDS: Final = DEFAULT_LEASE.duration.total_seconds()
RECOVERY_CAP: Final = DEFAULT_RECOVERY_BACKOFF.maximum.total_seconds()
"""The worker loop's longest wait between retries after a database or broker failure."""
CLI_POLL_INTERVAL: Final = 60.0
CLI_CONCURRENCY: Final = 10
RESCUE_SLACK: Final = 2.0
"""Seconds a rescue may take beyond the moment the contract releases the job (the claim that
follows a release's wake-up, a busy machine's scheduling delays)."""


@dataclass
class CellPlan:
    """How a cell runs: workers, load, the injected timing settings, and what follows from them."""

    name: str
    what: str
    """The fault, in a few words (for the failure-mode table)."""
    workers: int = 2
    rate: float = 10.0
    """Chains started per second, from before the first fault until ``tail`` after the last."""
    knobs: Knobs = field(default_factory=Knobs)
    lead: float = 1.5
    """Seconds of steady load before the schedule starts."""
    tail: float = 2.5
    """Seconds of load after the schedule ends: every fault has work to recover to."""
    drain_timeout: float = 120.0
    notify: str | None = None
    """Notify URL of workers and producer; None: PostgreSQL LISTEN/NOTIFY on the state server."""
    input: dict[str, object] = field(default_factory=dict)

    @property
    def database(self) -> str:
        """The cell's own database on the private server."""
        return self.name.replace("-", "_")

    @property
    def concurrency(self) -> int:
        return self.knobs.concurrency or CLI_CONCURRENCY

    @property
    def slots(self) -> int:
        """Jobs the workers can run at once: the most one database fault can interrupt."""
        return self.workers * self.concurrency

    @property
    def capacity(self) -> float:
        """Jobs per second the workers finish when nothing goes wrong."""
        return self.slots / max(self.knobs.work, 0.01)

    @property
    def heartbeat(self) -> float:
        return self.knobs.heartbeat or DEFAULT_HEARTBEAT_INTERVAL

    @property
    def poll(self) -> float:
        return self.knobs.poll_interval or CLI_POLL_INTERVAL

    def lease_of(self, type_name: str) -> float:
        lease = self.knobs.long_lease if type_name == chaos_app.LONG_TYPE_NAME else self.knobs.lease
        return lease or DEFAULT_LEASE_SECONDS

    def crash_release(self, type_name: str) -> float:
        """Seconds after a SIGKILL by which the worker returns a killed job to pending: its
        lease expires, or a peer's heartbeat finds the worker dead (silent for ``interval *
        missed``), whichever comes first, plus one heartbeat interval: a peer notices a death
        at its next beat, and its reaper learns when a lease expires from its heartbeats (the
        earliest foreign lease per beat, so one behind live workers' earlier leases waits for
        the beat after it)."""
        return min(self.lease_of(type_name), self.heartbeat * DEFAULT_MISSED_HEARTBEATS) + self.heartbeat

    def rescue_bound(self, type_name: str) -> float:
        """Seconds after a kill by which a killed job of ``type_name`` must run again."""
        release = self.crash_release(type_name)
        return round(release + max(RESCUE_SLACK, 0.25 * release), 1)

    def drain_seconds(self, length: float) -> float:
        """Seconds the spare capacity needs for the backlog of a fault of ``length`` seconds."""
        spare = max(self.capacity - self.rate, 0.25 * self.capacity)
        return self.rate * length / spare

    def recovery_bound(self, fault: Fault) -> float:
        """Seconds after a fault by which every chain started before it must have completed:
        twice what the settings explain, plus 10 s (a loaded machine). A kill: the rescue of
        its jobs; anything else: the fault itself, the loop's longest recovery backoff and a
        lease (a job whose attempt the fault cut), then the backlog the fault built up."""
        length = max(fault.ended - fault.started, 0.0)
        if fault.killed_pid is not None:
            base = max(self.crash_release(t) for t in self.knobs.types) + self.knobs.work
        else:
            base = length + RECOVERY_CAP + max(self.lease_of(t) for t in self.knobs.types)
        return round(2 * (base + self.drain_seconds(length)) + 10.0, 1)

    def recovery_bounds(self, faults: list[Fault]) -> list[float]:
        """:meth:`recovery_bound` of each fault (once audited), extended to the recovery of every
        later fault that began while its backlog was still there: a series of faults (a
        terminate every 0.5 s) holds up the first one's backlog until the last one's recovery."""
        bounds = []
        for index, fault in enumerate(faults):
            bound = self.recovery_bound(fault)
            drained_at = fault.ended + (fault.backlog_drained_after or 0.0)
            for later in faults[index + 1 :]:
                if later.started < drained_at:
                    bound = max(bound, round(later.ended - fault.ended + self.recovery_bound(later), 1))
            bounds.append(bound)
        return bounds

    def settings(self) -> dict[str, object]:
        return {
            "workers": self.workers,
            "rate": self.rate,
            "concurrency": self.concurrency,
            "heartbeat": self.heartbeat,
            "missed_heartbeats": DEFAULT_MISSED_HEARTBEATS,
            "leases": {t: self.lease_of(t) for t in self.knobs.types},
            "poll_interval": self.poll,
            "recovery_cap": RECOVERY_CAP,
            "knobs": asdict(self.knobs),
        }


class CellRun:
    """A running cell: what a fault schedule may touch, and the fault log it fills."""

    def __init__(self, plan: CellPlan, server: PrivateServer, workdir: Path) -> None:
        self.plan = plan
        self.server = server
        self.workdir = workdir
        self.database = plan.database
        self.state = f"postgresql://postgres@127.0.0.1:{server.port}/{self.database}"
        self.notify = plan.notify or self.state
        self.conninfo = conninfo(server.port, self.database)
        self.exec_log = workdir / "executions.log"
        self.figures = Figures(cell=plan.name, mode=MODE, what=plan.what, settings=plan.settings())
        self.workers = [
            WorkerProcess(i, state=self.state, notify=self.notify, knobs=plan.knobs, workdir=workdir)
            for i in range(plan.workers)
        ]
        self.in_flight_sets: list[set[str]] = []
        """Per fault, the jobs in flight at it: the only ones allowed to run again."""
        self.producer = Producer(
            self.state, self.notify, rate=plan.rate, types=plan.knobs.types, input=plan.input
        )

    async def done_jobs(self) -> set[str]:
        """Job ids whose completion has committed (they have an audit row)."""
        async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
            cursor = await conn.execute("SELECT job_id::text FROM chaos_audit")
            return {row[0] for row in await cursor.fetchall()}

    def logged_jobs(self) -> set[str]:
        return {e.job_id for e in read_executions(self.exec_log)}

    @asynccontextmanager
    async def fault(self, kind: str, *, done_before: set[str] | None = None) -> AsyncIterator[Fault]:
        """Record a fault around the block. In flight = jobs logged by the end of the fault
        whose completion had not committed when it began (``done_before``, read now if None)."""
        done = done_before if done_before is not None else await self.done_jobs()
        fault = Fault(kind=kind, started=time.time(), ended=0.0)
        yield fault
        fault.ended = time.time()
        fault.committed_before = len(self.producer.committed)
        fault.worker_pids = [w.pid for w in self.workers if w.alive()]
        if fault.killed_pid is None:
            # Allowed to run again: every job logged by the end whose completion had not
            # committed when the fault began. Counted as in flight: those of them still not
            # completed once it ended (what the fault interrupted or held up).
            touched = self.logged_jobs() - done
            self.in_flight_sets.append(touched)
            fault.in_flight = len(touched - await self.done_jobs())
        self.figures.faults.append(fault)

    async def kill_worker(self, index: int, *, types: Iterable[str] = ()) -> Fault:
        """SIGKILL worker ``index`` once it runs a job (one of each of ``types``, if given),
        count its in-flight jobs, and start a new process in its place."""
        worker = self.workers[index]
        await self._wait_busy(worker, set(types))
        async with self.fault("sigkill") as fault:
            fault.killed_pid = await asyncio.to_thread(worker.kill)
        await asyncio.sleep(0.3)  # a commit the server had already received may still land
        done = await self.done_jobs()
        latest = {e.job_id: e for e in read_executions(self.exec_log)}
        in_flight = {j: e.type_name for j, e in latest.items() if e.pid == fault.killed_pid and j not in done}
        fault.in_flight = len(in_flight)
        fault.in_flight_ids = sorted(in_flight)
        fault.in_flight_types = in_flight
        self.in_flight_sets.append(set(in_flight))
        await asyncio.to_thread(worker.start)
        # The new process counts as alive at the kill: its first completion is the rescue too.
        fault.worker_pids = [w.pid for w in self.workers]
        return fault

    async def _wait_busy(self, worker: WorkerProcess, types: set[str], limit: float = 15.0) -> None:
        """Wait (up to ``limit`` s) until the worker began a job (one of each of ``types``) so
        recently that it surely still runs it: less than 60% of a job's work ago."""
        deadline = time.monotonic() + limit
        fresh = 0.6 * self.plan.knobs.work
        while time.monotonic() < deadline:
            now = time.time()
            running = {
                e.type_name
                for e in read_executions(self.exec_log)
                if e.pid == worker.pid and now - e.started < fresh
            }
            if running and types <= running:
                return
            await asyncio.sleep(0.02)

    async def wait_rescued(self, fault: Fault, limit: float) -> None:
        """Wait (up to ``limit`` s after the kill) until every killed job ran again and completed,
        so that a next kill cannot hit a rescued job and blur this kill's figures."""
        while time.time() < fault.ended + limit:
            if set(fault.in_flight_ids) <= await self.done_jobs():
                return
            await asyncio.sleep(0.1)


def _log_levels(workers: list[WorkerProcess]) -> dict[str, int]:
    """WARNING and ERROR lines the workers wrote (how loud a fault is)."""
    counts: Counter[str] = Counter()
    for worker in workers:
        for line in worker.tail(chars=50_000_000).splitlines():
            for level in ("WARNING", "ERROR", "CRITICAL"):
                if f" {level} " in line:
                    counts[level] += 1
    return dict(counts)


def _limits_and_words(run: CellRun) -> None:
    """The limited type's most executions at once, and what the workers said of their liveness."""
    steps = read_steps(run.workdir / "steps.log")
    if steps:
        at_once, which = most_at_once(steps, run.plan.knobs.step)
        run.figures.extra["limit"] = run.plan.knobs.limit
        run.figures.extra["limited_at_once_max"] = at_once
        run.figures.extra["limited_at_once_when_max"] = which
        run.figures.extra["limited_steps"] = len(steps)
    logs = [w.log_file for w in run.workers]
    run.figures.extra["presumed_dead_warnings"] = sum(count_lines(f, PRESUMED_DEAD) for f in logs)
    run.figures.extra["liveness_lapses"] = sum(count_lines(f, LIVENESS_LAPSED) for f in logs)


def _create_database(server: PrivateServer, database: str) -> None:
    with psycopg.connect(conninfo(server.port, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(database), sql.Identifier(TEMPLATE)
            )
        )


async def _in_threads(calls: Iterable[Callable[[], None]]) -> None:
    await asyncio.gather(*(asyncio.to_thread(call) for call in calls))


async def run_cell(
    plan: CellPlan,
    server: PrivateServer,
    workdir: Path,
    schedule: Callable[[CellRun], Awaitable[None]],
    *,
    prepare: Callable[[CellRun], None] | None = None,
) -> Figures:
    """Run ``schedule`` beside the producer, then drain and audit; return the figures.

    ``prepare`` may change the workers (their URLs: a proxy) before they are launched.
    """
    began = time.monotonic()
    run = CellRun(plan, server, workdir)
    await asyncio.to_thread(_create_database, server, run.database)
    if prepare is not None:
        prepare(run)
    try:
        for worker in run.workers:
            worker.launch()
        await _in_threads(w.wait_ready for w in run.workers)
        producing = asyncio.ensure_future(run.producer.run())
        try:
            await asyncio.sleep(plan.lead)  # steady state before the first fault
            await schedule(run)
            await asyncio.sleep(plan.tail)
        finally:
            run.producer.stop.set()
            await producing
        exited = [(w.index, w.process.returncode) for w in run.workers if w.process and not w.alive()]
        run.figures.extra["workers_exited"] = exited
        drained = await wait_drained(run.conninfo, set(run.producer.committed), plan.drain_timeout)
        run.figures.extra["drain_after_producer_s"] = round(drained, 3)
        await audit(run.conninfo, run.figures, run.producer.committed, run.producer.uncertain, run.exec_log)
        run.figures.extra["failed_batches"] = run.producer.failed_batches
        allowed: set[str] = set().union(*run.in_flight_sets)
        rerun = {j for j, n in Counter(e.job_id for e in read_executions(run.exec_log)).items() if n > 1}
        run.figures.extra["re_executed_jobs"] = len(rerun)
        strays = sorted(rerun - allowed)
        if strays:  # why they ran again: their executions and what the job rows recorded
            details = await job_details(run.conninfo, strays)
            for execution in read_executions(run.exec_log):
                if execution.job_id in details:
                    details[execution.job_id].setdefault("executions", []).append(execution)
            lapses = read_lapses(w.log_file for w in run.workers)
            lapsed = [j for j in strays if ran_again_after_a_lapse(details.get(j, {}), lapses)]
            strays = [j for j in strays if j not in lapsed]
            run.figures.extra["re_executed_after_liveness_lapse"] = lapsed
            shown = {j: details[j] for j in strays[:20] if j in details}
            run.figures.extra["re_executed_not_in_flight_detail"] = shown
        run.figures.extra["re_executed_not_in_flight"] = strays[:20]
        run.figures.extra["worker_logs"] = [str(w.log_file) for w in run.workers]
        run.figures.extra["worker_log_lines"] = _log_levels(run.workers)
        _limits_and_words(run)
        bounds = {f"recovery_{i}": b for i, b in enumerate(plan.recovery_bounds(run.figures.faults))}
        bounds |= {f"rescue_{t}": plan.rescue_bound(t) for t in plan.knobs.types}
        run.figures.bounds = bounds
    finally:
        await _in_threads(w.stop for w in run.workers)
        run.figures.wall_seconds = round(time.monotonic() - began, 1)
    return run.figures


def assert_cell(
    figures: Figures,
    plan: CellPlan,
    *,
    max_other_re_executions: int,
    crash_slots: int = 0,
    only_faults_rerun: bool = True,
    check_drain: bool = True,
) -> None:
    """The invariants of every cell.

    Nothing lost, no double completion, every completion audited; re-executions in a killed
    process's wake at most the jobs it had in flight (and at most kills * concurrency =
    ``crash_slots``), other re-executions at most ``max_other_re_executions``; after every
    fault, the backlog it left drained within :meth:`CellPlan.recovery_bounds` (unless
    ``check_drain`` is off: an overloaded queue never drains while the load lasts), and every
    killed job ran again within :meth:`CellPlan.rescue_bound` of its type.
    """
    details = f"figures: {figures.as_json()}"
    assert figures.started > 0, details
    assert not figures.extra.get("workers_exited"), f"a worker process ended on its own; {details}"
    assert figures.lost == 0, f"lost chains {figures.lost_ids}; {details}"
    assert figures.double_completions == 0, f"completed twice: {figures.double_ids}; {details}"
    assert figures.missing_audit == 0, f"completed without the handler's audit row; {details}"
    assert figures.crash_re_executions <= figures.in_flight_at_crashes, details
    assert figures.crash_re_executions <= crash_slots, details
    assert figures.other_re_executions <= max_other_re_executions, details
    if only_faults_rerun:
        assert not figures.extra.get("re_executed_not_in_flight"), f"a job no fault hit ran again; {details}"
    for fault, bound in zip(figures.faults, plan.recovery_bounds(figures.faults), strict=True):
        assert fault.first_completion_after is not None, f"nothing completed after {fault}; {details}"
        assert fault.backlog_drained_after is not None
        if check_drain:
            slow = f"slow recovery (bound {bound} s) after {fault}; {details}"
            assert fault.backlog_drained_after <= bound, slow
        if fault.in_flight_ids:
            assert fault.rescue_started_after is not None, f"a killed job never ran again: {fault}; {details}"
            for type_name, started in fault.rescue_started_by_type.items():
                limit = plan.rescue_bound(type_name)
                slow = f"slow rescue of {type_name} (bound {limit} s) after {fault}; {details}"
                assert started <= limit, slow
            assert fault.rescued_after is not None, f"a killed job never completed: {fault}; {details}"
