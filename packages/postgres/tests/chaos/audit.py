"""The audit of a chaos cell: from the database, the execution log and the audit table.

- lost: a chain the producer committed that is missing or not ``completed`` once the cell
  has drained (must be 0), and any job in the database that is not completed;
- double completions: jobs with two ``chaos_audit`` rows, each written inside a committed
  attempt transaction (must be 0); a completed job with no row is reported too;
- re-executions: execution-log lines beyond the first per job, split into those whose
  previous execution ran in a process that was SIGKILLed (a crash re-run) and the others;
- recovery per fault: from the fault's end to the first completion after it, and to the
  completion of every chain started before it (the backlog drained); after a kill, from the
  kill to the re-execution of the last of the killed process's jobs (rescue started) and to
  its completion (rescued), per job type, and the backlog still waiting at that moment;
- stale starts: a handler began running a job its worker no longer held at that moment: after
  the job's completion had committed, or after an execution of a later attempt had begun
  (must be 0; see :mod:`.audit_limits` for the limited jobs' overlap).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import psycopg

AUDIT_TABLE = """
CREATE TABLE IF NOT EXISTS chaos_audit (
    job_id  uuid NOT NULL,          -- no unique constraint: a second completion must show
    pid     integer NOT NULL,
    attempt integer NOT NULL,
    done_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
JOB_TABLE = "public.jobchain_job"


@dataclass
class Fault:
    """One injected fault: what, when it began and ended (epoch seconds), and its victims."""

    kind: str
    started: float
    ended: float
    killed_pid: int | None = None
    in_flight: int = 0
    """A kill: jobs the killed process was running (logged, never completed). Other faults:
    jobs started (logged) but not completed when the fault ended."""
    committed_before: int = 0
    """Chains the producer had committed when the fault ended (a prefix of its list)."""
    first_completion_after: float | None = None
    backlog_drained_after: float | None = None
    in_flight_ids: list[str] = field(default_factory=list)
    """The killed process's unfinished jobs (kills only)."""
    in_flight_types: dict[str, str] = field(default_factory=dict)
    """Job type of each of ``in_flight_ids``."""
    rescue_started_after: float | None = None
    """From the kill to the start of the re-execution of the last of ``in_flight_ids``."""
    rescue_started_by_type: dict[str, float] = field(default_factory=dict)
    """``rescue_started_after`` per job type of the killed jobs."""
    rescued_after: float | None = None
    """From the kill to the completion of the last of ``in_flight_ids`` (kills only)."""
    backlog_at_rescue: int | None = None
    """Chains started before the last killed job's re-execution began and completed after it:
    the queue the rescue did not wait for."""
    worker_pids: list[int] = field(default_factory=list)
    """The worker processes alive when the fault ended."""
    slowest_worker_resumed_after: float | None = None
    """From the fault's end to the first completion of the last of those workers to complete
    anything (None: one of them completed nothing afterwards)."""
    victim_pid: int | None = None
    """The worker process a stall or partition hit (it lives on, unlike a killed one)."""
    victim_rejoined_after: float | None = None
    """From the fault's end to the victim's log saying a heartbeat got through again and it
    claims again: its rejoin time."""
    victim_resumed_after: float | None = None
    """From the fault's end to the victim's first completion afterwards (it competes with the
    other workers for the jobs, so this is at least its rejoin time)."""


@dataclass
class Figures:
    """What a cell measured; written to the results JSON and the end-of-session table."""

    cell: str
    mode: str
    what: str = ""
    """The fault, in a few words (the report's second column)."""
    started: int = 0
    uncertain: int = 0
    completed: int = 0
    lost: int = 0
    double_completions: int = 0
    missing_audit: int = 0
    executions: int = 0
    re_executions: int = 0
    crash_re_executions: int = 0
    other_re_executions: int = 0
    faults: list[Fault] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    """The cell's knobs and plan (rate, workers), as run."""
    bounds: dict[str, float] = field(default_factory=dict)
    """The bounds the cell asserts, derived from its settings (seconds)."""
    extra: dict[str, Any] = field(default_factory=dict)
    lost_ids: list[str] = field(default_factory=list)
    double_ids: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def in_flight_at_crashes(self) -> int:
        return sum(f.in_flight for f in self.faults)

    def recovery(self, attr: str) -> float | None:
        values = [getattr(f, attr) for f in self.faults if getattr(f, attr) is not None]
        return max(values) if values else None

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["in_flight_at_crashes"] = self.in_flight_at_crashes
        for attr in (
            "first_completion_after",
            "backlog_drained_after",
            "rescue_started_after",
            "rescued_after",
            "slowest_worker_resumed_after",
        ):
            data[f"max_{attr}"] = self.recovery(attr)
        return data


class Execution(NamedTuple):
    """One line of the execution log: a handler began running a job."""

    job_id: str
    pid: int
    attempt: int
    type_name: str
    started: float


def read_executions(path: Path) -> list[Execution]:
    """Every logged execution, in log order."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        job_id, pid, attempt, type_name, started = line.split()
        rows.append(Execution(job_id, int(pid), int(attempt), type_name, float(started)))
    return rows


async def wait_drained(conninfo: str, expected: set[str], limit: float) -> float:
    """Wait until every expected chain and every job in the table is completed; seconds waited."""
    began = time.monotonic()
    query = f"SELECT count(*) FILTER (WHERE status <> 'completed'), count(*) FROM {JOB_TABLE}"
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                cursor = await conn.execute(query)
                row = await cursor.fetchone()
                assert row is not None
                if row[0] == 0 and row[1] >= len(expected):
                    return time.monotonic() - began
        except psycopg.OperationalError:
            pass  # the server may still be coming back
        if time.monotonic() - began > limit:
            return time.monotonic() - began
        await asyncio.sleep(0.25)


async def job_details(conninfo: str, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """What the job table says about some jobs' attempts (why a job ran again)."""
    if not job_ids:
        return {}
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cursor = await conn.execute(
            f"SELECT id::text, attempt, last_attempt_error, rescue_reason, rescued_from, "
            f"extract(epoch FROM rescued_at) FROM {JOB_TABLE} WHERE id = ANY(%s::uuid[])",
            (job_ids,),
        )
        return {
            row[0]: {
                "attempt": row[1],
                "last_attempt_error": row[2],
                "rescue_reason": row[3],
                "rescued_from": row[4],
                "rescued_at": float(row[5]) if row[5] is not None else None,
            }
            for row in await cursor.fetchall()
        }


async def audit(
    conninfo: str, figures: Figures, committed: list[str], uncertain: list[str], exec_log: Path
) -> None:
    """Fill ``figures`` from the database and the execution log (after the cell drained)."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cursor = await conn.execute(
            f"SELECT id::text, status::text, extract(epoch FROM created_at) FROM {JOB_TABLE}"
        )
        jobs = {row[0]: (row[1], float(row[2])) for row in await cursor.fetchall()}
        cursor = await conn.execute("SELECT job_id::text, extract(epoch FROM done_at), pid FROM chaos_audit")
        audit_rows = [(row[0], float(row[1]), int(row[2])) for row in await cursor.fetchall()]
        cursor = await conn.execute(
            f"SELECT coalesce(rescue_reason, '-'), count(*) FROM {JOB_TABLE} "
            "WHERE rescued_at IS NOT NULL GROUP BY 1"
        )
        figures.extra["rescue_reasons"] = {str(row[0]): int(row[1]) for row in await cursor.fetchall()}
    figures.started = len(committed)
    figures.uncertain = len(uncertain)
    known = set(committed)
    not_done = [j for j in committed if jobs.get(j, ("missing", 0.0))[0] != "completed"]
    not_done += [j for j, (status, _) in jobs.items() if status != "completed" and j not in known]
    figures.lost = len(not_done)
    figures.lost_ids = sorted(set(not_done))[:20]
    figures.completed = sum(1 for status, _ in jobs.values() if status == "completed")
    per_job = Counter(job_id for job_id, _, _ in audit_rows)
    doubles = [job_id for job_id, count in per_job.items() if count > 1]
    figures.double_completions = len(doubles)
    figures.double_ids = sorted(doubles)[:20]
    figures.missing_audit = sum(1 for j, (s, _) in jobs.items() if s == "completed" and j not in per_job)
    executions = read_executions(exec_log)
    _count_executions(figures, executions)
    done_at: dict[str, float] = defaultdict(float)
    for job_id, at, _ in audit_rows:
        done_at[job_id] = max(done_at[job_id], at)
    created = {job_id: at for job_id, (_, at) in jobs.items()}
    _recovery(figures, done_at, audit_rows, committed)
    stale = stale_starts(executions, done_at)
    figures.extra["stale_starts"] = len(stale)
    figures.extra["stale_start_examples"] = [e._asdict() for e in stale[:10]]
    _rescues(figures, executions, done_at, created)
    _latency(figures, [(created[j], done) for j, done in done_at.items() if j in created])


def _percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 3)


def _latency(figures: Figures, rows: list[tuple[float, float]]) -> None:
    """Start-to-completion latency of chains started before the first fault and of those
    started a second after the last one: whether the workers came back to their old pace
    (a notify backend that never reconnects leaves them polling)."""
    if not figures.faults:
        phases = {"all": [done - created for created, done in rows]}
    else:
        first, last = figures.faults[0].started, figures.faults[-1].ended + 1.0
        phases = {
            "before": [done - created for created, done in rows if created < first],
            "after": [done - created for created, done in rows if created > last],
        }
    for phase, values in phases.items():
        figures.extra[f"latency_{phase}_p50_s"] = _percentile(values, 0.5)
        figures.extra[f"latency_{phase}_p95_s"] = _percentile(values, 0.95)


def stale_starts(executions: list[Execution], done_at: dict[str, float]) -> list[Execution]:
    """Executions that began when their worker could no longer hold the job: after its
    completion committed, or after an execution of a later attempt of it had begun."""
    stale: list[Execution] = []
    latest_begun: dict[str, Execution] = {}
    for execution in sorted(executions, key=lambda e: e.started):
        done = done_at.get(execution.job_id)
        previous = latest_begun.get(execution.job_id)
        if (done is not None and execution.started > done) or (
            previous is not None and previous.attempt > execution.attempt
        ):
            stale.append(execution)
        if previous is None or execution.attempt > previous.attempt:
            latest_begun[execution.job_id] = execution
    return stale


def _count_executions(figures: Figures, executions: list[Execution]) -> None:
    killed = {f.killed_pid for f in figures.faults if f.killed_pid is not None}
    previous: dict[str, int] = {}
    figures.executions = len(executions)
    for execution in executions:
        if execution.job_id in previous:
            figures.re_executions += 1
            if previous[execution.job_id] in killed:
                figures.crash_re_executions += 1
            else:
                figures.other_re_executions += 1
        previous[execution.job_id] = execution.pid


def _recovery(
    figures: Figures,
    done_at: dict[str, float],
    audit_rows: list[tuple[str, float, int]],
    committed: list[str],
) -> None:
    times = sorted(done_at.values())
    for fault in figures.faults:
        after = [t for t in times if t > fault.ended]
        fault.first_completion_after = round(after[0] - fault.ended, 3) if after else None
        # Chains started before the fault ended: the last of them to complete marks the backlog
        # the fault left behind as drained (0 when all completed while the fault lasted).
        created_before = [done_at[j] for j in committed[: fault.committed_before] if j in done_at]
        last = max(created_before, default=fault.ended)
        fault.backlog_drained_after = round(max(0.0, last - fault.ended), 3)
        if fault.in_flight_ids:
            rescued = [done_at[j] for j in fault.in_flight_ids if j in done_at]
            if len(rescued) == len(fault.in_flight_ids):
                fault.rescued_after = round(max(rescued) - fault.ended, 3)
        resumed = [
            min((at for _, at, p in audit_rows if p == pid and at > fault.ended), default=None)
            for pid in fault.worker_pids
        ]
        if fault.victim_pid is not None:
            fault.victim_resumed_after = next(
                (
                    round(at - fault.ended, 3)
                    for _, at, p in sorted(audit_rows, key=lambda r: r[1])
                    if p == fault.victim_pid and at > fault.ended
                ),
                None,
            )
        if resumed and None not in resumed:
            fault.slowest_worker_resumed_after = round(
                max(r for r in resumed if r is not None) - fault.ended, 3
            )


def _rescues(
    figures: Figures, executions: list[Execution], done_at: dict[str, float], created: dict[str, float]
) -> None:
    """When each killed job began running again, and how much queue was still waiting then."""
    for fault in figures.faults:
        if not fault.in_flight_ids:
            continue
        by_type: dict[str, float] = {}
        restarts: list[float] = []
        for job_id in fault.in_flight_ids:
            again = [
                e.started
                for e in executions
                if e.job_id == job_id and e.pid != fault.killed_pid and e.started > fault.started
            ]
            if not again:
                break  # never ran again: the assertions name it (rescued_after stays None)
            restarts.append(min(again))
            type_name = fault.in_flight_types.get(job_id, "?")
            by_type[type_name] = max(by_type.get(type_name, 0.0), round(min(again) - fault.ended, 3))
        if len(restarts) < len(fault.in_flight_ids):
            continue
        fault.rescue_started_by_type = by_type
        fault.rescue_started_after = max(by_type.values())
        moment = max(restarts)
        fault.backlog_at_rescue = sum(
            1 for job_id, at in created.items() if at < moment and done_at.get(job_id, float("inf")) > moment
        )
