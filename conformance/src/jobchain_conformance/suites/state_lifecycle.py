"""State cases of the job lifecycle: failed and cancelled jobs, propagation, redrive, retention.

``LifecycleStateTests`` gathers every lifecycle mixin (split across ``state_lifecycle_*``
modules as they grow); ``all.py`` lists only this one.
"""

from __future__ import annotations

from jobchain_conformance.suites._base import StateSuiteBase


class LifecycleStateTests(StateSuiteBase):
    """Every lifecycle case of the state contract."""
