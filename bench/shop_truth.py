"""Issue 36, done-when: the shop's metrics beside the database's own counts.

    .venv/bin/python bench/shop_truth.py [--orders 500] [--slow 150] [--delay 0.03] [--no-spark]

Re-runs the scenario of issue 36: a shop on PostgreSQL state and Redis notify, two
``jobchain worker`` processes of different names (concurrency 8, prefetch 2, each with its own
``--metrics-port``) reaching PostgreSQL through a TCP proxy that delays every chunk ``--delay``
seconds each way (slow commits), handler deadlines, dead letters, then ``jobchain-spark
archive``. The job types are in bench/shop_truth_app.py.

While the workers run it scrapes both /metrics endpoints and the worker registry every second
(in-flight jobs against capacity; how many workers export the queue gauges). Once the queue is
drained it scrapes both one last time and compares, summed over the two workers, each counter
with the database's own count (SQL on the job table, ``client.list_jobs`` error histories,
``client.queue_stats``) and with what the construction of the inputs says it must be; the queue
gauges must come from exactly one worker and equal ``client.queue_stats()``. Then the archive
must take the completed chains and leave the dead letters.

Prints the table and writes bench/results/shop-truth-<UTC date>.md and .json; exits 1 when any
row differs. Everything runs in a schema of its own (dropped at the end) and a Redis prefix of
its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families

import jobchain
from jobchain.entities import JobStatus
from jobchain.telemetry import names

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
sys.path.insert(0, str(BENCH_DIR))  # the app module, for this process and (PYTHONPATH) the workers
sys.path.insert(0, str(ROOT / "packages" / "postgres" / "tests" / "chaos"))  # the delaying proxy

import shop_truth_app as app  # noqa: E402
from partition import PartitionProxy  # noqa: E402

PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DATABASE = "test"
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
TX_SIZE = 50
STATUSES = tuple(s.value for s in JobStatus)

# The Prometheus names, from jobchain.telemetry.names (counters get _total in the text format).
COMPLETED = names.JOBS_COMPLETED.prometheus_name + "_total"
FAILED = names.JOBS_FAILED.prometheus_name + "_total"
TIMED_OUT = names.JOBS_TIMED_OUT.prometheus_name + "_total"
LOST = names.ATTEMPTS_LOST.prometheus_name + "_total"
STARTED = names.JOBS_STARTED.prometheus_name + "_total"
RETRIED = names.JOBS_RETRIED.prometheus_name + "_total"
CREATED = names.JOBS_CREATED.prometheus_name + "_total"
CLAIMS_EXPIRED = names.CLAIMS_EXPIRED.prometheus_name + "_total"
LAPSES = names.WORKER_LIVENESS_LAPSES.prometheus_name + "_total"
QUEUE_JOBS = names.QUEUE_JOBS.prometheus_name
QUEUE_DEPTH = names.QUEUE_DEPTH.prometheus_name
QUEUE_EXPIRED = names.QUEUE_EXPIRED_LEASES.prometheus_name
QUEUE_AGE = names.QUEUE_OLDEST_DUE_AGE.prometheus_name
DURATION = names.ATTEMPT_DURATION.prometheus_name
QUEUE_PREFIX = "jobchain_queue_"
TIMEOUT_ERROR = "JobTimeoutError"
CARD_ERROR = app.CardExpired.__name__

Sample = tuple[str, tuple[tuple[str, str], ...], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> list[Sample]:
    """Every sample of one /metrics page: (name, sorted labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return [
        (s.name, tuple(sorted(s.labels.items())), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def total(samples: list[Sample], name: str, **match: str) -> float:
    return sum(v for n, labels, v in samples if n == name and match.items() <= dict(labels).items())


def queue_series(samples: list[Sample]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(n, labels): v for n, labels, v in samples if n.startswith(QUEUE_PREFIX)}


@dataclass
class Worker:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    worker_id: str | None = None
    max_inflight: int = 0
    max_running: int = 0
    max_buffered: int = 0
    max_committing: int = 0
    capacity: int = 0
    concurrency: int = 0
    heartbeats_seen: int = 0
    over_capacity: list[dict[str, Any]] = field(default_factory=list)
    exporting_ticks: int = 0


@dataclass
class Row:
    metric: str
    metric_value: float | str
    database: float | str
    expected: float | str
    ok: bool
    note: str = ""


def expected_counts(orders: int, slow: int) -> dict[str, int]:
    card = sum(1 for n in range(1, orders + 1) if n % app.CARD_EXPIRED_EVERY == 0)
    timeouts = sum(1 for n in range(1, slow + 1) if n % app.SLOW_EVERY == 0)
    emails = orders - card
    return {
        "charge": orders,
        "card_expired": card,
        "email": emails,
        "slow": slow,
        "timeouts": timeouts,
        # continued charges count as completed jobs (the metric: "completed (or continued)")
        "completed": emails + emails + (slow - timeouts),
        "failed": card + timeouts,
        "jobs": orders + emails + slow,
    }


async def db_counts(conn: psycopg.AsyncConnection[Any], schema: str) -> dict[str, Any]:
    """The job table's own counts, by SQL (not through jobchain)."""
    job = f'"{schema}".jobchain_job'
    rows = await (
        await conn.execute(f"SELECT type_name, status::text, count(*) FROM {job} GROUP BY 1, 2")
    ).fetchall()
    by_type_status = {f"{t}|{s}": int(c) for t, s, c in rows}
    attempts, attempted, rescued = await (
        await conn.execute(
            f"SELECT coalesce(sum(attempt), 0), count(*) FILTER (WHERE attempt > 0),"
            f" count(*) FILTER (WHERE rescued_at IS NOT NULL) FROM {job}"
        )
    ).fetchone() or (0, 0, 0)
    return {
        "by_type_status": by_type_status,
        "completed": sum(c for k, c in by_type_status.items() if k.endswith("|completed")),
        "failed": sum(c for k, c in by_type_status.items() if k.endswith("|failed")),
        "jobs": sum(by_type_status.values()),
        "attempts": int(attempts),
        "retried_attempts": int(attempts) - int(attempted),
        "rescued": int(rescued),
        "email_jobs": sum(c for k, c in by_type_status.items() if k.startswith("shop.email|")),
    }


async def failed_jobs(client: jobchain.Client) -> list[Any]:
    jobs: list[Any] = []
    cursor = None
    while True:
        page = await client.list_jobs(statuses=["failed"], cursor=cursor, limit=500)
        jobs += page.items
        cursor = page.next_cursor
        if cursor is None:
            return jobs


def stats_series(stats: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The queue gauges client.queue_stats() says the reporter should export (oldest_due_age aside)."""
    series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for t in stats.types:
        series[QUEUE_DEPTH, (("job_type", t.type_name),)] = float(t.due)
        series[QUEUE_EXPIRED, (("job_type", t.type_name),)] = float(t.expired_leases)
        for s in STATUSES:
            series[QUEUE_JOBS, (("job_type", t.type_name), ("status", s))] = float(t.count(s))
    return series


def start_worker(name: str, state: str, notify: str, args: argparse.Namespace, logdir: Path) -> Worker:
    port = free_port()
    log = logdir / f"{name}.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BENCH_DIR), env.get("PYTHONPATH")) if p)
    command = [
        sys.executable, "-m", "jobchain.cli", "worker", "shop_truth_app:processors",
        "--state", state, "--notify", notify, "--name", name,
        "--concurrency", str(args.concurrency), "--prefetch", str(args.prefetch),
        "--metrics-port", str(port), "--log-level", "INFO",
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=BENCH_DIR)
    return Worker(name=name, port=port, process=process, log=log)


async def wait_for(what: str, check: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(Exception):
            if await check():
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {seconds:.0f} s")
        await asyncio.sleep(0.25)


def run_archive(url: str, to: str, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BENCH_DIR), env.get("PYTHONPATH")) if p)
    command = [
        str(Path(sys.executable).with_name("jobchain-spark")), "archive", "--url", url,
        "--older-than", "1s", "--to", to, "--master", "local[1]",
    ]  # fmt: skip
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ran": False, "why": f"jobchain-spark archive did not finish within {timeout:.0f} s"}
    except OSError as error:
        return {"ran": False, "why": f"jobchain-spark archive could not start: {error}"}
    seconds = time.monotonic() - started
    out = done.stdout.strip()
    result: dict[str, Any] = {
        "ran": done.returncode == 0,
        "returncode": done.returncode,
        "seconds": round(seconds, 1),
        "stdout": [line for line in out.splitlines() if line.startswith(("archiving ", "run ", "finished "))],
        "stderr": done.stderr.strip().splitlines()[-5:],
        "command": " ".join(command[1:]).replace(url, "<state url>"),
    }
    if done.returncode != 0:
        result["why"] = f"exit {done.returncode}: {' / '.join(result['stderr']) or out}"
    if match := re.search(r"archived (\d+) chains(?: \(([^)]*)\))?", out):
        result["archived_chains"] = int(match.group(1))
        result["by_status"] = dict(
            (k, int(v)) for k, v in (p.split() for p in (match.group(2) or "").split(", ") if p)
        )
    if match := re.search(r"deleted (\d+)", out):
        result["deleted"] = int(match.group(1))
    return result


FAILED_LISTING = ("--status", "failed", "--all", "--limit", "500", "--json")


def cli_failed_ids(url: str) -> list[str]:
    done = subprocess.run(
        [*(sys.executable, "-m", "jobchain.cli", "jobs", "list", "--state", url), *FAILED_LISTING],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return sorted(item["id"] for item in json.loads(done.stdout)["items"])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    began = time.monotonic()
    tag = f"{os.getpid()}_{int(time.time()) % 100000}"
    schema = f"shop_truth_{tag}"
    direct = f"{PG}/{DATABASE}?schema={schema}"
    notify = f"{REDIS}?prefix=shoptruth-{tag}"
    expect = expected_counts(args.orders, args.slow)
    report: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {
            "orders": args.orders,
            "slow_jobs": args.slow,
            "proxy_delay_s_each_way": args.delay,
            "concurrency": args.concurrency,
            "prefetch": args.prefetch,
            "tx_size": TX_SIZE,
            "fast_timeout_s": app.FAST_TIMEOUT,
            "slow_timeout_s": app.SLOW_TIMEOUT,
            "slow_sleep_s": app.SLOW_SLEEP,
            "card_expired_every": app.CARD_EXPIRED_EVERY,
            "slow_every": app.SLOW_EVERY,
            "schema": schema,
            "state": "PostgreSQL 127.0.0.1:5432 (workers through the delaying proxy)",
            "notify": "Redis 127.0.0.1:6379 (own prefix)",
        },
        "expected": expect,
    }
    logdir = Path(tempfile.mkdtemp(prefix="shop-truth-"))
    workers: list[Worker] = []
    conn = await psycopg.AsyncConnection.connect(f"{PG}/{DATABASE}", autocommit=True)
    client = await jobchain.connect(direct, notify=notify, job_types=app.types, migrate=True)
    proxy = PartitionProxy(5432)
    try:
        try:
            with proxy:
                proxy.delay = args.delay
                via = f"postgresql://postgres@127.0.0.1:{proxy.port}/{DATABASE}?schema={schema}"
                workers = [start_worker(n, via, notify, args, logdir) for n in ("shop-a", "shop-b")]

                async def up() -> bool:
                    for w in workers:
                        if w.process.poll() is not None:
                            raise RuntimeError(
                                f"worker {w.name} exited {w.process.returncode}: {w.log.read_text()}"
                            )
                        await asyncio.to_thread(scrape, w.port)
                    running = await client.list_workers(states=["running"])
                    return len(running) == 2

                await wait_for("both workers running with their metrics endpoints", up, 90)
                for info in await client.list_workers(states=["running"]):
                    for w in workers:
                        if info.name.startswith(w.name):
                            w.worker_id = info.id
                report["workers_up_s"] = round(time.monotonic() - began, 1)

                ticks: list[dict[str, Any]] = []
                stop_monitor = asyncio.Event()

                async def monitor() -> None:
                    while not stop_monitor.is_set():
                        tick: dict[str, Any] = {"t": round(time.monotonic() - began, 1), "exporters": []}
                        for w in workers:
                            with contextlib.suppress(Exception):
                                if queue_series(await asyncio.to_thread(scrape, w.port)):
                                    tick["exporters"].append(w.name)
                                    w.exporting_ticks += 1
                        with contextlib.suppress(Exception):
                            for info in await client.list_workers():
                                w = next((w for w in workers if w.worker_id == info.id), None)
                                if w is None or info.state.value != "running":
                                    continue
                                w.heartbeats_seen += 1
                                w.capacity, w.concurrency = info.capacity, info.concurrency
                                w.max_inflight = max(w.max_inflight, info.inflight)
                                w.max_running = max(w.max_running, info.running)
                                w.max_buffered = max(w.max_buffered, info.buffered)
                                w.max_committing = max(w.max_committing, info.committing)
                                if info.inflight > info.capacity or info.running > info.concurrency:
                                    w.over_capacity.append(
                                        {"t": tick["t"], "inflight": info.inflight, "running": info.running}
                                    )
                        ticks.append(tick)
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop_monitor.wait(), 1.0)

                monitoring = asyncio.create_task(monitor())

                # The orders: charges and slow jobs interleaved, 50 a transaction, straight to PostgreSQL.
                inputs = [(app.charge, n) for n in range(1, args.orders + 1)]
                step = max(1, args.orders // max(1, args.slow))
                for i, n in enumerate(range(1, args.slow + 1)):
                    inputs.insert(min(len(inputs), (i + 1) * step + i), (app.slow, n))
                load_began = time.monotonic()
                for at in range(0, len(inputs), TX_SIZE):
                    async with client.transaction() as tx:
                        for job_type, value in inputs[at : at + TX_SIZE]:
                            await client.start_chain(tx, job_type, value)
                report["orders_started_s"] = round(time.monotonic() - load_began, 1)

                async def drained() -> bool:
                    stats = await client.queue_stats()
                    busy = sum(t.due + t.scheduled + t.running + t.blocked for t in stats.types)
                    return busy == 0 and stats.total("completed") + stats.total("failed") == expect["jobs"]

                try:
                    await wait_for("the queue drained", drained, args.drain_timeout)
                except TimeoutError as error:  # compare all the same: the rows show what is missing
                    report["drain_timeout"] = str(error)
                report["drain_s"] = round(time.monotonic() - load_began, 1)

                # The queue gauges are sampled (every 15 s): wait for a sample taken after the drain.
                stats = await client.queue_stats()
                want = stats_series(stats)
                finals: dict[str, list[Sample]] = {}

                async def gauges_settled() -> bool:
                    for w in workers:
                        finals[w.name] = await asyncio.to_thread(scrape, w.port)
                    summed: dict[Any, float] = defaultdict(float)
                    for samples in finals.values():
                        for key, value in queue_series(samples).items():
                            if key[0] != QUEUE_AGE:
                                summed[key] += value
                    return dict(summed) == want

                gauge_wait = time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await wait_for("queue gauges equal to queue_stats", gauges_settled, 40)
                report["gauge_settle_s"] = round(time.monotonic() - gauge_wait, 1)
                for w in workers:  # the last scrape of both, after the gauges settled (or gave up)
                    finals[w.name] = await asyncio.to_thread(scrape, w.port)
                stop_monitor.set()
                await monitoring

                rows = compare(
                    finals, want, stats, await db_counts(conn, schema), await failed_jobs(client), expect
                )
                report["rows"] = [asdict(r) for r in rows["rows"]]
                report["gauges"] = rows["gauges"]
                report["slow_outcomes"] = rows["slow_outcomes"]
                report["db"] = rows["db"]
                report["exporters_per_tick"] = {
                    "ticks": len(ticks),
                    "max_simultaneous": max((len(t["exporters"]) for t in ticks), default=0),
                    "ticks_with_none": sum(1 for t in ticks if not t["exporters"]),
                    "ticks_with_two": [t for t in ticks if len(t["exporters"]) > 1][:20],
                    "first_exporting_tick_s": next((t["t"] for t in ticks if t["exporters"]), None),
                }
                report["workers"] = [
                    {
                        "name": w.name,
                        "worker_id": w.worker_id,
                        "metrics_port": w.port,
                        "concurrency": w.concurrency,
                        "capacity": w.capacity,
                        "max_inflight": w.max_inflight,
                        "max_running": w.max_running,
                        "max_buffered": w.max_buffered,
                        "max_committing": w.max_committing,
                        "registry_reads": w.heartbeats_seen,
                        "over_capacity": w.over_capacity[:20],
                        "ticks_exporting_queue_gauges": w.exporting_ticks,
                    }
                    for w in workers
                ]
                capacity = args.concurrency + args.prefetch
                report["rows"] += [asdict(r) for r in run_rows(report, workers, capacity)]

                # Stop the workers cleanly before the archive deletes chains under them.
                report["worker_exit"] = stop_workers(workers)
        finally:
            for w in workers:
                if w.process.poll() is None:
                    w.process.kill()
                    w.process.wait(10)

        if args.no_spark:
            report["archive"] = {"ran": False, "why": "--no-spark"}
        else:
            before_failed = sorted(j.id for j in await failed_jobs(client))
            before = await client.queue_stats()
            completed_chains = len(await all_chains(client, "completed"))
            await asyncio.sleep(1.5)  # --older-than 1s: every chain finished more than a second ago
            archive = await asyncio.to_thread(
                run_archive, direct, str(logdir / "archive"), args.spark_timeout
            )
            archive["completed_chains_before"] = completed_chains
            archive["completed_jobs_before"] = before.total("completed")
            archive["failed_before"] = before.total("failed")
            if archive.get("ran"):
                after = await client.queue_stats()
                after_ids = await asyncio.to_thread(cli_failed_ids, direct)
                archive["failed_after"] = after.total("failed")
                archive["completed_jobs_after"] = after.total("completed")
                archive["cli_failed_listed"] = len(after_ids)
                archive["dead_letters_kept"] = after_ids == before_failed
                report["rows"] += [
                    asdict(r)
                    for r in (
                        Row(
                            "archive: dead letters in the live queue (queue_stats failed)",
                            archive["failed_after"],
                            archive["failed_before"],
                            expect["failed"],
                            archive["failed_after"] == archive["failed_before"] == expect["failed"],
                            "after the archive | before it",
                        ),
                        Row(
                            "archive: ids from jobchain jobs list --status failed --json",
                            len(after_ids),
                            len(before_failed),
                            expect["failed"],
                            archive["dead_letters_kept"] and len(after_ids) == expect["failed"],
                            "same ids as before the archive"
                            if archive["dead_letters_kept"]
                            else "ids differ",
                        ),
                        Row(
                            "archive: completed jobs left in the live queue",
                            archive["completed_jobs_after"],
                            0,
                            0,
                            archive["completed_jobs_after"] == 0,
                            f"{archive['completed_jobs_before']} before",
                        ),
                        Row(
                            "archive: chains archived (its own report)",
                            archive.get("archived_chains", "?"),
                            completed_chains,
                            expect["email"] + expect["slow"] - expect["timeouts"],
                            archive.get("archived_chains") == completed_chains
                            and archive.get("by_status", {}).get("failed", 0) == 0,
                            f"by status {archive.get('by_status')}; deleted {archive.get('deleted')}",
                        ),
                    )
                ]
            report["archive"] = archive
    finally:
        await client.close()
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
    report["schema_dropped"] = True
    report["wall_s"] = round(time.monotonic() - began, 1)
    archived = args.no_spark or report.get("archive", {}).get("ran", False)
    report["ok"] = all(r["ok"] for r in report["rows"]) and archived and "drain_timeout" not in report
    return report


async def all_chains(client: jobchain.Client, status: str) -> list[Any]:
    chains: list[Any] = []
    cursor = None
    while True:
        page = await client.list_chains(statuses=[status], cursor=cursor, limit=500)
        chains += page.items
        cursor = page.next_cursor
        if cursor is None:
            return chains


def stop_workers(workers: list[Worker]) -> list[dict[str, Any]]:
    for w in workers:
        w.process.send_signal(signal.SIGTERM)
    exits = []
    for w in workers:
        try:
            code: int | str = w.process.wait(60)
        except subprocess.TimeoutExpired:
            code = "still running 60 s after SIGTERM (killed)"
            w.process.kill()
        tail = w.log.read_text(errors="replace").splitlines()
        exits.append(
            {
                "name": w.name,
                "exit": code,
                "warnings": [line for line in tail if " WARNING " in line or " ERROR " in line][-10:],
                "gauge_log": [line for line in tail if "queue gauges" in line][-5:],
            }
        )
    return exits


def compare(
    finals: dict[str, list[Sample]],
    want: dict[Any, float],
    stats: Any,
    db: dict[str, Any],
    failed: list[Any],
    expect: dict[str, int],
) -> dict[str, Any]:
    scrapes = list(finals.values())

    def summed(name: str, **match: str) -> float:
        return sum(total(s, name, **match) for s in scrapes)

    last_errors = [j.attempt_errors[-1].error_type if j.attempt_errors else "" for j in failed]
    db_timeouts = sum(1 for e in last_errors if e == TIMEOUT_ERROR)
    db_timeout_entries = sum(1 for j in failed for e in j.attempt_errors if e.error_type == TIMEOUT_ERROR)
    db_card = sum(1 for e in last_errors if e == CARD_ERROR)
    timed_out_inputs = sorted(j.input for j in failed if j.type_name == app.slow.name)
    card_failed = f'{FAILED}{{error_type="{CARD_ERROR}"}}'
    timeout_failed = f'{FAILED}{{error_type="{TIMEOUT_ERROR}"}}'
    email_created = f'{CREATED}{{job_type="{app.send_email.name}"}}'
    table = [
        (COMPLETED, summed(COMPLETED), db["completed"], expect["completed"],
         "DB: jobs with status completed (a continued charge is completed)"),
        (FAILED, summed(FAILED), db["failed"], expect["failed"], "DB: jobs with status failed"),
        (card_failed, summed(FAILED, error_type=CARD_ERROR), db_card, expect["card_expired"],
         "DB: failed jobs whose last error is CardExpired"),
        (timeout_failed, summed(FAILED, error_type=TIMEOUT_ERROR), db_timeouts, expect["timeouts"],
         "DB: failed jobs whose last error is JobTimeoutError"),
        (TIMED_OUT, summed(TIMED_OUT), db_timeout_entries, expect["timeouts"],
         "DB: JobTimeoutError entries in the error histories (list_jobs attempt_errors)"),
        (f"{LOST} (all reasons)", summed(LOST), 0, 0, "nothing cancelled, deleted or killed"),
        (f'{LOST}{{reason="already_completed"}}', summed(LOST, reason="already_completed"), 0, 0, ""),
        (STARTED, summed(STARTED), db["attempts"], expect["jobs"], "DB: sum of job.attempt"),
        (RETRIED, summed(RETRIED), db["retried_attempts"], 0,
         "DB: sum(attempt) - jobs attempted (max_attempts=1; e-mails never fail)"),
        (email_created, summed(CREATED, job_type=app.send_email.name), db["email_jobs"], expect["email"],
         "continuations the workers created; DB: shop.email jobs"),
        (CLAIMS_EXPIRED, summed(CLAIMS_EXPIRED), db["rescued"], 0, "DB: jobs with rescued_at set"),
        (LAPSES, summed(LAPSES), 0, 0, "no stall was caused"),
    ]  # fmt: skip
    rows = [Row(m, v, d, e, v == d == e, note) for m, v, d, e, note in table]
    # Queue gauges: summed over both last scrapes, against queue_stats and the SQL counts.
    exporters = [name for name, s in finals.items() if queue_series(s)]
    got: dict[Any, float] = defaultdict(float)
    for s in scrapes:
        for key, value in queue_series(s).items():
            got[key] += value
    gauges = []
    for key in sorted(set(want) | {k for k in got if k[0] != QUEUE_AGE}):
        name, labels = key
        label = dict(labels)
        sql = None
        if name == QUEUE_JOBS:
            sql = db["by_type_status"].get(f"{label['job_type']}|{label['status']}", 0)
        gauges.append(
            {
                "series": name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}",
                "metric": got.get(key),
                "queue_stats": want.get(key),
                "sql": sql,
                "ok": got.get(key) == want.get(key) and (sql is None or sql == want.get(key)),
            }
        )
    ages = [v for (n, _), v in got.items() if n == QUEUE_AGE]
    matching = sum(g["ok"] for g in gauges)
    rows += [
        Row(
            "workers exporting jobchain_queue_* (last scrape)",
            len(exporters),
            1,
            1,
            len(exporters) == 1,
            f"exported by {', '.join(exporters) or 'none'}",
        ),
        Row(
            "jobchain_queue_* series equal to queue_stats (and SQL)",
            f"{matching} of {len(gauges)}",
            f"{len(want)} series",
            f"{len(want)} series",
            bool(gauges) and matching == len(gauges) == len(want),
            "summed over both workers' last scrapes; see the gauge table",
        ),
        Row(
            f"{QUEUE_AGE} (nothing due)",
            max(ages, default=float("nan")),
            0,
            0,
            bool(ages) and max(ages) == 0,
            "",
        ),
    ]
    # How slow the outcomes were to write: completed attempts whose handler start to outcome
    # written (the commit included) took longer than the fast types' deadline. Each of them
    # would have "timed out" if the commit counted toward the deadline (the issue-36 bug).
    slow_outcomes = {}
    for type_name in (app.charge.name, app.send_email.name):
        labels = {"job_type": type_name, "outcome": "completed"}
        count = summed(DURATION + "_count", **labels)
        within = summed(DURATION + "_bucket", le=str(float(app.FAST_TIMEOUT)), **labels)
        within_1s = summed(DURATION + "_bucket", le="1.0", **labels)
        slow_outcomes[type_name] = {
            "completed_attempts": count,
            "longer_than_deadline": count - within,
            "longer_than_1s": count - within_1s,
        }
    return {
        "rows": rows,
        "gauges": gauges,
        "slow_outcomes": slow_outcomes,
        "db": {**db, "failed_last_error_types": dict(sorted(_count(last_errors).items()))}
        | {"timed_out_inputs": timed_out_inputs},
    }


def _count(values: list[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for v in values:
        counts[v] += 1
    return counts


def run_rows(report: dict[str, Any], workers: list[Worker], capacity: int) -> list[Row]:
    ticks = report["exporters_per_tick"]
    rows = [
        Row(
            "max workers exporting jobchain_queue_* at one scrape (every 1 s)",
            ticks["max_simultaneous"],
            1,
            1,
            ticks["max_simultaneous"] == 1,
            f"{ticks['ticks']} scrapes of both; {ticks['ticks_with_none']} with none "
            f"(the first sample came at {ticks['first_exporting_tick_s']} s)",
        ),
    ]
    for w in workers:
        rows.append(
            Row(
                f"{w.name}: max inflight (registry) <= capacity",
                w.max_inflight,
                w.capacity,
                capacity,
                w.max_inflight <= w.capacity == capacity and not w.over_capacity,
                f"capacity = concurrency {w.concurrency} + prefetch; max running {w.max_running} "
                f"(<= {w.concurrency}), buffered {w.max_buffered}, committing {w.max_committing}; "
                f"{w.heartbeats_seen} registry reads",
            )
        )
    return rows


def fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def markdown(report: dict[str, Any]) -> str:
    c = report["config"]
    lines = [
        f"# Shop truth: metrics beside the database (issue 36, done-when), {report['started_at']}",
        "",
        f"Verdict: **{'PASS' if report['ok'] else 'FAIL'}**; wall time {report['wall_s']} s "
        f"(workers up {report.get('workers_up_s')} s, orders started in {report.get('orders_started_s')} s, "
        f"drained {report.get('drain_s')} s after the first order, gauges settled "
        f"{report.get('gauge_settle_s')} s after the drain).",
        "",
        f"{c['orders']} `shop.charge` orders (every {c['card_expired_every']}th raises CardExpired, "
        f"max_attempts=1; the others continue with `shop.email`; both 3 ms handlers with a "
        f"{c['fast_timeout_s']} s deadline) and {c['slow_jobs']} `shop.slow` jobs (every "
        f"{c['slow_every']}th sleeps {c['slow_sleep_s']} s past its {c['slow_timeout_s']} s deadline, "
        f"max_attempts=1; the rest 3 ms), started in transactions of {c['tx_size']} straight to "
        f"PostgreSQL. Two `jobchain worker` processes (`shop-a`, `shop-b`), concurrency "
        f"{c['concurrency']}, prefetch {c['prefetch']}, their own `--metrics-port`, Redis notify, "
        f"PostgreSQL through a proxy delaying every chunk {c['proxy_delay_s_each_way'] * 1000:.0f} ms "
        "each way. Counters are summed over both workers' last scrape after the drain. "
        "`database` is the database's own count (SQL on the job table, `list_jobs` error "
        "histories, `queue_stats`); `expected` is what the inputs make it by construction.",
        "",
        "| metric | metrics value | database count | expected | ok | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| `{r['metric']}` | {fmt(r['metric_value'])} | {fmt(r['database'])} | {fmt(r['expected'])} | "
            f"{'yes' if r['ok'] else '**NO**'} | {r['note']} |"
        )
    slow = report.get("slow_outcomes", {})
    if slow:
        parts = [
            f"`{t}` {fmt(v['longer_than_deadline'])} of {fmt(v['completed_attempts'])} "
            f"(over 1 s: {fmt(v['longer_than_1s'])})"
            for t, v in slow.items()
        ]
        lines += [
            "",
            f"How slow the database was: completed attempts whose handler start to outcome written "
            f"(`{DURATION}`, the commit included) took longer than the {c['fast_timeout_s']} s deadline "
            f"of their 3 ms handler: {'; '.join(parts)}. None of them may count as timed out.",
        ]
    lines += ["", "## Queue gauges (last scrape of both, summed) vs `client.queue_stats()` and SQL", ""]
    lines += ["| series | metrics | queue_stats | SQL | ok |", "|---|---|---|---|---|"]
    for g in report.get("gauges", []):
        sql = "-" if g["sql"] is None else g["sql"]
        lines.append(
            f"| `{g['series']}` | {fmt(g['metric'])} | {fmt(g['queue_stats'])} | {sql} | "
            f"{'yes' if g['ok'] else '**NO**'} |"
        )
    lines += [
        "",
        "## Workers (from the registry, read every second)",
        "",
        "| worker | capacity | max inflight | max running | max buffered | max committing "
        "| scrapes exporting queue gauges | exit after SIGTERM |",
        "|---|---|---|---|---|---|---|---|",
    ]
    exits = {e["name"]: e["exit"] for e in report.get("worker_exit", [])}
    for w in report.get("workers", []):
        lines.append(
            f"| {w['name']} | {w['capacity']} | {w['max_inflight']} | {w['max_running']} | "
            f"{w['max_buffered']} | {w['max_committing']} | {w['ticks_exporting_queue_gauges']} | "
            f"{exits.get(w['name'])} |"
        )
    a = report.get("archive", {})
    lines += ["", "## Archive", ""]
    if a.get("ran"):
        lines.append(
            f"`jobchain-spark {a['command']}` ran in {a['seconds']} s: "
            f"{' / '.join(a['stdout'])}. Dead letters before {a['failed_before']}, after "
            f"{a['failed_after']} (`jobchain jobs list --status failed --json`: {a['cli_failed_listed']}, "
            f"same ids: {a['dead_letters_kept']}); completed jobs before {a['completed_jobs_before']}, "
            f"after {a['completed_jobs_after']}."
        )
    else:
        lines.append(f"Did not run: {a.get('why')}")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=500)
    parser.add_argument("--slow", type=int, default=150)
    parser.add_argument("--delay", type=float, default=0.03, help="proxy delay per chunk, each way (s)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--drain-timeout", type=float, default=240)
    parser.add_argument("--spark-timeout", type=float, default=300)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="print only, write no result files")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    text = markdown(report)
    print(text)
    if not args.no_write:
        stem = RESULTS / f"shop-truth-{datetime.now(UTC):%Y-%m-%d}"
        stem.with_suffix(".md").write_text(text)
        stem.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"wrote {stem}.md and {stem}.json")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
