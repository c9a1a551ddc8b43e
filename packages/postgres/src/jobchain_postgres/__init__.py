"""jobchain-postgres: the PostgreSQL state adapter and LISTEN/NOTIFY notify adapter (psycopg 3).

Installing the distribution registers ``postgresql://`` and ``postgres://`` with jobchain; most
applications only pass a URL to ``jobchain.connect``. Import from here to build adapters over
your own psycopg pool or connection, or an SQLAlchemy engine, and to run your own SQL in
jobchain's transaction (``connection_of(tx)``, ``sync_connection_of(tx)``).

Names load lazily, so that the entry-point module ``jobchain_postgres.plugin`` (imported by
every jobchain process) never imports psycopg.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobchain_postgres.errors import PostgresStateError, SchemaNotMigratedError, StatementTimeoutError
    from jobchain_postgres.notify import PostgresNotifyAdapter
    from jobchain_postgres.options import Claim, NotifyOptions, StateOptions
    from jobchain_postgres.own_sql import NotAPostgresTransactionError, connection_of, sync_connection_of
    from jobchain_postgres.state import PostgresStateAdapter

_LAZY = {
    "Claim": "jobchain_postgres.options",
    "NotifyOptions": "jobchain_postgres.options",
    "StateOptions": "jobchain_postgres.options",
    "PostgresNotifyAdapter": "jobchain_postgres.notify",
    "PostgresStateAdapter": "jobchain_postgres.state",
    "PostgresStateError": "jobchain_postgres.errors",
    "SchemaNotMigratedError": "jobchain_postgres.errors",
    "StatementTimeoutError": "jobchain_postgres.errors",
    "NotAPostgresTransactionError": "jobchain_postgres.own_sql",
    "connection_of": "jobchain_postgres.own_sql",
    "sync_connection_of": "jobchain_postgres.own_sql",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jobchain_postgres' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "Claim",
    "NotAPostgresTransactionError",
    "NotifyOptions",
    "PostgresNotifyAdapter",
    "PostgresStateAdapter",
    "PostgresStateError",
    "SchemaNotMigratedError",
    "StateOptions",
    "StatementTimeoutError",
    "connection_of",
    "sync_connection_of",
]
