"""Shared helpers of the benchmark: settings, database admin, statistics, process metering."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psutil
import psycopg

T = TypeVar("T")

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PYTHON = sys.executable
PG_BASE = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
"""The server as this process started (scripts run by a phase inherit ``BENCH_PG``)."""
REDIS_URL = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
NATS_URL = os.environ.get("BENCH_NATS", "nats://127.0.0.1:4222")
TMP = Path(os.environ.get("BENCH_TMP", "/tmp/jobchain-bench"))


LOOP = os.environ.get("BENCH_LOOP", "uvloop")
"""The event loop every library's processes run on (the same for all: ``uvloop`` or ``asyncio``)."""


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the benchmark's event loop (:data:`LOOP`)."""
    if LOOP == "uvloop":
        import uvloop

        return uvloop.run(main)
    if LOOP != "asyncio":
        raise SystemExit(f"BENCH_LOOP must be uvloop or asyncio, got {LOOP!r}")
    return asyncio.run(main)


def pg_base() -> str:
    """``postgresql://USER@HOST:PORT`` of the benchmark server, read when called: ``make bench``
    sets ``BENCH_PG`` to its private cluster after this module is imported."""
    return os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")


def pg_address() -> tuple[str, int, str]:
    """(host, port, user) of the benchmark server, for pgbench and psql."""
    parsed = urlsplit(pg_base())
    return parsed.hostname or "127.0.0.1", parsed.port or 5432, parsed.username or "postgres"


def pg_cli() -> list[str]:
    """``-h HOST -p PORT -U USER`` for the PostgreSQL command-line tools."""
    host, port, user = pg_address()
    return ["-h", host, "-p", str(port), "-U", user]


def pg_url(db: str, host: str | None = None) -> str:
    """``db`` on the benchmark server, or on ``host`` ("127.0.0.1:PORT", the counting proxy)."""
    base = pg_base()
    if host is not None:
        base = base.rsplit("@", 1)[0] + "@" + host
    return f"{base}/{db}"


def admin_sql(sql: str, db: str = "postgres") -> list[tuple[Any, ...]]:
    """Run one statement in autocommit on ``db`` and return its rows (if any)."""
    with psycopg.connect(pg_url(db), autocommit=True) as conn:
        cur = conn.execute(sql)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def recreate_db(name: str) -> None:
    admin_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin_sql(f"CREATE DATABASE {name}")


def checkpoint() -> None:
    """An untimed CHECKPOINT before every timed phase, as in the peer baselines."""
    admin_sql("CHECKPOINT")


def db_xacts(db: str) -> int:
    """Committed + rolled-back server transactions of ``db`` so far (pg_stat_database)."""
    with psycopg.connect(pg_url("postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", (db,)
        ).fetchone()
    return int(row[0]) if row else 0


# ---------------------------------------------------------------- machine load


class CpuMeter:
    """Whole-machine CPU busy fraction between start() and stop() (from /proc/stat)."""

    @staticmethod
    def _read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            parts = [int(x) for x in f.readline().split()[1:]]
        idle = parts[3] + parts[4]
        return sum(parts), idle

    def start(self) -> None:
        self._t0 = self._read()

    def stop(self) -> float:
        total, idle = self._read()
        dt = total - self._t0[0]
        return 0.0 if dt <= 0 else 1.0 - (idle - self._t0[1]) / dt


# ---------------------------------------------------------------- child processes


@dataclass
class Child:
    """A benchmark subprocess speaking JSON lines on stdout; its RSS is sampled while it runs."""

    argv: list[str]
    proc: subprocess.Popen[str] = field(init=False)
    peak_rss: int = 0

    def __post_init__(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env=env, cwd=str(ROOT)
        )
        self._ps = psutil.Process(self.proc.pid)

    def sample(self) -> None:
        with contextlib.suppress(psutil.Error):
            self.peak_rss = max(self.peak_rss, self._ps.memory_info().rss)

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                code = self.proc.wait()
                raise RuntimeError(f"{' '.join(self.argv[:3])} exited with {code} before answering")
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)  # type: ignore[no-any-return]

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 600) -> dict[str, Any]:
        """Wait for the final JSON line (sampling RSS meanwhile) and for the exit."""
        import threading

        result: dict[str, Any] = {}
        error: list[BaseException] = []

        def reader() -> None:
            try:
                result.update(self.read())
            except BaseException as exc:
                error.append(exc)

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while thread.is_alive():
            self.sample()
            thread.join(0.1)
            if time.monotonic() > deadline:
                self.proc.kill()
                raise TimeoutError(f"{self.argv[:3]} took longer than {timeout} s")
        self.proc.wait(timeout=60)
        if error:
            raise error[0]
        return result


def run_child(args: Sequence[str], timeout: float = 600) -> dict[str, Any]:
    child = Child([PYTHON, *args])
    out = child.finish(timeout)
    out.setdefault("peak_rss", child.peak_rss)
    return out


def emit(obj: dict[str, Any]) -> None:
    """Child side: one JSON line to the parent."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Stat:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Stat | None:
        vals = [v for v in values if v is not None]
        if not vals:
            return None
        return cls(statistics.median(vals), min(vals), max(vals), len(vals))


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    t = os.times()
    return t.user + t.system


def rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


# ---------------------------------------------------------------- table statistics while a phase runs


class TableSampler:
    """Samples ``pg_stat_user_tables`` of one table every ``every`` seconds, in a thread.

    Each sample: seconds since start, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd,
    autovacuum_count and the table's total size in bytes (heap + indexes + TOAST). The
    statistics are the server's cumulative counters (flushed by backends about once a second).
    """

    SQL = (
        "SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count, "
        "pg_total_relation_size(relid) FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s"
    )

    def __init__(self, db: str, schema: str, table: str, every: float = 5.0) -> None:
        import threading

        self.db, self.schema, self.table, self.every = db, schema, table, every
        self.samples: list[tuple[float, int, int, int, int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample_once(self, conn: psycopg.Connection[Any], t0: float) -> None:
        row = conn.execute(self.SQL, (self.schema, self.table)).fetchone()  # type: ignore[arg-type]
        if row is not None:
            self.samples.append((round(time.monotonic() - t0, 2), *(int(x) for x in row)))  # type: ignore[arg-type]

    def _run(self) -> None:
        t0 = time.monotonic()
        with psycopg.connect(pg_url(self.db), autocommit=True) as conn:
            while True:
                self.sample_once(conn, t0)
                if self._stop.wait(self.every):
                    self.sample_once(conn, t0)
                    return

    def __enter__(self) -> TableSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def summary(self) -> dict[str, Any]:
        """Peak and last dead tuples, HOT share of updates and autovacuum runs over the window."""
        if not self.samples:
            return {}
        first, last = self.samples[0], self.samples[-1]
        peak = max(self.samples, key=lambda s: s[2])
        half = last[0] / 2
        upd = last[3] - first[3]
        return {
            "dead_peak": peak[2],
            "dead_peak_at_s": peak[0],
            "dead_last": last[2],
            "dead_peak_first_half": max(s[2] for s in self.samples if s[0] <= half),
            "dead_peak_second_half": max(s[2] for s in self.samples if s[0] > half) if last[0] > 0 else 0,
            "tup_upd": upd,
            "tup_hot_upd": last[4] - first[4],
            "hot_share": (last[4] - first[4]) / upd if upd else None,
            "autovacuums": last[5] - first[5],
            "table_bytes_start": first[6],
            "table_bytes_end": last[6],
            "samples": [list(s) for s in self.samples],
            "sample_every_s": self.every,
        }
