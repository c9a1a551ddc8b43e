"""pytest plugin (entry point ``pytest11``): markers, capability skipping, opt-in watchdogs.

It adds no autouse fixtures and no collection hooks that touch tests outside the suite
classes, so installing ``jobchain-conformance`` never changes an unrelated test run. The
watchdogs (:mod:`jobchain_conformance.watchdog`) only declare their ini and command-line
options unless one of them is set.
"""

from __future__ import annotations

import pytest

from jobchain_conformance import watchdog

MARKERS = (
    "conformance: a jobchain adapter conformance case (from jobchain-conformance)",
    "integration: a jobchain client+worker integration case (from jobchain-conformance)",
    "requires(*capabilities): the case needs these adapter capabilities",
    "scheduling: a jobchain scheduling-controls case (priorities, limits, pause, ordered keys, waits)",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    watchdog.addoption(parser)


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    watchdog.configure(config)
