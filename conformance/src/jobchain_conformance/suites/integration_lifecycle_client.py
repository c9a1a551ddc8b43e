"""Client cases of the job lifecycle: cancel, redrive, awaiting failed and cancelled chains,
dead-letter listings."""

from __future__ import annotations

from jobchain_conformance.suites._integration_base import IntegrationSuiteBase


class ClientLifecycleTests(IntegrationSuiteBase):
    """Lifecycle cases driven through the client."""
