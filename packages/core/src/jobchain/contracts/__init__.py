"""The contracts every backend implements: state, notify and observability.

The state contract's protocols are in :mod:`jobchain.contracts.state`; its params and result
types live by area (``creation``, ``reads``, ``claims``, ``lifecycle``, ``deletion``,
``workers``, ``queue_stats``, ``listings``, ``scheduling``). Import them from here:
``from jobchain.contracts import JobsAcquire``.
"""

from jobchain.contracts.capabilities import Capability
from jobchain.contracts.claims import (
    JobComplete,
    JobCompleted,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsAcquired,
    JobsReapExpired,
)
from jobchain.contracts.creation import JobCreated, JobsCreate, NewJob
from jobchain.contracts.deletion import ChainsDelete, ChainsDeleted, ChainsPrune, ChainsPruned, PrunedChain
from jobchain.contracts.end_hooks import EndHooksRegister, TypeEndHooks
from jobchain.contracts.lifecycle import (
    ChainsCancel,
    ChainsCancelled,
    JobFail,
    JobFailed,
    JobsRetried,
    JobsRetry,
    JobsTrigger,
    JobsTriggered,
)
from jobchain.contracts.listings import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    BlockedJobsList,
    ChainJobsList,
    ChainsList,
    JobsList,
)
from jobchain.contracts.notify import (
    AnnouncesWithinState,
    ChecksDelivery,
    DeliveryWatcher,
    Listener,
    NotifyAdapter,
    NotifyDelivery,
    PublishesChainsInBulk,
    Unsubscribe,
)
from jobchain.contracts.observe import Event, NoopObserver, Observer
from jobchain.contracts.providers import StateProvider
from jobchain.contracts.queue_stats import QueueStatsGet
from jobchain.contracts.reads import ChainGet, JobBlockersGet, JobGet, JobNextAvailable
from jobchain.contracts.scheduling import (
    JobWait,
    JobWaited,
    PausedTypesList,
    ScheduleRegistration,
    SchedulesList,
    SchedulesRegister,
    TypesPause,
)
from jobchain.contracts.sessions import RevokesSessions, SessionRevoked, SessionsRevoke, session_key
from jobchain.contracts.state import (
    COMPLETION_REFUSALS,
    CompletesJobsInBatches,
    ObservesCallerCommits,
    ReservesConnections,
    RunsOperationsAlone,
    StateAdapter,
    StateTx,
)
from jobchain.contracts.workers import WorkerHeartbeat, WorkerHeartbeatResult, WorkersList

__all__ = [
    # capabilities and providers
    "Capability",
    "StateProvider",
    # the state contract: protocols
    "StateAdapter",
    "StateTx",
    "CompletesJobsInBatches",
    "ObservesCallerCommits",
    "ReservesConnections",
    "RunsOperationsAlone",
    "COMPLETION_REFUSALS",
    # creation
    "NewJob",
    "JobsCreate",
    "JobCreated",
    # reads
    "ChainGet",
    "JobGet",
    "JobBlockersGet",
    "JobNextAvailable",
    # claims
    "JobsAcquire",
    "JobsAcquired",
    "JobRenewLease",
    "JobReschedule",
    "JobComplete",
    "JobCompleted",
    "JobsReapExpired",
    # lifecycle
    "JobFail",
    "JobFailed",
    "ChainsCancel",
    "ChainsCancelled",
    "JobsRetry",
    "JobsRetried",
    "JobsTrigger",
    "JobsTriggered",
    # deletion
    "ChainsDelete",
    "ChainsDeleted",
    "ChainsPrune",
    "ChainsPruned",
    "PrunedChain",
    # workers
    "WorkerHeartbeat",
    "WorkerHeartbeatResult",
    "WorkersList",
    # queue health
    "QueueStatsGet",
    # listings
    "ChainsList",
    "JobsList",
    "ChainJobsList",
    "BlockedJobsList",
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    # scheduling controls
    "JobWait",
    "JobWaited",
    "TypesPause",
    "PausedTypesList",
    "ScheduleRegistration",
    "SchedulesRegister",
    "SchedulesList",
    # failure and cancel hooks
    "EndHooksRegister",
    "TypeEndHooks",
    # revoked dashboard sessions (optional)
    "RevokesSessions",
    "SessionsRevoke",
    "SessionRevoked",
    "session_key",
    # the notify contract
    "NotifyAdapter",
    "Listener",
    "Unsubscribe",
    "PublishesChainsInBulk",
    "AnnouncesWithinState",
    "ChecksDelivery",
    "DeliveryWatcher",
    "NotifyDelivery",
    # observability
    "Event",
    "Observer",
    "NoopObserver",
]
