"""Provider contracts: how an adapter borrows the user's own driver objects.

A provider wraps a driver object (a connection pool, a single connection, an SQLAlchemy
engine) and knows only how to lend a connection; the adapter implements the job semantics
on top. Joining a caller's open transaction is ``StateAdapter.transaction(connection=...)``.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeVar, runtime_checkable

C_co = TypeVar("C_co", covariant=True)


@runtime_checkable
class StateProvider(Protocol[C_co]):
    """Lends idle driver connections (not inside a transaction) for the adapter's own transactions."""

    label: str
    """A short description for errors and logs (never a password)."""

    def connection(self) -> AbstractAsyncContextManager[C_co]:
        """Borrow a connection for one transaction; it goes back when the block ends."""
        ...

    async def recover(self) -> None:
        """After a connection turned out dead: drop the other idle ones the server dropped too."""
        ...

    async def close(self) -> None:
        """Release what this provider owns (never a caller's pool, connection or engine)."""
        ...
