"""`jobchain worker` against a SQLite file that was never migrated: a one-line exit, or --migrate."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import jobchain
from jobchain.errors import SchemaNotMigratedError as CoreSchemaNotMigratedError
from jobchain.worker import Attempt, Completed, Processors, Worker
from jobchain_sqlite import SchemaNotMigratedError, SqliteOptions, SqliteStateAdapter

APP = textwrap.dedent(
    """
    from jobchain import JobTypes
    from jobchain.worker import Processors

    types = JobTypes()
    echo = types.define("unmigrated.echo", input=int, output=int, entry=True)
    processors = Processors()

    @processors.handler(echo)
    async def handle(attempt):
        return await attempt.complete(attempt.input + 1)
    """
)

TIMEOUT = 60.0


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, ModuleType]]:
    (tmp_path / "unmigrated_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, importlib.import_module("unmigrated_app")
    sys.modules.pop("unmigrated_app", None)


def worker(app_dir: Path, state: str, *options: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCHAIN_")}
    env["PYTHONPATH"] = str(app_dir)
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "jobchain.cli", "worker", "unmigrated_app:processors", "--state", state),
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


async def test_a_statement_on_an_unmigrated_file_raises_schema_not_migrated(tmp_path: Path) -> None:
    state = SqliteStateAdapter(SqliteOptions(path=str(tmp_path / "empty.db")))
    try:
        with pytest.raises(CoreSchemaNotMigratedError, match=r"jobchain migrate --state URL"):
            async with await jobchain.connect(state, job_types=jobchain.JobTypes()) as client:
                await client.list_chains()
    finally:
        await state.close()


def test_worker_on_an_unmigrated_file_exits_non_zero_naming_jobchain_migrate(
    app: tuple[Path, ModuleType],
) -> None:
    app_dir, _ = app
    state = f"sqlite:///{app_dir / 'never-migrated.db'}"
    process = worker(app_dir, state)
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode not in (0, None), output
    last = output.strip().splitlines()[-1]
    assert last.startswith("Error: "), output
    assert f"run `jobchain migrate --state {state}` first" in last
    assert "--migrate" in last
    assert "Traceback" not in output


def test_worker_with_migrate_migrates_then_processes_a_job(app: tuple[Path, ModuleType]) -> None:
    app_dir, unmigrated_app = app
    state = f"sqlite:///{app_dir / 'migrated-by-worker.db'}"
    process = worker(app_dir, state, "--migrate")

    async def run_one() -> object:
        async with await jobchain.connect(
            state, notify="none", job_types=unmigrated_app.types, migrate=False
        ) as client:
            async with client.transaction() as tx:
                started = await client.start_chain(tx, unmigrated_app.echo, 41)
            chain = await client.await_chain(started.id, timeout=TIMEOUT, poll_interval=0.05)
        return chain.output

    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "processing unmigrated.echo" in line:
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
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    state = SqliteStateAdapter(SqliteOptions(path=str(path)))
    await state.migrate()
    await state.close()
    # Undo the attempt-start migration by hand: the tables now predate this library.
    with sqlite3.connect(path) as connection:
        connection.execute("ALTER TABLE jobchain_job DROP COLUMN first_attempt_at")
        connection.execute("ALTER TABLE jobchain_job DROP COLUMN attempt_started_at")
    connection.close()

    types = jobchain.JobTypes()
    echo = types.define("old.echo", input=int, output=int, entry=True)
    processors = Processors()

    @processors.handler(echo)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        return await attempt.complete(attempt.input)

    async with await jobchain.connect(f"sqlite:///{path}", notify="none", job_types=types) as client:
        async with client.transaction() as tx:
            await client.start_chain(tx, echo, 1)
        worker = Worker(client, processors, poll_interval=0.05)
        await worker.start()
        with pytest.raises(CoreSchemaNotMigratedError, match=r"older than this library.*jobchain migrate"):
            await asyncio.wait_for(worker.wait(), TIMEOUT)
        await worker.stop()
