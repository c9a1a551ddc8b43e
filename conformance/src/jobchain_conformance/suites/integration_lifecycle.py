"""Client + worker cases of the job lifecycle: attempt limits, failing at once, deadlines,
cancellation, redrive, awaiting a failed chain, retention.

``LifecycleIntegrationTests`` gathers the lifecycle mixins; ``all.py`` lists only this one.
"""

from __future__ import annotations

from jobchain_conformance.suites.integration_lifecycle_client import ClientLifecycleTests
from jobchain_conformance.suites.integration_lifecycle_worker import WorkerLifecycleTests


class LifecycleIntegrationTests(WorkerLifecycleTests, ClientLifecycleTests):
    """Every lifecycle case of the client and worker."""
