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
    # tryfirst: xdist's worker turns the marker into the group suffix in this same hook, and this
    # root conftest is registered before xdist's worker plugin, so it would otherwise run after
    # it (and every worker started a JVM of its own).
    for item in items:
        if item.get_closest_marker("spark") is not None:
            item.add_marker(pytest.mark.xdist_group("spark"))
