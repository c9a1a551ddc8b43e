"""URL options of the PostgreSQL backend: typos are caught by jobchain before libpq sees them,
libpq's own connection parameters still pass, and ``jobchain migrate`` prints one line."""

from __future__ import annotations

import psycopg
import pytest
from click.testing import CliRunner

import jobchain
from jobchain.cli import main
from jobchain.errors import BackendUnreachableError, InvalidURLError
from jobchain_postgres.options import libpq_keys

from .conftest import conninfo, with_query


def _one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


def test_migrate_with_a_typo_exits_with_one_line_naming_the_key(postgres_url: str) -> None:
    result = CliRunner().invoke(main, ["migrate", "--state", with_query(postgres_url, shema="jobs")])
    assert result.exit_code != 0
    assert not isinstance(result.exception, psycopg.Error)
    line = _one_line_error(result.output)
    assert "'shema'" in line
    assert "did you mean 'schema'?" in line
    assert "libpq connection parameters" in line


def test_migrate_against_a_closed_port_exits_with_one_line() -> None:
    # Port 1 on loopback: refused at once, with libpq's two-line message.
    result = CliRunner().invoke(main, ["migrate", "--state", "postgresql://postgres@127.0.0.1:1/test"])
    assert result.exit_code != 0
    assert not isinstance(result.exception, psycopg.Error)
    line = _one_line_error(result.output)
    assert "cannot connect to PostgreSQL" in line


@pytest.mark.parametrize("role", ["state", "notify"])
async def test_connect_rejects_unknown_keys_before_connecting(role: str) -> None:
    # Port 1: had jobchain tried to connect, the error would be BackendUnreachableError.
    url = "postgresql://postgres@127.0.0.1:1/test?schema=jobs&chanel_prefix=x"
    state, notify = (url, "none") if role == "state" else ("memory://", url)
    with pytest.raises(InvalidURLError) as info:
        await jobchain.connect(state, notify=notify, job_types=jobchain.JobTypes())
    message = str(info.value)
    assert "'chanel_prefix'" in message
    assert "did you mean 'channel_prefix'?" in message
    assert "schema" in message
    assert "table_prefix" in message


def _libpq_url(postgres_url: str, schema_name: str) -> str:
    return with_query(
        postgres_url,
        schema=schema_name,
        sslmode="disable",
        application_name="jc_url_options",
        connect_timeout="3",
    )


def test_migrate_accepts_libpq_parameters(postgres_url: str, schema_name: str) -> None:
    result = CliRunner().invoke(main, ["migrate", "--state", _libpq_url(postgres_url, schema_name)])
    assert result.exit_code == 0, result.output
    with psycopg.connect(conninfo(postgres_url)) as connection:
        row = connection.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", [schema_name]
        ).fetchone()
    assert row is not None
    assert row[0] > 0


async def test_connect_accepts_libpq_parameters(postgres_url: str, schema_name: str) -> None:
    url = _libpq_url(postgres_url, schema_name)
    client = await jobchain.connect(url, notify=url, job_types=jobchain.JobTypes(), migrate=True)
    try:
        async with await psycopg.AsyncConnection.connect(conninfo(postgres_url)) as connection:
            cursor = await connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jc_url_options'"
            )
            row = await cursor.fetchone()
        assert row is not None
        assert row[0] >= 1
    finally:
        await client.close()


def test_libpq_keys_come_from_the_installed_libpq() -> None:
    keys = libpq_keys()
    assert {"sslmode", "application_name", "connect_timeout", "options", "host"} <= keys
    assert "schema" not in keys


async def test_a_bad_libpq_value_is_a_jobchain_error(postgres_url: str) -> None:
    with pytest.raises((InvalidURLError, BackendUnreachableError)) as info:
        await jobchain.connect(with_query(postgres_url, sslmode="sometimes"), job_types=jobchain.JobTypes())
    assert "sslmode" in str(info.value)
