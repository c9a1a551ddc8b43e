"""Error texts say what happened: a terminated connection is not a restarting server."""

from __future__ import annotations

import psycopg
import pytest

from jobchain.errors import TransientStateError
from jobchain_postgres.errors import translate

from .conftest import conninfo


def test_a_terminated_connection_is_not_reported_as_a_restarting_server(postgres_url: str) -> None:
    # Only this test's own connection is terminated: the shared server is not disturbed.
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as victim:
        pid = victim.info.backend_pid
        with psycopg.connect(conninfo(postgres_url), autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        with pytest.raises(psycopg.Error) as caught:
            victim.execute("SELECT 1")
    error = translate(caught.value)
    assert isinstance(error, TransientStateError)
    assert "restarting" not in str(error)
    assert "closed" in str(error) or "terminated" in str(error)


@pytest.mark.parametrize(
    ("sqlstate", "phrase"),
    [("57P01", "terminated"), ("57P02", "crash"), ("57P03", "starting up or shutting down")],
)
def test_each_shutdown_state_has_its_own_text(sqlstate: str, phrase: str) -> None:
    error_class = psycopg.errors.lookup(sqlstate)
    translated = translate(error_class("server message"))
    assert isinstance(translated, TransientStateError)
    assert phrase in str(translated)
