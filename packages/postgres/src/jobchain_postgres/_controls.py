"""The scheduling controls of PostgresStateTx kept in their own tables: pause and resume
(``type_control``), the registry of periodic schedules (``schedule``) and the failure and cancel
hooks of each type (``type_hook``, read by the ``job_end_hooks`` trigger), one statement each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from jobchain.contracts.end_hooks import EndHooksRegister
from jobchain.contracts.scheduling import PausedTypesList, SchedulesList, SchedulesRegister, TypesPause
from jobchain.end_hooks import HOOK_FIELDS
from jobchain.entities import PausedType, ScheduleRecord
from jobchain.errors import InvalidArgumentError
from jobchain_postgres._results import check_now
from jobchain_postgres.queries import Queries
from jobchain_postgres.rows import Row, Shape, job_uuid, json_text, utc, utc_or_none

__all__ = ["ControlsMixin"]


def _names(values: Sequence[object], what: str) -> list[str]:
    """Distinct names in order; anything but a non-empty string is refused before any SQL."""
    for value in values:
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(f"{what} must be non-empty strings, got {value!r}")
    return list(dict.fromkeys(str(value) for value in values))


def _aware(name: str, value: datetime | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidArgumentError(f"{name} must be a timezone-aware datetime, got {value!r}")
    return value.isoformat()


def _schedules_document(params: SchedulesRegister) -> str:
    """The registrations as one JSON array (the last registration of a name wins)."""
    items: dict[str, dict[str, Any]] = {}
    for item in params.schedules:
        for field in ("name", "cron", "timezone", "type_name", "worker_name"):
            value = getattr(item, field)
            if not isinstance(value, str) or not value:
                raise InvalidArgumentError(f"a schedule's {field} must be a non-empty string, got {value!r}")
        items[item.name] = {
            "name": item.name,
            "cron": item.cron,
            "timezone": item.timezone,
            "type_name": item.type_name,
            "catch_up": bool(item.catch_up),
            "worker_name": item.worker_name,
            "next_tick_at": _aware("next_tick_at", item.next_tick_at),
            "last_tick_at": _aware("last_tick_at", item.last_tick_at),
            "last_chain_id": None if item.last_chain_id is None else job_uuid(item.last_chain_id),
        }
    return json_text([{"ord": position, **item} for position, item in enumerate(items.values())])


def _end_hooks_document(params: EndHooksRegister) -> str:
    """The hook rows as one JSON array (the last row of a type name wins; TypeEndHooks checked
    each row when it was built)."""
    items: dict[str, dict[str, Any]] = {}
    for row in params.types:
        item: dict[str, Any] = {"type_name": row.type_name, "priority": row.priority}
        for field in HOOK_FIELDS:
            item[field] = getattr(row, field)
        items[row.type_name] = item
    return json_text(list(items.values()))


def _schedule(row: Row) -> ScheduleRecord:
    """A ``schedules_list`` / ``schedules_register`` row (columns in the order they select them)."""
    (
        name,
        cron,
        timezone,
        type_name,
        catch_up,
        worker_name,
        registered_at,
        last_seen_at,
        last_tick_at,
        last_chain_id,
        next_tick_at,
    ) = row
    return ScheduleRecord(
        name=name,
        cron=cron,
        timezone=timezone,
        type_name=type_name,
        catch_up=catch_up,
        worker_name=worker_name,
        registered_at=utc(registered_at),
        last_seen_at=utc(last_seen_at),
        last_tick_at=utc_or_none(last_tick_at),
        last_chain_id=None if last_chain_id is None else str(last_chain_id),
        next_tick_at=utc_or_none(next_tick_at),
    )


def _paused(rows: list[Row]) -> list[PausedType]:
    paused = [PausedType(type_name=row[0], paused_at=utc(row[1])) for row in rows]
    paused.sort(key=lambda item: item.type_name)
    return paused


class ControlsMixin:
    """Pause and schedules; the transaction class supplies ``_q``, ``_check`` and ``_rows``."""

    _q: Queries

    def _check(self, *, write: bool) -> None:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def _rows(
        self, query: bytes, params: Mapping[str, Any], *, write: bool, ids: Sequence[str] = ()
    ) -> tuple[Shape, list[Row]]:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def types_pause(self, params: TypesPause) -> list[PausedType]:
        """Pause or resume types (``sql/types_pause.sql``); the paused ones among them after."""
        type_names = _names(params.type_names, "type names")
        now = check_now(params.now)
        self._check(write=True)
        if not type_names:
            return []
        query_params = {"type_names": type_names, "paused": bool(params.paused), "now": now}
        _shape, rows = await self._rows(self._q.types_pause, query_params, write=True)
        return _paused(rows)

    async def paused_types_list(self, params: PausedTypesList) -> list[PausedType]:
        """Every paused type, by name."""
        _shape, rows = await self._rows(self._q.paused_types_list, {}, write=False)
        return _paused(rows)

    async def schedules_register(self, params: SchedulesRegister) -> list[ScheduleRecord]:
        """Upsert schedules and forget stale ones (``sql/schedules_register.sql``)."""
        document = _schedules_document(params)
        query_params = {
            "schedules": document,
            "forget_before": _aware("forget_before", params.forget_before),
            "now": check_now(params.now),
        }
        self._check(write=True)
        _shape, rows = await self._rows(self._q.schedules_register, query_params, write=True)
        by_name = {record.name: record for record in map(_schedule, rows)}
        return [by_name[item.name] for item in params.schedules if item.name in by_name]

    async def schedules_list(self, params: SchedulesList) -> list[ScheduleRecord]:
        """Every registered schedule, by name."""
        _shape, rows = await self._rows(self._q.schedules_list, {}, write=False)
        records = [_schedule(row) for row in rows]
        records.sort(key=lambda record: record.name)
        return records

    async def end_hooks_register(self, params: EndHooksRegister) -> None:
        """Upsert each type's failure and cancel hooks (``sql/end_hooks_register.sql``).

        Guarantees (suite: EndHooksTests): one statement; a name given twice ends as its last;
        a row without hooks replaces the type's hooks with none; types not given are untouched.
        The hook jobs themselves are started by the ``job_end_hooks`` trigger (migration 0013).
        """
        document = _end_hooks_document(params)
        now = check_now(params.now)
        self._check(write=True)
        if not params.types:
            return
        await self._rows(self._q.end_hooks_register, {"types": document, "now": now}, write=True)
