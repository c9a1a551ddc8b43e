"""PrivateServer: a cluster of its own that fault tests may stop, crash and restart."""

from __future__ import annotations

import os

import psycopg
import pytest

from jobchain_postgres.testing import PrivateServer, PrivateServerError


def _server(**settings: str) -> PrivateServer:
    try:
        return PrivateServer(settings=settings)
    except PrivateServerError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{exc} (CI=true: a missing server fails the run)", pytrace=False)
        pytest.skip(str(exc))


def test_a_private_server_keeps_committed_rows_through_a_crash_and_is_removed_on_close() -> None:
    server = _server(autovacuum="on")
    root = server.data_dir.parent
    try:
        server.start()
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (n int)")
            conn.execute("INSERT INTO t VALUES (1), (2)")
            assert conn.execute("SHOW autovacuum").fetchone() == ("on",)
            assert conn.execute("SHOW port").fetchone() == (str(server.port),)
        server.stop("immediate")
        assert not server.running()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.url, connect_timeout=2).close()
        server.start()
        with psycopg.connect(server.url) as conn:
            assert conn.execute("SELECT sum(n) FROM t").fetchone() == (3,)
    finally:
        server.close()
    assert not root.exists()
