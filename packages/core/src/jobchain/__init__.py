"""jobchain: durable, typed job chains that commit with your database transaction."""

from jobchain.client import ChainsCancelReport, ChainsRetried, ChainStart, ChainStarted, Client, connect
from jobchain.completion import Completion, ContinuationSpec, JobFinished
from jobchain.end_hooks import JobEnded
from jobchain.entities import (
    PRIORITY_AGING,
    PRIORITY_MAX,
    PRIORITY_MIN,
    AttemptError,
    Chain,
    Deduplication,
    Job,
    JobStatus,
    Page,
    PausedType,
    RateLimit,
    RescueReason,
    Schedule,
    ScheduleRecord,
    WorkerInfo,
    WorkerState,
)
from jobchain.errors import *  # noqa: F403 -- the error tree is public API, listed in errors.__all__
from jobchain.errors import __all__ as _error_names
from jobchain.job_types import DEFAULT_MAX_ATTEMPTS, UNSET, JobType, JobTypes
from jobchain.stats import AttemptDurations, QueueStats, ThroughputBucket, TypeStats, WindowCounts
from jobchain.transactions import Transaction, TransactionHooks
from jobchain.worker.retention import Retention

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "UNSET",
    "AttemptDurations",
    "AttemptError",
    "Chain",
    "ChainStart",
    "ChainStarted",
    "ChainsCancelReport",
    "ChainsRetried",
    "Client",
    "Completion",
    "ContinuationSpec",
    "Deduplication",
    "Job",
    "JobEnded",
    "JobFinished",
    "JobStatus",
    "JobType",
    "JobTypes",
    "PRIORITY_AGING",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "Page",
    "PausedType",
    "RateLimit",
    "ScheduleRecord",
    "QueueStats",
    "RescueReason",
    "Retention",
    "Schedule",
    "ThroughputBucket",
    "Transaction",
    "TransactionHooks",
    "TypeStats",
    "WindowCounts",
    "WorkerInfo",
    "WorkerState",
    "connect",
    *_error_names,
]
