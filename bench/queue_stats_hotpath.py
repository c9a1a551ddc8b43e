"""What queue_stats' two indexes cost the hot path on PostgreSQL: server CPU and WAL per job.

    .venv/bin/python bench/queue_stats_hotpath.py [--jobs 20000] [--rounds 5] [--batch 100]

Two schemas migrated by this checkout; in ``before``, ``job_stats_idx`` and ``job_finished_idx``
are dropped again (the statements are the same on both sides: only the index maintenance
differs). Each round fills both with ``--jobs`` pending jobs (one type), then claims and
completes them in batches (``jobs_acquire`` + ``jobs_complete``, ``--batch`` at a time, as a
batch worker does), alternating which side goes first. Measured over the claim-and-complete
phase only, on the one server process the adapter uses: its user + system CPU (``/proc``, so
the server must run on this machine) and the WAL it wrote. Wall time on a shared machine
swings more than the effect; the CPU of the process doing the work does not wait for a core.
Prints the medians and the after/before ratios; ``--out`` writes them as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from jobchain.contracts import JobComplete, JobsAcquire, JobsCreate, NewJob
from jobchain.entities import new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions

DEFAULT_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432") + "/test"
SIDES = {"before": "bench_qs_hot_before", "after": "bench_qs_hot_after"}


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wal_lsn(adapter: PostgresStateAdapter) -> int:
    async with adapter.transaction(read_only=True) as tx:
        cursor = await tx.connection.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def prepare(url: str, side: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    adapter = await PostgresStateAdapter.open(url, StateOptions(schema=schema, pool_min_size=0))
    try:
        await adapter.migrate()
    finally:
        await adapter.close()
    if side == "before":
        with psycopg.connect(url, autocommit=True) as connection:
            for index in ("jobchain_job_stats_idx", "jobchain_job_finished_idx"):
                connection.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, index)))


async def one_round(url: str, schema: str, jobs: int, batch: int) -> dict[str, float]:
    adapter = await PostgresStateAdapter.open(
        url, StateOptions(schema=schema, pool_min_size=1, pool_max_size=1)
    )
    try:
        async with adapter.transaction() as tx:
            await tx.connection.execute(
                sql.SQL("TRUNCATE {} CASCADE").format(sql.Identifier(schema, "jobchain_job"))
            )
        for start in range(0, jobs, 1000):
            chunk = [
                NewJob(id=new_id(), type_name="t", chain_type_name="t")
                for _ in range(min(1000, jobs - start))
            ]
            async with adapter.transaction() as tx:
                await tx.jobs_create(JobsCreate(jobs=chunk))
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(schema, "jobchain_job")))
        async with adapter.transaction(read_only=True) as tx:
            pid = tx.connection.info.backend_pid
        wal_before, cpu_before = await wal_lsn(adapter), cpu_s(pid)
        done = 0
        while done < jobs:
            async with adapter.autocommit() as tx:
                claimed = await tx.jobs_acquire(
                    JobsAcquire(type_names=["t"], worker_id="w", lease_for=timedelta(minutes=5), limit=batch)
                )
            async with adapter.autocommit() as tx:
                await tx.jobs_complete(
                    [
                        JobComplete(job_id=job.id, worker_id="w", lease_generation=job.lease_generation)
                        for job in claimed.jobs
                    ]
                )
            done += len(claimed.jobs)
        cpu, wal = cpu_s(pid) - cpu_before, await wal_lsn(adapter) - wal_before
    finally:
        await adapter.close()
    return {"server_cpu_us_per_job": cpu * 1e6 / jobs, "wal_bytes_per_job": wal / jobs}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    for side, schema in SIDES.items():
        await prepare(args.url, side, schema)
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    try:
        for round_ in range(args.rounds):
            order = list(SIDES) if round_ % 2 == 0 else list(reversed(SIDES))
            for side in order:
                figures = await one_round(args.url, SIDES[side], args.jobs, args.batch)
                runs[side].append(figures)
                print(
                    f"round {round_ + 1} {side}: {figures['server_cpu_us_per_job']:.1f} us server CPU, "
                    f"{figures['wal_bytes_per_job']:.0f} WAL bytes per job",
                    flush=True,
                )
    finally:
        with psycopg.connect(args.url, autocommit=True) as connection:
            for schema in SIDES.values():
                connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    summary: dict[str, Any] = {"jobs": args.jobs, "rounds": args.rounds, "batch": args.batch, "runs": runs}
    for key in ("server_cpu_us_per_job", "wal_bytes_per_job"):
        before = statistics.median(run[key] for run in runs["before"])
        after = statistics.median(run[key] for run in runs["after"])
        summary[key] = {"before": before, "after": after, "ratio": after / before}
        print(f"{key}: before {before:.1f}, after {after:.1f}, after / before {after / before:.3f}")
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
