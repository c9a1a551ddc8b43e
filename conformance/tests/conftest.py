"""Tests of jobchain-conformance itself: they drive pytest in-process with ``pytester``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis.internal.conjecture import providers
from hypothesis.internal.constants_ast import Constants


def pytest_configure(config: pytest.Config) -> None:
    # ``pytest_plugins = ["pytester"]`` is only allowed in the rootdir's conftest, and
    # ``make test`` runs from the repository root; registering the plugin here has the same
    # effect (its fixtures become available) without breaking that run.
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@pytest.fixture(scope="module")
def without_local_constants() -> Iterator[None]:
    """Hypothesis draws, now and then, literals found in every loaded module outside
    site-packages (the repository's own code included), so a derandomized model run explores
    other paths whenever any such module gains or loses a literal; whether it reaches a given
    broken variant then flips with unrelated changes. Inside this fixture it draws from its
    built-in constants only. (A private hook of Hypothesis; tests only.)"""
    saved = providers._get_local_constants
    providers._get_local_constants = Constants
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = saved
        providers.CONSTANTS_CACHE.cache.clear()
