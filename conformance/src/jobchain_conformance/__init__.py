"""jobchain-conformance: the guarantee suite every jobchain backend must pass.

Subclass the suites in your backend's tests and override the adapter fixtures::

    class TestMyState(StateAdapterSuite):
        @pytest.fixture
        async def state_adapter(self): ...
"""

import pytest

pytest.register_assert_rewrite("jobchain_conformance.suites", "jobchain_conformance.helpers")

from jobchain_conformance.capabilities import requires  # noqa: E402 -- after assert rewriting
from jobchain_conformance.suites.all import (  # noqa: E402
    ClaimStateSuite,
    IntegrationSuite,
    NotifyAdapterSuite,
    StateAdapterSuite,
)

__all__ = ["ClaimStateSuite", "IntegrationSuite", "NotifyAdapterSuite", "StateAdapterSuite", "requires"]
