"""Tables, indexes, row locks and undo logs of the in-process state backend.

Write transactions change the live tables in place. Before changing a row a transaction
takes that row's exclusive lock, which it holds until it ends, so the rows changed by
different open transactions never overlap and each transaction's undo log can be replayed
on its own. The committed version of every changed row is kept in ``preimages`` until its
transaction ends; the views in ``_views`` combine live rows and preimages so that each
transaction sees committed data plus its own changes. Blocker rows live and die with the
job that declared them, so a stored row is ``(job, blocker chain ids, the ids among them that
resolve on any end)``. The worker registry (``_registry``) and the keyed tables of ordering
keys, type controls and schedules (``_tables``) follow the same rules.

A *hold* is a lock taken without writing (an atomic attempt's ``job_get(lock=True)``). It
conflicts with every lock and hold as an exclusive lock does, except that cancellation writes
through it (PostgreSQL's ``FOR KEY SHARE`` beside a plain ``UPDATE``): a cancel never waits
for a long atomic attempt, whose own later write then waits for the cancel and sees it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar

from jobchain.contracts.end_hooks import TypeEndHooks
from jobchain.entities import Job, ScheduleRecord, WorkerInfo
from jobchain.memory._indexkeys import (
    LeaseKey,
    PendingKey,
    PriorityKey,
    holder_of,
    lease_key,
    pending_key,
    priority_key,
)
from jobchain.memory._registry import WorkerTable
from jobchain.memory._sorted import SortedKeys
from jobchain.memory._tables import AnyTable, KeyedTable, TypeControl

NO_FLAGS: frozenset[str] = frozenset()
Row = tuple[Job, tuple[str, ...], frozenset[str]]
"""A stored job, its blocker chain ids in declaration order, and those among them that
resolve on any terminal status (``resolves_on_any_end``: ordering predecessors, waits with
``runs_after_failed``)."""

CreatedKey = tuple[datetime, str]  # (created_at, id): listing order
ChainKey = tuple[int, str]  # (chain_index, id)
Mark = tuple[int, int, int, int, int, int, int]
"""A savepoint: lengths of the (undo, locks) of jobs, of workers, holds, then (undo, locks) of tables."""
START: Mark = (0, 0, 0, 0, 0, 0, 0)
_IndexKey = TypeVar("_IndexKey", str, tuple[str, str])


def created_key(job: Job) -> CreatedKey:
    return (job.created_at, job.id)


class TxState:
    """The bookkeeping of one open write transaction."""

    __slots__ = (
        "ended",
        "holds",
        "locks",
        "pruning",
        "table_locks",
        "table_undo",
        "touched",
        "undo",
        "waiting_for",
        "worker_locks",
        "worker_undo",
    )

    def __init__(self) -> None:
        self.undo: list[tuple[str, Row | None]] = []  # (job id, previous row), oldest first
        self.locks: list[str] = []  # locked job ids, in acquisition order
        self.touched: set[str] = set()  # ids whose preimage this transaction recorded
        # (worker id, previous row, its incarnation)
        self.worker_undo: list[tuple[str, WorkerInfo | None, int]] = []
        self.worker_locks: list[str] = []  # locked worker ids, in acquisition order
        self.holds: list[str] = []  # held job ids (locks without a write), in acquisition order
        self.table_undo: list[tuple[AnyTable, str, Any]] = []  # (table, key, previous value)
        self.table_locks: list[tuple[AnyTable, str]] = []  # locked table keys, in acquisition order
        self.pruning = False  # holds the store's prune lock until it ends
        self.waiting_for: TxState | None = None  # for deadlock detection
        self.ended = asyncio.Event()

    def mark(self) -> Mark:
        return (
            len(self.undo),
            len(self.locks),
            len(self.worker_undo),
            len(self.worker_locks),
            len(self.holds),
            len(self.table_undo),
            len(self.table_locks),
        )


class Blocked(Exception):  # noqa: N818 -- a control-flow signal, never seen outside this package
    """A row the operation needs is locked by ``holder``: undo, wait for it to end, retry."""

    def __init__(self, holder: TxState) -> None:
        super().__init__("row locked by another transaction")
        self.holder = holder


class Store:
    """Live tables and their indexes, plus locks and preimages of the open transactions."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.blockers: dict[str, tuple[str, ...]] = {}  # job id -> blocker chain ids
        self.any_end: dict[str, frozenset[str]] = {}  # job id -> its blockers resolved by any end
        self.chains: dict[str, SortedKeys[ChainKey]] = {}
        self.dependents: dict[str, set[str]] = {}  # blocker chain id -> ids of jobs it blocks
        self.dedup: dict[tuple[str, str], set[str]] = {}  # (key, chain type) -> root ids
        self.pending: dict[str, SortedKeys[PendingKey]] = {}  # by type name
        self.prioritized: dict[str, SortedKeys[PriorityKey]] = {}  # by type name; priority != 0 only
        self.running: dict[str, SortedKeys[LeaseKey]] = {}  # by type name
        self.leased: dict[str, set[str]] = {}  # worker id -> ids of the running jobs it leases
        self.workers = WorkerTable()
        self.ordering: KeyedTable[str] = KeyedTable()  # ordering key -> the chain created last with it
        self.controls: KeyedTable[TypeControl] = KeyedTable()  # type name -> pause and rate window
        self.schedules: KeyedTable[ScheduleRecord] = KeyedTable()  # schedule name -> record
        self.end_hooks: KeyedTable[TypeEndHooks] = KeyedTable()  # type name -> its hooks
        self.sessions: KeyedTable[datetime] = KeyedTable()  # session_key -> revoked until
        self.created: SortedKeys[CreatedKey] = SortedKeys()
        self.roots: SortedKeys[CreatedKey] = SortedKeys()
        self.locks: dict[str, TxState] = {}
        self.holds: dict[str, TxState] = {}  # job id -> the transaction holding it without a write
        self.pruner: TxState | None = None  # the transaction running chains_prune, if any
        self.preimages: dict[str, Row | None] = {}  # committed row of each changed row (None: inserted)
        # Secondary indexes over the preimages, so views find committed rows that other
        # transactions moved or deleted without scanning every preimage.
        self.preimages_by_chain: dict[str, set[str]] = {}
        self.preimages_by_blocker: dict[str, set[str]] = {}
        self.preimages_by_dedup: dict[tuple[str, str], set[str]] = {}

    def chain_member_id(self, chain_id: str, chain_index: int) -> str | None:
        """The live job id at ``chain_index`` of the chain, if any."""
        members = self.chains.get(chain_id)
        if members is None:
            return None
        key = next(members.after((chain_index, "")), None)  # ids are never empty: first key >= index
        return key[1] if key is not None and key[0] == chain_index else None

    def row(self, job_id: str) -> Row | None:
        job = self.jobs.get(job_id)
        return (
            None if job is None else (job, self.blockers.get(job_id, ()), self.any_end.get(job_id, NO_FLAGS))
        )

    # ------------------------------------------------------------ locks and writes

    def lock(self, tx: TxState, job_id: str, *, through_holds: bool = False) -> None:
        """Take the row's exclusive lock for ``tx`` or raise :class:`Blocked` naming its holder.

        ``through_holds``: another transaction's hold does not make ``tx`` wait (cancellation).
        """
        holder = self.locks.get(job_id)
        if holder is None:
            keeper = self.holds.get(job_id)
            if keeper is not None and keeper is not tx and not through_holds:
                raise Blocked(keeper)
            self.locks[job_id] = tx
            tx.locks.append(job_id)
        elif holder is not tx:
            raise Blocked(holder)

    def hold(self, tx: TxState, job_id: str) -> None:
        """Hold the row for ``tx`` without writing it, or raise :class:`Blocked` naming the holder."""
        lock, keeper = self.locks.get(job_id), self.holds.get(job_id)
        if lock is tx or keeper is tx:
            return
        holder = lock or keeper
        if holder is not None:
            raise Blocked(holder)
        self.holds[job_id] = tx
        tx.holds.append(job_id)

    def held_elsewhere(self, tx: TxState, job_id: str) -> bool:
        """Another transaction locks or holds the row (what ``SKIP LOCKED`` skips)."""
        lock = self.locks.get(job_id)
        keeper = self.holds.get(job_id)
        return (lock is not None and lock is not tx) or (keeper is not None and keeper is not tx)

    def try_lock(self, tx: TxState, job_id: str) -> bool:
        """Take the lock unless another transaction locks or holds it (``SKIP LOCKED``)."""
        if self.held_elsewhere(tx, job_id):
            return False
        self.lock(tx, job_id)
        return True

    def put(
        self,
        tx: TxState,
        job_id: str,
        job: Job | None,
        blockers: tuple[str, ...] = (),
        *,
        any_end: frozenset[str] = NO_FLAGS,
        through_holds: bool = False,
    ) -> None:
        """Write a row for ``tx`` (``None`` deletes it), locking it first.

        ``blockers`` and ``any_end`` are used when the row is created; an update keeps the
        existing ones (:meth:`put_blockers` changes them).
        """
        self.lock(tx, job_id, through_holds=through_holds)
        old_row = self.row(job_id)
        if job is None:
            self._write(tx, job_id, old_row, None)
        elif old_row is None:
            self._write(tx, job_id, old_row, (job, blockers, any_end))
        else:
            self._write(tx, job_id, old_row, (job, old_row[1], old_row[2]))

    def put_blockers(
        self, tx: TxState, job_id: str, blockers: tuple[str, ...], any_end: frozenset[str]
    ) -> None:
        """Replace an existing job's blocker rows for ``tx`` (a wait appends to them)."""
        self.lock(tx, job_id)
        old_row = self.row(job_id)
        assert old_row is not None, "only a stored job's blockers change"
        self._write(tx, job_id, old_row, (old_row[0], blockers, any_end))

    def lock_table(self, tx: TxState, table: AnyTable, key: str) -> None:
        """Lock a keyed table's row for ``tx`` or raise :class:`Blocked` naming its holder."""
        holder = table.try_lock(tx, key)
        if holder is not None:
            raise Blocked(holder)

    def _write(self, tx: TxState, job_id: str, old_row: Row | None, new_row: Row | None) -> None:
        tx.undo.append((job_id, old_row))
        if job_id not in self.preimages:
            self._record_preimage(job_id, old_row)
            tx.touched.add(job_id)
        self._apply(job_id, old_row, new_row)

    def rollback_to(self, tx: TxState, mark: Mark) -> None:
        """Undo ``tx``'s writes after ``mark``, newest first, and release the locks taken since."""
        (
            undo_length,
            lock_count,
            worker_undo_length,
            worker_lock_count,
            hold_count,
            table_undo,
            table_locks,
        ) = mark
        self.workers.rollback_to(tx, worker_undo_length, worker_lock_count)
        while len(tx.table_undo) > table_undo:
            table, key, value = tx.table_undo.pop()
            table.restore(key, value)
        while len(tx.table_locks) > table_locks:
            table, key = tx.table_locks.pop()
            table.unlock(key)
        while len(tx.holds) > hold_count:
            del self.holds[tx.holds.pop()]
        while len(tx.undo) > undo_length:
            job_id, row = tx.undo.pop()
            self._apply(job_id, self.row(job_id), row)
        while len(tx.locks) > lock_count:
            # Rows first locked after the mark were first changed after it: they are back
            # to their committed state, so their preimages go too.
            job_id = tx.locks.pop()
            del self.locks[job_id]
            if job_id in tx.touched:
                tx.touched.discard(job_id)
                self._drop_preimage(job_id)

    def finish(self, tx: TxState, *, commit: bool) -> None:
        """End ``tx``: keep (commit) or undo its writes, release its locks, wake its waiters."""
        if not commit:
            self.rollback_to(tx, START)
        self.workers.release(tx)
        for table, key in tx.table_locks:
            table.unlock(key)
        tx.table_locks.clear()
        tx.table_undo.clear()
        for job_id in tx.locks:
            del self.locks[job_id]
        for job_id in tx.holds:
            del self.holds[job_id]
        if tx.pruning:
            self.pruner = None
            tx.pruning = False
        for job_id in tx.touched:
            self._drop_preimage(job_id)
        tx.undo.clear()
        tx.locks.clear()
        tx.holds.clear()
        tx.touched.clear()
        tx.ended.set()

    def _record_preimage(self, job_id: str, row: Row | None) -> None:
        self.preimages[job_id] = row
        if row is not None:
            job, blockers, _ = row
            self.preimages_by_chain.setdefault(job.chain_id, set()).add(job_id)
            for chain_id in blockers:
                self.preimages_by_blocker.setdefault(chain_id, set()).add(job_id)
            if job.is_root and job.deduplication_key is not None:
                key = (job.deduplication_key, job.chain_type_name)
                self.preimages_by_dedup.setdefault(key, set()).add(job_id)

    def _drop_preimage(self, job_id: str) -> None:
        row = self.preimages.pop(job_id)
        if row is not None:
            job, blockers, _ = row
            _discard_from(self.preimages_by_chain, job.chain_id, job_id)
            for chain_id in blockers:
                _discard_from(self.preimages_by_blocker, chain_id, job_id)
            if job.is_root and job.deduplication_key is not None:
                _discard_from(self.preimages_by_dedup, (job.deduplication_key, job.chain_type_name), job_id)

    # ------------------------------------------------------------ index maintenance

    def _apply(self, job_id: str, old_row: Row | None, new_row: Row | None) -> None:
        old = None if old_row is None else old_row[0]
        new = None if new_row is None else new_row[0]
        if old_row is not None and new_row is None:
            self._unindex_blockers(job_id, old_row[1])
            self._unindex_row(old_row[0])
            del self.jobs[job_id]
        elif old_row is None and new_row is not None:
            self.jobs[job_id] = new_row[0]
            self._index_blockers(job_id, new_row[1], new_row[2])
            self._index_row(new_row[0])
        elif old_row is not None and new_row is not None:
            self.jobs[job_id] = new_row[0]
            if old_row[1:] != new_row[1:]:
                self._unindex_blockers(job_id, old_row[1])
                self._index_blockers(job_id, new_row[1], new_row[2])
        self._reindex_state(old, new)

    def _index_blockers(self, job_id: str, blockers: tuple[str, ...], any_end: frozenset[str]) -> None:
        if blockers:
            self.blockers[job_id] = blockers
            for chain_id in blockers:
                self.dependents.setdefault(chain_id, set()).add(job_id)
        if any_end:
            self.any_end[job_id] = any_end

    def _unindex_blockers(self, job_id: str, blockers: tuple[str, ...]) -> None:
        self.blockers.pop(job_id, None)
        self.any_end.pop(job_id, None)
        for chain_id in blockers:
            _discard_from(self.dependents, chain_id, job_id)

    def _index_row(self, job: Job) -> None:
        self.chains.setdefault(job.chain_id, SortedKeys()).add((job.chain_index, job.id))
        self.created.add(created_key(job))
        if job.is_root:
            self.roots.add(created_key(job))
            if job.deduplication_key is not None:
                self.dedup.setdefault((job.deduplication_key, job.chain_type_name), set()).add(job.id)

    def _unindex_row(self, job: Job) -> None:
        members = self.chains[job.chain_id]
        members.discard((job.chain_index, job.id))
        if not members:
            del self.chains[job.chain_id]
        self.created.discard(created_key(job))
        if job.is_root:
            self.roots.discard(created_key(job))
            if job.deduplication_key is not None:
                _discard_from(self.dedup, (job.deduplication_key, job.chain_type_name), job.id)

    def _reindex_state(self, old: Job | None, new: Job | None) -> None:
        old_key, new_key = pending_key(old), pending_key(new)
        if old_key != new_key:
            if old is not None and old_key is not None:
                self.pending[old.type_name].discard(old_key)
            if new is not None and new_key is not None:
                self.pending.setdefault(new.type_name, SortedKeys()).add(new_key)
        old_priority, new_priority = priority_key(old), priority_key(new)
        if old_priority != new_priority:
            if old is not None and old_priority is not None:
                self.prioritized[old.type_name].discard(old_priority)
            if new is not None and new_priority is not None:
                self.prioritized.setdefault(new.type_name, SortedKeys()).add(new_priority)
        old_lease, new_lease = lease_key(old), lease_key(new)
        if old_lease != new_lease:
            if old is not None and old_lease is not None:
                self.running[old.type_name].discard(old_lease)
            if new is not None and new_lease is not None:
                self.running.setdefault(new.type_name, SortedKeys()).add(new_lease)
        old_holder, new_holder = holder_of(old), holder_of(new)
        if old_holder != new_holder:
            if old is not None and old_holder is not None:
                _discard_from(self.leased, old_holder, old.id)
            if new is not None and new_holder is not None:
                self.leased.setdefault(new_holder, set()).add(new.id)


def _discard_from(index: dict[_IndexKey, set[str]], key: _IndexKey, job_id: str) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(job_id)
        if not members:
            del index[key]


def unique(values: Iterable[str]) -> list[str]:
    """``values`` without repeats, first occurrence kept."""
    return list(dict.fromkeys(values))
