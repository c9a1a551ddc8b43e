"""Small keyed tables of the in-process state backend: ordering keys, type controls, schedules.

They follow the job table's rules (see ``_store``): a write transaction locks a row (by key,
present or not) before changing it and holds the lock until it ends; the previous value goes
to the transaction's undo log so a rollback or a savepoint rollback replays it backwards; the
committed value of every locked key stays in ``preimages`` so other transactions keep reading
it. A lock taken without a write (a claim serializing on its type's row) records the preimage
too, which then equals the live value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from jobchain.memory._store import TxState

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class TypeControl:
    """One job type's control row: paused (since when) and its rate window counter."""

    paused_at: datetime | None = None
    window_start: datetime | None = None
    window_count: int = 0


class KeyedTable(Generic[V]):
    """Values by string key, with row locks, undo and preimages as the job table has."""

    __slots__ = ("locks", "preimages", "rows")

    def __init__(self) -> None:
        self.rows: dict[str, V] = {}
        self.locks: dict[str, TxState] = {}
        self.preimages: dict[str, V | None] = {}  # committed value of each locked key (None: absent)

    def locked_elsewhere(self, viewer: TxState | None, key: str) -> bool:
        holder = self.locks.get(key)
        return holder is not None and holder is not viewer

    def get(self, viewer: TxState | None, key: str) -> V | None:
        """The value ``viewer`` sees (None: a read-only transaction): committed or its own."""
        if self.locked_elsewhere(viewer, key):
            return self.preimages[key]
        return self.rows.get(key)

    def visible(self, viewer: TxState | None) -> dict[str, V]:
        """Every key and value ``viewer`` sees."""
        seen = {key: value for key, value in self.rows.items() if not self.locked_elsewhere(viewer, key)}
        for key, value in self.preimages.items():
            if value is not None and self.locked_elsewhere(viewer, key):
                seen[key] = value
        return seen

    def try_lock(self, tx: TxState, key: str) -> TxState | None:
        """Lock ``key`` for ``tx``; if another transaction holds it, return that one instead."""
        holder = self.locks.get(key)
        if holder is None:
            self.locks[key] = tx
            self.preimages[key] = self.rows.get(key)
            tx.table_locks.append((self, key))
            return None
        return None if holder is tx else holder

    def put(self, tx: TxState, key: str, value: V | None) -> None:
        """Write (None: delete) a key ``tx`` holds the lock of, logging the previous value."""
        assert self.locks.get(key) is tx, "write a table row only under its lock"
        tx.table_undo.append((self, key, self.rows.get(key)))
        self.restore(key, value)

    def restore(self, key: str, value: V | None) -> None:
        """Set the live value (undo replays through this)."""
        if value is None:
            self.rows.pop(key, None)
        else:
            self.rows[key] = value

    def unlock(self, key: str) -> None:
        """Release a key's lock; its live value is now the committed one."""
        del self.locks[key]
        del self.preimages[key]


AnyTable = KeyedTable[Any]
