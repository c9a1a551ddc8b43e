"""The audit of the limited jobs and of the workers' own words, for the stall and partition cells.

- limited jobs at once: each line of the step log is one step of ``chaos.limited``'s
  cooperative handler, taken after it read its abort signal; a step lasts ``step`` seconds.
  The most distinct jobs whose steps overlap at one moment must stay within the type's
  ``max_running`` — a stalled worker's handler and its successor never work at once;
- the worker logs: how many times a worker was told it had been presumed dead (the documented
  WARNING), and how many times it went past its liveness deadline on its own. A worker past
  that deadline aborts its attempts by design (a fault that kills its connections several
  times over can keep every heartbeat from being confirmed), so a job it held then may run
  again although it started after the fault: :func:`ran_again_after_a_lapse` tells those
  apart from re-executions nothing explains.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

PRESUMED_DEAD = "was presumed dead by another worker"
LIVENESS_LAPSED = "has had no heartbeat confirmed"
CONFIRMED_AGAIN = "has a heartbeat confirmed again"
_LAPSE_LINE = re.compile(r"worker (\S+) " + re.escape(LIVENESS_LAPSED))


class Lapse(NamedTuple):
    """A worker's report that it went past its liveness deadline (and aborted its attempts)."""

    worker_id: str
    at: float


def read_lapses(log_files: Iterable[Path]) -> list[Lapse]:
    """Every liveness lapse the worker logs report, with its wall-clock time."""
    lapses = []
    for log_file in log_files:
        if not log_file.exists():
            continue
        for line in log_file.read_text(errors="replace").splitlines():
            found = _LAPSE_LINE.search(line)
            if found is None:
                continue
            try:
                at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:
                continue
            lapses.append(Lapse(found[1], at))
    return lapses


def ran_again_after_a_lapse(detail: Mapping[str, Any], lapses: Iterable[Lapse]) -> bool:
    """Whether a job ran again because the worker holding it reported a liveness lapse meanwhile.

    ``detail`` is what the audit gathered for the job: its row's ``rescue_reason``,
    ``rescued_from`` and ``rescued_at``, and its ``executions``. It must have been rescued
    from that worker for an expired lease, and the lapse fall between the start of its first
    execution and that rescue.
    """
    executions = detail.get("executions") or []
    rescued_at = detail.get("rescued_at")
    if detail.get("rescue_reason") != "lease_expired" or not executions or rescued_at is None:
        return False
    first = min(execution.started for execution in executions)
    holder = detail.get("rescued_from")
    return any(lapse.worker_id == holder and first <= lapse.at <= rescued_at for lapse in lapses)


class Step(NamedTuple):
    """One step of a limited job's handler."""

    job_id: str
    pid: int
    attempt: int
    at: float


def read_steps(path: Path) -> list[Step]:
    """Every logged step, in log order."""
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        job_id, pid, attempt, at = line.split()
        steps.append(Step(job_id, int(pid), int(attempt), float(at)))
    return steps


def most_at_once(steps: list[Step], step_seconds: float) -> tuple[int, list[str]]:
    """The most distinct jobs doing a step at one moment, and the executions then at work
    (``job_id/pid/attempt``)."""
    # A step is [at, at + step): the work it stands for. Ends sort before starts at one moment.
    events = sorted(
        [(s.at, 1, s) for s in steps] + [(s.at + step_seconds, 0, s) for s in steps],
        key=lambda e: (e[0], e[1]),
    )
    active: dict[tuple[str, int, int], int] = {}
    best, best_set = 0, []
    for _, starting, step in events:
        key = (step.job_id, step.pid, step.attempt)
        if starting:
            active[key] = active.get(key, 0) + 1
        else:
            active[key] -= 1
            if not active[key]:
                del active[key]
        if len(active) > best:
            best = len(active)
            best_set = sorted(f"{j}/{p}/{a}" for j, p, a in active)
    return best, best_set


def count_lines(log_file: Path, marker: str) -> int:
    """Lines of a worker log that contain ``marker``."""
    if not log_file.exists():
        return 0
    return sum(1 for line in log_file.read_text(errors="replace").splitlines() if marker in line)


def first_line_after(log_file: Path, marker: str, after: float) -> float | None:
    """When (wall clock) a worker first logged a line containing ``marker`` after ``after``.

    The CLI's log lines begin with ``asctime``, the local time to the millisecond.
    """
    if not log_file.exists():
        return None
    for line in log_file.read_text(errors="replace").splitlines():
        if marker not in line:
            continue
        try:
            at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        if at > after:
            return at
    return None
