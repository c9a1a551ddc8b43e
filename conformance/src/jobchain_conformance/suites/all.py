"""Composition of the suite classes adopters subclass.

Each module contributes mixins named ``…Tests``; this file only lists them.
"""

from __future__ import annotations

from jobchain_conformance.model import ModelTests
from jobchain_conformance.model_scheduling import SchedulingModelTests
from jobchain_conformance.suites._base import NotifySuiteBase, StateSuiteBase
from jobchain_conformance.suites._integration_base import IntegrationSuiteBase
from jobchain_conformance.suites.integration_await import AwaitChainTests
from jobchain_conformance.suites.integration_batches import BatchProcessingTests
from jobchain_conformance.suites.integration_blockers import BlockerTests
from jobchain_conformance.suites.integration_concurrency import WorkerConcurrencyTests
from jobchain_conformance.suites.integration_deletion import DeletionTests, WorkerlessCompletionTests
from jobchain_conformance.suites.integration_end_hooks import EndHookIntegrationTests
from jobchain_conformance.suites.integration_hostile_text import HostileTextTests
from jobchain_conformance.suites.integration_leases import LeaseTests
from jobchain_conformance.suites.integration_lifecycle import LifecycleIntegrationTests
from jobchain_conformance.suites.integration_liveness import LivenessTests
from jobchain_conformance.suites.integration_middleware import MiddlewareTests
from jobchain_conformance.suites.integration_modes import ErrorPositionTests, ProcessingModeTests
from jobchain_conformance.suites.integration_number_types import NumberTypeTests
from jobchain_conformance.suites.integration_processing import ChainTests, ProcessingTests
from jobchain_conformance.suites.integration_rescue import RescueTests
from jobchain_conformance.suites.integration_resilience import NotifyResilienceTests, StateResilienceTests
from jobchain_conformance.suites.integration_retries import HandlerErrorTests, RetryTests
from jobchain_conformance.suites.integration_scheduling import (
    DeduplicationTests,
    SchedulingTests,
    WakeUpTests,
)
from jobchain_conformance.suites.integration_scheduling_controls import PeriodicScheduleTests, WaitForTests
from jobchain_conformance.suites.integration_scheduling_controls_limits import (
    PauseTests,
    PriorityTests,
    TypeLimitTests,
)
from jobchain_conformance.suites.integration_scheduling_controls_order import OrderedKeyTests
from jobchain_conformance.suites.integration_shutdown import ShutdownTests
from jobchain_conformance.suites.notify_channels import (
    ChainCompletedChannelTests,
    JobScheduledChannelTests,
    ListenerLifecycleTests,
    NotifyLifecycleTests,
    OwnershipLostChannelTests,
)
from jobchain_conformance.suites.notify_instances import InterruptedConnectionTests, SeveralInstancesTests
from jobchain_conformance.suites.notify_wake_hints import WakeHintTests
from jobchain_conformance.suites.state_acquire import (
    JobNextAvailableTests,
    JobsAcquireTests,
    JobsReapExpiredTests,
)
from jobchain_conformance.suites.state_agreement import RefusedArgumentTests, ResultOrderTests
from jobchain_conformance.suites.state_attempts import JobAttemptTimesTests
from jobchain_conformance.suites.state_chains import (
    ChainGetTests,
    JobBlockersGetTests,
    JobCompleteUnblockingTests,
    JobGetTests,
    JobsCreateBlockersTests,
)
from jobchain_conformance.suites.state_concurrent_dedup import ConcurrentDeduplicationTests
from jobchain_conformance.suites.state_concurrent_unblock import ConcurrentUnblockTests
from jobchain_conformance.suites.state_create import JobsCreateDeduplicationTests, JobsCreateTests
from jobchain_conformance.suites.state_delete import ChainsDeleteTests
from jobchain_conformance.suites.state_end_hooks import EndHooksTests
from jobchain_conformance.suites.state_isolation import ConcurrencyTests, ReadIsolationTests
from jobchain_conformance.suites.state_leases import JobCompleteTests, JobRenewLeaseTests, JobRescheduleTests
from jobchain_conformance.suites.state_lifecycle import LifecycleStateTests
from jobchain_conformance.suites.state_lifecycle_cancel import ChainsCancelTests
from jobchain_conformance.suites.state_lifecycle_fail import ErrorHistoryTests, JobFailTests
from jobchain_conformance.suites.state_listing import (
    BlockedJobsListTests,
    ChainJobsListTests,
    ChainsListTests,
    JobsListTests,
)
from jobchain_conformance.suites.state_pagination import CursorTests, PageSizeTests
from jobchain_conformance.suites.state_queue_stats import QueueStatsTests
from jobchain_conformance.suites.state_rescue import (
    ConcurrentReleaseTests,
    FencingAfterReleaseTests,
    PerTypeLeaseTests,
    ReapRescueTests,
    WorkerReleaseTests,
)
from jobchain_conformance.suites.state_scheduling import SchedulingStateTests
from jobchain_conformance.suites.state_scheduling_limits import (
    ConcurrentLimitTests,
    MaxRunningTests,
    RateLimitTests,
)
from jobchain_conformance.suites.state_scheduling_ordering import ConcurrentOrderingTests, OrderingKeyTests
from jobchain_conformance.suites.state_scheduling_pause import PausedVisibilityTests
from jobchain_conformance.suites.state_scheduling_pause import PauseTests as PauseStateTests
from jobchain_conformance.suites.state_scheduling_priority import AgingTests
from jobchain_conformance.suites.state_scheduling_priority import PriorityTests as PriorityStateTests
from jobchain_conformance.suites.state_scheduling_races import ClaimRaceTests
from jobchain_conformance.suites.state_sessions import SessionRevocationTests
from jobchain_conformance.suites.state_transactions import CloseTests, SavepointTests, TransactionTests
from jobchain_conformance.suites.state_trigger import JobsTriggerTests
from jobchain_conformance.suites.state_worker_incarnation import WorkerIncarnationTests
from jobchain_conformance.suites.state_workers import (
    NextLeaseExpiryTests,
    WorkerDeathTests,
    WorkerHeartbeatTests,
    WorkerPruneTests,
    WorkersListTests,
)

# Filled in as suite modules land (state_create, state_chains, state_acquire, state_leases,
# state_trigger, state_transactions, state_delete, state_listing, notify_channels,
# notify_wake_hints, model).


class StateAdapterSuite(
    JobsCreateTests,
    JobsCreateDeduplicationTests,
    ConcurrentDeduplicationTests,
    JobsCreateBlockersTests,
    ChainGetTests,
    JobGetTests,
    JobBlockersGetTests,
    JobNextAvailableTests,
    JobsAcquireTests,
    PerTypeLeaseTests,
    JobRenewLeaseTests,
    JobRescheduleTests,
    JobCompleteTests,
    JobCompleteUnblockingTests,
    ConcurrentUnblockTests,
    JobsReapExpiredTests,
    ReapRescueTests,
    WorkerHeartbeatTests,
    WorkerDeathTests,
    WorkerIncarnationTests,
    WorkerReleaseTests,
    FencingAfterReleaseTests,
    ConcurrentReleaseTests,
    WorkerPruneTests,
    NextLeaseExpiryTests,
    WorkersListTests,
    JobAttemptTimesTests,
    JobsTriggerTests,
    ChainsDeleteTests,
    LifecycleStateTests,
    EndHooksTests,
    QueueStatsTests,
    SchedulingStateTests,
    ResultOrderTests,
    RefusedArgumentTests,
    ChainsListTests,
    JobsListTests,
    ChainJobsListTests,
    BlockedJobsListTests,
    CursorTests,
    PageSizeTests,
    TransactionTests,
    SavepointTests,
    ReadIsolationTests,
    ConcurrencyTests,
    CloseTests,
    SessionRevocationTests,
    ModelTests,
    StateSuiteBase,
):
    """Every state-adapter conformance case."""


class ClaimStateSuite(
    JobNextAvailableTests,
    JobsAcquireTests,
    PerTypeLeaseTests,
    JobsReapExpiredTests,
    ReapRescueTests,
    WorkerReleaseTests,
    FencingAfterReleaseTests,
    ConcurrentReleaseTests,
    NextLeaseExpiryTests,
    JobAttemptTimesTests,
    ErrorHistoryTests,
    JobFailTests,
    ChainsCancelTests,
    ResultOrderTests,
    PriorityStateTests,
    AgingTests,
    MaxRunningTests,
    RateLimitTests,
    ConcurrentLimitTests,
    ClaimRaceTests,
    PauseStateTests,
    PausedVisibilityTests,
    OrderingKeyTests,
    ConcurrentOrderingTests,
    ConcurrencyTests,
    ModelTests,
    SchedulingModelTests,
    StateSuiteBase,
):
    """The state cases that exercise claims and reaps: every claim rule, the order and the
    fields a claim or a reap writes, what is never claimed (failed, cancelled), releases,
    concurrent claims, and the two models.

    For a backend with more than one claim strategy (row locks skipped, or one atomic update,
    say): run :class:`StateAdapterSuite` on one strategy and this suite on each other one,
    instead of the whole suite again over code the strategy does not change.
    """


class NotifyAdapterSuite(
    JobScheduledChannelTests,
    ChainCompletedChannelTests,
    OwnershipLostChannelTests,
    ListenerLifecycleTests,
    WakeHintTests,
    NotifyLifecycleTests,
    SeveralInstancesTests,
    InterruptedConnectionTests,
    NotifySuiteBase,
):
    """Every notify-adapter conformance case."""


class IntegrationSuite(
    ProcessingTests,
    ChainTests,
    BlockerTests,
    DeduplicationTests,
    SchedulingTests,
    WakeUpTests,
    DeletionTests,
    WorkerlessCompletionTests,
    AwaitChainTests,
    RetryTests,
    HandlerErrorTests,
    HostileTextTests,
    EndHookIntegrationTests,
    NumberTypeTests,
    ProcessingModeTests,
    ErrorPositionTests,
    LeaseTests,
    WorkerConcurrencyTests,
    BatchProcessingTests,
    MiddlewareTests,
    RescueTests,
    LivenessTests,
    LifecycleIntegrationTests,
    ShutdownTests,
    NotifyResilienceTests,
    StateResilienceTests,
    PeriodicScheduleTests,
    WaitForTests,
    TypeLimitTests,
    PauseTests,
    PriorityTests,
    OrderedKeyTests,
    IntegrationSuiteBase,
):
    """Every client + worker integration case, over one (state adapter, notify adapter) pair."""
