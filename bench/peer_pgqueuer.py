"""pgqueuer through its documented API (asyncpg driver, QueueManager, Queries.enqueue).

python bench/peer_pgqueuer.py install DB
python bench/peer_pgqueuer.py start DB single|batch N BATCH
python bench/peer_pgqueuer.py worker CONFIG_JSON   (db, n, batch_size, max_concurrent_tasks)
python bench/peer_pgqueuer.py latency DB N GAP
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta
from typing import Any

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import contextlib

from common import PYTHON, cpu_seconds, emit, pg_url, rss_bytes, run_loop


async def driver(db: str, host: str | None = None) -> AsyncpgDriver:
    return AsyncpgDriver(await asyncpg.connect(pg_url(db, host)))


async def install(db: str) -> dict[str, Any]:
    d = await driver(db)
    await Queries(d).install()
    return {"ok": True}


async def start(db: str, how: str, n: int, batch: int) -> dict[str, Any]:
    queries = Queries(await driver(db))
    t0 = time.perf_counter()
    if how == "single":
        for _ in range(n):
            await queries.enqueue("noop", None)
    else:
        for i in range(0, n, batch):
            size = min(batch, n - i)
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
    elapsed = time.perf_counter() - t0
    return {"n": n, "seconds": elapsed, "rate": n / elapsed}


async def work(cfg: dict[str, Any]) -> dict[str, Any]:
    qm = QueueManager(Queries(await driver(cfg["db"], cfg.get("host"))))
    state: dict[str, Any] = {"count": 0, "first": None, "cpu0": 0.0}
    rss_start = rss_bytes()

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        if state["first"] is None:
            state["first"] = time.perf_counter()
            state["cpu0"] = cpu_seconds()
        state["count"] += 1

    await qm.run(
        batch_size=cfg["batch_size"],
        max_concurrent_tasks=cfg.get("max_concurrent_tasks"),
        mode=QueueExecutionMode.drain,
    )
    end = time.perf_counter()
    seconds = end - state["first"]
    return {
        "n": state["count"],
        "seconds": seconds,
        "rate": state["count"] / seconds,
        "cpu_per_1000": (cpu_seconds() - state["cpu0"]) / state["count"] * 1000,
        "rss_start": rss_start,
        "rss_end": rss_bytes(),
    }


async def latency(db: str, n: int, gap: float) -> dict[str, Any]:
    queries = Queries(await driver(db))
    proc = await asyncio.create_subprocess_exec(
        PYTHON, __file__, "latency-worker", db, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    await proc.stdout.readline()
    await asyncio.sleep(1.0)
    samples: list[float] = []
    try:
        for _ in range(n):
            t_commit = time.monotonic()  # enqueue is one autocommit statement: measured from its start
            [job_id] = await queries.enqueue("noop", None)
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=40)
            got, t_handler = json.loads(line)
            assert got == job_id, (got, job_id)
            samples.append(t_handler - t_commit)
            await asyncio.sleep(gap)
    finally:
        proc.terminate()
        await proc.wait()
    return {"samples_ms": [s * 1000 for s in samples]}


async def latency_worker(db: str) -> None:
    qm = QueueManager(Queries(await driver(db)))

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        sys.stdout.write(json.dumps([job.id, time.monotonic()]) + "\n")
        sys.stdout.flush()

    emit({"ready": True})
    await qm.run(batch_size=5, max_concurrent_tasks=10, dequeue_timeout=timedelta(seconds=30))


def main(argv: list[str]) -> None:
    cmd = argv[0]
    if cmd == "install":
        emit(run_loop(install(argv[1])))
    elif cmd == "start":
        emit(run_loop(start(argv[1], argv[2], int(argv[3]), int(argv[4]))))
    elif cmd == "worker":
        emit(run_loop(work(json.loads(argv[1]))))
    elif cmd == "latency":
        emit(run_loop(latency(argv[1], int(argv[2]), float(argv[3]))))
    elif cmd == "latency-worker":
        with contextlib.suppress(KeyboardInterrupt):
            run_loop(latency_worker(argv[1]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
