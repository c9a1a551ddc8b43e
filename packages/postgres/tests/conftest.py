"""Fixtures of the PostgreSQL tests: a real server, and a fresh schema per test (dropped after).

The server is ``JOBCHAIN_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``).
If it cannot be reached the tests skip with a one-line reason, except under ``CI=true``, where
they fail: CI must never pass by skipping.

Every connection to that server holds a slot of the run's connection budget
(``connection_budget/``, default 60 of its 100 connections); a test reserves what it opens
at once before it starts: 4 unless it says more with ``@pytest.mark.pg_connections(n)``, or
:data:`SUITE_NEEDS` below names it (suite tests are inherited, so they carry no marker).
The chaos cells run on a private cluster and are not counted.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlencode

import psycopg
import pytest
from psycopg import sql

from jobchain.url import BackendURL
from jobchain_postgres import NotifyOptions, PostgresNotifyAdapter, PostgresStateAdapter, StateOptions
from jobchain_postgres.options import Claim, target

from .connection_budget import DEFAULT_NEED
from .schema_pool import SchemaPool

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
STATE_POOL_MAX = 6
"""The pool cap of the fixtures' state adapters: the suites' most parallel cases use 5-6
connections at once (a worker grows its own pool to concurrency + 4 all the same)."""
STATE_CONNECT_TIMEOUT = 60.0
"""The fixtures' connect and pool-wait bound: the pools start empty, and with 8 CPU burners a
new backend took more than the default 10 s to open, so a claim loop's wait for a connection
ended in a TransientStateError the suites' strict worker-error check reports."""
HERE = Path(__file__).resolve().parent

SUITE_NEEDS: dict[str, int] = {
    # Connections open at once (in this process) of the inherited suite tests that open more
    # than the default 4, as measured with JOBCHAIN_TEST_PG_REPORT on the LISTEN/NOTIFY
    # variants (packages/postgres/README.md): several workers, or one with many slots.
    **dict.fromkeys(
        [
            "test_batch_workers_complete_every_job_exactly_once_with_its_own_output",
            "test_many_workers_process_every_job_exactly_once",
            "test_specialised_workers_only_take_their_own_types",
            "test_interleaved_keys_run_in_start_order_per_key_and_in_parallel",
            "test_max_running_is_never_exceeded_across_workers",
            "test_n_ticks_start_exactly_n_chains_across_workers",
            "test_transient_failures_while_processing_are_survived",
            "test_rate_limit_caps_starts_per_window",
            "test_transient_failures_when_the_worker_starts_are_retried",
            "test_a_worker_runs_up_to_its_concurrency_at_once_and_never_more",
            "test_jobs_started_before_the_worker_and_while_it_runs_are_all_processed",
            "test_paused_type_waits_and_resumes",
            "test_ticks_missed_while_down_start_one_chain_not_a_storm",
            "test_without_catch_up_only_ticks_after_the_start_count",
            "test_a_notify_adapter_that_drops_every_message_still_gets_all_jobs_done",
            "test_workers_keep_processing_while_the_notify_broker_is_down",
        ],
        12,  # measured 10-12
    ),
    **dict.fromkeys(
        [
            "test_claims_take_higher_priority_first_fifo_within",
            "test_one_chain_can_block_many_jobs",
            "test_parallel_writes_and_read_only_reads_do_not_deadlock",
            "test_renewal_keeps_a_job_running_past_its_first_lease",
            "test_a_worker_whose_job_was_taken_sees_taken_by_another_worker",
            "test_branched_chain_follows_the_branch_the_handler_picks",
            "test_wait_for_in_staged_mode",
            "test_retry_settings_resolve_processor_then_type_then_registry_then_worker",
            "test_waiters_started_before_the_worker_get_the_last_jobs_output",
        ],
        8,  # measured 7-9
    ),
    **dict.fromkeys(
        [
            "test_parallel_transactions_all_commit",
            "test_many_parallel_claimers_never_exceed_max_running",
            "test_listeners_hear_again_after_an_interruption",
        ],
        6,  # measured 5
    ),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items: mark only this folder's. Every test here
    # reserves at least the default, even one whose adapter comes from getfixturevalue (the
    # suites' capability checks), which the budget's fixture check cannot see.
    for item in items:
        if HERE in item.path.parents:
            marked = item.get_closest_marker("pg_connections") is not None
            reserve = reservation(getattr(item, "originalname", item.name), marked=marked)
            if reserve is not None:  # on the item itself: it wins over a module's pytestmark
                item.add_marker(pytest.mark.pg_connections(reserve))


def reservation(name: str, *, marked: bool) -> int | None:
    """The ``pg_connections`` marker a test of this folder gets (None: it keeps its own)."""
    if name in SUITE_NEEDS:
        return SUITE_NEEDS[name]
    return None if marked else DEFAULT_NEED


def server_url() -> str:
    return os.environ.get("JOBCHAIN_TEST_POSTGRES_URL", DEFAULT_URL)


def conninfo(url: str) -> str:
    return target(BackendURL.parse(url), 5).conninfo


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test server's URL, after checking that it answers."""
    url = server_url()
    try:
        psycopg.connect(conninfo(url), connect_timeout=3).close()
    except psycopg.Error as exc:
        reason = f"PostgreSQL not reachable at {BackendURL.parse(url)}: {str(exc).strip().splitlines()[0]}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: a missing server is a failure)", pytrace=False)
        pytest.skip(reason)
    return url


@pytest.fixture
def schema_name(postgres_url: str) -> Iterator[str]:
    """A fresh schema name for this test; the schema (if created) is dropped afterwards."""
    name = f"jc_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def schema_pool(postgres_url: str) -> Iterator[SchemaPool]:
    """This process's pool of migrated schemas (see ``schema_pool.py``)."""
    pool = SchemaPool(conninfo(postgres_url))
    yield pool
    pool.close()


@pytest.fixture
def suite_schema(schema_pool: SchemaPool) -> Iterator[str]:
    """A schema for one suite case: migrated and empty once the case has run ``migrate()``,
    emptied and given back to the pool after the case (the case must close its adapter)."""
    name = schema_pool.take()
    yield name
    schema_pool.give_back(name)


def with_query(url: str, **query: str) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}{urlencode(query)}"


@pytest.fixture
def schema_url(postgres_url: str, schema_name: str) -> str:
    """The server URL selecting this test's schema."""
    return with_query(postgres_url, schema=schema_name)


async def open_state(url: str, schema: str, claim: Claim = "skip-locked") -> PostgresStateAdapter:
    options = StateOptions(
        schema=schema,
        claim=claim,
        pool_min_size=0,
        pool_max_size=STATE_POOL_MAX,
        connect_timeout=STATE_CONNECT_TIMEOUT,
    )
    adapter = await PostgresStateAdapter.open(url, options)
    await adapter.migrate()
    return adapter


@pytest.fixture
async def pg_state(postgres_url: str, schema_name: str) -> AsyncIterator[PostgresStateAdapter]:
    """A migrated state adapter (default claim mode) on this test's schema."""
    adapter = await open_state(postgres_url, schema_name)
    yield adapter
    await adapter.close()


@pytest.fixture
def channel_prefix() -> str:
    return f"jc_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def pg_notify(postgres_url: str, channel_prefix: str) -> AsyncIterator[PostgresNotifyAdapter]:
    """A notify adapter on channels no other test uses."""
    adapter = await PostgresNotifyAdapter.open(postgres_url, NotifyOptions(channel_prefix=channel_prefix))
    yield adapter
    await adapter.close()


def notify_backend_pids(adapter: PostgresNotifyAdapter) -> list[int]:
    """Server process ids of the adapter's LISTEN and publishing connections (those open now)."""
    pids = [adapter.listen_backend_pid]
    publisher = adapter._publisher  # no public pid: the publishing connection opens lazily
    if publisher is not None and not publisher.closed:
        pids.append(publisher.info.backend_pid)
    return [pid for pid in pids if pid is not None]


async def terminate_backends(url: str, pids: list[int]) -> None:
    """``pg_terminate_backend`` each pid and wait (up to 30 s) until it is gone: the server side
    of a connection breaks, as when an administrator or a failover kills it."""
    async with await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True) as connection:
        await connection.execute(
            "SELECT pg_terminate_backend(pid, 30000) FROM unnest(%s::int[]) AS pid", [pids]
        )
