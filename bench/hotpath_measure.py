"""Hot-path measurement of the PostgreSQL job table (issue 21): bench only, not part of `make bench`.

Runs a private PostgreSQL cluster with production-like settings, migrates a schema (all
migrations, or only those up to ``--upto`` to measure an earlier layout with today's code), fills
a pending backlog through the library, then processes a fixed number of jobs with a real Worker
(atomic handler, concurrency 10, prefetch 10, no-op) and reports: jobs/s, the HOT ratio and
tuple counts from pg_stat_user_tables, the peak of n_dead_tup (sampled every second), table and
index sizes, and EXPLAIN (ANALYZE, BUFFERS) of the claim statements (rolled back) on the backlog
before and after processing. A small backlog (``--small``) runs first for comparison.

    .venv/bin/python bench/hotpath_measure.py --label before --upto 0008_scheduling \\
        --out bench/results/hotpath-before-2026-11-26

Writes ``OUT.json`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

import jobchain
from jobchain import ChainStart, JobTypes
from jobchain.worker import Attempt, Completed, Processors, Worker
from jobchain_postgres.queries import Queries, migration, migration_names
from jobchain_postgres.testing import PrivateServer

SETTINGS = {
    "shared_buffers": "2GB",
    "effective_cache_size": "8GB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "15min",
    "wal_buffers": "64MB",
    "autovacuum": "on",
    "autovacuum_naptime": "10s",
    "max_connections": "200",
    "synchronous_commit": "on",
    "fsync": "on",
}
PREFIX = "jobchain_"
TYPE = "bench.noop"
CLAIMS = ("jobs_acquire_plain", "jobs_acquire_atomic_plain")

types = JobTypes()
noop = types.define(TYPE, input=None, output=None, entry=True)


@dataclass
class Progress:
    """Jobs handled so far, and when the first one started."""

    target: int
    count: int = 0
    first: float | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


def migrate(url: str, schema: str, upto: str | None) -> list[str]:
    """Apply the migrations (those up to ``upto`` included), recording each in the ledger."""
    names = [n for n in migration_names() if upto is None or n <= upto]
    queries = Queries(schema, PREFIX)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(queries.migration_bootstrap)
        for name in names:
            with conn.transaction():
                conn.execute(migration(name, schema, PREFIX))
                conn.execute(queries.migration_record, {"name": name})
    return names


def job_table(schema: str) -> str:
    return sql.Identifier(schema, PREFIX + "job").as_string(None)


async def table_stats(conn: psycopg.AsyncConnection[Any], schema: str) -> dict[str, Any]:
    cur = await conn.execute(
        "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_live_tup, n_dead_tup,"
        " autovacuum_count, autoanalyze_count, vacuum_count"
        " FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
        (schema, PREFIX + "job"),
    )
    row = await cur.fetchone()
    assert row is not None
    assert cur.description is not None
    return {d.name: v for d, v in zip(cur.description, row, strict=True)}


async def sizes(conn: psycopg.AsyncConnection[Any], schema: str) -> dict[str, Any]:
    table = job_table(schema)
    cur = await conn.execute(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index AS i JOIN pg_class AS c"
        " ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass ORDER BY c.relname",
        (table,),
    )
    indexes = {name.removeprefix(PREFIX): size for name, size in await cur.fetchall()}
    cur = await conn.execute(
        "SELECT pg_relation_size(%s::regclass), pg_total_relation_size(%s::regclass)", (table, table)
    )
    row = await cur.fetchone()
    assert row is not None
    return {"table": row[0], "total": row[1], "indexes_total": sum(indexes.values()), "indexes": indexes}


_BUFFERS = re.compile(r"Buffers: (.*)")
_TIME = re.compile(r"Execution Time: ([0-9.]+) ms")


async def explain(conn: psycopg.AsyncConnection[Any], schema: str, name: str) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of one claim statement, rendered as the adapter renders it."""
    query = getattr(Queries(schema, PREFIX), name)
    params = {
        "type_names": [TYPE],
        "leases": [timedelta(seconds=60)],
        "limit": 10,
        "worker_id": "explain",
        "now": None,
    }
    async with conn.transaction(force_rollback=True):
        cur = await conn.execute(b"EXPLAIN (ANALYZE, BUFFERS) " + query, params)
        lines = [row[0] for row in await cur.fetchall()]
    text = "\n".join(lines)
    top = _BUFFERS.search(text)
    ms = _TIME.search(text)
    return {
        "statement": name,
        "top_buffers": top.group(1) if top else None,
        "execution_ms": float(ms.group(1)) if ms else None,
        "seq_scan_on_job": f"Seq Scan on {PREFIX}job" in text,
        "plan": text,
    }


async def fill(client: jobchain.Client, n: int, batch: int = 1000) -> float:
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        async with client.transaction() as tx:
            await client.start_chains(
                tx, [ChainStart(job_type=noop, input=None) for _ in range(min(batch, n - i))]
            )
    return time.perf_counter() - t0


async def sample(
    url: str, schema: str, progress: Progress, timeline: list[dict[str, Any]], stop: asyncio.Event
) -> None:
    """Every second: jobs handled, n_dead_tup, n_live_tup and vacuum counts of the job table."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        while not stop.is_set():
            stats = await table_stats(conn, schema)
            timeline.append(
                {
                    "t": round(time.perf_counter() - t0, 2),
                    "handled": progress.count,
                    "n_dead_tup": stats["n_dead_tup"],
                    "n_live_tup": stats["n_live_tup"],
                    "autovacuum_count": stats["autovacuum_count"],
                }
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


async def process(client: jobchain.Client, progress: Progress) -> float:
    procs = Processors()

    async def handle(attempt: Attempt[None, None]) -> Completed:
        if progress.first is None:
            progress.first = time.perf_counter()
        result = await attempt.complete(None)
        progress.count += 1
        if progress.count >= progress.target:
            progress.done.set()
        return result

    procs.register(noop, handle)
    worker = Worker(client, procs, concurrency=10, prefetch=10, poll_interval=1.0)
    await worker.start()
    await progress.done.wait()
    end = time.perf_counter()
    await worker.stop()
    assert progress.first is not None
    return end - progress.first


def windows(timeline: list[dict[str, Any]], width: float = 10.0) -> list[float]:
    """Jobs/s over consecutive windows of ``width`` seconds (from the samples)."""
    rates: list[float] = []
    start = timeline[0] if timeline else None
    for point in timeline:
        assert start is not None
        if point["t"] - start["t"] >= width:
            rates.append((point["handled"] - start["handled"]) / (point["t"] - start["t"]))
            start = point
    return rates


async def run(url: str, schema: str, backlog: int, jobs: int, upto: str | None) -> dict[str, Any]:
    applied = migrate(url, schema, upto)
    state = f"{url}?schema={schema}"
    result: dict[str, Any] = {"schema": schema, "backlog": backlog, "jobs": jobs, "migrations": applied}
    # Each phase has its own client, closed before the statistics are read: a backend flushes
    # its counters when it exits (an idle pooled connection only every 10 s).
    wal0 = await wal_lsn(url)
    client = await jobchain.connect(state, notify="none", job_types=types)
    try:
        result["fill_seconds"] = await fill(client, backlog)
    finally:
        await client.close()
    # WAL written per job: every index entry is logged, so this counts index maintenance
    # independently of how busy the machine is (the bench server holds only this schema).
    result["fill_wal_bytes_per_job"] = (await wal_lsn(url) - wal0) / backlog
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        # A backlog built over time has been vacuumed and analyzed; start from that state.
        await conn.execute(f"VACUUM (ANALYZE) {job_table(schema)}")
        result["sizes_after_fill"] = await sizes(conn, schema)
        result["explain_backlog"] = [await explain(conn, schema, n) for n in CLAIMS]
        await asyncio.sleep(1.5)  # statistics are flushed at most once a second
        before = await table_stats(conn, schema)
        timeline: list[dict[str, Any]] = []
        stop = asyncio.Event()
        done = Progress(target=jobs)
        sampler = asyncio.create_task(sample(url, schema, done, timeline, stop))
        wal1 = await wal_lsn(url)
        client = await jobchain.connect(state, notify="none", job_types=types)
        try:
            seconds = await process(client, done)
        finally:
            await client.close()
        wal2 = await wal_lsn(url)
        stop.set()
        await sampler
        await asyncio.sleep(1.5)
        after = await table_stats(conn, schema)
        delta = {k: after[k] - before[k] for k in ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del")}
        result["processing"] = {
            "handled": done.count,
            "seconds": seconds,
            "rate": done.count / seconds,
            "window_rates_10s": windows(timeline),
            "wal_bytes_per_job": (wal2 - wal1) / done.count,
        }
        result["stats_delta"] = delta
        result["hot_ratio"] = delta["n_tup_hot_upd"] / delta["n_tup_upd"] if delta["n_tup_upd"] else None
        result["stats_after"] = after
        result["peak_dead_tup"] = max((p["n_dead_tup"] for p in timeline), default=None)
        result["timeline"] = timeline
        result["sizes_after_processing"] = await sizes(conn, schema)
        result["explain_after_processing"] = [await explain(conn, schema, n) for n in CLAIMS]
    return result


async def wal_lsn(url: str) -> int:
    """The current WAL position in bytes."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def settings_of(url: str) -> dict[str, str]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        out: dict[str, str] = {}
        for key in [*SETTINGS, "server_version"]:
            cur = await conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(key)))
            row = await cur.fetchone()
            assert row is not None
            out[key] = str(row[0])
        return out


async def drop(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "label": args.label,
        "upto": args.upto or migration_names()[-1],
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "worker": {"mode": "atomic", "concurrency": 10, "prefetch": 10, "claim": "skip-locked"},
        "runs": [],
    }
    with PrivateServer(settings=SETTINGS) as server:
        report["settings"] = await settings_of(server.url)
        for name, backlog, jobs in (("small", args.small, args.small), ("large", args.backlog, args.jobs)):
            if backlog <= 0:
                continue
            schema = f"hotpath_{name}"
            t0 = time.perf_counter()
            run_result = await run(server.url, schema, backlog, min(jobs, backlog), args.upto)
            run_result["name"] = name
            run_result["wall_seconds"] = time.perf_counter() - t0
            report["runs"].append(run_result)
            print(summary_line(run_result), flush=True)
            await drop(server.url, schema)
    return report


def summary_line(r: dict[str, Any]) -> str:
    p = r["processing"]
    return (
        f"{r['name']}: backlog {r['backlog']:,} → {p['handled']:,} jobs in {p['seconds']:.1f} s = "
        f"{p['rate']:,.0f} jobs/s; HOT {r['hot_ratio'] or 0:.1%}; peak dead {r['peak_dead_tup']:,}; "
        f"indexes {r['sizes_after_fill']['indexes_total'] / 2**20:,.1f} MB after fill"
    )


def markdown(report: dict[str, Any]) -> str:
    mb = 2**20
    lines = [
        f"# Hot-path measurement: {report['label']} ({report['upto']})",
        "",
        "Private PostgreSQL cluster (`jobchain_postgres.testing.PrivateServer`), settings: "
        + ", ".join(f"{k}={v}" for k, v in report["settings"].items())
        + ".",
        f"Worker: atomic handler, concurrency 10, prefetch 10, no-op, claim skip-locked, one process; "
        f"{report['machine']['cpus']} CPUs shared with other work on the machine.",
        "Backlog filled through `start_chains` (1,000 per transaction), then `VACUUM (ANALYZE)`.",
        "",
        "| run | backlog | jobs | jobs/s | 10 s windows min to max | HOT ratio | peak n_dead_tup"
        " | WAL B/job | table MB | indexes MB (after fill → after run) |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in report["runs"]:
        p = r["processing"]
        w = p["window_rates_10s"]
        span = f"{min(w):,.0f} to {max(w):,.0f}" if w else "n/a"
        lines.append(
            f"| {r['name']} | {r['backlog']:,} | {p['handled']:,} | {p['rate']:,.0f} | {span} | "
            f"{(r['hot_ratio'] or 0):.1%} | {r['peak_dead_tup']:,} | {p['wal_bytes_per_job']:,.0f} | "
            f"{r['sizes_after_processing']['table'] / mb:,.1f} | "
            f"{r['sizes_after_fill']['indexes_total'] / mb:,.1f} → "
            f"{r['sizes_after_processing']['indexes_total'] / mb:,.1f} |"
        )
    for r in report["runs"]:
        lines += [
            "",
            f"## {r['name']} backlog ({r['backlog']:,})",
            "",
            "| index | after fill MB | after run MB |",
            "|---|---:|---:|",
        ]
        for name, size in r["sizes_after_fill"]["indexes"].items():
            later = r["sizes_after_processing"]["indexes"].get(name, 0)
            lines.append(f"| {name} | {size / mb:,.1f} | {later / mb:,.1f} |")
        lines += [
            "",
            f"Updates: {r['stats_delta']}. WAL per job: start {r['fill_wal_bytes_per_job']:,.0f} B, "
            f"claim + complete {r['processing']['wal_bytes_per_job']:,.0f} B.",
            "",
        ]
        for when in ("explain_backlog", "explain_after_processing"):
            for e in r[when]:
                lines.append(
                    f"- {when.replace('_', ' ')}, `{e['statement']}`: {e['execution_ms']} ms, "
                    f"buffers {e['top_buffers']}, seq scan on job: {e['seq_scan_on_job']}"
                )
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--label", default="run")
    parser.add_argument("--upto", default=None, help="apply migrations up to this name (default: all)")
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=150_000, help="jobs to process from the large backlog")
    parser.add_argument("--small", type=int, default=20_000, help="small backlog (all processed); 0: skip")
    parser.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    result = asyncio.run(main(arguments))
    if arguments.out is not None:
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
        arguments.out.with_suffix(".md").write_text(markdown(result))
