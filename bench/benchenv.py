"""The bench-only environment (bench/.venv: peers, psutil, matplotlib and jobchain's packages)
and the benchmark's own PostgreSQL server (a private cluster with production-like settings)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
VENV = BENCH / ".venv"
PACKAGES = ["packages/core", "packages/sqlite", "packages/postgres", "packages/redis", "packages/nats"]


def ensure_venv(script: str) -> None:
    """Re-exec inside bench/.venv, creating or refreshing it when requirements changed."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    wanted = (BENCH / "requirements.txt").read_text() + "\n".join(PACKAGES)
    if not stamp.exists() or stamp.read_text() != wanted:
        print("bench: preparing bench/.venv (peers at their latest release)", flush=True)
        if not python.exists():
            venv.create(VENV, with_pip=True)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, "--upgrade", "-r", str(BENCH / "requirements.txt")], check=True)
        subprocess.run([*pip, *(x for p in PACKAGES for x in ("-e", str(ROOT / p)))], check=True)
        stamp.write_text(wanted)
    if Path(sys.prefix).resolve() != VENV.resolve():
        os.execv(str(python), [str(python), script, *sys.argv[1:]])


# ---------------------------------------------------------------- the benchmark's own server

SERVER_SETTINGS = {
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
"""Production-like settings of the private cluster (issue 21): the figures must not depend on
the shared server's test configuration (128 MB shared_buffers, autovacuum off)."""


@contextlib.contextmanager
def bench_server() -> Iterator[str]:
    """A private PostgreSQL cluster for the whole run, unless ``BENCH_PG`` names a server.

    Sets ``BENCH_PG`` (inherited by every phase's subprocess) and ``BENCH_PG_KIND``
    ("private" or "shared"); yields the kind. The cluster (initdb into a temporary directory,
    pg_ctl on a free loopback port) is stopped and its directory removed on exit, on an error,
    on Ctrl-C and on SIGTERM/SIGHUP.
    """
    if os.environ.get("BENCH_PG"):
        os.environ["BENCH_PG_KIND"] = "shared"
        yield "shared"
        return
    from jobchain_postgres.testing import PrivateServer

    server = PrivateServer(settings=SERVER_SETTINGS)
    with signals_unwind():
        try:
            print(f"bench: starting a private PostgreSQL cluster in {server.data_dir.parent}", flush=True)
            server.start()
            os.environ["BENCH_PG"] = f"postgresql://postgres@127.0.0.1:{server.port}"
            os.environ["BENCH_PG_KIND"] = "private"
            print(f"bench: private cluster on 127.0.0.1:{server.port}", flush=True)
            yield "private"
        finally:
            server.close()
            print("bench: private cluster stopped and removed", flush=True)


@contextlib.contextmanager
def signals_unwind() -> Iterator[None]:
    """SIGTERM and SIGHUP raise SystemExit inside the block, so its cleanup (a private
    cluster's removal) runs when a run is stopped; the previous handlers come back after."""

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
