"""Workspace-wide test settings (tests run in parallel with pytest-xdist, see the Makefile)."""

from __future__ import annotations

import importlib.util
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
