"""Error groups: failed jobs by the fingerprint of their last error (``queue_stats``, the
dashboard's failed-jobs page, ``jobchain stats``).

A job's last error is the last entry of its error history (``attempt_errors``), or for a job
without one its ``last_attempt_error`` as a plain message. Errors differing only in the
values they carry (an order ref, an id, a number, a quoted value) share a fingerprint
(:func:`jobchain.error_fingerprint.error_fingerprint`), the same one the Spark report groups
by: 44 ``CardExpired`` failures whose messages name 44 orders are one group of 44.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from jobchain.entities import Job
from jobchain.error_fingerprint import error_fingerprint, error_line

SHOWN_GROUPS: Final = 10
"""Groups shown on the dashboard's page, the largest first; it says how many more there are."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorGroup:
    """Jobs whose last error has one fingerprint.

    ``example`` is one real error of the group (``Type: first line``), the latest;
    ``messages`` counts the distinct such errors; ``type_names`` are the job types, sorted.
    """

    fingerprint: str
    error_type: str
    example: str
    jobs: int
    messages: int
    type_names: tuple[str, ...]
    last_seen_at: datetime | None


def last_error(job: Job) -> tuple[str, str, datetime | None] | None:
    """(error type, message, when) of the job's last recorded error, None without one."""
    if job.attempt_errors:
        entry = job.attempt_errors[-1]
        return entry.error_type, entry.message, entry.at
    if job.last_attempt_error:
        return "", job.last_attempt_error, job.last_attempt_at
    return None


def group_errors(jobs: Iterable[Job]) -> list[ErrorGroup]:
    """The jobs with an error, grouped by fingerprint: most jobs first, then the latest.

    Jobs without a recorded error are left out.
    """
    found: dict[str, list[tuple[Job, str, str, datetime | None]]] = {}
    for job in jobs:
        error = last_error(job)
        if error is None:
            continue
        kind, message, at = error
        found.setdefault(error_fingerprint(kind, message), []).append(
            (job, kind, error_line(kind, message), at)
        )
    groups = []
    for fingerprint, members in found.items():
        latest = max(members, key=lambda m: (m[3].timestamp() if m[3] else float("-inf"), m[2]))
        groups.append(
            ErrorGroup(
                fingerprint=fingerprint,
                error_type=latest[1],
                example=latest[2],
                jobs=len({m[0].id for m in members}),
                messages=len({m[2] for m in members}),
                type_names=tuple(sorted({m[0].type_name for m in members})),
                last_seen_at=latest[3],
            )
        )
    groups.sort(
        key=lambda g: (-g.jobs, -(g.last_seen_at.timestamp() if g.last_seen_at else 0.0), g.fingerprint)
    )
    return groups


__all__ = ["SHOWN_GROUPS", "ErrorGroup", "group_errors", "last_error"]
