"""``manage.py jobchain_migrate`` and ``manage.py jobchain_worker``, and the connection handling
around sync handlers. The worker runs as a real subprocess (``python -m django``) until a job
completes, then stops on a signal; every wait is on a condition, with a generous timeout."""

from __future__ import annotations

import io
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections
from djshop.jobs import OrderRef, count_receipts, make_receipt
from djshop.models import Order, Receipt
from djsupport import tmp_dir, worker_env

import jobchain.contrib.django as jd
from jobchain import JobStatus
from jobchain.contrib.django.worker import close_connections_around

WAIT = 60.0


def _jobchain_tables(alias: str) -> list[str]:
    with connections[alias].cursor() as cursor:
        names = connections[alias].introspection.table_names(cursor)
    return sorted(name for name in names if name.startswith("jobchain_"))


def test_jobchain_migrate_creates_jobchain_tables_and_is_idempotent(alias: str) -> None:
    out = io.StringIO()
    call_command("jobchain_migrate", database=alias, stdout=out)
    call_command("jobchain_migrate", database=alias, stdout=out)
    assert out.getvalue().count(f"migrated jobchain's tables in database {alias!r}") == 2
    assert "jobchain_job" in _jobchain_tables(alias)


def test_jobchain_migrate_applies_jobchains_own_migrations_not_djangos(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.sqlite3"
    result = subprocess.run(
        [sys.executable, "-m", "django", "jobchain_migrate"],
        env=worker_env("default", JOBCHAIN_DJANGO_SQLITE=str(fresh)),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "migrated jobchain's tables in database 'default'" in result.stdout
    with sqlite3.connect(fresh) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "jobchain_job" in tables
    assert not {"djshop_order", "django_migrations"} & tables  # Django's migrate was not run


@pytest.fixture
def worker(alias: str) -> Iterator[subprocess.Popen[str]]:
    """``manage.py jobchain_worker`` on ``alias``, killed if a test left it running."""
    log = (tmp_dir() / f"worker-{alias}-{threading.get_ident()}.log").open("w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "jobchain_worker", "--loop", "asyncio"],
        env=worker_env(alias),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)
        log.seek(0)
        print(log.read())  # shown by pytest when the test failed
        log.close()


@pytest.mark.pg_connections(4, outside=6)  # the worker subprocess: 4 measured (connection budget)
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_jobchain_worker_runs_orm_handlers_and_stops_gracefully_on_a_signal(
    alias: str, worker: subprocess.Popen[str], stop_signal: signal.Signals
) -> None:
    order = Order.objects.using(alias).create(name=f"worker-{alias}-{stop_signal.name}")
    ref = OrderRef(order_id=order.pk, alias=alias)
    made = jd.start_chain(make_receipt, ref, using=alias)
    chain = jd.client(alias).await_chain(made.id, timeout=WAIT)
    receipt = Receipt.objects.using(alias).get(order=order)
    assert chain.output == receipt.pk
    assert receipt.text == f"receipt for {order.name}"
    assert receipt.thread != "MainThread"  # the sync handler ran in a worker thread
    counted = jd.start_chain(count_receipts, ref, using=alias)
    assert jd.client(alias).await_chain(counted.id, timeout=WAIT).output == 1  # the async ORM handler
    worker.send_signal(stop_signal)
    assert worker.wait(WAIT) == 0
    job = jd.client(alias).get_job(counted.id)
    assert job is not None
    assert job.status is JobStatus.COMPLETED


def test_jobchain_worker_without_migrations_says_to_run_jobchain_migrate(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "django", "jobchain_worker"],
        env=worker_env("default", JOBCHAIN_DJANGO_SQLITE=str(tmp_path / "empty.sqlite3")),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert result.returncode != 0
    assert "jobchain_migrate" in result.stderr


def test_sync_handler_calls_close_old_connections_before_and_after(sqlite_database: str) -> None:
    """CONN_MAX_AGE=0: a connection left open in the thread is closed before the call, and the
    one the handler opened is closed after it (Django's request rule, per handler call)."""
    seen: dict[str, object] = {}

    def handler() -> int:
        wrapper = connections[sqlite_database]
        seen["before"] = wrapper.connection
        return Order.objects.using(sqlite_database).count()

    def in_thread() -> None:
        connections[sqlite_database].ensure_connection()
        seen["opened"] = connections[sqlite_database].connection
        seen["result"] = close_connections_around(handler)
        seen["after"] = connections[sqlite_database].connection

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(WAIT)
    assert seen["opened"] is not None
    assert seen["before"] is None
    assert isinstance(seen["result"], int)
    assert seen["after"] is None


def test_jobchain_worker_migrate_applies_the_migrations_then_runs(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.sqlite3"
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "django", "jobchain_worker", "--migrate", "--name", "migrating"],
            env=worker_env("default", JOBCHAIN_DJANGO_SQLITE=str(fresh)),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + WAIT
        while "worker migrating" not in log_path.read_text() and process.poll() is None:
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)  # polling a condition, not asserting on time
        assert process.poll() is None, log_path.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)
    with sqlite3.connect(fresh) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "jobchain_job" in tables


@pytest.mark.pg_connections(4, outside=6)
def test_jobchain_worker_otel_exports_the_attempts_span_and_the_completion_metric(alias: str) -> None:
    import os

    env = {k: v for k, v in worker_env(alias).items() if not k.startswith("OTEL_") and k != "JOBCHAIN_OTEL"}
    env |= {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "console"}
    out = (tmp_dir() / f"otel-{alias}-{os.getpid()}-{threading.get_ident()}.out").open("w+")
    err = (tmp_dir() / f"otel-{alias}-{os.getpid()}-{threading.get_ident()}.err").open("w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "jobchain_worker", "--loop", "asyncio", "--otel"],
        env=env,
        stdout=out,
        stderr=err,
        text=True,
    )
    try:
        order = Order.objects.using(alias).create(name=f"otel-{alias}-{time.monotonic_ns()}")
        made = jd.start_chain(make_receipt, OrderRef(order_id=order.pk, alias=alias), using=alias)
        assert jd.client(alias).await_chain(made.id, timeout=WAIT).status is JobStatus.COMPLETED
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT) == 0  # the providers flush their spans and metrics at exit
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        out.close()
        err.close()
    assert '"name": "process djshop.make_receipt"' in stdout, stderr
    assert made.id in stdout
    assert '"name": "jobchain.jobs.completed"' in stdout, stdout[-2000:]
    assert "tracing and metrics through OpenTelemetry" in stderr, stderr


def test_jobchain_worker_otel_without_an_exporter_package_says_what_to_install() -> None:
    env = worker_env("default", OTEL_TRACES_EXPORTER="no-such-exporter", OTEL_METRICS_EXPORTER="none")
    result = subprocess.run(
        [sys.executable, "-m", "django", "jobchain_worker", "--otel"],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert result.returncode != 0
    assert "--otel" in result.stderr
    assert "no-such-exporter" in result.stderr, result.stderr
