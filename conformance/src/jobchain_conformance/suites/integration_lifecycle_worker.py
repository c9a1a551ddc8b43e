"""Worker cases of the job lifecycle: attempt limits, failing at once, deadlines, the worker's
side of cancellation, retention."""

from __future__ import annotations

from jobchain_conformance.suites._integration_base import IntegrationSuiteBase


class WorkerLifecycleTests(IntegrationSuiteBase):
    """Lifecycle cases that run a worker."""
