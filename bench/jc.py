"""jobchain side of the benchmark; every subcommand runs in its own process.

python bench/jc.py start STATE NOTIFY single|single-autocommit|single-sync|batch N BATCH
python bench/jc.py fill STATE N                      (untimed: N chains, 1,000 per transaction)
python bench/jc.py worker CONFIG_JSON                (process N jobs, print one JSON line)
python bench/jc.py latency STATE NOTIFY POLL N GAP   (starter + idle worker subprocess)
python bench/jc.py memory N CONCURRENCY MODE         (in-process adapter: start + process)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

import jobchain
from jobchain import ChainStart, JobTypes
from jobchain.worker import Attempt, Batch, Completed, Processors, Worker

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))

from common import PYTHON, cpu_seconds, emit, rss_bytes, run_loop

types = JobTypes()
noop = types.define("bench.noop", input=None, output=None, entry=True)


async def connect(state: str, notify: str) -> jobchain.Client:
    client = await jobchain.connect(state, notify=notify, job_types=types)
    await client.state.migrate()
    return client


async def start(state: str, notify: str, how: str, n: int, batch: int) -> dict[str, Any]:
    client = await connect(state, notify)
    try:
        t0 = time.perf_counter()
        if how in ("single", "single-autocommit"):
            # single-autocommit: the one INSERT is the whole transaction (no BEGIN/COMMIT round
            # trips), as a one-statement enqueue is elsewhere.
            autocommit = how == "single-autocommit"
            for _ in range(n):
                async with client.transaction(autocommit=autocommit) as tx:
                    await client.start_chain(tx, noop, None)
        else:
            for i in range(0, n, batch):
                async with client.transaction() as tx:
                    await client.start_chains(
                        tx, [ChainStart(job_type=noop, input=None) for _ in range(min(batch, n - i))]
                    )
        elapsed = time.perf_counter() - t0
    finally:
        await client.close()
    return {"n": n, "seconds": elapsed, "rate": n / elapsed}


def start_sync(state: str, notify: str, n: int) -> dict[str, Any]:
    """``n`` single starts through jobchain.sync, each in its own transaction: no event loop."""
    import jobchain.sync

    client = jobchain.sync.connect(state, notify=notify, job_types=types, migrate=True)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            with client.transaction() as tx:
                client.start_chain(tx, noop, None)
        elapsed = time.perf_counter() - t0
    finally:
        client.close()
    return {"n": n, "seconds": elapsed, "rate": n / elapsed}


class Counter:
    """Counts handled jobs; records the first-handler clock, CPU and RSS marks."""

    def __init__(self, n: int, marks: list[int]) -> None:
        self.n = n
        self.count = 0
        self.first: float | None = None
        # The system-wide monotonic clock, comparable between processes (bench/multiprocess.py).
        self.first_mono = 0.0
        self.last_mono = 0.0
        self.cpu0 = 0.0
        self.marks = sorted(marks)
        self.rss: dict[int, int] = {}
        self.started = asyncio.Event()
        self.done = asyncio.Event()

    def begin(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()
            self.first_mono = time.monotonic()
            self.cpu0 = cpu_seconds()
            self.started.set()

    def end(self) -> None:
        self.count += 1
        self.last_mono = time.monotonic()
        if self.marks and self.count >= self.marks[0]:
            self.rss[self.marks.pop(0)] = rss_bytes()
        if self.count >= self.n:
            self.done.set()


async def timeline(counter: Counter, every: float, out: list[tuple[float, int]]) -> None:
    """(seconds since the first handler, jobs handled) every ``every`` seconds."""
    await counter.started.wait()
    assert counter.first is not None
    while True:
        await asyncio.sleep(every)
        out.append((round(time.perf_counter() - counter.first, 3), counter.count))


async def run_until(counter: Counter, cfg: dict[str, Any]) -> None:
    """Until ``n`` jobs are handled; ``max_seconds`` after the first handler started (the long
    run: it then reports how far it got); or, with ``until_stop``, until a line on stdin."""
    if cfg.get("until_stop"):
        await asyncio.to_thread(sys.stdin.readline)
        return
    max_seconds = cfg.get("max_seconds")
    if max_seconds is None:
        await counter.done.wait()
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(counter.started.wait(), max_seconds)
        assert counter.first is not None
        left = max_seconds - (time.perf_counter() - counter.first)
        await asyncio.wait_for(counter.done.wait(), max(0.0, left))


def processors(counter: Counter, mode: str, max_batch: int = 100) -> Processors:
    procs = Processors()
    if mode == "batch":

        async def handle_batch(batch: Batch[None, None]) -> list[None]:
            for _ in batch.jobs:
                counter.begin()
                counter.end()
            return [None] * len(batch)

        procs.register_batch(noop, handle_batch, max_batch=max_batch)
        return procs
    if mode == "atomic":

        async def handle(attempt: Attempt[None, None]) -> Completed:
            counter.begin()
            result = await attempt.complete(None)
            counter.end()
            return result
    else:

        async def handle(attempt: Attempt[None, None]) -> Completed:
            counter.begin()
            await attempt.prepare("staged")
            result = await attempt.complete(None)
            counter.end()
            return result

    procs.register(noop, handle)
    return procs


async def work(cfg: dict[str, Any]) -> dict[str, Any]:
    client = await connect(cfg["state"], cfg.get("notify", "none"))
    counter = Counter(cfg["n"], cfg.get("rss_marks", []))
    # "atomic/no-group": the same handler with the worker's group commit turned off.
    mode, _, variant = cfg["mode"].partition("/")
    worker = Worker(
        client,
        # "batch/50": a batch processor taking up to 50 jobs per handler call.
        processors(counter, mode, int(variant) if mode == "batch" and variant else 100),
        concurrency=cfg["concurrency"],
        prefetch=cfg.get("prefetch", 0),
        group_commit=variant != "no-group",
        poll_interval=cfg.get("poll_interval", 1.0),
    )
    rss_start = rss_bytes()
    if cfg.get("barrier"):  # several processes start claiming together (bench/multiprocess.py)
        emit({"ready": True})
        await asyncio.to_thread(sys.stdin.readline)
    ticks: list[tuple[float, int]] = []
    ticker = asyncio.create_task(timeline(counter, cfg["timeline"], ticks)) if cfg.get("timeline") else None
    await worker.start()
    await run_until(counter, cfg)
    await worker.stop()
    end = time.perf_counter()
    cpu = cpu_seconds() - counter.cpu0
    if ticker is not None:
        ticker.cancel()
    await client.close()
    assert counter.first is not None
    seconds = end - counter.first
    result = {
        "n": counter.count,
        "seconds": seconds,
        "rate": counter.count / seconds,
        "cpu_per_1000": cpu / counter.count * 1000,
        "cpu_seconds": cpu,
        "first_mono": counter.first_mono,
        "last_mono": counter.last_mono,
        "rss_start": rss_start,
        "rss_end": rss_bytes(),
        "rss_marks": counter.rss,
    }
    if ticker is not None:
        result["timeline"] = ticks
    return result


async def memory(n: int, concurrency: int, mode: str, prefetch: int = 0) -> dict[str, Any]:
    """The in-process adapter cannot be shared across processes: start and process in one."""
    client = await connect("memory://", "memory://")
    result: dict[str, Any] = {}
    t0 = time.perf_counter()
    for _ in range(min(n, 5000)):
        async with client.transaction() as tx:
            await client.start_chain(tx, noop, None)
    result["start_single"] = min(n, 5000) / (time.perf_counter() - t0)
    for batch in (100, 1000):
        t0 = time.perf_counter()
        for _ in range(0, n, batch):
            async with client.transaction() as tx:
                await client.start_chains(tx, [ChainStart(job_type=noop, input=None) for _ in range(batch)])
        result[f"start_batch_{batch}"] = n / (time.perf_counter() - t0)
    total = min(n, 5000) + 2 * n
    counter = Counter(total, [])
    worker = Worker(
        client, processors(counter, mode), concurrency=concurrency, prefetch=prefetch, poll_interval=1.0
    )
    await worker.start()
    await counter.done.wait()
    await worker.stop()
    assert counter.first is not None
    seconds = time.perf_counter() - counter.first
    result["process"] = counter.count / seconds
    result["cpu_per_1000"] = (cpu_seconds() - counter.cpu0) / counter.count * 1000
    await client.close()
    return result


async def latency(state: str, notify: str, poll: float, n: int, gap: float) -> dict[str, Any]:
    """Start ``n`` chains one at a time against an idle worker; commit → handler start."""
    client = await connect(state, notify)
    cfg = {"state": state, "notify": notify, "poll_interval": poll}
    proc = await asyncio.create_subprocess_exec(
        PYTHON, __file__, "latency-worker", json.dumps(cfg), stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    await proc.stdout.readline()  # ready
    await asyncio.sleep(0.5)
    samples: list[float] = []
    try:
        for _ in range(n):
            async with client.transaction() as tx:
                started = await client.start_chain(tx, noop, None)
                t_commit = time.monotonic()  # just before COMMIT is sent: conservative
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=max(10.0, 3 * poll))
            job_id, t_handler = json.loads(line)
            assert job_id == started.id, (job_id, started.id)
            samples.append(t_handler - t_commit)
            await asyncio.sleep(gap)
    finally:
        proc.terminate()
        await proc.wait()
        await client.close()
    return {"samples_ms": [s * 1000 for s in samples]}


async def latency_worker(cfg: dict[str, Any]) -> None:
    client = await connect(cfg["state"], cfg["notify"])
    procs = Processors()

    async def handle(attempt: Attempt[None, None]) -> Completed:
        now = time.monotonic()
        sys.stdout.write(json.dumps([attempt.job.chain_id, now]) + "\n")
        sys.stdout.flush()
        return await attempt.complete(None)

    procs.register(noop, handle)
    async with Worker(client, procs, concurrency=10, poll_interval=cfg["poll_interval"]):
        emit({"ready": True})
        await asyncio.Event().wait()


def main(argv: list[str]) -> None:
    cmd = argv[0]
    if cmd == "start" and argv[3] == "single-sync":
        emit(start_sync(argv[1], argv[2], int(argv[4])))
    elif cmd == "start":
        emit(run_loop(start(argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]))))
    elif cmd == "fill":
        emit(run_loop(start(argv[1], "none", "batch", int(argv[2]), 1000)))
    elif cmd == "worker":
        emit(run_loop(work(json.loads(argv[1]))))
    elif cmd == "memory":
        emit(run_loop(memory(int(argv[1]), int(argv[2]), argv[3], int(argv[4]) if len(argv) > 4 else 0)))
    elif cmd == "latency":
        emit(run_loop(latency(argv[1], argv[2], float(argv[3]), int(argv[4]), float(argv[5]))))
    elif cmd == "latency-worker":
        with contextlib.suppress(KeyboardInterrupt):
            run_loop(latency_worker(json.loads(argv[1])))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
