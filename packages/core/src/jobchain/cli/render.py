"""Output of the admin commands: JSON documents for scripts, rich tables and trees for people.

JSON shapes (documented in docs/reference/cli.md) use the entities' own field names:
datetimes are ISO 8601 strings with their UTC offset, durations are seconds (float),
statuses and states their string values, job inputs and outputs their JSON values.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table
from rich.text import Text

from jobchain.entities import Chain, Job, JobStatus, WorkerInfo

STATUS_STYLES = {
    JobStatus.BLOCKED: "magenta",
    JobStatus.PENDING: "yellow",
    JobStatus.RUNNING: "cyan",
    JobStatus.COMPLETED: "green",
    JobStatus.FAILED: "bold red",
    JobStatus.CANCELLED: "dim",
}

WIDE = 160
"""Columns used when stdout is not a terminal and $COLUMNS is unset: ids stay whole in logs."""


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses by field, datetimes ISO 8601, timedeltas seconds."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def job_json(job: Job) -> dict[str, Any]:
    """A job: every field of :class:`~jobchain.entities.Job`."""
    data: dict[str, Any] = plain(job)
    return data


def chain_json(chain: Chain) -> dict[str, Any]:
    """A chain: ``id``, ``type_name``, ``status`` (its last job's), ``created_at``, ``finished_at``,
    ``root`` and ``last`` (jobs; the same job for a chain of one)."""
    return {
        "id": chain.id,
        "type_name": chain.type_name,
        "status": chain.status.value,
        "created_at": plain(chain.created_at),
        "finished_at": plain(chain.finished_at),
        "root": job_json(chain.root),
        "last": job_json(chain.last),
    }


def worker_json(worker: WorkerInfo, running: list[Job]) -> dict[str, Any]:
    """A worker: every field of :class:`~jobchain.entities.WorkerInfo`, plus ``running_jobs``."""
    data: dict[str, Any] = plain(worker)
    data["running_jobs"] = [job_json(job) for job in running]
    return data


def emit_json(document: Any) -> None:
    """Print one JSON document on stdout."""
    click.echo(json.dumps(document, indent=2, ensure_ascii=False, default=str))


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr), wide when not writing to a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else WIDE
    return Console(file=stream, width=width, highlight=False)


def status_text(status: JobStatus | str) -> Text:
    """A status, coloured."""
    status = JobStatus(status)
    return Text(status.value, style=STATUS_STYLES[status])


def when(moment: datetime | None) -> str:
    """A datetime as ``YYYY-MM-DD HH:MM:SS`` (UTC offset dropped when UTC), or ``-``."""
    if moment is None:
        return "-"
    text = moment.isoformat(sep=" ", timespec="seconds")
    return text.removesuffix("+00:00")


def short(moment: datetime | None) -> str:
    """A datetime for a table cell: ``MM-DD HH:MM:SS`` in UTC (the year only when not this one)."""
    if moment is None:
        return "-"
    moment = moment.astimezone(UTC)
    if moment.year != datetime.now(UTC).year:
        return moment.strftime("%Y-%m-%d %H:%M")
    return moment.strftime("%m-%d %H:%M:%S")


ID_HEADERS = frozenset({"ID", "CHAIN", "JOB", "BLOCKER CHAIN"})
"""Columns holding ids: never wrapped or cut, so they can be copied whole."""
WRAPPED_HEADERS = frozenset({"LAST ERROR", "TYPES", "ERROR TYPE"})
"""Free-text columns: they wrap and give up width first on a narrow terminal."""
SENTENCE_HEADERS = frozenset({"LAST ERROR"})
"""Of those, the ones holding words to read: they wrap at spaces only, and a word wider than
the column is cut with an ellipsis, never folded onto the next line ("CardExpi" / "red:")."""


class PlainTable(Table):
    """A table whose string cells and title are shown as written, never parsed as rich markup:
    type names, worker names and errors are user data (``[/x]`` would even break the parser)."""

    def add_row(self, *renderables: Any, **options: Any) -> None:
        super().add_row(*(Text(c) if isinstance(c, str) else c for c in renderables), **options)


def table(*headers: str, title: str | None = None) -> Table:
    """A compact table (header rule only): ids keep their width, free text wraps, the rest stays
    on one line (cut with an ellipsis only when the terminal is far too narrow)."""
    columns = [
        Column(h, no_wrap=True, min_width=36)
        if h in ID_HEADERS
        else Column(h, overflow="ellipsis")
        if h in SENTENCE_HEADERS
        else Column(h, overflow="fold")
        if h in WRAPPED_HEADERS
        else Column(h, no_wrap=True)
        for h in headers
    ]
    result = PlainTable(*columns, title=Text(title) if title is not None else None, box=box.SIMPLE_HEAD)
    result.pad_edge = False
    return result


def last_error(job: Job) -> str:
    """``Type: message`` of the job's last recorded error (one line, cut), or ``""``."""
    if job.attempt_errors:
        error = job.attempt_errors[-1]
        text = f"{error.error_type}: {error.message}"
    else:
        text = job.last_attempt_error or ""
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:79] + "…"


def markup(text: str) -> str:
    """``text`` escaped for rich markup (job inputs and errors are user data)."""
    return escape(text)
