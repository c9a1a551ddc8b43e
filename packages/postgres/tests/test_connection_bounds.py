"""Every PostgreSQL connection jobchain opens carries TCP keepalives and a TCP user timeout, so
a statement on a connection whose peer vanished fails within a stated bound instead of waiting
for the kernel's default (two hours of keepalive silence, fifteen minutes of retransmits)
(issue 35, deliver 4). The URL overrides each of them, as any libpq parameter."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

import jobchain
from jobchain.url import BackendURL
from jobchain_postgres.options import CONNECTION_BOUNDS, target

from .conftest import with_query

EXPECTED = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}


def test_the_defaults_are_stated() -> None:
    assert dict(CONNECTION_BOUNDS) == EXPECTED


def test_every_target_carries_the_bounds() -> None:
    params = conninfo_to_dict(target(BackendURL.parse("postgresql://u@db.example/app"), 5).conninfo)
    assert {key: params[key] for key in EXPECTED} == EXPECTED


def test_the_url_overrides_a_bound() -> None:
    url = BackendURL.parse("postgresql://u@db.example/app?tcp_user_timeout=5000&keepalives_idle=60")
    params = conninfo_to_dict(target(url, 5).conninfo)
    assert params["tcp_user_timeout"] == "5000"
    assert params["keepalives_idle"] == "60"
    assert params["keepalives_count"] == "3"


async def test_the_adapters_connections_use_them(postgres_url: str, schema_name: str) -> None:
    url = with_query(postgres_url, schema=schema_name)
    client = await jobchain.connect(url, notify=url, job_types=jobchain.JobTypes(), migrate=True)
    try:
        async with client.state.transaction(read_only=True) as tx:
            connection = tx.connection  # type: ignore[attr-defined]
            assert isinstance(connection, psycopg.AsyncConnection)
            params = connection.info.get_parameters()
        assert {key: params.get(key) for key in EXPECTED} == EXPECTED
    finally:
        await client.close()
