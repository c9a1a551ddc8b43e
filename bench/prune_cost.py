"""What one retention batch costs on PostgreSQL, before and after the 2026-11-27 change.

The 30-minute soak of 2026-11-27 fell behind once retention began: its batches (5,000 chains)
took 2.3 s each, 1.9 s of which LLVM spent compiling the plan, and each read every chain old
enough to go. This script times ``chains_prune`` batches on the same data three ways, interleaved,
on the bench's private cluster (``benchenv.bench_server``):

- the statement of ``--before`` (a commit, default 9e2f772) as it ran then: JIT as the server says;
- the same statement with JIT off, to separate the two causes;
- the statement of the work tree, JIT off as the adapter now sends it.

Each batch runs in a transaction that is rolled back, so every run sees the same table:
``--chains`` completed root chains (three types, finished over the last two hours). Writes
bench/results/prune-cost-<date>.{json,md}.

    bench/.venv/bin/python bench/prune_cost.py --chains 200000 --chains 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchenv import ROOT, bench_server, ensure_venv

SCHEMA = "prune_cost"
LIMIT = 5000
STATEMENT = "packages/postgres/src/jobchain_postgres/sql/chains_prune.sql"


async def fill(url: str, chains: int) -> None:
    """``chains`` completed root chains, finished at random over the last two hours."""
    import psycopg

    from jobchain.contracts import JobsCreate, NewJob
    from jobchain.entities import new_id
    from jobchain_postgres import PostgresStateAdapter

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")  # type: ignore[arg-type]
    adapter = await PostgresStateAdapter.open(f"{url}?schema={SCHEMA}")
    await adapter.migrate()
    created = datetime.now(UTC) - timedelta(hours=3)
    for start in range(0, chains, 5000):
        jobs = [
            NewJob(id=new_id(), type_name=f"t{n % 3}", chain_type_name=f"t{n % 3}")
            for n in range(start, min(chains, start + 5000))
        ]
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=jobs, now=created))
    await adapter.close()
    with psycopg.connect(url, autocommit=True) as conn:
        # Completing a million jobs through the adapter would take minutes; the rows end the same.
        conn.execute(
            f"UPDATE {SCHEMA}.jobchain_job SET status = 'completed', attempt = 1, "  # type: ignore[arg-type]
            "attempt_started_at = created_at, completed_at = created_at + random() * interval '2 hours'"
        )
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobchain_job")  # type: ignore[arg-type]
        conn.execute("CHECKPOINT")


def batch_ms(url: str, statement: bytes, jit: bool) -> float:
    """One batch of LIMIT chains, rolled back; milliseconds from send to the last row."""
    import psycopg

    params = {
        "key": "prune-cost",
        "completed_before": datetime.now(UTC) - timedelta(seconds=1),
        "failed_before": None,
        "cancelled_before": None,
        "locks_before": None,
        "limit": LIMIT,
    }
    with psycopg.connect(url) as conn:
        conn.execute("SET jit = on" if jit else "SET jit = off")
        began = time.perf_counter()
        rows = conn.execute(statement, params).fetchall()
        took = time.perf_counter() - began
        conn.rollback()
    if len(rows) != LIMIT:
        raise SystemExit(f"a batch deleted {len(rows)} chains, not {LIMIT}")
    return took * 1000


def main() -> None:
    from jobchain_postgres._identifiers import render

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="9e2f772", help="commit of the statement before")
    parser.add_argument("--chains", type=int, action="append", help="qualifying chains (repeatable)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sizes = args.chains or [200_000, 1_000_000]
    before_text = subprocess.run(
        ["git", "show", f"{args.before}:{STATEMENT}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    before = render(before_text, SCHEMA, "jobchain_")
    after = render((ROOT / STATEMENT).read_text(), SCHEMA, "jobchain_")
    variants = {"before, JIT on": (before, True), "before, JIT off": (before, False), "after": (after, False)}
    results: list[dict[str, Any]] = []
    with bench_server():
        url = os.environ["BENCH_PG"] + "/postgres"
        for chains in sizes:
            asyncio.run(fill(url, chains))
            runs: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(args.rounds):
                for name, (statement, jit) in variants.items():
                    runs[name].append(batch_ms(url, statement, jit))
            medians = {name: statistics.median(ms) for name, ms in runs.items()}
            row = {"chains": chains, "ms": runs, "median_ms": medians}
            print(json.dumps(row["median_ms"] | {"chains": chains}), flush=True)
            results.append(row)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    info = {
        "before": args.before,
        "after": head.stdout.strip(),
        "limit": LIMIT,
        "rounds": args.rounds,
        "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "results": results,
    }
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    out = ROOT / "bench" / "results" / f"prune-cost-{stamp}"
    out.with_suffix(".json").write_text(json.dumps(info, indent=2) + "\n")
    lines = [
        f"# One retention batch ({LIMIT:,} chains), before ({args.before}) and after ({info['after']})",
        "",
        f"Private cluster (bench settings), median of {args.rounds} interleaved rounds, each batch "
        "rolled back; load average after the run " + info["load_after"] + ".",
        "",
        "| chains old enough | before, JIT on | before, JIT off | after | before (JIT on) / after |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in results:
        m = row["median_ms"]
        lines.append(
            f"| {row['chains']:,} | {m['before, JIT on']:,.0f} ms | {m['before, JIT off']:,.0f} ms "
            f"| {m['after']:,.0f} ms | {m['before, JIT on'] / m['after']:.1f}x |"
        )
    Path(out.with_suffix(".md")).write_text("\n".join(lines) + "\n")
    print(f"prune cost: wrote {out}.json and .md", flush=True)


if __name__ == "__main__":
    ensure_venv(__file__)
    main()
