"""pytest plugin (entry point ``pytest11``): markers and capability skipping. Inert otherwise.

It adds no autouse fixtures and no collection hooks that touch tests outside the suite
classes, so installing ``jobchain-conformance`` never changes an unrelated test run.
"""

from __future__ import annotations

import pytest

MARKERS = (
    "conformance: a jobchain adapter conformance case (from jobchain-conformance)",
    "integration: a jobchain client+worker integration case (from jobchain-conformance)",
    "requires(*capabilities): the case needs these adapter capabilities",
    "scheduling: a jobchain scheduling-controls case (priorities, limits, pause, ordered keys, waits)",
)


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
