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


class MutantReport:
    """Caught/missed per broken variant, from the ``…broken_variant…`` cases of this run.

    A variant is caught when every case named against it failed on it (each such test then
    passes); one test of it failing means the suite let that variant through.
    """

    MARKERS = ("broken_variant_fails", "a_broken_variant_fails")

    def __init__(self) -> None:
        self.results: dict[str, bool] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name, _, params = report.nodeid.partition("[")
        if report.when != "call" or not any(marker in name for marker in self.MARKERS):
            return
        variant = params.split("-")[0]
        if variant.startswith("Test"):
            module = name.split("::")[0].rsplit("/", 1)[-1]
            key = f"{module}::{variant}"
            self.results[key] = self.results.get(key, True) and report.passed

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.results:
            return
        missed = sorted(key for key, caught in self.results.items() if not caught)
        terminalreporter.write_line(
            f"suite mutants: {len(self.results)} variants run, "
            f"{len(self.results) - len(missed)} caught, {len(missed)} missed"
        )
        for key in missed:
            terminalreporter.write_line(f"  missed: {key}")


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist)
        session.config.pluginmanager.register(MutantReport(), "jobchain-mutant-report")
