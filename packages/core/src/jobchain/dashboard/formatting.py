"""Template filters: times, durations, JSON. They return plain text, which Jinja escapes (but
:func:`breakable`, which escapes itself)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from jinja2 import Environment
from markupsafe import Markup, escape

MAX_JSON_CHARS: Final = 100_000
"""A value longer than this as JSON is cut (the page stays light); the API has it whole."""


def when(value: datetime | None) -> str:
    """``2026-11-26 06:50:01 UTC`` (or an em dash for None)."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).isoformat()


def duration(value: timedelta | float | None) -> str:
    """A short human duration: ``350 ms``, ``4.2 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``."""
    if value is None:
        return "—"
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{sign}{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{sign}{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{sign}{days} d {hours} h"


def ago(value: datetime | None, now: datetime) -> str:
    """``5.0 s ago`` or ``in 3 min 0 s`` relative to ``now``: for a moment that may be ahead
    (alive until, next tick, scheduled run, lease end). A past event takes :func:`since`."""
    if value is None:
        return "—"
    delta = now - value
    if delta >= timedelta(0):
        return f"{duration(delta)} ago"
    return f"in {duration(-delta)}"


def since(value: datetime | None, now: datetime) -> str:
    """``5.0 s ago`` for a moment that has happened (last seen, started, created, finished);
    ``just now`` when it reads ahead of ``now``. Such a moment was written by a worker's
    clock or the database's, which may run ahead of the dashboard's: "in 2.3 s" for a
    heartbeat would be skew, not news."""
    if value is None:
        return "—"
    delta = now - value
    if delta <= timedelta(0):
        return "just now"
    return f"{duration(delta)} ago"


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON, cut to :data:`MAX_JSON_CHARS`."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    if len(text) > MAX_JSON_CHARS:
        return text[:MAX_JSON_CHARS] + f"\n… ({len(text) - MAX_JSON_CHARS} more characters)"
    return text


def short(value: str | None, size: int = 8) -> str:
    """The last ``size`` characters of an id: job ids are UUIDv7, whose head is the creation
    time (ids created together share it) and whose tail is random."""
    return "—" if value is None else "…" + value[-size:]


def first_line(value: str | None, size: int = 160) -> str:
    """The first line of a message, cut to ``size`` characters."""
    if not value:
        return ""
    line = value.strip().splitlines()[0] if value.strip() else ""
    return line if len(line) <= size else line[: size - 1] + "…"


def breakable(value: str | None) -> Markup:
    """``value`` escaped, with a line-break opportunity (``<wbr>``) after each ``.`` and ``_``:
    a long type name (``shop.fulfilment.warehouse_reservation``) would otherwise be one
    unbreakable word that widens its table past its card. The only markup this module makes;
    ``.`` and ``_`` never occur inside an escape (``&amp;``, ``&#39;``)."""
    text = str(escape(value or ""))
    return Markup(text.replace(".", ".<wbr>").replace("_", "_<wbr>"))


def install(env: Environment) -> None:
    """Register the filters on ``env``."""
    env.filters.update(
        when=when,
        iso=iso,
        duration=duration,
        ago=ago,
        since=since,
        pretty_json=pretty_json,
        short=short,
        first_line=first_line,
        breakable=breakable,
    )


__all__ = [
    "ago",
    "breakable",
    "duration",
    "first_line",
    "install",
    "iso",
    "pretty_json",
    "short",
    "since",
    "when",
]
