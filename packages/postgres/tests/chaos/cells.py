"""One chaos cell from start to audit: a fresh database on the private server, workers, the
producer, a fault schedule running beside it, the drain, and the figures."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

import jobchain
from jobchain_postgres.testing import PrivateServer

from . import chaos_app
from .audit import AUDIT_TABLE, Fault, Figures, audit, read_executions, wait_drained
from .faults import conninfo
from .harness import Knobs, Producer, WorkerProcess

FULL = os.environ.get("JOBCHAIN_CHAOS_FULL", "") not in ("", "0")
MODE = "full" if FULL else "compact"


@dataclass
class CellPlan:
    """How a cell runs: workers, load, duration; the knobs are the injected timing settings."""

    name: str
    workers: int = 2
    rate: float = 20.0
    duration: float = 24.0
    drain_timeout: float = 120.0
    knobs: Knobs = field(default_factory=Knobs)
    notify: str | None = None
    """Notify URL of workers and producer; None: PostgreSQL LISTEN/NOTIFY on the state server."""
    input: dict[str, object] = field(default_factory=dict)

    @property
    def database(self) -> str:
        """The cell's own database on the private server."""
        return self.name.replace("-", "_")

    @property
    def slots(self) -> int:
        """Jobs the workers can run at once: the most one database fault can interrupt."""
        return self.workers * self.knobs.concurrency


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
        self.figures = Figures(cell=plan.name, mode=MODE)
        self.workers = [
            WorkerProcess(i, state=self.state, notify=self.notify, knobs=plan.knobs, workdir=workdir)
            for i in range(plan.workers)
        ]
        self.in_flight_sets: list[set[str]] = []
        """Per fault, the jobs in flight at it: the only ones allowed to run again."""
        self.producer = Producer(
            self.state, self.notify, rate=plan.rate, duration=plan.duration, input=plan.input
        )

    async def done_jobs(self) -> set[str]:
        """Job ids whose completion has committed (they have an audit row)."""
        async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
            cursor = await conn.execute("SELECT job_id::text FROM chaos_audit")
            return {row[0] for row in await cursor.fetchall()}

    def logged_jobs(self) -> set[str]:
        return {job_id for job_id, _, _ in read_executions(self.exec_log)}

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

    async def kill_worker(self, index: int) -> Fault:
        """SIGKILL worker ``index`` (once it has a job in flight), count its in-flight jobs,
        and start a new process in its place."""
        worker = self.workers[index]
        await self._wait_busy(worker)
        async with self.fault("sigkill") as fault:
            fault.killed_pid = await asyncio.to_thread(worker.kill)
        await asyncio.sleep(0.3)  # a commit the server had already received may still land
        executions = read_executions(self.exec_log)
        done = await self.done_jobs()
        latest: dict[str, int] = {}
        for job_id, pid, _ in executions:
            latest[job_id] = pid
        in_flight = {j for j, pid in latest.items() if pid == fault.killed_pid and j not in done}
        fault.in_flight = len(in_flight)
        fault.in_flight_ids = sorted(in_flight)
        self.in_flight_sets.append(in_flight)
        await asyncio.to_thread(worker.start)
        # The new process counts as alive at the kill: its first completion is the rescue too.
        fault.worker_pids = [w.pid for w in self.workers]
        return fault

    async def _wait_busy(self, worker: WorkerProcess, limit: float = 10.0) -> None:
        """Wait (up to ``limit`` s) until the worker runs a job whose completion has not committed."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            latest = {job_id: pid for job_id, pid, _ in read_executions(self.exec_log)}
            mine = {job_id for job_id, pid in latest.items() if pid == worker.pid}
            if mine - await self.done_jobs():
                return
            await asyncio.sleep(0.05)


def _log_levels(workers: list[WorkerProcess]) -> dict[str, int]:
    """WARNING and ERROR lines the workers wrote (how loud a fault is)."""
    counts: Counter[str] = Counter()
    for worker in workers:
        for line in worker.tail(chars=50_000_000).splitlines():
            for level in ("WARNING", "ERROR", "CRITICAL"):
                if f" {level} " in line:
                    counts[level] += 1
    return dict(counts)


def _create_database(server: PrivateServer, database: str) -> None:
    with psycopg.connect(conninfo(server.port, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    with psycopg.connect(conninfo(server.port, database), autocommit=True) as conn:
        conn.execute(AUDIT_TABLE)


async def run_cell(
    plan: CellPlan,
    server: PrivateServer,
    workdir: Path,
    schedule: Callable[[CellRun], Awaitable[None]],
) -> Figures:
    """Run ``schedule`` beside the producer, then drain and audit; return the figures."""
    run = CellRun(plan, server, workdir)
    await asyncio.to_thread(_create_database, server, run.database)
    migrate = await jobchain.connect(run.state, notify="none", job_types=chaos_app.job_types, migrate=True)
    await migrate.close()
    try:
        for worker in run.workers:
            await asyncio.to_thread(worker.start)
        producing = asyncio.ensure_future(run.producer.run())
        try:
            await asyncio.sleep(2.0)  # steady state before the first fault
            await schedule(run)
        finally:
            await producing
        exited = [(w.index, w.process.returncode) for w in run.workers if w.process and not w.alive()]
        run.figures.extra["workers_exited"] = exited
        expected = set(run.producer.committed)
        drained = await wait_drained(run.conninfo, expected, plan.drain_timeout)
        run.figures.extra["drain_after_producer_s"] = round(drained, 3)
        await audit(run.conninfo, run.figures, run.producer.committed, run.producer.uncertain, run.exec_log)
        run.figures.extra["failed_batches"] = run.producer.failed_batches
        allowed: set[str] = set().union(*run.in_flight_sets)
        rerun = {j for j, n in Counter(j for j, _, _ in read_executions(run.exec_log)).items() if n > 1}
        run.figures.extra["re_executed_jobs"] = len(rerun)
        run.figures.extra["re_executed_not_in_flight"] = sorted(rerun - allowed)[:20]
        run.figures.extra["worker_logs"] = [str(w.log_file) for w in run.workers]
        run.figures.extra["worker_log_lines"] = _log_levels(run.workers)
    finally:
        for worker in run.workers:
            await asyncio.to_thread(worker.stop)
    return run.figures


def assert_cell(
    figures: Figures,
    *,
    max_other_re_executions: int,
    recovery_bound: float,
    crash_slots: int = 0,
    only_faults_rerun: bool = True,
) -> None:
    """The invariants of every cell.

    Nothing lost, no double completion, every completion audited; re-executions in a killed
    process's wake at most the jobs it had in flight (and at most kills * concurrency =
    ``crash_slots``), other re-executions at most ``max_other_re_executions``; after every
    fault, the backlog it left drained within ``recovery_bound`` seconds (a generous bound).
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
    for fault in figures.faults:
        assert fault.first_completion_after is not None, f"nothing completed after {fault}; {details}"
        assert fault.backlog_drained_after is not None
        assert fault.backlog_drained_after <= recovery_bound, f"slow recovery after {fault}; {details}"
        if fault.in_flight_ids:
            assert fault.rescued_after is not None, f"a killed job never completed: {fault}; {details}"
            assert fault.rescued_after <= recovery_bound, f"slow rescue after {fault}; {details}"
