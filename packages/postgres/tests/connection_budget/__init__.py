"""A budget of connections to the shared PostgreSQL test server, across every test process.

The shared server (``JOBCHAIN_TEST_POSTGRES_URL``, max_connections 100) serves several test
runs at once; a run that opened what it liked failed with ``FATAL: sorry, too many clients
already`` (issue 33). Now every connection a test process opens to that server holds one of
``JOBCHAIN_TEST_PG_CONNECTIONS`` (default 60) slots, and a process that finds them all taken
waits for one instead of failing.

The slots are ``flock``-ed files in a directory shared by every process of this user on this
machine (``JOBCHAIN_TEST_PG_BUDGET_DIR``, default ``<tmp>/jobchain-pg-budget-<uid>-<host>-<port>``),
so concurrent runs share the budget too; runs with different sizes use slots ``0..size-1``
and together never exceed the larger size. The root ``conftest.py`` registers this package
as a plugin of every run; it only counts connections made in its own process, so a test
whose subprocesses connect (a worker started with ``subprocess``, Spark's Python workers)
reserves slots ``outside`` for them.

Each test that uses the server reserves its need before it starts, outside its timeout (this
wrapper runs before pytest-timeout's), and gives it back after its teardown:

- ``@pytest.mark.pg_connections(inside, outside=0)``: ``inside`` connections this process
  opens at once, ``outside`` ones its subprocesses open (held aside for them);
- otherwise a test that takes a PostgreSQL fixture (or a ``postgres`` parameter) reserves
  :data:`DEFAULT_NEED`.

Inside the test, a connection takes a spare reserved slot, else a free one, else it waits,
sleeping between tries. A reservation gathers its slots while holding a guard file, so a
large need is served in turn instead of starving behind small ones.

``JOBCHAIN_TEST_PG_REPORT=<dir>`` writes one JSON line per reserving test (need, peak,
overflow, seconds waited) to ``<dir>/budget-<pid>.jsonl``: how the needs were measured.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any, Final

import pytest

from .psycopg_hook import from_environment, install, installed, shared_server, targets_server
from .slots import REPORT_ENV, SIZE_ENV, Budget, BudgetExhaustedError, Reservation, Slots

DEFAULT_NEED: Final = 4
"""Connections a plain PostgreSQL test opens at once: a state adapter's pool in use (1-2), a
notify adapter's LISTEN and publishing connections, a fixture's own (schema drop) after
them. Measured per test with JOBCHAIN_TEST_PG_REPORT (packages/postgres/README.md)."""
PG_FIXTURES: Final = frozenset({"postgres_url", "postgres_server", "postgres_base_url", "pg_database"})
"""The session fixtures through which every test reaches the shared server (core, spark,
postgres and Django tests)."""
PG_PARAMS: Final = frozenset({"postgres", "postgresql", "pg"})
"""Parameter values of fixtures that open the server with ``getfixturevalue`` (admin CLI,
testing helpers, Django aliases, Spark state URLs)."""
SPARK_TASKS: Final = 2
"""Spark runs ``local[2]``: two Python workers, each opening its own connection per task."""


def uses_postgres(item: pytest.Item) -> bool:
    """True if ``item`` reaches the shared server through a known fixture or parameter."""
    if PG_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    params: dict[str, Any] = callspec.params if callspec is not None else {}
    return any(isinstance(value, str) and value in PG_PARAMS for value in params.values())


def need(item: pytest.Item) -> tuple[int, int]:
    """``(inside, outside)`` slots ``item`` reserves: its marker, or the default if it uses PostgreSQL."""
    marker = item.get_closest_marker("pg_connections")
    if marker is not None:
        inside = int(marker.args[0] if marker.args else marker.kwargs.get("inside", DEFAULT_NEED))
        return inside, int(marker.kwargs.get("outside", 0))
    if not uses_postgres(item):
        return 0, 0
    if item.get_closest_marker("spark") is not None:
        return DEFAULT_NEED, SPARK_TASKS * 2  # a task's read or start: a connection, a pool's second
    return DEFAULT_NEED, 0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "pg_connections(inside, outside=0): connections to the shared PostgreSQL server this test "
        "opens at once, in this process and in its subprocesses (the connection budget)",
    )
    budget = from_environment()
    if budget is None:
        return
    install(budget)
    # Names this run's sessions in pg_stat_activity (an explicit application_name still wins).
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    os.environ.setdefault("PGAPPNAME", f"jobchain-tests-{worker}")


def _report(reservation: Reservation, budget: Budget) -> None:
    directory = os.environ.get(REPORT_ENV, "").strip()
    if not directory:
        return
    line = {
        "test": reservation.label,
        "inside": reservation.inside,
        "outside": reservation.outside,
        "complete": reservation.complete,
        "waited": round(reservation.waited, 3),
        "base": reservation.base,
        "peak": reservation.peak,
        "overflow": reservation.overflow,
        "size": budget.size,
    }
    Path(directory).mkdir(parents=True, exist_ok=True)
    with open(Path(directory) / f"budget-{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(line) + "\n")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    budget = installed()
    if budget is None or budget.forked:
        return (yield)
    inside, outside = need(item)
    report = bool(os.environ.get(REPORT_ENV, "").strip())
    if not (inside or outside or report):
        return (yield)
    with budget.reserve(inside, outside, item.nodeid) as reservation:
        result = yield
    _report(reservation, budget)
    return result


__all__ = [
    "DEFAULT_NEED",
    "SIZE_ENV",
    "Budget",
    "BudgetExhaustedError",
    "Reservation",
    "Slots",
    "from_environment",
    "install",
    "installed",
    "need",
    "shared_server",
    "targets_server",
    "uses_postgres",
]
