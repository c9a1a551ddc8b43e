"""Optional abilities a backend declares; the suites skip cases on undeclared ones."""

from __future__ import annotations

from enum import StrEnum


class Capability(StrEnum):
    """Abilities named as what the backend can do, never as which backend it is."""

    SAVEPOINTS = "savepoints"
    """Nested savepoints that roll back independently of the outer transaction."""
    POISONABLE_TRANSACTIONS = "poisonable_transactions"
    """A failed statement poisons the transaction until a savepoint is rolled back."""
    CONCURRENT_TRANSACTIONS = "concurrent_transactions"
    """Several write transactions may be open at once (row locks, SKIP LOCKED)."""
    ROW_LOCKS = "row_locks"
    """``lock=True`` reads block a concurrent locked read until the holder commits."""
    WAKE_HINTS = "wake_hints"
    """Notify adapter tracks a wake-hint budget (consume may return False)."""
