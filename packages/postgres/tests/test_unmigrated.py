"""`jobchain worker` against a PostgreSQL schema that was never migrated: a one-line exit, or --migrate.

Each test picks a fresh schema name through the URL (``?schema=...``) that nothing created.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
from psycopg import sql

import jobchain
from jobchain.errors import SchemaNotMigratedError as CoreSchemaNotMigratedError
from jobchain.worker import Attempt, Completed, Processors, Worker
from jobchain_postgres import PostgresStateAdapter, SchemaNotMigratedError, StateOptions

from .conftest import conninfo

APP = textwrap.dedent(
    """
    from jobchain import JobTypes
    from jobchain.worker import Processors

    types = JobTypes()
    echo = types.define("pg_unmigrated.echo", input=int, output=int, entry=True)
    processors = Processors()

    @processors.handler(echo)
    async def handle(attempt):
        return await attempt.complete(attempt.input + 1)
    """
)

TIMEOUT = 60.0


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, ModuleType]]:
    (tmp_path / "pg_unmigrated_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, importlib.import_module("pg_unmigrated_app")
    sys.modules.pop("pg_unmigrated_app", None)


def worker(app_dir: Path, state: str, *options: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCHAIN_")}
    env["PYTHONPATH"] = str(app_dir)
    return subprocess.Popen(
        [
            *(
                sys.executable,
                "-m",
                "jobchain.cli",
                "worker",
                "pg_unmigrated_app:processors",
                "--state",
                state,
            ),
            *("--notify", "none", "--poll-interval", "0.05", *options),
        ],
        cwd=app_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_the_adapter_error_is_the_core_schema_error() -> None:
    assert issubclass(SchemaNotMigratedError, CoreSchemaNotMigratedError)


async def test_a_statement_on_an_unmigrated_schema_raises_one_line(
    postgres_url: str, schema_name: str
) -> None:
    state = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    try:
        client = jobchain.Client(state, None, jobchain.JobTypes())
        with pytest.raises(CoreSchemaNotMigratedError) as raised:
            await client.list_chains()
    finally:
        await state.close()
    message = str(raised.value)
    assert "jobchain migrate --state URL" in message
    assert "\n" not in message  # no LINE/caret context from the server


@pytest.mark.pg_connections(2, outside=5)  # the worker subprocess: probe, claim, heartbeat, attempt
def test_worker_on_an_unmigrated_schema_exits_non_zero_naming_jobchain_migrate(
    app: tuple[Path, ModuleType], schema_url: str
) -> None:
    app_dir, _ = app
    process = worker(app_dir, schema_url)
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode not in (0, None), output
    last = output.strip().splitlines()[-1]
    assert last.startswith("Error: "), output
    assert "run `jobchain migrate --state postgresql://" in last
    assert "--migrate" in last
    assert "Traceback" not in output


@pytest.mark.pg_connections(2, outside=5)  # as above
def test_worker_with_migrate_migrates_then_processes_a_job(
    app: tuple[Path, ModuleType], schema_url: str
) -> None:
    app_dir, pg_app = app
    process = worker(app_dir, schema_url, "--migrate")

    async def run_one() -> object:
        async with await jobchain.connect(schema_url, notify="none", job_types=pg_app.types) as client:
            async with client.transaction() as tx:
                started = await client.start_chain(tx, pg_app.echo, 41)
            chain = await client.await_chain(started.id, timeout=TIMEOUT, poll_interval=0.05)
        return chain.output

    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "processing pg_unmigrated.echo" in line:
                break
        else:
            raise AssertionError("the worker exited before its start-up line")
        assert asyncio.run(run_one()) == 42
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_a_worker_on_tables_older_than_the_library_stops_naming_jobchain_migrate(
    postgres_url: str, schema_name: str, schema_url: str
) -> None:
    state = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    await state.migrate()
    await state.close()
    # Undo the attempt-start migration by hand: the tables now predate this library.
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(
            sql.SQL(
                "ALTER TABLE {}.jobchain_job DROP COLUMN first_attempt_at, DROP COLUMN attempt_started_at"
            ).format(sql.Identifier(schema_name))
        )

    types = jobchain.JobTypes()
    echo = types.define("old.echo", input=int, output=int, entry=True)
    processors = Processors()

    @processors.handler(echo)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        return await attempt.complete(attempt.input)

    async with await jobchain.connect(schema_url, notify="none", job_types=types) as client:
        async with client.transaction() as tx:
            await client.start_chain(tx, echo, 1)
        worker = Worker(client, processors, poll_interval=0.05)
        await worker.start()
        with pytest.raises(CoreSchemaNotMigratedError, match=r"older than this library.*jobchain migrate"):
            await asyncio.wait_for(worker.wait(), TIMEOUT)
        await worker.stop()
