"""PostgresStateTx: the contract's operations, one statement (one round trip) each.

Every operation validates its input in Python first (so bad input never reaches SQL and never
poisons the transaction), sends exactly one named statement from ``sql/``, and maps the rows.
Completions send two in one pipeline (one round trip): the row locks, then the statement that
decides (see ``sql/jobs_lock.sql``); when another transaction holds a row, they wait for its
lock and decide again (see ``sql/job_complete.sql``).

An own transaction begins lazily: BEGIN goes out with its first statement, so a transaction
that only starts chains costs two round trips (BEGIN with the INSERT, then COMMIT), not three,
and one that sends nothing costs none (see ``PostgresStateTx._roots_create``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext, suppress
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

import psycopg
from psycopg import IsolationLevel
from psycopg.pq import TransactionStatus

from jobchain.contracts.state import (
    COMPLETION_REFUSALS,
    ChainGet,
    ChainsDelete,
    ChainsDeleted,
    JobBlockersGet,
    JobComplete,
    JobCompleted,
    JobCreated,
    JobGet,
    JobNextAvailable,
    JobRenewLease,
    JobReschedule,
    JobsCreate,
    JobsReapExpired,
    JobsTrigger,
    JobsTriggered,
    NewJob,
)
from jobchain.entities import ATTEMPT_ERRORS_KEPT, Chain, Job, JobStatus
from jobchain.errors import (
    BlockerReference,
    ChainNotFoundError,
    InvalidArgumentError,
    JobchainError,
    JobNotFoundError,
    TransientStateError,
)
from jobchain_postgres._claims import ATOMIC_CLAIM_ATTEMPTS, ClaimsMixin
from jobchain_postgres._controls import ControlsMixin
from jobchain_postgres._identifiers import savepoint_statements
from jobchain_postgres._lifecycle import LifecycleMixin
from jobchain_postgres._listings import ListingsMixin
from jobchain_postgres._results import check_now, owned_result, shape_of
from jobchain_postgres._sessions import SessionsMixin
from jobchain_postgres._stats import StatsMixin
from jobchain_postgres._waits import WaitsMixin
from jobchain_postgres._workers import WorkersMixin
from jobchain_postgres.errors import translated
from jobchain_postgres.providers import AnyConnection
from jobchain_postgres.queries import Queries, plain
from jobchain_postgres.rows import (
    UUID_OID,
    Row,
    Shape,
    UuidAsText,
    attempt_error_param,
    json_text,
    new_jobs_document,
    new_roots_document,
    utc,
    uuid_or_none,
    uuids,
)

__all__ = ["ATOMIC_CLAIM_ATTEMPTS", "PostgresStateTx"]

_STALE_RUNS = 16
"""Statements one jobs_create may send while its blocker chains keep completing steps under it."""


Reconnect = Callable[[], Awaitable[AnyConnection]]
"""Hands back a transaction's connection, found dead before anything ran on it, for another one."""


class _Transaction:
    """psycopg's transaction block with its BEGIN and COMMIT errors translated.

    Errors from the body are left as they are; when the body fails, a failing ROLLBACK (the
    connection is gone) never hides the body's error.
    """

    def __init__(self, connection: AnyConnection) -> None:
        self._block = connection.transaction()

    async def __aenter__(self) -> None:
        with translated():
            await self._block.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if exc is None:
            with translated():
                await self._block.__aexit__(None, None, None)
            return False
        # A failing ROLLBACK means the connection broke; the pool discards it and the body's error wins.
        with suppress(psycopg.Error):
            await self._block.__aexit__(exc_type, exc, tb)
        return False


def _begin_statement(conn: psycopg.AsyncConnection[Any]) -> bytes:
    """The BEGIN psycopg's transaction block would send on ``conn`` (its isolation level and
    read-only setting). Only for a real psycopg connection (not jobchain.sync's view)."""
    parts = [b"BEGIN"]
    if conn.isolation_level is not None:
        level = IsolationLevel(conn.isolation_level).name.replace("_", " ")
        parts.append(b"ISOLATION LEVEL " + level.encode())
    if conn.read_only is not None:
        parts.append(b"READ ONLY" if conn.read_only else b"READ WRITE")
    return b" ".join(parts)


def _plain_root(job: NewJob) -> bool:
    return (
        job.chain_id is None
        and job.deduplication is None
        and not job.blocker_chain_ids
        and job.ordering_key is None
    )


def _deduplication_keys(jobs: Sequence[NewJob], now: datetime | None) -> dict[str, Any] | None:
    """Parameters of ``jobs_deduplication_lock`` for the batch's deduplicating starts, or None."""
    pairs = sorted(
        {
            (job.chain_type_name, job.deduplication.key)
            for job in jobs
            if job.chain_id is None and job.deduplication
        }
    )
    if not pairs:
        return None
    return {"chain_type_names": [p[0] for p in pairs], "keys": [p[1] for p in pairs], "now": now}


def _ordering_keys(jobs: Sequence[NewJob], now: datetime | None) -> dict[str, Any] | None:
    """Parameters of ``jobs_ordering_lock`` for the batch's new roots with an ordering key, or
    None: each key (sorted) with its first root in the batch."""
    first: dict[str, str] = {}
    for job in jobs:
        if job.chain_id is None and job.ordering_key is not None:
            first.setdefault(job.ordering_key, job.id)
    if not first:
        return None
    keys = sorted(first)
    return {"keys": keys, "chain_ids": [first[key] for key in keys], "now": now}


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


class PostgresStateTx(
    ClaimsMixin,
    ControlsMixin,
    WaitsMixin,
    LifecycleMixin,
    ListingsMixin,
    StatsMixin,
    WorkersMixin,
    SessionsMixin,
):
    """One open transaction (or savepoint) of a PostgreSQL state adapter.

    ``connection`` is the psycopg connection it runs on: your own SQL executed there commits or
    rolls back together with the jobchain writes.
    """

    def __init__(
        self,
        connection: AnyConnection,
        queries: Queries,
        *,
        atomic_claim: bool,
        read_only: bool,
        prepare: bool | None,
        autocommit: bool = False,
        begin: _Transaction | None = None,
        reconnect: Reconnect | None = None,
        renewals: int = 1,
    ) -> None:
        self._conn = connection
        self._autocommit = autocommit
        self._pending = begin
        """The own transaction's block, not entered yet: BEGIN goes with the first statement."""
        self._entered: _Transaction | None = None
        self._manual = False
        """BEGIN was sent outside psycopg's transaction block (folded, or left to psycopg's
        non-autocommit mode): _finish commits or rolls back."""
        self._autocommit_off = False
        self._reconnect = reconnect
        """Until the transaction has begun: how to trade its dead connection for another."""
        self._renewals = renewals
        """How many dead connections it may trade in a row (see dead_connections_at_most)."""
        self._q = queries
        self._atomic_claim = atomic_claim
        self._read_only = read_only
        self._prepare = prepare
        self._depth = 0
        self._open = True

    @property
    def connection(self) -> AnyConnection:
        """The psycopg connection of this transaction."""
        if self._pending is not None:
            self._begin_with_your_first_statement()
        return self._conn

    def _begin_with_your_first_statement(self) -> None:
        """The caller takes the connection before jobchain sent anything: psycopg's non-autocommit
        mode then sends BEGIN before the first statement there, whoever sends it.

        psycopg counts an open transaction block as well, as the eager block did: the caller's
        ``transaction()`` block is then a savepoint inside this transaction and an explicit
        commit there is refused, instead of committing half of it.
        """
        # psycopg's private _autocommit and _num_transactions (hence psycopg < 3.4 in
        # pyproject.toml); test_start_round_trips fails if their meaning changes.
        conn = self._conn
        self._pending = None
        self._reconnect = None  # your statements run here: never on another connection
        self._manual = True
        self._autocommit_off = True
        conn._autocommit = False
        conn._num_transactions += 1

    async def _start(self) -> None:
        """Send the pending BEGIN on its own (statements that do not carry it)."""
        block = self._pending
        if block is None:
            return
        while True:
            self._pending = None
            try:
                await block.__aenter__()
            except TransientStateError:
                if not self._renewable():
                    raise
                block = await self._renew()
                continue
            self._entered = block
            self._reconnect = None  # begun: a connection lost from here on ends the transaction
            return

    def _renewable(self) -> bool:
        """A dead pooled connection, found by this transaction's BEGIN: nothing ran.

        Not only once: after a server restart the next connection the pool hands out can be
        dead too (one it was still opening, or one that died after the pool's check), up to
        every connection the pool holds.
        """
        return self._reconnect is not None and self._renewals > 0 and self._conn.broken

    async def _renew(self) -> _Transaction:
        """Another connection in place of the dead one; its block is pending (and returned)."""
        assert self._reconnect is not None
        self._renewals -= 1
        self._manual = False  # the dead connection's BEGIN ended with it
        self._conn = await self._reconnect()
        self._pending = _Transaction(self._conn)
        return self._pending

    async def _finish(self, error: BaseException | None) -> None:
        """Commit (``error`` is None) or roll back the own transaction, if it began."""
        if self._entered is not None:
            if error is None:
                await self._entered.__aexit__(None, None, None)
            else:
                await self._entered.__aexit__(type(error), error, error.__traceback__)
            return
        if not self._manual:
            return  # nothing was sent: nothing to end
        conn = self._conn
        # Never below zero: your connection.transaction() failing as the first statement
        # already popped the block counted here.
        conn._num_transactions = max(0, conn._num_transactions - 1)
        try:
            if error is None:
                with translated():
                    await conn.commit()
            else:
                with suppress(psycopg.Error):
                    await conn.rollback()
        finally:
            if self._autocommit_off:
                conn._autocommit = True

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def poisoned(self) -> bool:
        """True after a failed statement, until a savepoint rolls back (PostgreSQL aborts the tx)."""
        return self._conn.info.transaction_status == TransactionStatus.INERROR

    def _end(self) -> None:
        self._open = False

    # ------------------------------------------------------------ plumbing

    def _check(self, *, write: bool) -> None:
        if not self._open:
            raise InvalidArgumentError("this transaction has ended; use it only inside its async with block")
        if write and self._read_only:
            raise InvalidArgumentError(
                "a read-only transaction cannot write or lock; open transaction() instead"
            )

    async def _rows(
        self, query: bytes, params: Mapping[str, Any], *, write: bool, ids: Sequence[str] = ()
    ) -> tuple[Shape, list[Row]]:
        self._check(write=write)
        await self._start()
        with translated(ids=ids):
            cursor = self._conn.cursor()
            # Ids as the server's text: parsing each into uuid.UUID only to str() it again
            # cost a few µs per job. Registered on this cursor alone, never on your connection.
            cursor.adapters.register_loader(UUID_OID, UuidAsText)
            await cursor.execute(query, params, prepare=self._prepare)
            rows = await cursor.fetchall()
            return shape_of(query, cursor), rows

    async def _rows_after_lock(
        self,
        lock: bytes,
        lock_params: Mapping[str, Any],
        query: bytes,
        params: Mapping[str, Any],
        *,
        ids: Sequence[str] = (),
    ) -> tuple[Shape, list[Row]]:
        """``lock`` then ``query`` in one pipeline: one round trip and one transaction (in
        autocommit too: one Sync ends both), with ``query``'s snapshot taken after ``lock``'s
        row locks were granted."""
        self._check(write=True)
        await self._start()
        with translated(ids=ids):
            async with self._conn.pipeline():
                await self._conn.cursor().execute(lock, lock_params, prepare=self._prepare)
                cursor = self._conn.cursor()
                cursor.adapters.register_loader(UUID_OID, UuidAsText)
                await cursor.execute(query, params, prepare=self._prepare)
                rows = await cursor.fetchall()
            return shape_of(query, cursor), rows

    async def _rows_after_locks(
        self,
        locks: Sequence[tuple[bytes, Mapping[str, Any]]],
        query: bytes,
        params: Mapping[str, Any],
        *,
        ids: Sequence[str] = (),
    ) -> tuple[Shape, list[Row]]:
        """``_rows_after_lock`` with several lock statements, sent in the order given."""
        self._check(write=True)
        await self._start()
        with translated(ids=ids):
            async with self._conn.pipeline():
                for lock, lock_params in locks:
                    await self._conn.cursor().execute(lock, lock_params, prepare=self._prepare)
                cursor = self._conn.cursor()
                cursor.adapters.register_loader(UUID_OID, UuidAsText)
                await cursor.execute(query, params, prepare=self._prepare)
                rows = await cursor.fetchall()
            return shape_of(query, cursor), rows

    async def _pipeline(
        self, steps: Sequence[tuple[bytes, Mapping[str, Any]]]
    ) -> list[tuple[Shape, list[Row]]]:
        await self._start()
        return await super()._pipeline(steps)

    async def _rows_without_jit(
        self, query: bytes, params: Mapping[str, Any], *, write: bool
    ) -> tuple[Shape, list[Row]]:
        """``query`` between jit_off and jit_restore, in one pipeline (one round trip): for a
        statement whose cost estimate grows with the table past the JIT thresholds, where
        compiling the plan takes longer than running it."""
        self._check(write=write)
        await self._start()
        with translated():
            async with self._conn.pipeline():
                await self._conn.cursor().execute(plain("jit_off"), prepare=self._prepare)
                cursor = self._conn.cursor()
                await cursor.execute(query, params, prepare=self._prepare)
                await self._conn.cursor().execute(plain("jit_restore"), prepare=self._prepare)
                rows = await cursor.fetchall()
            return shape_of(query, cursor), rows

    def _steps_together(self) -> AbstractAsyncContextManager[object]:
        """Where an operation's statements must share one transaction: in autocommit, a
        transaction block of its own; inside a transaction, nothing more."""
        return self._conn.transaction() if self._autocommit else nullcontext()

    def savepoint(self) -> AbstractAsyncContextManager[PostgresStateTx]:
        """Nested unit of work: released on success, rolled back (and re-raised) on error.

        A savepoint whose body leaves the transaction poisoned is rolled back and raises
        TransientStateError; rolling back recovers the outer transaction.
        """
        if self._autocommit:
            raise InvalidArgumentError(
                "savepoints need a transaction, and this one commits each operation on its own; "
                "use transaction() instead of autocommit()"
            )
        return self._savepoint()

    @asynccontextmanager
    async def _savepoint(self) -> AsyncIterator[PostgresStateTx]:
        self._check(write=False)
        self._depth += 1
        save, release, rollback = savepoint_statements(self._depth)
        try:
            await self._start()
            with translated():
                await self._conn.execute(save, prepare=False)
            try:
                yield self
            except BaseException:
                await self._quietly(rollback)
                raise
            if self.poisoned:
                await self._quietly(rollback)
                raise TransientStateError("a statement failed inside the savepoint; it was rolled back")
            with translated():
                await self._conn.execute(release, prepare=False)
        finally:
            self._depth -= 1

    async def _quietly(self, statement: bytes) -> None:
        # Rolling back must not hide the error that caused it; a dead connection fails the
        # whole transaction anyway.
        with suppress(Exception):
            await self._conn.execute(statement, prepare=False)

    # ------------------------------------------------------------ creation

    async def jobs_create(self, params: JobsCreate) -> list[JobCreated]:
        if not params.jobs:
            self._check(write=True)
            return []
        if all(_plain_root(job) for job in params.jobs):
            return await self._roots_create(params)
        # Deduplication and blockers may take several runs that must keep their locks.
        async with self._steps_together():
            return await self._jobs_create(params)

    async def _jobs_create(self, params: JobsCreate) -> list[JobCreated]:
        document = new_jobs_document(params.jobs)
        now = check_now(params.now)
        query_params = {"now": now, "jobs": document}
        ids = [job.id for job in params.jobs]
        keys = _deduplication_keys(params.jobs, now)
        ordering = _ordering_keys(params.jobs, now)
        for run in range(_STALE_RUNS):
            if run == 0 and ordering is not None:
                # As below, and the ordering keys' rows after the deduplication locks (one order).
                locks = [(self._q.jobs_ordering_lock, ordering)]
                if keys is not None:
                    locks.insert(0, (self._q.jobs_deduplication_lock, keys))
                shape, rows = await self._rows_after_locks(locks, self._q.jobs_create, query_params, ids=ids)
            elif run == 0 and keys is not None:
                # Locks first, then the decision with a snapshot taken after them: a start of
                # the same key in another open transaction is waited for, then seen.
                shape, rows = await self._rows_after_lock(
                    self._q.jobs_deduplication_lock, keys, self._q.jobs_create, query_params, ids=ids
                )
            else:
                shape, rows = await self._rows(self._q.jobs_create, query_params, write=True, ids=ids)
            problems = shape.scalar(rows[0], "_problems") if rows else None
            # A blocker's last job was completed under the statement (it waited for that
            # completion): decide again with a fresh snapshot. Each run keeps its locks, so a
            # further run only happens when the blocker chain went on by another step meanwhile.
            if not problems or not any(p.startswith("stale:") for p in problems):
                break
        if problems:
            missing = sorted(p for p in problems if not p.startswith("stale:"))
            if not missing:
                raise TransientStateError("a blocker chain kept changing while this job was created; retry")
            raise ChainNotFoundError(missing[0].partition(":")[2])
        results: list[JobCreated] = []
        for row in rows:
            deduplicated = bool(shape.scalar(row, "_deduplicated"))
            incomplete = () if deduplicated else tuple(shape.scalar(row, "_incomplete") or ())
            results.append(
                JobCreated(
                    job=shape.must_job(row),
                    deduplicated=deduplicated,
                    incomplete_blocker_chain_ids=incomplete,
                    ordered_after=None if deduplicated else shape.scalar(row, "_ordered_after"),
                )
            )
        return await self._fail_in_batch_dependents(params, results, now)

    async def _fail_in_batch_dependents(
        self, params: JobsCreate, results: list[JobCreated], now: datetime | None
    ) -> list[JobCreated]:
        """Jobs of the batch blocked by a chain the batch created failed (a blocker chain of
        its had failed) follow it, as after a failure — or are released by it, when it is their
        ordering key's previous chain: one more round trip, only then."""
        ended = {r.job.chain_id for r in results if r.job.status is JobStatus.FAILED and not r.deduplicated}
        if not ended or not any(
            ended.intersection(job.blocker_chain_ids) or result.ordered_after in ended
            for job, result in zip(params.jobs, results, strict=True)
        ):
            return results
        origins = ",".join(f"{chain_id}:failed" for chain_id in sorted(ended))
        *_, (shape, rows) = await self._pipeline(
            [
                (self._q.origins_set, {"origins": origins}),
                (self._q.jobs_propagate, {"now": now, "kept": ATTEMPT_ERRORS_KEPT}),
            ]
        )
        changed = {job.id: job for row in rows if (job := shape.job(row)) is not None}
        return [
            JobCreated(
                job=changed.get(r.job.id, r.job),
                deduplicated=r.deduplicated,
                incomplete_blocker_chain_ids=tuple(
                    c for c in r.incomplete_blocker_chain_ids if c not in ended
                ),
                ordered_after=r.ordered_after,
                announced=r.announced,
            )
            for r in results
        ]

    async def _roots_create(self, params: JobsCreate) -> list[JobCreated]:
        """New chains without deduplication or blockers: one plain multi-row INSERT.

        Nothing is read back but what the server decides (ids, clock, clamped schedule): the rest
        of each job is what was written. With ``announce_on`` the same statement announces the
        new jobs' types there (delivered at commit).
        """
        jobs = params.jobs
        ids, document = new_roots_document(jobs)
        channel = params.announce_on
        query_params = {"now": check_now(params.now), "jobs": document, "channel": channel}
        announced = channel is not None
        rows = await self._roots_rows(query_params, ids)
        decided = {row[0]: (utc(row[1]), utc(row[2])) for row in rows}
        results: list[JobCreated] = []
        for job_id, new in zip(ids, jobs, strict=True):
            created_at, scheduled_at = decided[job_id]
            job = Job(
                id=job_id,
                chain_id=job_id,
                type_name=new.type_name,
                chain_type_name=new.chain_type_name,
                chain_index=0,
                status=JobStatus.PENDING,
                input=new.input,
                created_at=created_at,
                scheduled_at=scheduled_at,
                trace_context=new.trace_context,
                chain_trace_context=new.chain_trace_context,
                runs_after_failed_blockers=new.runs_after_failed_blockers,
                priority=new.priority,
            )
            results.append(JobCreated(job=job, announced=announced))
        return results

    async def _roots_rows(self, params: Mapping[str, Any], ids: list[str]) -> list[Row]:
        """The rows of ``jobs_create_roots``; as the transaction's first statement, sent together
        with its BEGIN (one round trip for both)."""
        if self._pending is None or not isinstance(self._conn, psycopg.AsyncConnection):
            _shape, rows = await self._rows(self._q.jobs_create_roots, params, write=True, ids=ids)
            return rows
        self._check(write=True)
        while True:
            try:
                rows = await self._begin_with(self._q.jobs_create_roots, params, ids)
            except TransientStateError:
                # The connection died under BEGIN and the INSERT: neither committed; retry both.
                if not self._renewable():
                    raise
                await self._renew()
                continue
            self._reconnect = None  # begun: a connection lost from here on ends the transaction
            return rows

    async def _begin_with(self, query: bytes, params: Mapping[str, Any], ids: Sequence[str]) -> list[Row]:
        """BEGIN and ``query`` in one pipeline with one Sync: one wait for both.

        The rows are read after the pipeline ends: fetching them inside it would send a flush
        and wait, then the pipeline's own Sync would wait again. ``query`` stays a prepared
        statement. BEGIN goes through a plain cursor: it is the transaction's own statement.
        """
        # psycopg's private _autocommit and _num_transactions (hence psycopg < 3.4 in
        # pyproject.toml); test_start_round_trips fails if their meaning changes.
        conn = self._conn
        self._pending = None
        self._manual = True
        conn._num_transactions += 1  # an open transaction block, as psycopg's own would count
        with translated(ids=ids):
            cursor = conn.cursor()
            cursor.adapters.register_loader(UUID_OID, UuidAsText)
            async with conn.pipeline():
                await psycopg.AsyncCursor(conn).execute(_begin_statement(conn), prepare=False)
                await cursor.execute(query, params, prepare=self._prepare)
            return await cursor.fetchall()

    # ------------------------------------------------------------ reads

    async def chain_get(self, params: ChainGet) -> Chain | None:
        chain_id = uuid_or_none(params.chain_id)
        self._check(write=params.lock)
        if chain_id is None:
            return None
        query = self._q.chain_get_locked if params.lock else self._q.chain_get
        shape, rows = await self._rows(query, {"chain_id": chain_id}, write=params.lock)
        return _chain(shape, rows[0]) if rows else None

    async def job_get(self, params: JobGet) -> Job | None:
        job_id = uuid_or_none(params.job_id)
        self._check(write=params.lock)
        if job_id is None:
            return None
        if params.lock:
            # The hold (sql/job_hold.sql) first, then the read with a snapshot taken after it.
            shape, rows = await self._rows_after_lock(
                self._q.job_hold, {"job_id": job_id}, self._q.job_get, {"job_id": job_id}
            )
        else:
            shape, rows = await self._rows(self._q.job_get, {"job_id": job_id}, write=False)
        return shape.job(rows[0]) if rows else None

    async def job_blockers_get(self, params: JobBlockersGet) -> list[Chain]:
        job_id = uuid_or_none(params.job_id)
        self._check(write=False)
        if job_id is None:
            return []
        shape, rows = await self._rows(self._q.job_blockers_get, {"job_id": job_id}, write=False)
        return [_chain(shape, row) for row in rows]

    async def job_next_available(self, params: JobNextAvailable) -> timedelta | None:
        type_names = _unique(params.type_names)
        self._check(write=False)
        if not type_names:
            return None
        query_params = {"type_names": type_names, "now": check_now(params.now)}
        _shape, rows = await self._rows(self._q.job_next_available, query_params, write=False)
        value = rows[0][0] if rows else None
        return value if isinstance(value, timedelta) else None

    # ------------------------------------------------------------ worker transitions

    async def job_renew_lease(self, params: JobRenewLease) -> Job:
        job_id = self._existing_id(params.job_id)
        shape, rows = await self._rows(
            self._q.job_renew_lease,
            {
                "job_id": job_id,
                "worker_id": params.worker_id,
                "lease_for": params.lease_for,
                "lease_generation": params.lease_generation,
                "now": check_now(params.now),
            },
            write=True,
        )
        return owned_result(shape, rows, params.job_id, params.worker_id)

    async def job_reschedule(self, params: JobReschedule) -> Job:
        job_id = self._existing_id(params.job_id)
        shape, rows = await self._rows(
            self._q.job_reschedule,
            {
                "job_id": job_id,
                "worker_id": params.worker_id,
                "lease_generation": params.lease_generation,
                "scheduled_at": params.schedule.at,
                "delay": params.schedule.after,
                "error": params.error,
                "attempt_error": attempt_error_param(params.attempt_error),
                "kept": ATTEMPT_ERRORS_KEPT,
                "released": bool(params.released),
                "now": check_now(params.now),
            },
            write=True,
        )
        return owned_result(shape, rows, params.job_id, params.worker_id)

    async def job_complete(self, params: JobComplete) -> JobCompleted:
        job_id = self._existing_id(params.job_id)
        query_params = _complete_params(job_id, params)
        shape, rows = await self._rows_after_lock(
            self._q.jobs_lock, {"job_ids": [job_id]}, self._q.job_complete, query_params
        )
        if rows and shape.scalar(rows[0], "_busy"):
            # Another transaction held the row: wait for it, then decide with a fresh snapshot.
            shape, rows = await self._rows_after_lock(
                self._q.job_lock, {"job_id": job_id}, self._q.job_complete, query_params
            )
        return _completed(shape, rows, params)

    async def jobs_complete(self, params: Sequence[JobComplete]) -> list[JobCompleted | JobchainError]:
        """Complete many jobs in one statement, each decided as job_complete decides it. A job
        another transaction holds then takes job_complete's waiting path on its own."""
        self._check(write=True)
        ids = [uuid_or_none(item.job_id) for item in params]
        if not params or None in ids or len(set(ids)) != len(ids):
            return [await _refused_or(self.job_complete(item)) for item in params]
        items = [
            {
                "position": position,
                "job_id": job_id,
                "worker_id": item.worker_id,
                "lease_generation": item.lease_generation,
                "output": item.output,
                "now": None if (now := check_now(item.now)) is None else now.isoformat(),
            }
            for position, (job_id, item) in enumerate(zip(ids, params, strict=True), start=1)
        ]
        shape, rows = await self._rows_after_lock(
            self._q.jobs_lock, {"job_ids": ids}, self._q.jobs_complete, {"items": json_text(items)}
        )
        by_position: dict[int, list[Row]] = {}
        for row in rows:
            by_position.setdefault(shape.scalar(row, "_position"), []).append(row)
        results: list[JobCompleted | JobchainError] = []
        for position, item in enumerate(params, start=1):
            rows_of = by_position[position]
            if shape.scalar(_target(shape, rows_of), "_busy"):
                results.append(await _refused_or(self.job_complete(item)))
            else:
                results.append(_completed_or_refusal(shape, rows_of, item))
        return results

    def _existing_id(self, job_id: str) -> str:
        canonical = uuid_or_none(job_id)
        self._check(write=True)
        if canonical is None:
            raise JobNotFoundError(job_id)
        return canonical

    async def jobs_reap_expired(self, params: JobsReapExpired) -> list[Job]:
        if not isinstance(params.limit, int) or isinstance(params.limit, bool) or params.limit < 1:
            raise InvalidArgumentError(f"reap limit must be a positive integer, got {params.limit!r}")
        type_names = _unique(params.type_names)
        self._check(write=True)
        if not type_names:
            return []
        query = self._q.jobs_reap_expired_atomic if self._atomic_claim else self._q.jobs_reap_expired
        shape, rows = await self._rows(
            query,
            {
                "type_names": type_names,
                "exclude_job_ids": uuids(params.exclude_job_ids),
                "limit": params.limit,
                "kept": ATTEMPT_ERRORS_KEPT,
                "now": check_now(params.now),
            },
            write=True,
        )
        reaped = [(shape.scalar(row, "_expired_at"), shape.must_job(row)) for row in rows]
        reaped.sort(key=lambda pair: (pair[0], pair[1].id))  # oldest lease first, as claimed
        return [job for _, job in reaped]

    # ------------------------------------------------------------ operator transitions

    async def jobs_trigger(self, params: JobsTrigger) -> JobsTriggered:
        job_ids = _unique(params.job_ids)
        self._check(write=True)
        if not job_ids:
            return JobsTriggered()
        valid = [(job_id, uuid_or_none(job_id)) for job_id in job_ids]
        canonical = [c for _, c in valid if c is not None]
        shape, rows = await self._rows(
            self._q.jobs_trigger,
            {"job_ids": canonical, "refuse": len(canonical) < len(job_ids), "now": check_now(params.now)},
            write=True,
        )
        by_id = {shape.scalar(row, "_id"): row for row in rows}
        not_found: list[str] = []
        not_triggerable: list[tuple[str, str]] = []
        triggered: list[Job] = []
        for job_id, key in valid:
            row = by_id.get(key) if key is not None else None
            status = None if row is None else shape.scalar(row, "_status")
            if status is None:
                not_found.append(job_id)
            elif status != "pending":
                not_triggerable.append((job_id, status))
            elif row is not None and (job := shape.job(row)) is not None:
                triggered.append(job)
        if not_found or not_triggerable:
            return JobsTriggered(not_found=not_found, not_triggerable=not_triggerable)
        return JobsTriggered(triggered=triggered)

    async def chains_delete(self, params: ChainsDelete) -> ChainsDeleted:
        requested = _unique(uuids(params.chain_ids))
        self._check(write=True)
        if not requested:
            return ChainsDeleted(chains=[])
        query_params = {"chain_ids": requested, "cascade": bool(params.cascade)}
        # The roots first: the self-referencing foreign key that refused deleting a chain a
        # concurrent completion was continuing is gone (0009), so the deletion must see that job.
        shape, rows = await self._rows_after_lock(
            self._q.chains_delete_lock, query_params, self._q.chains_delete, query_params
        )
        position = {chain_id: index for index, chain_id in enumerate(requested)}
        last = len(requested)
        head = rows[0]
        references = shape.scalar(head, "_references")
        if references:
            # Already in order: the referencing job's (created_at, id), then the blocker chain.
            refs = [BlockerReference(chain_id=c, referenced_by_job_id=j) for c, j in references]
            return ChainsDeleted(chains=[], blocker_references=refs)
        chains = [_chain(shape, row) for row in rows if shape.job(row) is not None]
        chains.sort(key=lambda c: (position.get(c.id, last), c.root.created_at, c.id))
        return ChainsDeleted(chains=chains, running_job_ids=list(shape.scalar(head, "_running") or []))


def _chain(shape: Shape, row: Row) -> Chain:
    root, last = shape.must_job(row, 0), shape.must_job(row, 1)
    # A lone root read under lock: the locked (fresher) row is authoritative for both halves.
    return Chain(last, last) if root.id == last.id else Chain(root, last)


def _complete_params(job_id: str, params: JobComplete) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "worker_id": params.worker_id,
        "lease_generation": params.lease_generation,
        "output": json_text(params.output),
        "now": check_now(params.now),
    }


def _target(shape: Shape, rows: list[Row]) -> Row:
    """The row describing the completed job itself (the others are jobs it unblocked)."""
    return next(row for row in rows if shape.scalar(row, "_kind") == "target")


def _completed(shape: Shape, rows: list[Row], params: JobComplete) -> JobCompleted:
    """The result of one job_complete statement, or the refusal it reports."""
    target = _target(shape, rows)
    job = owned_result(shape, [target], params.job_id, params.worker_id)
    status = shape.scalar(target, "_status")
    unblocked = [shape.must_job(row) for row in rows if row is not target]
    unblocked.sort(key=lambda j: (j.created_at, j.id))
    return JobCompleted(
        job=job,
        chain_completed=bool(shape.scalar(target, "_chain_completed")),
        unblocked_jobs=unblocked,
        previous_leased_by=shape.scalar(target, "_leased_by"),
        was_running=status == "running",
    )


def _completed_or_refusal(shape: Shape, rows: list[Row], params: JobComplete) -> JobCompleted | JobchainError:
    try:
        return _completed(shape, rows, params)
    except COMPLETION_REFUSALS as refused:
        return refused


async def _refused_or(pending: Awaitable[JobCompleted]) -> JobCompleted | JobchainError:
    try:
        return await pending
    except COMPLETION_REFUSALS as refused:
        return refused
