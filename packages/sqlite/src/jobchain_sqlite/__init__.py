"""jobchain-sqlite: the SQLite state backend (aiosqlite), jobchain's embedded default.

Your own SQL in jobchain's transaction: ``connection_of(tx)`` (aiosqlite) and
``sync_connection_of(tx)`` (sqlite3, for ``jobchain.sync``).
"""

from jobchain_sqlite.errors import (
    DatabaseLockedError,
    DatabaseNotWritableError,
    NotASqliteDatabaseError,
    SchemaNotMigratedError,
    SchemaTooNewError,
    SqliteStateError,
    SqliteVersionError,
)
from jobchain_sqlite.options import SqliteOptions
from jobchain_sqlite.own_sql import NotASqliteTransactionError, connection_of, sync_connection_of
from jobchain_sqlite.state import SqliteStateAdapter, open_state_adapter

__all__ = [
    "DatabaseLockedError",
    "DatabaseNotWritableError",
    "NotASqliteTransactionError",
    "NotASqliteDatabaseError",
    "SchemaNotMigratedError",
    "SchemaTooNewError",
    "SqliteOptions",
    "SqliteStateAdapter",
    "SqliteStateError",
    "SqliteVersionError",
    "connection_of",
    "open_state_adapter",
    "sync_connection_of",
]
