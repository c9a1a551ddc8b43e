"""The worker: claims, leases, runs, retries and completes jobs."""

from jobchain.worker.abort import AbortReason, AbortSignal, AttemptAbortedError
from jobchain.worker.attempt import (
    Attempt,
    AttemptMisuseError,
    Completed,
    Continue,
    HandlerDidNotCompleteError,
)
from jobchain.worker.backoff import Backoff, LeaseConfig
from jobchain.worker.batch import Batch, BatchResultError
from jobchain.worker.loop import Worker
from jobchain.worker.processors import AttemptMiddleware, Processors
from jobchain.worker.retention import Retention
from jobchain.worker.slots import WorkerLoad

__all__ = [
    "AbortReason",
    "AbortSignal",
    "Attempt",
    "AttemptAbortedError",
    "AttemptMiddleware",
    "AttemptMisuseError",
    "Backoff",
    "Batch",
    "BatchResultError",
    "Completed",
    "Continue",
    "HandlerDidNotCompleteError",
    "LeaseConfig",
    "Processors",
    "Retention",
    "Worker",
    "WorkerLoad",
]
