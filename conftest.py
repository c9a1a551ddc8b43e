"""Workspace-wide test settings (tests run in parallel with pytest-xdist, see the Makefile)."""

from __future__ import annotations

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


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupSuffix(), "jobchain-xdist-group-suffix")
