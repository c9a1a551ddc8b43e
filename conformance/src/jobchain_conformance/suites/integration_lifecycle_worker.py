"""Worker cases of the job lifecycle: attempt limits, failing at once, deadlines, the worker's
side of cancellation, failure downstream, retention."""

from __future__ import annotations

from jobchain_conformance.suites.integration_lifecycle_worker_cancel import WorkerCancelTests
from jobchain_conformance.suites.integration_lifecycle_worker_limits import WorkerLimitTests


class WorkerLifecycleTests(WorkerLimitTests, WorkerCancelTests):
    """Lifecycle cases that run a worker."""
