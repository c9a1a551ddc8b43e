"""The worker registry operations of PostgresStateTx: heartbeat and listing, one statement each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from jobchain.contracts.state import WorkerHeartbeat, WorkerHeartbeatResult, WorkersList
from jobchain.entities import ATTEMPT_ERRORS_KEPT, Job, WorkerInfo
from jobchain.errors import InvalidArgumentError
from jobchain_postgres.queries import Queries
from jobchain_postgres.rows import Row, Shape, worker_info

__all__ = ["WorkersMixin"]


def _aware(now: datetime | None) -> datetime | None:
    if now is not None and now.tzinfo is None:
        raise InvalidArgumentError("now must be timezone-aware (use datetime.now(timezone.utc))")
    return now


def _count(name: str, value: object) -> int:
    """A non-negative integer, refused before any SQL (a bad value would poison the transaction)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise InvalidArgumentError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _heartbeat_params(params: WorkerHeartbeat) -> dict[str, Any]:
    return {
        "worker_id": params.worker_id,
        "name": params.name,
        "host": params.host,
        "pid": _count("pid", params.pid),
        "version": params.version,
        "type_names": list(dict.fromkeys(params.type_names)),
        "concurrency": _count("concurrency", params.concurrency),
        "inflight": _count("inflight", params.inflight),
        "buffered": _count("buffered", params.buffered),
        "committing": _count("committing", params.committing),
        "capacity": _count("capacity", params.capacity),
        # The value, not the member: psycopg would dump an Enum by its name.
        "state": params.state.value,
        "alive_for": params.alive_for,
        "release_dead": bool(params.release_dead),
        "prune_after": params.prune_after,
        "incarnation": params.incarnation,  # 0 to 2**63 - 1 (bigint): WorkerHeartbeat checked it
        "kept": ATTEMPT_ERRORS_KEPT,
        "now": _aware(params.now),
    }


class WorkersMixin:
    """Worker registry operations; the transaction class supplies ``_q`` and ``_rows``."""

    _q: Queries

    async def _rows(
        self, query: bytes, params: Mapping[str, Any], *, write: bool, ids: Sequence[str] = ()
    ) -> tuple[Shape, list[Row]]:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def worker_heartbeat(self, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
        """Upsert the caller's registry row and, with ``release_dead``, rescue dead workers' jobs.

        One statement (see ``sql/worker_heartbeat.sql``). Guarantees: two heartbeats never both
        release one dead worker; a job whose row another transaction holds is left to its lease;
        a fenced heartbeat (an earlier incarnation, or a dead row's) writes nothing and says
        ``was_dead`` (suite: WorkerIncarnationTests).
        """
        shape, rows = await self._rows(self._q.worker_heartbeat, _heartbeat_params(params), write=True)
        head = rows[0]
        released: list[Job] = [job for row in rows if (job := shape.job(row)) is not None]
        released.sort(key=lambda job: (job.created_at, job.id))
        expiry = shape.scalar(head, "_next_lease_expiry")
        return WorkerHeartbeatResult(
            was_dead=bool(shape.scalar(head, "_was_dead")),
            released_jobs=released,
            dead_worker_ids=list(shape.scalar(head, "_dead_worker_ids") or []),
            next_lease_expiry=expiry if isinstance(expiry, timedelta) else None,
        )

    async def workers_list(self, params: WorkersList) -> list[WorkerInfo]:
        """The registry, most recently started first; a worker past ``alive_until`` reads ``dead``."""
        states = [str(state) for state in params.states] if params.states else None
        _shape, rows = await self._rows(
            self._q.workers_list, {"states": states, "now": _aware(params.now)}, write=False
        )
        return [worker_info(row) for row in rows]
