"""scratch_database: a new, empty database per test, removed after it (SQLite and memory here;
PostgreSQL in packages/postgres/tests/test_scratch.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import jobchain
from jobchain import JobStatus, JobTypes
from jobchain.errors import BackendUnavailableError, InvalidArgumentError
from jobchain.plugins.hookspecs import BackendSpec
from jobchain.plugins.registry import BackendRegistry, RegisteredBackend
from jobchain.testing import FrozenClock, RunOutcome, run_until_idle, scratch_database
from jobchain.url import BackendURL
from jobchain.worker import Attempt, Backoff, Completed, Processors
from jobchain_sqlite import connection_of

job_types = JobTypes()
ship = job_types.define("ship", input=int, output=str, entry=True)
processors = Processors()


@processors.handler(ship, retry=Backoff(initial=timedelta(seconds=5), maximum=timedelta(seconds=5)))
async def on_ship(attempt: Attempt[int, str]) -> Completed:
    await attempt.prepare("atomic")
    await connection_of(attempt).execute(
        "INSERT INTO shipments (order_id, attempt) VALUES (?, ?)", (attempt.input, attempt.job.attempt)
    )
    if attempt.job.attempt == 1:
        raise RuntimeError("carrier down: the row rolls back with the attempt")
    return await attempt.complete(f"order {attempt.input} shipped")


def _file_of(url: str) -> Path:
    database = BackendURL.parse(url).database
    assert database is not None
    return Path(database)


def test_each_sqlite_scratch_is_a_new_file_that_goes_away_and_keeps_the_options() -> None:
    with (
        scratch_database("sqlite:///app.db?busy_timeout=7") as first,
        scratch_database("sqlite://") as second,
    ):
        assert first != second
        assert _file_of(first).name == "jobchain.db"
        assert _file_of(first).parent.is_dir()
        assert not _file_of(first).exists()  # empty: connecting creates it
        assert BackendURL.parse(first).query == {"busy_timeout": "7"}
        assert _file_of(first).parent != _file_of(second).parent
    assert not _file_of(first).parent.exists()
    assert not _file_of(second).parent.exists()


async def test_a_handler_doing_its_own_sql_runs_on_a_scratch_sqlite_file() -> None:
    clock = FrozenClock()
    with scratch_database("sqlite://") as url:
        async with await jobchain.connect(
            url, notify="none", job_types=job_types, clock=clock, migrate=True
        ) as client:
            async with client.transaction() as tx:
                own = connection_of(tx)
                await own.execute("CREATE TABLE shipments (order_id INTEGER, attempt INTEGER)")
                started = await client.start_chain(tx, ship, 42)
            assert [r.outcome for r in await run_until_idle(client, processors)] == [RunOutcome.RETRIED]
            clock.advance(seconds=5)
            assert [r.outcome for r in await run_until_idle(client, processors)] == [RunOutcome.COMPLETED]
            chain = await client.get_chain(started.id)
            assert chain is not None
            assert chain.status is JobStatus.COMPLETED
            async with client.transaction() as tx:
                cursor = await connection_of(tx).execute("SELECT order_id, attempt FROM shipments")
                rows = await cursor.fetchall()
            assert [tuple(row) for row in rows] == [(42, 2)]  # attempt 1's row rolled back
        path = _file_of(url)
        assert path.exists()
    assert not path.exists()


async def test_a_memory_scratch_is_one_store_for_every_open_until_it_ends() -> None:
    with scratch_database("memory://") as url:
        assert url.startswith("memory://scratch-")
        async with await jobchain.connect(url, notify="none", job_types=job_types) as writer:
            async with writer.transaction() as tx:
                started = await writer.start_chain(tx, ship, 1)
            async with await jobchain.connect(url, notify="none", job_types=job_types) as reader:
                seen = await reader.get_chain(started.id)
                assert seen is not None
                assert seen.id == started.id
    async with await jobchain.connect(url, notify="none", job_types=job_types) as later:
        assert await later.get_chain(started.id) is None  # the name was forgotten: a new store


def test_a_backend_without_scratch_says_which_ones_have_it() -> None:
    registry = BackendRegistry(
        [
            RegisteredBackend(
                BackendSpec(scheme="plain", role="state", distribution="plain-dist", factory="m:f"), "test"
            ),
            RegisteredBackend(
                BackendSpec(
                    scheme="roomy", role="state", distribution="roomy-dist", factory="m:f", scratch="m:s"
                ),
                "test",
            ),
        ]
    )
    with pytest.raises(
        BackendUnavailableError, match=r"plain:// \(from plain-dist\) cannot make a scratch.*roomy://"
    ):
        registry.scratch(BackendURL.parse("plain://"))


def test_scratch_is_a_state_backend_entry() -> None:
    with pytest.raises(InvalidArgumentError, match="scratch must be 'module:attr' on a state backend"):
        BackendSpec(scheme="x", role="notify", distribution="d", factory="m:f", scratch="m:s")
    with pytest.raises(InvalidArgumentError, match="scratch must be 'module:attr'"):
        BackendSpec(scheme="x", role="state", distribution="d", factory="m:f", scratch="nocolon")
