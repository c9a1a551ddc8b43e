"""jobchain-sqlite: the SQLite state backend (aiosqlite), jobchain's embedded default."""

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
from jobchain_sqlite.state import SqliteStateAdapter, open_state_adapter

__all__ = [
    "DatabaseLockedError",
    "DatabaseNotWritableError",
    "NotASqliteDatabaseError",
    "SchemaNotMigratedError",
    "SchemaTooNewError",
    "SqliteOptions",
    "SqliteStateAdapter",
    "SqliteStateError",
    "SqliteVersionError",
    "open_state_adapter",
]
