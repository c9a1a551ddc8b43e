"""Registration through the ``jobchain`` entry points, URL options, and the light plugin module."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from jobchain import JobTypes
from jobchain.client import connect
from jobchain.plugins import get_registry
from jobchain.url import BackendURL
from jobchain_postgres import PostgresNotifyAdapter, PostgresStateAdapter
from jobchain_postgres.options import StateOptions, state_options, target

from .conftest import with_query


def test_the_entry_point_names_the_plugin_module() -> None:
    found = {ep.name: ep.value for ep in entry_points(group="jobchain")}
    assert found.get("postgres") == "jobchain_postgres.plugin"


def test_importing_the_plugin_module_imports_no_driver() -> None:
    code = (
        "import sys, jobchain_postgres.plugin; print('psycopg' in sys.modules, 'psycopg_pool' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_both_schemes_serve_state_and_notify(scheme: str) -> None:
    registry = get_registry()
    assert registry.lookup(scheme, "state").factory == "jobchain_postgres.state:open_state_adapter"
    assert registry.lookup(scheme, "notify").factory == "jobchain_postgres.notify:open_notify_adapter"
    assert registry.lookup(scheme, "state").distribution == "jobchain-postgres"


def test_url_query_keys_become_options_and_the_rest_goes_to_libpq() -> None:
    url = BackendURL.parse(
        "postgresql+psycopg://app:pw@db:6543/jobs?schema=work&table_prefix=jc_&claim=atomic-update"
        "&pool_max_size=4&prepare_threshold=none&sslmode=disable"
    )
    options = state_options(url)
    assert options == StateOptions(
        schema="work", table_prefix="jc_", claim="atomic-update", pool_max_size=4, prepare_threshold=None
    )
    where = target(url, options.connect_timeout)
    assert "sslmode=disable" in where.conninfo
    assert "schema" not in where.conninfo
    assert "pw" not in where.display


async def test_connect_opens_both_adapters_from_urls(postgres_url: str, schema_name: str) -> None:
    state_url = with_query(
        postgres_url.replace("postgresql://", "postgresql+psycopg://", 1), schema=schema_name
    )
    notify_url = postgres_url.replace("postgresql://", "postgres://", 1)
    client = await connect(state_url, notify=notify_url, job_types=JobTypes(), migrate=True)
    try:
        assert isinstance(client.state, PostgresStateAdapter)
        assert isinstance(client.notify, PostgresNotifyAdapter)
        assert client.state.options.schema == schema_name
    finally:
        await client.close()


async def test_claim_mode_comes_from_the_url(postgres_url: str, schema_name: str) -> None:
    adapter = await PostgresStateAdapter.open(
        with_query(postgres_url, schema=schema_name, claim="atomic-update")
    )
    try:
        assert adapter.options.claim == "atomic-update"
        assert "atomic-update" in repr(adapter)
    finally:
        await adapter.close()


async def test_passwords_never_appear_in_reprs(postgres_url: str) -> None:
    url = postgres_url.replace("postgresql://postgres@", "postgresql://postgres:hunter2-secret@", 1)
    state = await PostgresStateAdapter.open(url)
    notify = await PostgresNotifyAdapter.open(url)
    try:
        assert "hunter2-secret" not in repr(state)
        assert "hunter2-secret" not in repr(notify)
    finally:
        await state.close()
        await notify.close()
