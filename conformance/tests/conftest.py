"""Tests of jobchain-conformance itself: they drive pytest in-process with ``pytester``."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # ``pytest_plugins = ["pytester"]`` is only allowed in the rootdir's conftest, and
    # ``make test`` runs from the repository root; registering the plugin here has the same
    # effect (its fixtures become available) without breaking that run.
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")
