"""Several worker processes on one PostgreSQL database (issue 21 item 4).

The processing table's single-process row runs one worker process, atomic c10 prefetch 10, over
the plan's pre-filled jobs. Here the same total concurrency (10 handler slots, 10 prefetched
jobs) is split over 1, 2 and 4 worker processes on the same database (:data:`LAYOUTS`):

- 1 process: c10 prefetch 10 (this harness's own control for the single-process row);
- 2 processes: c5 prefetch 5 each;
- 4 processes: c3 prefetch 3, c3 prefetch 3, c2 prefetch 2, c2 prefetch 2.

Every process connects, says it is ready and waits, and all are released together, so no
process has the backlog to itself while the others start. The orchestrator polls the table
every 0.1 s until no job is left incomplete, then tells every process to stop.

- jobs/s = jobs / (last completion in any process - first handler start in any process), both
  on the system-wide monotonic clock;
- worker CPU = the sum over the processes, each from its first handler to its stop, per 1,000 jobs;
- server transactions per job: ``pg_stat_database`` of the database from before the processes
  start to after they exit (as the single-process row), the orchestrator's own polls subtracted.
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
from common import PYTHON, Child, CpuMeter, db_xacts, pg_url

LAYOUTS: dict[int, list[tuple[int, int]]] = {
    1: [(10, 10)],
    2: [(5, 5), (5, 5)],
    4: [(3, 3), (3, 3), (2, 2), (2, 2)],
}
"""Worker processes → (concurrency, prefetch) of each; every layout totals c10 prefetch 10."""

POLL_SECONDS = 0.1


def layout_label(parts: list[tuple[int, int]]) -> str:
    """``2 processes: c5 prefetch 5 + c5 prefetch 5 (total c10 prefetch 10)``."""
    count = len(parts)
    shares = " + ".join(f"c{conc} prefetch {prefetch}" for conc, prefetch in parts)
    total = f"total c{sum(c for c, _ in parts)} prefetch {sum(p for _, p in parts)}"
    return f"{count} process{'es' if count > 1 else ''}: {shares} ({total})"


def run_processes(
    state: str,
    notify: str,
    db: str,
    schema: str,
    jobs: int,
    parts: list[tuple[int, int]],
    timeout: float = 600,
) -> dict[str, Any]:
    """Process the ``jobs`` already pending in ``db`` with one worker process per entry of ``parts``."""
    before = db_xacts(db)
    meter = CpuMeter()
    meter.start()
    children: list[Child] = []
    polls = 0
    try:
        for conc, prefetch in parts:
            cfg = {
                "state": state,
                "notify": notify,
                "mode": "atomic",
                "concurrency": conc,
                "prefetch": prefetch,
                "n": 2**62,  # never reached: the orchestrator says when to stop
                "barrier": True,
                "until_stop": True,
            }
            children.append(Child([PYTHON, "bench/jc.py", "worker", json.dumps(cfg)]))
        for child in children:
            child.read()  # {"ready": true}: connected, migrated, not yet claiming
        unfinished = f"SELECT EXISTS (SELECT 1 FROM {schema}.jobchain_job WHERE status <> 'completed')"
        deadline = time.monotonic() + timeout
        with psycopg.connect(pg_url(db), autocommit=True) as conn:
            for child in children:
                child.send({"go": True})
            while True:
                time.sleep(POLL_SECONDS)
                for child in children:
                    child.sample()
                row = conn.execute(unfinished).fetchone()  # type: ignore[arg-type]
                polls += 1
                if row is not None and not row[0]:
                    break
                if any(child.proc.poll() is not None for child in children):
                    raise RuntimeError("a worker process exited before the jobs were done")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(parts)} worker processes took longer than {timeout} s")
        for child in children:
            child.send({"stop": True})
        outs = [child.finish(120) for child in children]
    finally:
        for child in children:
            if child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()
    busy = meter.stop()
    time.sleep(0.5)  # exited backends have reported their statistics by now
    total = sum(int(out["n"]) for out in outs)
    seconds = max(out["last_mono"] for out in outs) - min(out["first_mono"] for out in outs)
    return {
        "n": total,
        "jobs": jobs,
        "processes": len(parts),
        "layout": parts,
        "seconds": seconds,
        "rate": total / seconds,
        "cpu_per_1000": sum(out["cpu_seconds"] for out in outs) / total * 1000,
        "xacts_per_job": (db_xacts(db) - before - polls) / max(1, total),
        "per_process_jobs": [int(out["n"]) for out in outs],
        "peak_rss": max(child.peak_rss for child in children),
        "machine_busy": busy,
    }
