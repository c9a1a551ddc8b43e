"""``make bench-soak``: steady load at 50 % of measured capacity for 30 minutes (issue 21, item 5).

Runs on a private PostgreSQL cluster with production-like settings (:data:`SERVER_SETTINGS`,
recorded in the output). Steps:

1. capacity: a backlog of BENCH_SOAK_CAPACITY_JOBS no-op chains processed by ``bench/jc.py
   worker`` (atomic, concurrency 10, prefetch 10, LISTEN/NOTIFY), as the bench's process row;
2. soak: one worker process (same configuration, plus retention) and one starter process that
   starts chains at BENCH_SOAK_LOAD x capacity, paced by an absolute schedule (chain k is due at
   t0 + k / rate; the chains due at each tick go in one transaction), for BENCH_SOAK_SECONDS;
3. every 10 s the parent samples the job table and index sizes, n_dead_tup, the pending count
   and the worker's RSS. Starter and worker write one line per chain (commit time, handler
   start and end); the parent joins them as it goes: wake-to-start latency per job is the
   handler start minus the moment the starter sent COMMIT (conservative: includes the commit).

Writes bench/results/soak-<date>.{json,md} (soak-short-<date> for runs under 30 minutes):
a table per minute and the drift between the first and the last 5 minutes.

Knobs (defaults in brackets): BENCH_SOAK_SECONDS [1800], BENCH_SOAK_LOAD [0.5],
BENCH_SOAK_CAPACITY_JOBS [20000], BENCH_SOAK_RATE [measured x load], BENCH_SOAK_TICK [0.01 s],
BENCH_SOAK_RETENTION [min(300, seconds / 4) s: completed chains older are pruned],
BENCH_SOAK_NAME [soak-<date> or soak-short-<date>].
``python bench/soak.py --render RESULTS.json`` writes the page of a recorded run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from array import array
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchenv import ensure_venv, signals_unwind

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

if __name__ == "__main__":
    ensure_venv(__file__)

sys.path.insert(0, str(BENCH))
from common import PYTHON, TMP, Child, CpuMeter, emit, percentile, rss_bytes, run_child, run_loop  # noqa: E402
from soak_report import SAMPLE_EVERY, Joiner, analyse, render  # noqa: E402

SERVER_SETTINGS = {
    "shared_buffers": "2GB",
    "effective_cache_size": "8GB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "15min",
    "wal_buffers": "64MB",
    "autovacuum": "on",
    "autovacuum_naptime": "10s",
    "synchronous_commit": "on",
    "fsync": "on",
    "max_connections": "200",
}
SCHEMA = "bench"
JOB = f"{SCHEMA}.jobchain_job"
WORKER = {"mode": "atomic", "concurrency": 10, "prefetch": 10}
RETENTION_RUN = {"interval_s": 10, "batch_size": 5000, "max_batches": 20}


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


# ---------------------------------------------------------------- child processes


def soak_types() -> tuple[Any, Any]:
    from jobchain import JobTypes

    types = JobTypes()
    return types, types.define("bench.soak", input=None, output=None, entry=True)


async def starter(cfg: dict[str, Any]) -> dict[str, Any]:
    """Start chains at ``rate``/s for ``seconds``; one line per chain: id, COMMIT sent, COMMIT done."""
    import jobchain
    from jobchain import ChainStart

    types, soak = soak_types()
    client = await jobchain.connect(cfg["state"], notify=cfg["notify"], job_types=types)
    rate, tick, cap = cfg["rate"], cfg["tick"], cfg["max_batch"]
    total = int(rate * cfg["seconds"])
    lags = array("d")
    commits = array("d")
    started = batches = 0
    # A local file opens at once; the line writes are buffered.
    with open(cfg["out"], "w", buffering=1 << 20) as out:  # noqa: ASYNC230
        t0 = time.monotonic()
        emit({"t0": t0})
        last_flush = last_batch = t0
        while started < total:
            now = time.monotonic()
            # Chain k is due at t0 + k / rate: lateness never shifts the schedule.
            wake = max(t0 + started / rate, last_batch + tick)
            if now < wake:
                await asyncio.sleep(wake - now)
                now = time.monotonic()
            due = min(total, int((now - t0) * rate) + 1)
            n = min(cap, due - started)
            if n <= 0:
                continue
            lags.append(now - (t0 + started / rate))
            last_batch = now
            async with client.transaction() as tx:
                done = await client.start_chains(tx, [ChainStart(job_type=soak, input=None)] * n)
                t_send = time.monotonic()  # just before COMMIT is sent
            t_done = time.monotonic()
            commits.append(t_done - t_send)
            out.write("".join(f"{s.id} {t_send:.6f} {t_done:.6f}\n" for s in done))
            started += n
            batches += 1
            if t_done - last_flush > 1.0:
                out.flush()
                last_flush = t_done
        elapsed = time.monotonic() - t0
    await client.close()
    return {
        "started": started,
        "batches": batches,
        "seconds": elapsed,
        "rate": started / elapsed,
        "mean_batch": started / max(1, batches),
        "lag_ms": {k: percentile(lags, q) * 1000 for k, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))},
        "commit_ms": {k: percentile(commits, q) * 1000 for k, q in (("p50", 0.5), ("p99", 0.99))},
        "rss": rss_bytes(),
    }


async def worker(cfg: dict[str, Any]) -> dict[str, Any]:
    """One worker process until a line arrives on stdin; one line per job: id, start, end."""
    import jobchain
    from jobchain.worker import Attempt, Completed, Processors, Retention, Worker

    types, soak = soak_types()
    client = await jobchain.connect(cfg["state"], notify=cfg["notify"], job_types=types)
    await client.state.migrate()
    out = open(cfg["out"], "w", buffering=1 << 20)  # noqa: SIM115, ASYNC230 (closed after the worker)
    handled = 0

    async def handle(attempt: Attempt[None, None]) -> Completed:
        nonlocal handled
        t_start = time.monotonic()
        result = await attempt.complete(None)
        out.write(f"{attempt.job.chain_id} {t_start:.6f} {time.monotonic():.6f}\n")
        handled += 1
        return result

    procs = Processors()
    procs.register(soak, handle)
    run = cfg["retention_run"]
    retention = Retention(
        completed=timedelta(seconds=cfg["retention_s"]),
        interval=timedelta(seconds=run["interval_s"]),
        batch_size=run["batch_size"],
        max_batches=run["max_batches"],
    )
    w = Worker(client, procs, concurrency=cfg["concurrency"], prefetch=cfg["prefetch"], retention=retention)
    await w.start()
    emit({"ready": True, "pid": os.getpid(), "poll_interval": w.poll_interval})

    async def flush() -> None:
        while True:
            await asyncio.sleep(1.0)
            out.flush()

    flusher = asyncio.create_task(flush())
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    flusher.cancel()
    await w.stop()
    out.close()
    await client.close()
    return {"handled": handled, "rss": rss_bytes()}


# ---------------------------------------------------------------- the parent: join and sample


STATS_SQL = f"""
SELECT pg_relation_size(s.relid), pg_indexes_size(s.relid), pg_total_relation_size(s.relid),
       s.n_live_tup, s.n_dead_tup, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del,
       s.autovacuum_count, s.autoanalyze_count,
       (SELECT count(*) FROM {JOB} WHERE status = 'pending'),
       (SELECT count(*) FROM {JOB} WHERE status = 'running' AND leased_until IS NOT NULL)
FROM pg_stat_user_tables AS s WHERE s.relid = '{JOB}'::regclass
"""
STATS_KEYS = [
    *("table_bytes", "index_bytes", "total_bytes", "n_live_tup", "n_dead_tup", "n_tup_upd"),
    *("n_tup_hot_upd", "n_tup_del", "autovacuum_count", "autoanalyze_count", "pending", "running"),
]
INDEX_SQL = f"""
SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes
WHERE relid = '{JOB}'::regclass ORDER BY indexrelname
"""


def sample(conn: Any, t: float, procs: dict[str, Child], meter: CpuMeter) -> dict[str, Any]:
    import psutil

    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(STATS_SQL).fetchone()
    out: dict[str, Any] = {"t": round(t, 1), **dict(zip(STATS_KEYS, row, strict=True))}
    for name, child in procs.items():
        with contextlib.suppress(psutil.Error):
            out[f"{name}_rss"] = psutil.Process(child.proc.pid).memory_info().rss
    out["machine_busy"] = round(meter.stop(), 3)
    meter.start()
    return out


def measure_capacity(state: str, notify: str, jobs: int) -> dict[str, Any]:
    """The bench's process row on this server: ``jobs`` no-op chains, atomic c10 prefetch 10."""
    import psycopg

    run_child(["bench/jc.py", "fill", state, str(jobs)], timeout=900)
    with psycopg.connect(notify, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {JOB}")  # type: ignore[arg-type]
        conn.execute("CHECKPOINT")
    cfg = {"state": state, "notify": notify, "n": jobs, **WORKER}
    out = run_child(["bench/jc.py", "worker", json.dumps(cfg)], timeout=900)
    with psycopg.connect(notify, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {SCHEMA}.jobchain_job_blocker, {JOB}")  # type: ignore[arg-type]
        conn.execute(f"VACUUM ANALYZE {JOB}")  # type: ignore[arg-type]
        conn.execute("CHECKPOINT")
    return {"jobs": jobs, **{k: out[k] for k in ("rate", "seconds", "cpu_per_1000", "peak_rss")}}


def soak(state: str, notify: str, rate: float, seconds: int, retention_s: int, tmp: Path) -> dict[str, Any]:
    import psycopg

    starts, handled = tmp / "soak-starts.txt", tmp / "soak-handled.txt"
    wcfg = {"state": state, "notify": notify, "out": str(handled), "retention_s": retention_s}
    wcfg |= {"retention_run": RETENTION_RUN, **WORKER}
    work = Child([PYTHON, __file__, "worker", json.dumps(wcfg)])
    ready = work.read()
    tick = env_float("BENCH_SOAK_TICK", 0.01)
    scfg = {"state": state, "notify": notify, "out": str(starts), "rate": rate, "seconds": seconds}
    scfg |= {"tick": tick, "max_batch": 500}
    start = Child([PYTHON, __file__, "starter", json.dumps(scfg)])
    t0 = start.read()["t0"]
    joiner = Joiner(starts, handled, t0)
    samples: list[dict[str, Any]] = []
    indexes: dict[str, dict[str, int]] = {}
    meter = CpuMeter()
    meter.start()
    with psycopg.connect(notify, autocommit=True) as conn:

        def take(t: float, tag: str) -> None:
            joiner.poll()
            row = sample(conn, t, {"worker": work, "starter": start}, meter)
            row["phase"] = tag
            samples.append(row)
            for name, size in conn.execute(INDEX_SQL).fetchall():
                indexes.setdefault(name, {"first": size, "peak": size})
                indexes[name]["peak"] = max(indexes[name]["peak"], size)
                indexes[name]["last"] = size
            mb = (row["table_bytes"] + row["index_bytes"]) / 2**20
            print(
                f"soak {tag} {t:6.0f} s: done {sum(joiner.completed.values()):>8} "
                f"pending {row['pending']:>6} "
                f"dead {row['n_dead_tup']:>7} table+idx {mb:7.1f} MB "
                f"worker rss {row.get('worker_rss', 0) / 2**20:6.1f} MB busy {row['machine_busy']:.0%}",
                flush=True,
            )

        take(time.monotonic() - t0, "start")  # the baseline: the table before any load
        # Absolute sample times too: sample k is at t0 + 10 k, however long sample k-1 took.
        for k in range(1, int(-(-seconds // SAMPLE_EVERY)) + 1):
            time.sleep(max(0.0, t0 + k * SAMPLE_EVERY - time.monotonic()))
            take(time.monotonic() - t0, "load")
        summary = start.finish(120)
        # Drain: the worker finishes what was started (at most 60 s), then stops.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(1.0)
            joiner.poll()
            if (
                not joiner.sent
                and conn.execute(f"SELECT count(*) FROM {JOB} WHERE status = 'pending'").fetchone()[0] == 0
            ):  # type: ignore[index]
                break
        take(time.monotonic() - t0, "drain")
        work.send({"stop": True})
        wsum = work.finish(120)
        time.sleep(1.5)  # the flush task's last write and the final close
        joiner.poll()
    joiner.close()
    return {
        "rate": rate,
        "seconds": seconds,
        "tick_s": tick,
        "worker_ready": ready,
        "starter": summary,
        "worker": wsum,
        "samples": samples,
        "indexes": indexes,
        "joiner": joiner,
        "unmatched": {"started_not_handled": len(joiner.sent), "handled_without_start": len(joiner.early)},
    }


# ---------------------------------------------------------------- figures and report


def git_state() -> str:
    def run(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT).stdout.strip()

    dirty = run("status", "--porcelain", "--untracked-files=no", "packages")
    return run("rev-parse", "--short", "HEAD") + (" (packages/ modified in the work tree)" if dirty else "")


def main() -> None:
    import psutil
    import psycopg

    from jobchain_postgres.testing import PrivateServer

    seconds = int(env_float("BENCH_SOAK_SECONDS", 1800))
    load = env_float("BENCH_SOAK_LOAD", 0.5)
    jobs = int(env_float("BENCH_SOAK_CAPACITY_JOBS", 20000))
    retention_s = int(env_float("BENCH_SOAK_RETENTION", min(300, max(30, seconds // 4))))
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    name = os.environ.get("BENCH_SOAK_NAME") or (
        f"soak-{stamp}" if seconds >= 1800 else f"soak-short-{stamp}"
    )
    tmp = TMP / "soak"
    tmp.mkdir(parents=True, exist_ok=True)
    began = time.time()
    machine = {
        "cpus": str(os.cpu_count()),
        "memory_gib": f"{psutil.virtual_memory().total / 2**30:.0f}",
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }

    with signals_unwind(), PrivateServer(settings=SERVER_SETTINGS, database="soak") as server:
        notify, state = server.url, f"{server.url}?schema={SCHEMA}"
        with psycopg.connect(notify, autocommit=True) as conn:
            names = list(SERVER_SETTINGS)
            shown = conn.execute(
                "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s) ORDER BY name",
                (names,),
            ).fetchall()
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        print(f"soak: private server on port {server.port}, {seconds} s at {load:.0%}", flush=True)
        if "BENCH_SOAK_RATE" in os.environ:
            capacity: dict[str, Any] = {"jobs": 0, "rate": None, "note": "BENCH_SOAK_RATE given"}
            rate = env_float("BENCH_SOAK_RATE", 0)
        else:
            capacity = measure_capacity(state, notify, jobs)
            rate = capacity["rate"] * load
        print(
            f"soak: capacity {capacity.get('rate') or 0:,.0f} jobs/s, offering {rate:,.0f} chains/s",
            flush=True,
        )
        run = soak(state, notify, rate, seconds, retention_s, tmp)
    result = analyse(run)
    machine["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    info = {
        "name": name,
        "seconds": seconds,
        "load": load,
        "rate": rate,
        "tick_s": run["tick_s"],
        "capacity": capacity,
        "worker": "atomic, concurrency 10, prefetch 10, LISTEN/NOTIFY, poll_interval "
        f"{run['worker_ready'].get('poll_interval')} s",
        "retention": f"completed chains older than {retention_s} s pruned by the worker (Retention: every "
        f"{RETENTION_RUN['interval_s']} s, up to {RETENTION_RUN['max_batches']} batches of "
        f"{RETENTION_RUN['batch_size']})",
        "server": {
            "version": version,
            "requested": SERVER_SETTINGS,
            "settings": dict(shown),
        },
        "starter": run["starter"],
        "worker_summary": run["worker"],
        "unmatched": run["unmatched"],
        "machine": machine,
        "git": git_state(),
        "duration_s": round(time.time() - began),
    }
    out = BENCH / "results"
    out.mkdir(exist_ok=True)
    data = {"info": info, **result, "samples": run["samples"], "indexes": run["indexes"]}
    (out / f"{name}.json").write_text(json.dumps(data, indent=1))
    md = render(data)
    (out / f"{name}.md").write_text(md)
    print(md)
    print(f"soak: wrote bench/results/{name}.md and .json in {info['duration_s']} s", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "starter":
        emit(run_loop(starter(json.loads(sys.argv[2]))))
    elif len(sys.argv) > 2 and sys.argv[1] == "worker":
        emit(run_loop(worker(json.loads(sys.argv[2]))))
    elif len(sys.argv) == 3 and sys.argv[1] == "--render":
        # The page again from a recorded run (after a change to the report only).
        path = Path(sys.argv[2])
        path.with_suffix(".md").write_text(render(json.loads(path.read_text())))
    elif len(sys.argv) == 1:
        main()
    else:
        raise SystemExit(__doc__)
