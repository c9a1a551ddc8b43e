"""Periodic schedules: cron expressions and their ticks, as pure functions of time.

Cron expressions are parsed and evaluated by `cronsim <https://pypi.org/project/cronsim/>`_
(five fields, or six with seconds first; ``L``, ``W``, ``#`` and names as cronsim reads
them) in an IANA timezone through :mod:`zoneinfo`. Daylight saving time follows cronsim,
which mimics Debian cron: a tick at a fixed local time that falls into the hour skipped in
spring runs at the first valid minute after it, and one in the hour repeated in autumn runs
once (the first occurrence). Every tick is returned as an aware UTC datetime, whole seconds.

The worker's scheduler (:mod:`jobchain.worker.periodic`) turns ticks into chains; nothing
here touches a backend, so the tick logic is tested with any ``now``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from jobchain.entities import Deduplication
from jobchain.errors import InvalidScheduleError

MAX_SCHEDULE_NAME_CHARS = 200
"""A schedule name is at most this long (it is part of each tick's deduplication key)."""

DEDUPLICATION_SLACK = timedelta(hours=1)
"""A tick's deduplication window is the time to the next tick plus this much."""

_NAME = re.compile(r"[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?")
_SECOND = timedelta(seconds=1)


def validate_schedule_name(name: object) -> str:
    """``name`` if it can name a schedule, else :class:`InvalidScheduleError` saying what to change."""
    if not isinstance(name, str) or not name:
        raise InvalidScheduleError(f"a schedule name must be a non-empty string, got {name!r}")
    if len(name) > MAX_SCHEDULE_NAME_CHARS:
        raise InvalidScheduleError(
            f"schedule name {name[:40]!r}… is {len(name)} characters; use at most {MAX_SCHEDULE_NAME_CHARS}"
        )
    if not _NAME.fullmatch(name):
        raise InvalidScheduleError(
            f"schedule name {name!r} must not start or end with whitespace nor hold control characters"
        )
    return name


def _zone(timezone: object, cron: str) -> tzinfo:
    if not isinstance(timezone, str) or not timezone:
        raise InvalidScheduleError(
            f"timezone of schedule {cron!r} must be an IANA name such as 'Europe/Paris', got {timezone!r}",
            cron=cron,
            timezone=str(timezone),
        )
    if timezone == "UTC":
        return UTC
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidScheduleError(
            f"unknown timezone {timezone!r} for schedule {cron!r}: use an IANA name such as "
            "'Europe/Paris' or 'UTC' (on Windows, install the tzdata package)",
            cron=cron,
            timezone=timezone,
        ) from exc


@dataclass(frozen=True, slots=True)
class CronTicks:
    """A parsed cron expression in a timezone: its ticks before and after any instant."""

    cron: str
    timezone: str
    zone: tzinfo

    @classmethod
    def parse(cls, cron: object, timezone: object = "UTC") -> CronTicks:
        """Parse ``cron`` in ``timezone``; :class:`InvalidScheduleError` naming the expression."""
        if not isinstance(cron, str) or not cron.strip():
            raise InvalidScheduleError(
                f"a cron expression must be a non-empty string such as '0 3 * * *', got {cron!r}",
                cron=str(cron),
            )
        zone = _zone(timezone, cron)
        assert isinstance(timezone, str)
        try:
            probe = CronSim(cron, datetime(2000, 1, 1, tzinfo=zone))
            next(probe)
        except (CronSimError, StopIteration, ValueError) as exc:
            reason = str(exc) or "it never matches"
            raise InvalidScheduleError(
                f"invalid cron expression {cron!r}: {reason} (five fields: minute hour "
                "day-of-month month day-of-week, e.g. '0 3 * * *')",
                cron=cron,
                timezone=timezone,
            ) from exc
        return cls(cron=cron, timezone=timezone, zone=zone)

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment`` (aware), in UTC."""
        local = moment.astimezone(self.zone)
        for found in CronSim(self.cron, local):
            tick = found.astimezone(UTC)
            # Wall-clock arithmetic around a DST change may give a tick that is not later in
            # UTC (the same instant twice): skip it, ticks only move forward.
            if tick > moment:
                return tick
        raise InvalidScheduleError(
            f"cron expression {self.cron!r} has no tick after {moment}"
        )  # pragma: no cover

    def last_at_or_before(self, moment: datetime) -> datetime | None:
        """The latest tick at or before ``moment`` (aware), in UTC; None if none in 50 years."""
        # Reverse iteration from the next whole second yields ticks strictly before it, so a
        # tick at exactly ``moment`` counts.
        start = moment.astimezone(self.zone).replace(microsecond=0) + _SECOND
        try:
            for found in CronSim(self.cron, start, reverse=True):
                tick = found.astimezone(UTC)
                if tick <= moment:
                    return tick
        except StopIteration:  # pragma: no cover - cronsim gives up after 50 years
            return None
        return None  # pragma: no cover


@dataclass(frozen=True, slots=True, kw_only=True)
class PeriodicSchedule:
    """One declared schedule: start a chain of ``job_type`` with ``input`` at every tick.

    Declared with :meth:`jobchain.worker.Processors.periodic`; run by every worker whose
    processors declare it (exactly one chain per tick across them).
    """

    name: str
    ticks: CronTicks
    job_type: Any
    input: Any
    catch_up: bool = True

    @property
    def cron(self) -> str:
        return self.ticks.cron

    @property
    def timezone(self) -> str:
        return self.ticks.timezone

    def deduplication_key(self, tick: datetime) -> str:
        """The key every worker starts ``tick``'s chain with: ``periodic:<name>:<tick UTC ISO>``."""
        return f"periodic:{self.name}:{tick.astimezone(UTC).isoformat()}"

    def deduplication(self, tick: datetime) -> Deduplication:
        """Deduplication of ``tick``'s chain: scope ``any``, held until an hour past the next tick."""
        window = self.ticks.next_after(tick) - tick + DEDUPLICATION_SLACK
        return Deduplication(key=self.deduplication_key(tick), scope="any", window=window)


def due_tick(ticks: CronTicks, now: datetime, after: datetime | None) -> datetime | None:
    """The tick to start at ``now``: the latest tick ``<= now`` that is later than ``after``.

    Only the latest: ticks missed while no worker ran are not started one by one (never a
    storm), the last of them stands for them all. ``after=None``: no tick was done yet.
    """
    tick = ticks.last_at_or_before(now)
    if tick is None or (after is not None and tick <= after):
        return None
    return tick
