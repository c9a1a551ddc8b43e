"""State cases of the scheduling controls (``contracts.scheduling``): priorities and aging,
type limits, pause, ordered keys, dynamic blockers (``job_wait``) and persisted schedules.

``SchedulingStateTests`` gathers every mixin of the ``state_scheduling_*`` modules; ``all.py``
lists only this one. Every case carries the ``scheduling`` marker, so a backend runs just
these with ``-m scheduling`` (or ``-k scheduling``).
"""

from __future__ import annotations

import inspect

import pytest

from jobchain_conformance.model_scheduling import SchedulingModelTests
from jobchain_conformance.suites._base import StateSuiteBase
from jobchain_conformance.suites.state_scheduling_limits import (
    ConcurrentLimitTests,
    MaxRunningTests,
    RateLimitTests,
)
from jobchain_conformance.suites.state_scheduling_ordering import (
    ConcurrentOrderingTests,
    OrderingKeyTests,
    OrderingRetentionTests,
)
from jobchain_conformance.suites.state_scheduling_pause import PausedVisibilityTests, PauseTests
from jobchain_conformance.suites.state_scheduling_priority import AgingTests, PriorityTests
from jobchain_conformance.suites.state_scheduling_prune import AnyEndPruneTests
from jobchain_conformance.suites.state_scheduling_races import ClaimRaceTests
from jobchain_conformance.suites.state_scheduling_schedules import SchedulesRegisterTests
from jobchain_conformance.suites.state_scheduling_wait import JobWaitRefusalTests, JobWaitTests

MIXINS: tuple[type, ...] = (
    PriorityTests,
    AgingTests,
    MaxRunningTests,
    RateLimitTests,
    ConcurrentLimitTests,
    ClaimRaceTests,
    PauseTests,
    PausedVisibilityTests,
    OrderingKeyTests,
    ConcurrentOrderingTests,
    OrderingRetentionTests,
    AnyEndPruneTests,
    JobWaitTests,
    JobWaitRefusalTests,
    SchedulesRegisterTests,
    SchedulingModelTests,
)

for _mixin in MIXINS:
    # Marked per case, not per class: a class mark would reach every case of the backend's
    # Test… class, which inherits all suites.
    for _name, _case in vars(_mixin).items():
        if _name.startswith("test_") and inspect.isfunction(_case):
            setattr(_mixin, _name, pytest.mark.scheduling(_case))


class SchedulingStateTests(
    PriorityTests,
    AgingTests,
    MaxRunningTests,
    RateLimitTests,
    ConcurrentLimitTests,
    ClaimRaceTests,
    PauseTests,
    PausedVisibilityTests,
    OrderingKeyTests,
    ConcurrentOrderingTests,
    OrderingRetentionTests,
    AnyEndPruneTests,
    JobWaitTests,
    JobWaitRefusalTests,
    SchedulesRegisterTests,
    SchedulingModelTests,
    StateSuiteBase,
):
    """Every scheduling-controls case of the state contract."""
