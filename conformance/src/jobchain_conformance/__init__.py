"""jobchain-conformance: the guarantee suite every jobchain backend must pass.

Subclass the suites in your backend's tests and override the adapter fixtures::

    class TestMyState(StateAdapterSuite):
        @pytest.fixture
        async def state_adapter(self): ...
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import pytest

pytest.register_assert_rewrite("jobchain_conformance.suites", "jobchain_conformance.helpers")

if TYPE_CHECKING:
    from jobchain_conformance.capabilities import requires
    from jobchain_conformance.suites.all import (
        ClaimStateSuite,
        IntegrationSuite,
        NotifyAdapterSuite,
        StateAdapterSuite,
    )

__all__ = ["ClaimStateSuite", "IntegrationSuite", "NotifyAdapterSuite", "StateAdapterSuite", "requires"]

# Loaded on first use: the pytest plugin imports this package in every pytest process, and the
# suites (with jobchain and hypothesis) cost seconds of CPU that a run without them never needs.
_HOMES = {
    "ClaimStateSuite": "jobchain_conformance.suites.all",
    "IntegrationSuite": "jobchain_conformance.suites.all",
    "NotifyAdapterSuite": "jobchain_conformance.suites.all",
    "StateAdapterSuite": "jobchain_conformance.suites.all",
    "requires": "jobchain_conformance.capabilities",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'jobchain_conformance' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
