"""Conversions between Python values and the stored columns: times, JSON, job rows.

Times are stored as fixed-width ISO-8601 UTC text with microseconds
(``2024-01-02T03:04:05.123456Z``), so comparing the text compares the instants.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from jobchain.entities import Chain, Job, JobStatus, JsonValue
from jobchain.errors import InvalidArgumentError, NotJsonSerializableError


class Row(Protocol):
    """A result row addressable by column name (sqlite3.Row, SQLAlchemy RowMapping, dict)."""

    def __getitem__(self, key: str, /) -> Any: ...


def fmt_time(value: datetime) -> str:
    """``value`` (aware) as fixed-width UTC text."""
    if value.tzinfo is None:
        raise InvalidArgumentError("times must be timezone-aware (use datetime.now(timezone.utc))")
    v = value.astimezone(UTC)
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}"
        f".{v.microsecond:06d}Z"
    )


def opt_time(value: datetime | None) -> str | None:
    return None if value is None else fmt_time(value)


def parse_time(text: str) -> datetime:
    """Stored time text back to an aware UTC datetime."""
    return datetime.fromisoformat(text)


def _opt_parse(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def dump_json(value: JsonValue, what: str = "value") -> str | None:
    """JSON text for a column; ``None`` is stored as SQL NULL."""
    if value is None:
        return None
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise NotJsonSerializableError(f"{what} is not JSON-serializable: {exc}") from None


def load_json(text: str | None) -> JsonValue:
    return None if text is None else json.loads(text)


def json_list(values: Iterable[object]) -> str:
    """A JSON array parameter for ``json_each``."""
    return json.dumps(list(values), separators=(",", ":"))


def job_from_row(row: Row) -> Job:
    """Build a Job from a row holding every column of the job table."""
    return Job(
        id=row["id"],
        chain_id=row["chain_id"],
        type_name=row["type_name"],
        chain_type_name=row["chain_type_name"],
        chain_index=row["chain_index"],
        status=JobStatus(row["status"]),
        input=load_json(row["input"]),
        output=load_json(row["output"]),
        created_at=datetime.fromisoformat(row["created_at"]),
        scheduled_at=datetime.fromisoformat(row["scheduled_at"]),
        attempt=row["attempt"],
        last_attempt_at=_opt_parse(row["last_attempt_at"]),
        last_attempt_error=row["last_attempt_error"],
        first_attempt_at=_opt_parse(row["first_attempt_at"]),
        attempt_started_at=_opt_parse(row["attempt_started_at"]),
        leased_by=row["leased_by"],
        leased_until=_opt_parse(row["leased_until"]),
        lease_generation=row["lease_generation"],
        completed_at=_opt_parse(row["completed_at"]),
        completed_by=row["completed_by"],
        deduplication_key=row["deduplication_key"],
        trace_context=load_json(row["trace_context"]),
        chain_trace_context=load_json(row["chain_trace_context"]),
    )


def chains_from_jobs(jobs: Sequence[Job]) -> dict[str, Chain]:
    """Pair root and last job per chain id from rows holding (at least) both of them."""
    roots: dict[str, Job] = {}
    lasts: dict[str, Job] = {}
    for job in jobs:
        if job.chain_index == 0:
            roots[job.chain_id] = job
        last = lasts.get(job.chain_id)
        if last is None or job.chain_index > last.chain_index:
            lasts[job.chain_id] = job
    return {chain_id: Chain(root, lasts[chain_id]) for chain_id, root in roots.items()}


__all__ = [
    "Row",
    "chains_from_jobs",
    "dump_json",
    "fmt_time",
    "job_from_row",
    "json_list",
    "load_json",
    "opt_time",
    "parse_time",
]
