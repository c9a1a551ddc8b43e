"""Workspace-wide test settings (tests run in parallel with pytest-xdist, see the Makefile)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Spark tests share one session-scoped SparkSession (a JVM): keep them on one xdist worker.
    for item in items:
        if item.get_closest_marker("spark") is not None:
            item.add_marker(pytest.mark.xdist_group("spark"))
