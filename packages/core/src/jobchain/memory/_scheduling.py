"""Pause and schedules of the in-process state backend (``contracts.scheduling``).

Paused types live in ``Store.controls`` (with the claim's rate counters), schedules in
``Store.schedules``; both are keyed tables under the job table's transaction rules.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from jobchain.contracts.scheduling import ScheduleRegistration, SchedulesRegister, TypesPause
from jobchain.entities import PausedType, ScheduleRecord
from jobchain.memory._store import Store, TxState, unique
from jobchain.memory._tables import TypeControl
from jobchain.memory._writes import Ctx

# ---------------------------------------------------------------- pause


def paused_types(store: Store, viewer: TxState | None) -> dict[str, datetime]:
    """Type name -> ``paused_at`` of every paused type ``viewer`` sees (None: read-only)."""
    return {
        name: control.paused_at
        for name, control in store.controls.visible(viewer).items()
        if control.paused_at is not None
    }


def types_pause(ctx: Ctx, params: TypesPause, now: datetime) -> list[PausedType]:
    """Pause (keeping an earlier ``paused_at``) or resume; the paused types among those given."""
    controls = ctx.store.controls
    result: list[PausedType] = []
    for name in sorted(unique(params.type_names)):  # one lock order: concurrent calls never deadlock
        ctx.store.lock_table(ctx.tx, controls, name)
        control = controls.rows.get(name)
        if params.paused:
            if control is None or control.paused_at is None:
                control = replace(control or TypeControl(), paused_at=now)
                controls.put(ctx.tx, name, control)
            assert control.paused_at is not None
            result.append(PausedType(type_name=name, paused_at=control.paused_at))
        elif control is not None and control.paused_at is not None:
            controls.put(ctx.tx, name, replace(control, paused_at=None))
    return result


def paused_types_list(store: Store, viewer: TxState | None) -> list[PausedType]:
    """Every paused type, by name."""
    found = paused_types(store, viewer)
    return [PausedType(type_name=name, paused_at=found[name]) for name in sorted(found)]


# ---------------------------------------------------------------- schedules


def registered(existing: ScheduleRecord | None, given: ScheduleRegistration, now: datetime) -> ScheduleRecord:
    """The stored record after one registration: every field given, ``last_seen_at = now``;
    the tick (and its chain) only moves forward."""
    tick, chain_id = given.last_tick_at, given.last_chain_id
    if (
        existing is not None
        and existing.last_tick_at is not None
        and (tick is None or tick < existing.last_tick_at)
    ):
        tick, chain_id = existing.last_tick_at, existing.last_chain_id
    return ScheduleRecord(
        name=given.name,
        cron=given.cron,
        timezone=given.timezone,
        type_name=given.type_name,
        catch_up=given.catch_up,
        worker_name=given.worker_name,
        registered_at=existing.registered_at if existing is not None else now,
        last_seen_at=now,
        last_tick_at=tick,
        last_chain_id=chain_id,
        next_tick_at=given.next_tick_at,
    )


def schedules_register(ctx: Ctx, params: SchedulesRegister, now: datetime) -> list[ScheduleRecord]:
    """Upsert each schedule (in order; a name given twice ends as its last registration), then
    forget rows last seen before ``forget_before``. Returns the registered rows by name."""
    table = ctx.store.schedules
    names = [given.name for given in params.schedules]
    for name in sorted(set(names)):  # one lock order: concurrent registrations never deadlock
        ctx.store.lock_table(ctx.tx, table, name)
    for given in params.schedules:
        table.put(ctx.tx, given.name, registered(table.rows.get(given.name), given, now))
    if params.forget_before is not None:
        cutoff = params.forget_before
        for name, stored in sorted(table.visible(ctx.tx).items()):
            if stored.last_seen_at < cutoff and name not in names:
                ctx.store.lock_table(ctx.tx, table, name)
                current = table.rows.get(name)
                if current is not None and current.last_seen_at < cutoff:
                    table.put(ctx.tx, name, None)
    return [record for name in sorted(set(names)) if (record := table.rows.get(name)) is not None]


def schedules_list(store: Store, viewer: TxState | None) -> list[ScheduleRecord]:
    """Every registered schedule, by name."""
    rows = store.schedules.visible(viewer)
    return [rows[name] for name in sorted(rows)]
