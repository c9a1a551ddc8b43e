"""Client + worker cases of the job lifecycle: attempt limits, failing at once, deadlines,
cancellation, redrive, awaiting a failed chain, retention.

``LifecycleIntegrationTests`` gathers every lifecycle mixin (split across
``integration_lifecycle_*`` modules as they grow); ``all.py`` lists only this one.
"""

from __future__ import annotations

from jobchain_conformance.suites._integration_base import IntegrationSuiteBase


class LifecycleIntegrationTests(IntegrationSuiteBase):
    """Every lifecycle case of the client and worker."""
