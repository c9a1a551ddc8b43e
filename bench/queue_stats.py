"""queue_stats on PostgreSQL over a large job table: median and p95 latency through the adapter.

    .venv/bin/python bench/queue_stats.py [--jobs 1000000] [--runs 50] [--schema bench_queue_stats]

Builds the table in its own schema (dropped first, and after the run unless ``--keep``) with a
realistic mix: mostly completed history spread over 30 days (denser in the last day and hour),
a pending backlog of 5 % (a tenth of it scheduled later), running jobs (5 % of their leases
expired), failed jobs with twelve error types (5 % without history), cancelled and blocked jobs,
over ten job types of skewed sizes. The rows are inserted in creation order, then VACUUM ANALYZE
runs, as autovacuum would on a live table. Then each variant of ``queue_stats`` runs ``--runs``
times (after three unmeasured runs) through the real adapter, one read-only transaction each,
and the script prints and records the median and p95 in milliseconds, the server process's CPU
time per call (on a shared machine, wall time also counts waiting for a core), the plan of the default
variant (EXPLAIN ANALYZE, JIT off as the adapter sends it) and the machine's load.
Writes ``bench/results/queue-stats-<date>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from jobchain.contracts import QueueStatsGet
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres.queries import Queries

BENCH = Path(__file__).resolve().parent
DEFAULT_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432") + "/test"

# Per million jobs; the rest of the table is completed history.
MIX = {"pending": 50_000, "running": 1_000, "failed": 15_000, "cancelled": 5_000, "blocked": 5_000}

ERROR_TYPES = [
    "TimeoutError",
    "ValueError",
    "KeyError",
    "ConnectionError",
    "HTTPError",
    "RuntimeError",
    "OSError",
    "PermissionError",
    "LookupError",
    "TypeError",
    "ZeroDivisionError",
    "AssertionError",
]

FILL = """
INSERT INTO {job} (
    id, chain_id, type_name, chain_type_name, chain_index, status, input, created_at, scheduled_at,
    attempt, last_attempt_at, leased_by, leased_until, lease_generation, completed_at, completed_by,
    first_attempt_at, attempt_started_at, attempt_errors, failed_at, cancelled_at, cancel_reason,
    open_blocker_count, failed_error_type)
SELECT id, id, type_name, type_name, 0, status::text::{job_status}, '{{"n": 1}}'::jsonb, created_at,
    scheduled_at, attempt, started, leased_by, leased_until, attempt, completed_at, completed_by,
    started, started, attempt_errors, failed_at, cancelled_at, cancel_reason, blocked,
    CASE WHEN status = 'failed' THEN COALESCE(attempt_errors -> -1 ->> 'error_type', '') END
FROM (
    SELECT g.*,
        CASE WHEN g.status IN ('pending', 'blocked') THEN NULL ELSE g.finished - g.took END AS started,
        CASE WHEN g.status = 'completed' THEN g.finished END AS completed_at,
        CASE WHEN g.status = 'completed' THEN 'worker-' || (g.n %% 8) END AS completed_by,
        CASE WHEN g.status = 'failed' THEN g.finished END AS failed_at,
        CASE WHEN g.status = 'cancelled' THEN g.finished END AS cancelled_at,
        CASE WHEN g.status = 'cancelled' THEN 'no longer needed' END AS cancel_reason,
        CASE WHEN g.status = 'running' THEN 'worker-' || (g.n %% 8) END AS leased_by,
        CASE WHEN g.status = 'running' AND g.r3 < 0.05 THEN %(now)s - g.r2 * interval '60 s'
             WHEN g.status = 'running' THEN %(now)s + interval '5 min' - g.r2 * interval '20 s'
        END AS leased_until,
        CASE WHEN g.status IN ('pending', 'blocked') THEN 0 ELSE 1 END AS attempt,
        CASE WHEN g.status = 'blocked' THEN 1 ELSE 0 END AS blocked,
        CASE WHEN g.status = 'pending' AND g.r3 < 0.1 THEN %(now)s + g.r2 * interval '1 day'
             ELSE g.created_at END AS scheduled_at,
        CASE WHEN g.status = 'failed' AND g.r3 >= 0.05 THEN jsonb_build_array(jsonb_build_object(
            'attempt', 1, 'worker_id', 'worker-1', 'message', 'boom', 'traceback', NULL,
            'at', g.finished,
            'error_type', (%(error_types)s::text[])[1 + floor(power(g.r1, 2) * 12)::int]))
        END AS attempt_errors
    FROM (
        SELECT f.*,
            CASE WHEN f.status IN ('pending', 'blocked') THEN NULL
                 WHEN f.status = 'running' THEN %(now)s + interval '1 s'
                 ELSE f.finished_at END AS finished,
            f.finished_at - f.took_ - (f.r3 * interval '10 s') AS created_at,
            f.took_ AS took
        FROM (
            SELECT s.*,
                CASE WHEN s.status = 'pending' AND s.r3 < 0.1 THEN %(now)s - s.r2 * interval '1 hour'
                     WHEN s.status IN ('pending', 'blocked') THEN %(now)s - s.r2 * interval '2 hours'
                     WHEN s.status = 'running' THEN %(now)s
                     WHEN s.r1 < 0.05 THEN %(now)s - s.r2 * interval '1 hour'
                     WHEN s.r1 < 0.40 THEN %(now)s - s.r2 * interval '1 day'
                     ELSE %(now)s - s.r2 * interval '30 days' END AS finished_at,
                CASE WHEN s.status IN ('pending', 'blocked') THEN interval '0'
                     WHEN s.status = 'running' THEN s.r2 * interval '60 s'
                     ELSE interval '20 ms' + power(s.r3, 3) * interval '30 s' END AS took_
            FROM (
                SELECT n, gen_random_uuid() AS id,
                    'type_' || lpad(floor(power(random(), 2) * 10)::int::text, 2, '0') AS type_name,
                    CASE WHEN n <= %(pending)s THEN 'pending'
                         WHEN n <= %(pending)s + %(running)s THEN 'running'
                         WHEN n <= %(pending)s + %(running)s + %(failed)s THEN 'failed'
                         WHEN n <= %(pending)s + %(running)s + %(failed)s + %(cancelled)s THEN 'cancelled'
                         WHEN n <= %(pending)s + %(running)s + %(failed)s + %(cancelled)s + %(blocked)s
                             THEN 'blocked'
                         ELSE 'completed' END AS status,
                    random() AS r1, random() AS r2, random() AS r3
                FROM generate_series(1, %(jobs)s) AS n
            ) AS s
        ) AS f
    ) AS g
) AS row
ORDER BY created_at
"""

VARIANTS: dict[str, QueueStatsGet] = {
    "default (every type, windows 1/5/15 min, 1,000-completion duration samples)": QueueStatsGet(),
    "with throughput (1 h in 1 min buckets)": QueueStatsGet(throughput_window=timedelta(hours=1)),
    "one type (type_03)": QueueStatsGet(type_names=["type_03"]),
}


def build(url: str, schema: str, jobs: int) -> dict[str, Any]:
    """Fill ``schema``'s job table (already migrated) and VACUUM ANALYZE it."""
    scale = jobs / 1_000_000
    counts = {status: int(count * scale) for status, count in MIX.items()}
    now = datetime.now(UTC)
    params: dict[str, Any] = {"now": now, "jobs": jobs, "error_types": list(ERROR_TYPES), **counts}
    table = sql.Identifier(schema, "jobchain_job")
    fill = sql.SQL(FILL).format(job=table, job_status=sql.Identifier(schema, "jobchain_job_status"))
    with psycopg.connect(url, autocommit=True) as connection:
        started = time.perf_counter()
        connection.execute(fill, params)
        filled = time.perf_counter()
        connection.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
        vacuumed = time.perf_counter()
        by_status: dict[str, int] = dict(
            connection.execute(
                sql.SQL("SELECT status::text, count(*) FROM {} GROUP BY 1").format(table)
            ).fetchall()
        )
    return {
        "built_at": now.isoformat(),
        "insert_s": round(filled - started, 1),
        "vacuum_analyze_s": round(vacuumed - filled, 1),
        "jobs_by_status": by_status,
    }


def server_facts(url: str, schema: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as connection:
        settings = {
            name: connection.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0]  # type: ignore[index]
            for name in (
                "server_version",
                "shared_buffers",
                "work_mem",
                "jit",
                "max_parallel_workers_per_gather",
            )
        }
        sizes = connection.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class AS c"
            " WHERE c.relnamespace = %s::regnamespace AND c.relname LIKE 'jobchain_job%%'"
            " ORDER BY pg_relation_size(c.oid) DESC",
            [schema],
        ).fetchall()
    return {"settings": settings, "relation_bytes": dict(sizes)}


def plan(url: str, schema: str, params: dict[str, Any]) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the default variant, JIT off as the adapter runs it."""
    query = Queries(schema, "jobchain_").queue_stats
    with psycopg.connect(url, autocommit=True) as connection, connection.transaction():
        connection.execute("SET LOCAL jit = off")
        rows = connection.execute(b"EXPLAIN (ANALYZE, BUFFERS) " + query, params).fetchall()
    return [row[0] for row in rows]


def nearest_rank(ordered: list[float], percent: int) -> float:
    return ordered[max(0, -(-percent * len(ordered) // 100) - 1)]


def backend_cpu_s(pid: int) -> float:
    """User + system CPU seconds the server process ``pid`` has used (Linux /proc, 10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed(run: Callable[[], Awaitable[object]], runs: int, pid: int | None) -> dict[str, Any]:
    for _ in range(3):
        await run()
    samples: list[float] = []
    cpu_before = backend_cpu_s(pid) if pid is not None else 0.0
    for _ in range(runs):
        started = time.perf_counter()
        await run()
        samples.append((time.perf_counter() - started) * 1000)
    cpu = backend_cpu_s(pid) - cpu_before if pid is not None else None
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(nearest_rank(ordered, 95), 1),
        "min_ms": round(ordered[0], 1),
        "max_ms": round(ordered[-1], 1),
        # The server's CPU per call: what the statement costs, whatever else shares the machine
        # (wall time on a busy machine also counts the time the backend waited for a core).
        "server_cpu_ms_per_call": None if cpu is None else round(cpu * 1000 / runs, 1),
        "samples_ms": [round(sample, 1) for sample in samples],
    }


async def measure(url: str, schema: str, runs: int) -> dict[str, Any]:
    # One connection, so every call runs on the server process whose CPU time is read.
    adapter = await PostgresStateAdapter.open(
        url, StateOptions(schema=schema, pool_min_size=1, pool_max_size=1)
    )
    results: dict[str, Any] = {}
    try:
        async with adapter.transaction(read_only=True) as tx:
            pid = tx.connection.info.backend_pid
        local = os.path.exists(f"/proc/{pid}/stat")  # noqa: ASYNC240 - once, before timing: a server on this machine
        for name, params in VARIANTS.items():

            async def run(params: QueueStatsGet = params) -> object:
                async with adapter.transaction(read_only=True) as tx:
                    return await tx.queue_stats(params)

            load_before = os.getloadavg()[0]
            results[name] = await timed(run, runs, pid if local else None)
            results[name]["load_1min_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            figures = results[name]
            print(
                f"{name}: median {figures['median_ms']} ms, p95 {figures['p95_ms']} ms, "
                f"server CPU {figures['server_cpu_ms_per_call']} ms per call",
                flush=True,
            )
    finally:
        await adapter.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--schema", default="bench_queue_stats")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep the schema after the run")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(args.schema))
    with psycopg.connect(args.url, autocommit=True) as connection:
        connection.execute(drop)

    async def migrate() -> None:
        adapter = await PostgresStateAdapter.open(args.url, StateOptions(schema=args.schema, pool_min_size=0))
        try:
            await adapter.migrate()
        finally:
            await adapter.close()

    asyncio.run(migrate())
    print(f"building {args.jobs:,} jobs in schema {args.schema} ...", flush=True)
    table = build(args.url, args.schema, args.jobs)
    print(f"built in {table['insert_s']} s, VACUUM ANALYZE {table['vacuum_analyze_s']} s", flush=True)
    try:
        variants = asyncio.run(measure(args.url, args.schema, args.runs))
        default = {
            "now": None,
            "type_names": None,
            "windows": [timedelta(minutes=m) for m in (1, 5, 15)],
            "duration_window": timedelta(minutes=15),
            "duration_sample": 1000,
            "error_types_kept": 10,
            "buckets": 0,
            "step_us": 60_000_000,
        }
        explain = plan(args.url, args.schema, default)
        facts = server_facts(args.url, args.schema)
    finally:
        if not args.keep:
            with psycopg.connect(args.url, autocommit=True) as connection:
                connection.execute(drop)
    out = args.out or BENCH / "results" / f"queue-stats-{datetime.now(UTC).date().isoformat()}.json"
    report = {
        "jobs": args.jobs,
        "runs": args.runs,
        "table": table,
        "variants": variants,
        "server": facts,
        "cpus": os.cpu_count(),
        "plan_default_variant": explain,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
