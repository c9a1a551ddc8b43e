"""Workspace-wide test settings (tests run in parallel with pytest-xdist, see the Makefile)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import settings

# Hypothesis fails an example that runs longer than 200 ms by default: a wall-clock assertion,
# which a loaded machine breaks without anything being wrong. Cases that set their own
# settings still inherit this.
settings.register_profile("jobchain", deadline=None)
settings.load_profile("jobchain")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Spark tests share one session-scoped SparkSession (a JVM): keep them on one xdist worker.
    # tryfirst: xdist's worker reads the marker in this same hook.
    for item in items:
        if item.get_closest_marker("spark") is not None:
            item.add_marker(pytest.mark.xdist_group("spark"))


class _GroupSuffix:
    """xdist 3.8 marks an item's group by appending "@name" to ``item._nodeid``, which pytest 9.2
    no longer reads (the id lives in ``item._id``), so groups were ignored and every worker
    started a JVM of its own. Where the suffix did not take, set it where pytest reads it."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):
            return
        from _pytest.nodeid import coerce_node_id

        for item in items:
            mark = item.get_closest_marker("xdist_group")
            if mark is None or not hasattr(item, "_id") or "@" in item.nodeid.rpartition("]")[2]:
                continue
            name = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
            item._id = coerce_node_id(f"{item.nodeid}@{name}")


def _connection_budget() -> ModuleType | None:
    """packages/postgres/tests/connection_budget, loaded by path (test folders are not importable
    packages): every test process holds a slot of the shared PostgreSQL server's connection
    budget for each connection it opens there (issue 33); none without psycopg."""
    where = Path(__file__).parent / "packages" / "postgres" / "tests" / "connection_budget"
    spec = importlib.util.spec_from_file_location(
        "jobchain_pg_budget", where / "__init__.py", submodule_search_locations=[str(where)]
    )
    if spec is None or spec.loader is None or importlib.util.find_spec("psycopg") is None:
        return None
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    if not hasattr(module, "pytest_configure"):
        spec.loader.exec_module(module)
    return module


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupSuffix(), "jobchain-xdist-group-suffix")
    budget = _connection_budget()
    if budget is not None and not config.pluginmanager.is_registered(budget):
        config.pluginmanager.register(budget, "jobchain-pg-budget")


# System catalogs every PostgreSQL test's schema writes (created and dropped per test). The
# shared server runs with autovacuum off, so their dead rows were never reclaimed: 2.4 million
# in pg_attribute after a few runs, and every schema creation got slower. The run vacuums what
# it left behind (plain VACUUM: no lock that blocks another run's reads, writes or DDL), when
# JOBCHAIN_TEST_VACUUM_CATALOGS=1 (`make test` sets it; a run of a few tests need not wait).
_CATALOGS = (
    "pg_attribute",
    "pg_class",
    "pg_depend",
    "pg_type",
    "pg_index",
    "pg_constraint",
    "pg_attrdef",
    "pg_namespace",
    "pg_statistic",
)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput") or os.environ.get("JOBCHAIN_TEST_VACUUM_CATALOGS") != "1":
        return  # an xdist worker: the controller vacuums once, after every worker finished
    try:
        import psycopg
    except ImportError:
        return

    from jobchain.url import BackendURL
    from jobchain_postgres.options import target

    url = os.environ.get("JOBCHAIN_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        with psycopg.connect(target(BackendURL.parse(url), 5).conninfo, autocommit=True) as connection:
            connection.execute("SET statement_timeout = '300s'")
            for catalog in _CATALOGS:
                connection.execute(f"VACUUM pg_catalog.{catalog}")
    except psycopg.Error as error:
        # The tests' outcome stands; only the next run may be slower.
        print(f"\njobchain: could not vacuum the test server's catalogs: {error}".rstrip())
