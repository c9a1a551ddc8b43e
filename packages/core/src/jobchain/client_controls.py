"""The client's scheduling controls: pause and resume job types, list paused types and schedules.

A pause is kept by the state backend: no worker (any process, any machine) claims a paused
type from the moment the pause commits; jobs already running finish. Resuming publishes a
job-scheduled wake-up per type after commit, so idle workers claim the waiting jobs at once
instead of at their next poll.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from jobchain.client_queries import ClientQueries, TypeRef
from jobchain.contracts.scheduling import PausedTypesList, SchedulesList, TypesPause
from jobchain.entities import PausedType, ScheduleRecord
from jobchain.errors import InvalidArgumentError
from jobchain.job_types import JobType, validate_type_name
from jobchain.transactions import Transaction


def control_type_names(job_types: Sequence[TypeRef]) -> list[str]:
    """The type names of ``job_types`` (JobType or name), de-duplicated in order.

    Raises InvalidArgumentError for an empty selection or anything that is not a type.
    """
    if not job_types:
        raise InvalidArgumentError("name at least one job type: client.pause(job_type, ...) or a type name")
    if len(job_types) == 1 and isinstance(job_types[0], (list, tuple, set, frozenset)):
        raise InvalidArgumentError(
            "pass job types as separate arguments: client.pause(*types), not client.pause(types)"
        )
    names = (t.name if isinstance(t, JobType) else validate_type_name(t) for t in job_types)
    return list(dict.fromkeys(names))


class ClientControls(ClientQueries):
    """Scheduling-control methods of :class:`~jobchain.client.Client` (see that class)."""

    def transaction(
        self, *, connection: object | None = None, autocommit: bool = False
    ) -> AbstractAsyncContextManager[Transaction]:
        raise NotImplementedError  # Client's; declared here so the controls can open one

    @asynccontextmanager
    async def _write(self, tx: Transaction | None) -> AsyncIterator[Transaction]:
        """``tx`` (the caller's: their commit decides), or a transaction of its own."""
        if tx is not None:
            yield self._tx(tx)
            return
        async with self.transaction() as own:
            yield own

    async def pause(self, *job_types: TypeRef, tx: Transaction | None = None) -> list[PausedType]:
        """Pause job types (JobType or name): no worker claims them until :meth:`resume`.

        Idempotent: pausing a paused type keeps its ``paused_at``. The types need no jobs and
        need not be in this client's registry. Jobs already running finish; new jobs of a
        paused type are still accepted and wait. Returns the given types, now paused, in
        name order. Without ``tx`` the pause commits on its own transaction.
        """
        names = control_type_names(job_types)
        async with self._write(tx) as write:
            paused = await write.state.types_pause(TypesPause(type_names=names, paused=True, now=self._now()))
            if write.hooks.records_events:
                write.hooks.event("job_types_paused", type_names=names)
        return sorted(paused, key=lambda p: p.type_name)

    async def resume(self, *job_types: TypeRef, tx: Transaction | None = None) -> list[str]:
        """Resume paused job types; returns those that were paused (resuming others is a no-op).

        After commit each given type gets a job-scheduled wake-up, so idle workers claim its
        waiting jobs at once. Without ``tx`` the resume commits on its own transaction.
        """
        names = control_type_names(job_types)
        async with self._write(tx) as write:
            state = write.state
            before = {p.type_name for p in await state.paused_types_list(PausedTypesList())}
            await state.types_pause(TypesPause(type_names=names, paused=False, now=self._now()))
            hooks = write.hooks
            for name in names:
                # Waking a type that was not paused costs a worker one empty claim at most.
                hooks.job_scheduled(name)
            resumed = [name for name in names if name in before]
            if hooks.records_events:
                hooks.event("job_types_resumed", type_names=resumed)
        return sorted(resumed)

    async def paused_types(self, *, tx: Transaction | None = None) -> list[PausedType]:
        """Every paused job type, by name, with when it was paused."""
        async with self._read(tx) as state:
            return await state.paused_types_list(PausedTypesList())

    async def list_schedules(self, *, tx: Transaction | None = None) -> list[ScheduleRecord]:
        """The periodic schedules workers registered, by name (see ``ScheduleRecord``).

        Readable without the code that declares them: ``last_seen_at`` says when a worker
        running the schedule last registered it (a schedule removed from every worker's code
        stops being seen, and is forgotten after a week).
        """
        async with self._read(tx) as state:
            return await state.schedules_list(SchedulesList())


__all__ = ["ClientControls", "control_type_names"]
