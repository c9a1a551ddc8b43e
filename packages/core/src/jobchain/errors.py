"""The jobchain error tree. Each class's docstring is its default message and says what to change."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class JobchainError(Exception):
    """Base class of every jobchain error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or type(self).__name__).strip())


class InvalidArgumentError(JobchainError, ValueError):
    """An argument is invalid; the message says which one and what is expected."""


class InvalidJobIdError(InvalidArgumentError):
    """A job id must be a canonical UUID string."""

    def __init__(self, job_id: object, source: str = "caller") -> None:
        self.job_id = job_id
        self.source = source
        super().__init__(
            f"invalid job id {job_id!r} from {source}: ids must be canonical UUID strings "
            "such as '2f1c7a52-2a53-4d51-9a0e-6cbb1d3c1a11'"
        )


class DuplicateJobIdError(JobchainError):
    """A job with this id already exists; pass a fresh id or omit it."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"a job with id {job_id!r} already exists; pass a fresh id or omit id=")


class InvalidCursorError(InvalidArgumentError):
    """The cursor was not produced by this query; pass the next_cursor of the previous page."""


class InvalidPageSizeError(InvalidArgumentError):
    """The page limit is out of range."""


class InvalidURLError(InvalidArgumentError):
    """A backend URL is malformed; the message says which part."""


class NotJsonSerializableError(InvalidArgumentError):
    """A value that must be stored as JSON is not JSON-serializable."""


class UnknownSchemeError(JobchainError):
    """No installed backend serves this URL scheme; install the distribution named in the message."""


class BackendConflictError(JobchainError):
    """Two installed distributions claim the same URL scheme and role; uninstall one."""


class BackendUnavailableError(JobchainError):
    """A backend's driver could not be imported; install the distribution named in the message."""


class JobNotFoundError(JobchainError):
    """The job does not exist (it may have been deleted)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} not found")


class ChainNotFoundError(JobchainError):
    """The chain does not exist (it may have been deleted)."""

    def __init__(self, chain_id: str) -> None:
        self.chain_id = chain_id
        super().__init__(f"chain {chain_id} not found")


class JobAlreadyCompletedError(JobchainError):
    """The job is already completed; nothing was changed."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} is already completed")


class LeaseLostError(JobchainError):
    """The worker no longer owns this job; stop and let its owner finish."""


class JobTakenByAnotherWorkerError(LeaseLostError):
    """The job's lease belongs to another worker (or was reaped); stop working on it."""

    def __init__(self, job_id: str, worker_id: str | None, leased_by: str | None) -> None:
        self.job_id = job_id
        self.worker_id = worker_id
        self.leased_by = leased_by
        super().__init__(
            f"job {job_id} is leased by {leased_by!r}, not by {worker_id!r}; "
            "this worker's lease expired or was reaped"
        )


class JobCancelledError(LeaseLostError):
    """The job was cancelled while its attempt ran; stop (whatever the attempt writes is refused)."""

    def __init__(self, job_id: str, reason: str | None = None) -> None:
        self.job_id = job_id
        self.reason = reason
        super().__init__(f"job {job_id} was cancelled" + (f": {reason}" if reason else ""))


class JobFinishedError(JobchainError):
    """The job is failed or cancelled; retry it first with ``client.retry_job``."""

    def __init__(self, job_id: str, status: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(f"job {job_id} is {status}; retry it first with client.retry_job(tx, {job_id!r})")


class JobNotRetryableError(JobchainError):
    """Only failed or cancelled jobs can be retried; the message says why this one cannot."""

    def __init__(self, job_id: str, status: str, blocked_by_chain_id: str | None = None) -> None:
        self.job_id = job_id
        self.status = status
        self.blocked_by_chain_id = blocked_by_chain_id
        if blocked_by_chain_id is not None:
            message = (
                f"job {job_id} failed because its blocker chain {blocked_by_chain_id} is still failed "
                f"or cancelled; retry that chain instead (its dependents are retried with it)"
            )
        else:
            message = f"job {job_id} is {status}; only failed or cancelled jobs can be retried"
        super().__init__(message)


class ChainNotCancellableError(JobchainError):
    """Only chains that are blocked, pending or running can be cancelled."""

    def __init__(self, chain_id: str, status: str) -> None:
        self.chain_id = chain_id
        self.status = status
        super().__init__(
            f"chain {chain_id} is {status}; only blocked, pending or running chains can be cancelled"
        )


class FailJob(JobchainError):  # noqa: N818 -- raised as a command (`raise FailJob("why")`), like StopIteration
    """Raised from a handler to fail the job at once, without using its remaining attempts."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class JobTimeoutError(JobchainError):
    """The handler ran past its job type's ``timeout``; the attempt counts as failed and is retried."""

    def __init__(self, job_id: str, timeout: float) -> None:
        self.job_id = job_id
        self.timeout = timeout
        super().__init__(f"job {job_id}: the handler ran past its timeout of {timeout:g} s")


class ChainFailedError(JobchainError):
    """The awaited chain failed; ``error`` is its last job's last error, ``job`` that job."""

    def __init__(self, chain_id: str, job: Any, error: str | None) -> None:
        self.chain_id = chain_id
        self.job = job
        self.error = error
        super().__init__(f"chain {chain_id} failed: {error or '(no error recorded)'}")


class ChainCancelledError(JobchainError):
    """The awaited chain was cancelled; ``reason`` is what ``cancel_chain`` was given."""

    def __init__(self, chain_id: str, job: Any, reason: str | None) -> None:
        self.chain_id = chain_id
        self.job = job
        self.reason = reason
        super().__init__(f"chain {chain_id} was cancelled" + (f": {reason}" if reason else ""))


class JobNotTriggerableError(JobchainError):
    """Only pending jobs can be triggered."""

    def __init__(self, job_id: str, status: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(f"job {job_id} is {status}; only pending jobs can be triggered")


class JobTypeMismatchError(JobchainError):
    """The entity has a different job type than the one asked for."""

    def __init__(self, expected: str, actual: str) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(f"expected job type {expected!r}, found {actual!r}")


class JobTypeValidationError(InvalidArgumentError):
    """A value does not match its job type's declaration; the message names the type and field."""

    def __init__(self, code: str, type_name: str, details: str) -> None:
        self.code = code
        self.type_name = type_name
        self.details = details
        super().__init__(f"{code} for job type {type_name!r}: {details}")


class UnknownJobTypeError(InvalidArgumentError):
    """The job type is not registered; register it or fix the name."""

    def __init__(self, type_name: str, registered: Sequence[str]) -> None:
        self.type_name = type_name
        self.registered_type_names = tuple(registered)
        names = ", ".join(sorted(registered)) or "(none)"
        super().__init__(f"unknown job type {type_name!r}; registered types: {names}")


class DuplicateJobTypeError(JobchainError):
    """Two registry slices declare the same job type name; rename one."""

    def __init__(self, type_names: Sequence[str]) -> None:
        self.type_names = tuple(type_names)
        super().__init__(f"job types declared twice: {', '.join(sorted(type_names))}")


class WaitChainTimeoutError(JobchainError):
    """The chain did not complete in time."""

    def __init__(self, chain_id: str, timeout: float) -> None:
        self.chain_id = chain_id
        self.timeout = timeout
        super().__init__(f"chain {chain_id} did not complete within {timeout:g} s")


class RescheduleJobError(JobchainError):
    """Raised from a handler to retry the job at an exact time instead of the backoff schedule."""

    def __init__(self, schedule: Any, cause: str | None = None) -> None:
        self.schedule = schedule
        self.cause = cause
        super().__init__(cause or "job rescheduled by its handler")


@dataclass(frozen=True, slots=True)
class BlockerReference:
    """A job outside the deletion set that is blocked by a chain inside it."""

    chain_id: str
    referenced_by_job_id: str


class BlockerReferenceError(JobchainError):
    """Chains are still blockers of other jobs; delete those too or pass cascade=True."""

    def __init__(self, references: Sequence[BlockerReference]) -> None:
        self.references = tuple(references)
        listed = ", ".join(f"{r.chain_id} (blocks job {r.referenced_by_job_id})" for r in references)
        super().__init__(
            f"cannot delete chains that block other jobs: {listed}; "
            "delete the dependent chains too or pass cascade=True"
        )


class HookNotRegisteredError(JobchainError):
    """No transaction hook is registered under this key."""


class TransactionRequiredError(JobchainError):
    """This call writes; pass the transaction from ``async with client.transaction() as tx``."""


class AdapterClosedError(JobchainError):
    """The adapter is closed; open a new one."""


class TransientStateError(JobchainError):
    """The state backend failed transiently (connection lost, serialization failure); retry."""


class SchemaNotMigratedError(JobchainError):
    """The state backend's jobchain tables are missing; run `jobchain migrate --state URL` first."""


class BackendUnreachableError(JobchainError):
    """A backend server could not be reached; start it, fix host and port, or allow more attempts."""


class MetricsPortInUseError(JobchainError):
    """The metrics port is already in use; pick another one (or stop what listens there)."""

    def __init__(self, port: int, host: str = "") -> None:
        self.port = port
        self.host = host
        where = f"{host}:{port}" if host else str(port)
        super().__init__(
            f"metrics port {port} is already in use ({where}); pass another port "
            "(--metrics-port) or stop what listens there"
        )


class InvalidScheduleError(InvalidArgumentError):
    """A periodic schedule is invalid: its cron expression, timezone or name; the message says which."""

    def __init__(self, message: str, *, cron: str | None = None, timezone: str | None = None) -> None:
        self.cron = cron
        self.timezone = timezone
        super().__init__(message)


class SyncInEventLoopError(JobchainError):
    """A synchronous jobchain call ran inside a running event loop, which it would block."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(
            f"{what} is synchronous and would block the running event loop; in async code use the "
            "async client (jobchain.connect) instead of jobchain.sync"
        )


__all__ = [
    "InvalidScheduleError",
    "SyncInEventLoopError",
    "AdapterClosedError",
    "BackendConflictError",
    "BackendUnreachableError",
    "BackendUnavailableError",
    "BlockerReference",
    "MetricsPortInUseError",
    "BlockerReferenceError",
    "ChainCancelledError",
    "ChainFailedError",
    "ChainNotCancellableError",
    "ChainNotFoundError",
    "DuplicateJobIdError",
    "DuplicateJobTypeError",
    "FailJob",
    "HookNotRegisteredError",
    "InvalidArgumentError",
    "InvalidCursorError",
    "InvalidJobIdError",
    "InvalidPageSizeError",
    "InvalidURLError",
    "JobAlreadyCompletedError",
    "JobCancelledError",
    "JobFinishedError",
    "JobNotFoundError",
    "JobNotRetryableError",
    "JobNotTriggerableError",
    "JobTakenByAnotherWorkerError",
    "JobTimeoutError",
    "JobTypeMismatchError",
    "JobTypeValidationError",
    "JobchainError",
    "LeaseLostError",
    "NotJsonSerializableError",
    "RescheduleJobError",
    "SchemaNotMigratedError",
    "TransactionRequiredError",
    "TransientStateError",
    "UnknownJobTypeError",
    "UnknownSchemeError",
    "WaitChainTimeoutError",
]
