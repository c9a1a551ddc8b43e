"""procrastinate through its documented API (PsycopgConnector, App.task, defer / batch_defer).

python bench/peer_procrastinate.py install DB
python bench/peer_procrastinate.py start DB single|batch N BATCH
python bench/peer_procrastinate.py worker CONFIG_JSON   (db, n, concurrency)
python bench/peer_procrastinate.py latency DB N GAP
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import Any

import procrastinate

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import contextlib

from common import PYTHON, cpu_seconds, emit, pg_url, rss_bytes, run_loop

logging.getLogger("procrastinate").setLevel(logging.ERROR)
STATE: dict[str, Any] = {"count": 0, "first": None, "cpu0": 0.0, "n": 0, "latency": False}


def make_app(db: str, host: str | None = None) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=pg_url(db, host)))

    @app.task(name="noop")
    async def noop() -> None:
        if STATE["latency"]:
            sys.stdout.write(json.dumps([context_job_id(), time.monotonic()]) + "\n")
            sys.stdout.flush()
            return
        if STATE["first"] is None:
            STATE["first"] = time.perf_counter()
            STATE["cpu0"] = cpu_seconds()
        STATE["count"] += 1

    return app


def context_job_id() -> int:
    return int(STATE.get("current", 0))


async def install(db: str) -> dict[str, Any]:
    app = make_app(db)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
    return {"ok": True}


async def start(db: str, how: str, n: int, batch: int) -> dict[str, Any]:
    app = make_app(db)
    task = app.tasks["noop"]
    async with app.open_async():
        t0 = time.perf_counter()
        if how == "single":
            for _ in range(n):
                await task.defer_async()
        else:
            for i in range(0, n, batch):
                await task.batch_defer_async(*({} for _ in range(min(batch, n - i))))
        elapsed = time.perf_counter() - t0
    return {"n": n, "seconds": elapsed, "rate": n / elapsed}


async def work(cfg: dict[str, Any]) -> dict[str, Any]:
    app = make_app(cfg["db"], cfg.get("host"))
    rss_start = rss_bytes()
    async with app.open_async():
        await app.run_worker_async(concurrency=cfg["concurrency"], wait=False)
    end = time.perf_counter()
    seconds = end - STATE["first"]
    return {
        "n": STATE["count"],
        "seconds": seconds,
        "rate": STATE["count"] / seconds,
        "cpu_per_1000": (cpu_seconds() - STATE["cpu0"]) / STATE["count"] * 1000,
        "rss_start": rss_start,
        "rss_end": rss_bytes(),
    }


async def latency(db: str, n: int, gap: float) -> dict[str, Any]:
    app = make_app(db)
    task = app.tasks["noop"]
    proc = await asyncio.create_subprocess_exec(
        PYTHON, __file__, "latency-worker", db, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    await proc.stdout.readline()
    await asyncio.sleep(1.0)
    samples: list[float] = []
    try:
        async with app.open_async():
            for _ in range(n):
                t_commit = time.monotonic()  # defer is one autocommit call: measured from its start
                await task.defer_async()
                line = await asyncio.wait_for(proc.stdout.readline(), timeout=40)
                _, t_handler = json.loads(line)
                samples.append(t_handler - t_commit)
                await asyncio.sleep(gap)
    finally:
        proc.terminate()
        await proc.wait()
    return {"samples_ms": [s * 1000 for s in samples]}


async def latency_worker(db: str) -> None:
    STATE["latency"] = True
    app = make_app(db)
    async with app.open_async():
        emit({"ready": True})
        await app.run_worker_async(concurrency=10)


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
