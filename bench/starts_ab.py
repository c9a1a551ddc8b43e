"""A/B of PostgreSQL chain starts: two jobchain_postgres source trees (and pgqueuer) side by side.

python bench/starts_ab.py ROUNDS BASE_SRC [--pgq] [--single N] [--batch N]
    BASE_SRC: a folder holding a ``jobchain_postgres`` package (e.g. one extracted with
    ``git archive HEAD packages/postgres/src | tar -x -C /tmp/base``); "B" is the working tree.
    Rounds interleave A, B (and pgqueuer) mode by mode; each run is a fresh process.
python bench/starts_ab.py child SCHEMA MODE N         (one run; prints one JSON line)
python bench/starts_ab.py trips SCHEMA                 (round trips per start, through pgproxy)

Each variant works in its own schema of the database ``BENCH_AB_DB`` (default ``test``), with
the PostgreSQL notify adapter on the same database, as ``make bench`` starts chains. Tables are
truncated before every run. Run on the bench environment: ``bench/.venv/bin/python``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DB = os.environ.get("BENCH_AB_DB", "test")
BASE = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
PGQ_DB = "hstarts_pgq"
MODES = ("single", "single-autocommit", "batch100", "batch1000")


def state_url(schema: str, host: str = "127.0.0.1:5432") -> str:
    return f"postgresql://postgres@{host}/{DB}?schema={schema}"


async def child(schema: str, mode: str, n: int) -> dict[str, Any]:
    import jobchain
    from jobchain import ChainStart, JobTypes

    types = JobTypes()
    noop = types.define("bench.noop", input=None, output=None, entry=True)
    client = await jobchain.connect(state_url(schema), notify=f"{BASE}/{DB}", job_types=types)
    try:
        await client.state.migrate()
        async with client.transaction() as tx:  # warm the pool and the statements
            await client.start_chain(tx, noop, None)
        t0 = time.perf_counter()
        if mode.startswith("single"):
            autocommit = mode == "single-autocommit"
            for _ in range(n):
                async with client.transaction(autocommit=autocommit) as tx:
                    await client.start_chain(tx, noop, None)
        else:
            batch = int(mode.removeprefix("batch"))
            for i in range(0, n, batch):
                async with client.transaction() as tx:
                    await client.start_chains(tx, [ChainStart(job_type=noop, input=None)] * min(batch, n - i))
        elapsed = time.perf_counter() - t0
    finally:
        await client.close()
    return {"rate": n / elapsed}


async def trips(schema: str) -> dict[str, float]:
    """Round trips per start (own transaction, autocommit, batch of 100) through the counting proxy."""
    sys.path.insert(0, str(BENCH))
    from pgproxy import CountingProxy

    import jobchain
    from jobchain import ChainStart, JobTypes

    types = JobTypes()
    noop = types.define("bench.noop", input=None, output=None, entry=True)
    out: dict[str, float] = {}
    with CountingProxy() as proxy:
        client = await jobchain.connect(
            state_url(schema, f"127.0.0.1:{proxy.port}") + "&pool_min_size=1&pool_max_size=1",
            notify=f"{BASE}/{DB}",
            job_types=types,
        )
        try:
            await client.state.migrate()
            for mode in ("single", "single-autocommit", "batch100"):
                for _ in range(3):  # warm (statements prepared after a few executions)
                    async with client.transaction() as tx:
                        await client.start_chain(tx, noop, None)
                proxy.reset()
                for _ in range(20):
                    if mode == "batch100":
                        async with client.transaction() as tx:
                            await client.start_chains(tx, [ChainStart(job_type=noop, input=None)] * 100)
                    else:
                        async with client.transaction(autocommit=mode == "single-autocommit") as tx:
                            await client.start_chain(tx, noop, None)
                await asyncio.sleep(0.2)
                out[mode] = proxy.round_trips / 20
        finally:
            await client.close()
    return out


def truncate(schema: str) -> None:
    with psycopg.connect(f"{BASE}/{DB}", autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (f"{schema}.jobchain_job",)).fetchone()
        if exists and exists[0]:
            conn.execute(f"TRUNCATE {schema}.jobchain_job_blocker, {schema}.jobchain_job")  # type: ignore[arg-type]
        conn.execute("CHECKPOINT")


def pgq_setup() -> None:
    with psycopg.connect(f"{BASE}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PGQ_DB,)).fetchone():
            conn.execute(f"CREATE DATABASE {PGQ_DB}")  # type: ignore[arg-type]
            subprocess.run([sys.executable, str(BENCH / "peer_pgqueuer.py"), "install", PGQ_DB], check=True)


def pgq_run(mode: str, n: int) -> float:
    with psycopg.connect(f"{BASE}/{PGQ_DB}", autocommit=True) as conn:
        conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
        conn.execute("CHECKPOINT")
    how, batch = ("single", "1") if mode.startswith("single") else ("batch", mode.removeprefix("batch"))
    out = subprocess.run(
        [sys.executable, str(BENCH / "peer_pgqueuer.py"), "start", PGQ_DB, how, str(n), batch],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["rate"])


def jc_run(src: str | None, schema: str, mode: str, n: int) -> float:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    truncate(schema)
    out = subprocess.run(
        [sys.executable, __file__, "child", schema, mode, str(n)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["rate"])


def main(argv: list[str]) -> None:
    if argv[0] == "child":
        import uvloop

        print(json.dumps(uvloop.run(child(argv[1], argv[2], int(argv[3])))))
        return
    if argv[0] == "trips":
        print(json.dumps(asyncio.run(trips(argv[1]))))
        return
    rounds, base = int(argv[0]), argv[1]
    single = int(argv[argv.index("--single") + 1]) if "--single" in argv else 2000
    batch_n = int(argv[argv.index("--batch") + 1]) if "--batch" in argv else 20000
    with_pgq = "--pgq" in argv
    modes = [m for m in MODES if "--modes" not in argv or m in argv[argv.index("--modes") + 1].split(",")]
    if with_pgq:
        pgq_setup()
    rates: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for mode in modes:
            n = single if mode.startswith("single") else batch_n
            variants: list[tuple[str, Any]] = [("A", base), ("B", None)]
            if r % 2:
                variants.reverse()
            for name, src in variants:
                rates.setdefault((name, mode), []).append(jc_run(src, f"hstarts_{name.lower()}", mode, n))
            if with_pgq and mode != "single-autocommit":
                rates.setdefault(("pgq", mode), []).append(pgq_run(mode, n))
        print(
            f"round {r + 1}: " + ", ".join(f"{k[0]}/{k[1]}={v[-1]:,.0f}" for k, v in rates.items()),
            flush=True,
        )
    print(f"\nmedians over {rounds} rounds (chains/s)")
    for mode in modes:
        a = statistics.median(rates[("A", mode)])
        b = statistics.median(rates[("B", mode)])
        line = f"{mode:18} A {a:9,.0f}  B {b:9,.0f}  B/A {b / a:5.2f}"
        if ("pgq", mode) in rates:
            p = statistics.median(rates[("pgq", mode)])
            line += f"  pgqueuer {p:9,.0f}  A/pgq {a / p:5.2f}  B/pgq {b / p:5.2f}"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
