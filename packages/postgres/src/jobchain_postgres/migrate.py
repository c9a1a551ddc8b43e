"""Versioned migrations: ``migrations/NNNN_name.sql`` applied in order, recorded in the ledger.

All of one run happens in one transaction that first takes a transaction-level advisory lock
keyed on the schema and prefix, so processes starting at once apply each migration exactly
once (the others wait, then find nothing left to do). The lock covers migration only and is
released at commit.
"""

from __future__ import annotations

from psycopg.pq import TransactionStatus

from jobchain_postgres.errors import translated
from jobchain_postgres.providers import AnyConnection
from jobchain_postgres.queries import Queries, migration, migration_names

__all__ = ["apply_migrations", "pending_migrations"]


async def apply_migrations(connection: AnyConnection, schema: str, prefix: str) -> list[str]:
    """Apply the migrations not yet recorded; returns the names applied (empty when up to date)."""
    queries = Queries(schema, prefix)
    applied_now: list[str] = []
    with translated():
        if connection.info.transaction_status != TransactionStatus.IDLE:
            await connection.rollback()
        async with connection.transaction():
            cursor = connection.cursor()
            await cursor.execute(
                queries.migration_lock, {"key": f"jobchain.migrate:{schema}:{prefix}"}, prepare=False
            )
            await cursor.execute(queries.migration_bootstrap, prepare=False)
            await cursor.execute(queries.migration_applied, prepare=False)
            done = {row[0] for row in await cursor.fetchall()}
            for name in migration_names():
                if name in done:
                    continue
                await cursor.execute(migration(name, schema, prefix), prepare=False)
                await cursor.execute(queries.migration_record, {"name": name}, prepare=False)
                applied_now.append(name)
    return applied_now


async def pending_migrations(connection: AnyConnection, schema: str, prefix: str) -> list[str]:
    """Migrations not applied yet (all of them when the ledger does not exist)."""
    queries = Queries(schema, prefix)
    with translated():
        cursor = connection.cursor()
        await cursor.execute(
            queries.migration_ledger_exists, {"schema": schema, "table": f"{prefix}migration"}, prepare=False
        )
        row = await cursor.fetchone()
        if row is None or not row[0]:
            return migration_names()
        await cursor.execute(queries.migration_applied, prepare=False)
        done = {r[0] for r in await cursor.fetchall()}
    return [name for name in migration_names() if name not in done]
