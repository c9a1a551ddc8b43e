"""What the scheduling controls cost the worker: the plain row next to each control, interleaved.

    python bench/scheduling.py [--rounds 3] [--jobs 20000] [--backends postgresql,sqlite]
                               [--variants plain,priorities,ordering-keys,max-running]

Row: atomic mode, concurrency 10, prefetch 10, no notify (the plain row of ``make bench``).
Variants, each on a freshly filled store of ``--jobs`` chains:

- ``plain``: no control in use (the figure the controls must not move);
- ``priorities``: every job has a priority from -5 to 5 (round robin), so each claim merges
  the FIFO and the priority index scans;
- ``ordering-keys``: 1,000 ordering keys, chains started round robin over them: every chain
  but the first of its key starts blocked behind its predecessor, and each completion
  unblocks the next;
- ``max-running``: the type has ``max_running=20`` (concurrency 10 + prefetch 10, what the
  worker holds at most: claimed jobs count as running), so the limit's bookkeeping is
  measured, not a throttle: every claim locks the type's control row.

Each round runs every variant once per backend, rotating the order, each in its own process.
Prints per backend and variant the median jobs/s, CPU per 1,000 jobs and the ratio to
``plain``. PostgreSQL state lives in schema ``bench_scheduling`` of ``BENCH_SCHEDULING_DB``
(default ``test``); SQLite in a temporary file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchenv import ensure_venv  # noqa: E402

if __name__ == "__main__":
    ensure_venv(__file__)

from common import PG_BASE, cpu_seconds, run_loop  # noqa: E402

DB = os.environ.get("BENCH_SCHEDULING_DB", "test")
PG_STATE = f"{PG_BASE}/{DB}?schema=bench_scheduling"
KEYS = 1_000
VARIANTS = ("plain", "priorities", "ordering-keys", "max-running")


def psql(sql: str) -> None:
    subprocess.run(["psql", f"{PG_BASE}/{DB}", "-qAtX", "-c", sql], check=True, capture_output=True)


def registry(variant: str) -> tuple[Any, Any]:
    from jobchain import JobTypes

    types = JobTypes()
    job_type = types.define(
        "bench.noop",
        input=None,
        output=None,
        entry=True,
        max_running=20 if variant == "max-running" else None,
    )
    return types, job_type


async def fill(state: str, variant: str, jobs: int) -> None:
    import jobchain
    from jobchain import ChainStart

    types, job_type = registry(variant)
    client = await jobchain.connect(state, notify="none", job_types=types)
    await client.state.migrate()
    try:
        for offset in range(0, jobs, 1_000):
            starts = []
            for i in range(offset, min(offset + 1_000, jobs)):
                options: dict[str, Any] = {}
                if variant == "priorities":
                    options["priority"] = i % 11 - 5
                elif variant == "ordering-keys":
                    options["ordering_key"] = f"key-{i % KEYS}"
                starts.append(ChainStart(job_type=job_type, input=None, **options))
            async with client.transaction() as tx:
                await client.start_chains(tx, starts)
    finally:
        await client.close()


async def work(state: str, variant: str, jobs: int) -> dict[str, float]:
    import asyncio

    import jobchain
    from jobchain.worker import Attempt, Completed, Processors, Worker

    types, job_type = registry(variant)
    client = await jobchain.connect(state, notify="none", job_types=types)
    done = asyncio.Event()
    count = 0
    first: list[float] = []

    async def handle(attempt: Attempt[None, None]) -> Completed:
        nonlocal count
        if not first:
            first.extend((time.perf_counter(), cpu_seconds()))
        result = await attempt.complete(None)
        count += 1
        if count >= jobs:
            done.set()
        return result

    processors = Processors()
    processors.register(job_type, handle)
    worker = Worker(client, processors, concurrency=10, prefetch=10, poll_interval=0.05)
    await worker.start()
    await done.wait()
    await worker.stop()
    seconds = time.perf_counter() - first[0]
    cpu = cpu_seconds() - first[1]
    await client.close()
    return {"rate": count / seconds, "cpu_per_1000": cpu / count * 1000}


def measure(backend: str, variant: str, jobs: int, sqlite_dir: str) -> tuple[float, float]:
    if backend == "postgresql":
        psql("DROP SCHEMA IF EXISTS bench_scheduling CASCADE")
        state = PG_STATE
    else:
        path = Path(sqlite_dir) / "scheduling.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        state = f"sqlite:///{path}"
    child = [sys.executable, __file__, "--child", variant, "--jobs", str(jobs), "--state", state]
    subprocess.run([*child, "--fill"], check=True, capture_output=True)
    if backend == "postgresql":
        psql("ANALYZE bench_scheduling.jobchain_job")
    out = subprocess.run(child, check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return float(result["rate"]), float(result["cpu_per_1000"]) * 1000  # ms per 1,000 jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--state", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--fill", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.child:
        if args.fill:
            run_loop(fill(args.state, args.child, args.jobs))
        else:
            print(json.dumps(run_loop(work(args.state, args.child, args.jobs))))
        return
    variants = args.variants.split(",")
    backends = args.backends.split(",")
    rates: dict[tuple[str, str], list[float]] = {(b, v): [] for b in backends for v in variants}
    cpus: dict[tuple[str, str], list[float]] = {(b, v): [] for b in backends for v in variants}
    with tempfile.TemporaryDirectory(prefix="bench-scheduling-") as sqlite_dir:
        for round_ in range(args.rounds):
            order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
            for backend in backends:
                for variant in order:
                    rate, cpu = measure(backend, variant, args.jobs, sqlite_dir)
                    rates[backend, variant].append(rate)
                    cpus[backend, variant].append(cpu)
                    print(
                        f"round {round_ + 1} {backend} {variant}: {rate:,.0f} jobs/s, "
                        f"{cpu:.1f} ms CPU per 1,000 jobs",
                        flush=True,
                    )
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for backend in backends:
        base_rate = statistics.median(rates[backend, variants[0]])
        base_cpu = statistics.median(cpus[backend, variants[0]])
        summary[backend] = {}
        for variant in variants:
            rate = statistics.median(rates[backend, variant])
            cpu = statistics.median(cpus[backend, variant])
            summary[backend][variant] = {
                "rate": rate,
                "cpu_per_1000": cpu,
                "rate_ratio": rate / base_rate,
                "cpu_ratio": cpu / base_cpu,
            }
            print(
                f"{backend} {variant}: median {rate:,.0f} jobs/s ({rate / base_rate:.3f} of "
                f"{variants[0]}), {cpu:.1f} ms CPU per 1,000 jobs ({cpu / base_cpu:.3f})"
            )
    if args.out:
        Path(args.out).write_text(
            json.dumps({"rounds": args.rounds, "jobs": args.jobs, "summary": summary}, indent=2)
        )


if __name__ == "__main__":
    main()
