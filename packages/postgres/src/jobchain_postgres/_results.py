"""Shared by the transaction's operation modules: result shapes, clock checks, refusals."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jobchain.entities import Job
from jobchain.errors import (
    InvalidArgumentError,
    JobAlreadyCompletedError,
    JobCancelledError,
    JobchainError,
    JobFinishedError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
)
from jobchain_postgres.rows import Row, Shape

__all__ = ["check_now", "owned_result", "shape_of"]

_SHAPES: dict[tuple[bytes, int], Shape] = {}
"""Result shapes by statement and column count: reading ``cursor.description`` builds a
Column object per column on every call, which was the worker's costliest line."""


def shape_of(query: bytes, cursor: Any) -> Shape:
    result = cursor.pgresult
    key = (query, result.nfields if result is not None else 0)
    shape = _SHAPES.get(key)
    if shape is None:
        shape = _SHAPES[key] = Shape(cursor.description)
    return shape


def check_now(now: datetime | None) -> datetime | None:
    if now is not None and now.tzinfo is None:
        raise InvalidArgumentError("now must be timezone-aware (use datetime.now(timezone.utc))")
    return now


_FINISHED = frozenset({"failed", "cancelled"})
"""Terminal statuses other than completed: a worker's write is fenced, a workerless one refused."""


def owned_result(shape: Shape, rows: list[Row], job_id: str, worker_id: str | None) -> Job:
    """The changed job, or the error its status and owner call for (the statement changed nothing)."""
    if not rows:
        raise JobNotFoundError(job_id)
    row = rows[0]
    job = shape.job(row)
    if job is not None:
        return job
    status = shape.scalar(row, "_status")
    if status is None:
        raise JobNotFoundError(job_id)
    if status == "completed":
        raise JobAlreadyCompletedError(job_id)
    if worker_id is None and status not in _FINISHED:  # pragma: no cover - an open job always changes
        raise JobchainError(f"job {job_id} could not be changed (status {status})")
    if status in _FINISHED:
        if worker_id is None:
            raise JobFinishedError(job_id, status)
        if status == "cancelled":
            raise JobCancelledError(job_id, shape.scalar(row, "_cancel_reason"))
    raise JobTakenByAnotherWorkerError(job_id, worker_id, shape.scalar(row, "_leased_by"))
