"""The state one transaction's operations share: where to run SQL and how to report errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobchain.errors import InvalidArgumentError
from jobchain_sqlite.errors import translating
from jobchain_sqlite.providers import Executor, Params
from jobchain_sqlite.queries import Queries
from jobchain_sqlite.rows import Row


@dataclass(slots=True, kw_only=True)
class TxContext:
    """One open transaction: its executor, statements and flags."""

    executor: Executor
    q: Queries
    path: str
    prefix: str
    read_only: bool
    foreign_keys: bool = True
    closed: bool = False
    savepoints: int = 0
    driven: bool = False
    """The executor is synchronous (``jobchain.sync``): nothing may wait on a task or the loop."""

    async def fetch(
        self, sql: str, params: Params | None = None, job_ids: Sequence[str] = ()
    ) -> Sequence[Row]:
        """Run one statement, translating driver errors (``job_ids`` names ids for duplicates)."""
        if self.closed:
            raise InvalidArgumentError(  # as every backend: a misuse of the tx, not a missing one
                "this transaction has ended; open a new one with `async with adapter.transaction() as tx`"
            )
        with translating(self.path, self.prefix, job_ids):
            return await self.executor.fetch(sql, params)

    def require_write(self, operation: str) -> None:
        if self.read_only:
            raise InvalidArgumentError(
                f"{operation} writes, but this transaction is read-only; use transaction(read_only=False)"
            )


__all__ = ["TxContext"]
