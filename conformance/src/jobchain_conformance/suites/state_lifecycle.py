"""State cases of the job lifecycle: failed and cancelled jobs, propagation, redrive, retention.

``LifecycleStateTests`` gathers every lifecycle mixin (split across ``state_lifecycle_*``
modules as they grow); ``all.py`` lists only this one.
"""

from __future__ import annotations

from jobchain_conformance.suites._base import StateSuiteBase
from jobchain_conformance.suites.state_lifecycle_cancel import CancelledJobFencingTests, ChainsCancelTests
from jobchain_conformance.suites.state_lifecycle_cancel_cascade import ChainsCancelCascadeTests
from jobchain_conformance.suites.state_lifecycle_fail import (
    ErrorHistoryTests,
    FailedJobFencingTests,
    JobFailTests,
)
from jobchain_conformance.suites.state_lifecycle_propagation import (
    ConcurrentPropagationTests,
    OptInPropagationTests,
    PropagationTests,
    TerminalDeduplicationTests,
)
from jobchain_conformance.suites.state_lifecycle_prune import ChainsPruneTests, DeadLetterListingTests
from jobchain_conformance.suites.state_lifecycle_retry import (
    JobsRetryTests,
    RetryDependentsTests,
    RetryRefusalTests,
)


class LifecycleStateTests(
    JobFailTests,
    FailedJobFencingTests,
    ErrorHistoryTests,
    ChainsCancelTests,
    ChainsCancelCascadeTests,
    CancelledJobFencingTests,
    PropagationTests,
    OptInPropagationTests,
    TerminalDeduplicationTests,
    ConcurrentPropagationTests,
    JobsRetryTests,
    RetryRefusalTests,
    RetryDependentsTests,
    ChainsPruneTests,
    DeadLetterListingTests,
    StateSuiteBase,
):
    """Every lifecycle case of the state contract."""
