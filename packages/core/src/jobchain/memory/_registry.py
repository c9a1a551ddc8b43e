"""The worker registry table of the in-process state backend: rows, row locks, undo, preimages.

It follows the job table's rules (see ``_store``): a write transaction locks a worker row
before changing it and holds the lock until it ends, logs the previous row so a rollback or
savepoint rollback can replay the log backwards, and the committed version of every row an
open transaction changed stays in ``preimages`` so other transactions keep reading it.
A row's lock and its preimage come and go together; a row locked and left unwritten (a fenced
heartbeat's own row) has a preimage equal to the row. A row's incarnation (which fences heartbeats)
lives beside it in ``incarnations`` and is written, logged and undone with it; only the
row's lock holder reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobchain.entities import WorkerInfo

if TYPE_CHECKING:
    from jobchain.memory._store import TxState


class WorkerTable:
    """Worker rows by id, as their workers (or a release) last wrote them."""

    __slots__ = ("incarnations", "locks", "preimages", "rows")

    def __init__(self) -> None:
        self.rows: dict[str, WorkerInfo] = {}
        self.incarnations: dict[str, int] = {}  # the incarnation of every row in ``rows``
        self.locks: dict[str, TxState] = {}
        self.preimages: dict[str, WorkerInfo | None] = {}  # committed row (None: inserted by its holder)

    def locked_elsewhere(self, tx: TxState | None, worker_id: str) -> bool:
        holder = self.locks.get(worker_id)
        return holder is not None and holder is not tx

    def visible(self, viewer: TxState | None) -> list[WorkerInfo]:
        """Every row ``viewer`` sees (None: a read-only transaction): committed plus its own."""
        rows = [row for worker_id, row in self.rows.items() if not self.locked_elsewhere(viewer, worker_id)]
        rows.extend(
            row
            for worker_id, row in self.preimages.items()
            if row is not None and self.locked_elsewhere(viewer, worker_id)
        )
        return rows

    def try_lock(self, tx: TxState, worker_id: str) -> TxState | None:
        """Take the row's lock for ``tx``; if another transaction holds it, return that one.

        An absent id can be locked too, so a concurrent first heartbeat of the same worker waits.
        """
        holder = self.locks.get(worker_id)
        if holder is None:
            self.locks[worker_id] = tx
            tx.worker_locks.append(worker_id)
            self.preimages[worker_id] = self.rows.get(worker_id)
        return None if holder is None or holder is tx else holder

    def put(
        self, tx: TxState, worker_id: str, row: WorkerInfo | None, incarnation: int | None = None
    ) -> None:
        """Write (None: delete) a row ``tx`` holds the lock of, logging the previous one.

        ``incarnation`` None keeps the row's (0 for a new row).
        """
        assert self.locks.get(worker_id) is tx, "write a worker row only under its lock"
        previous = self.incarnations.get(worker_id, 0)
        tx.worker_undo.append((worker_id, self.rows.get(worker_id), previous))
        self._set(worker_id, row, previous if incarnation is None else incarnation)

    def rollback_to(self, tx: TxState, undo_length: int, lock_count: int) -> None:
        """Undo ``tx``'s row writes after the mark, newest first, and release the locks taken since."""
        while len(tx.worker_undo) > undo_length:
            worker_id, row, incarnation = tx.worker_undo.pop()
            self._set(worker_id, row, incarnation)
        while len(tx.worker_locks) > lock_count:
            worker_id = tx.worker_locks.pop()
            del self.locks[worker_id]
            del self.preimages[worker_id]  # the row is back to this committed version

    def release(self, tx: TxState) -> None:
        """End ``tx``'s hold on its rows (their current versions are now the committed ones)."""
        for worker_id in tx.worker_locks:
            del self.locks[worker_id]
            del self.preimages[worker_id]
        tx.worker_locks.clear()
        tx.worker_undo.clear()

    def _set(self, worker_id: str, row: WorkerInfo | None, incarnation: int) -> None:
        if row is None:
            self.rows.pop(worker_id, None)
            self.incarnations.pop(worker_id, None)
        else:
            self.rows[worker_id] = row
            self.incarnations[worker_id] = incarnation
