"""Versioned migrations, recorded in ``{prefix}migration``; applied under BEGIN IMMEDIATE."""

from __future__ import annotations

from datetime import datetime

from jobchain_sqlite.errors import SchemaNotMigratedError, SchemaTooNewError, translating
from jobchain_sqlite.options import SqliteOptions
from jobchain_sqlite.providers import Executor
from jobchain_sqlite.queries import MIGRATIONS, Queries, migration_statements
from jobchain_sqlite.rows import fmt_time


def _too_new(options: SqliteOptions, unknown: list[str]) -> SchemaTooNewError:
    return SchemaTooNewError(
        f"SQLite database {options.path!r} has migration(s) {', '.join(unknown)} that this version of "
        f"jobchain-sqlite does not know (it knows {', '.join(MIGRATIONS)}); upgrade jobchain-sqlite",
        options.path,
    )


async def check_schema_version(
    executor: Executor, options: SqliteOptions, q: Queries, *, require_current: bool = True
) -> None:
    """Raise SchemaTooNewError if a newer library migrated this database, and (with
    ``require_current``) SchemaNotMigratedError if it lacks a migration of this library.

    A database with no jobchain tables passes: its first statement reports that itself.
    A partly migrated one must not: rows read with ``*`` would lack the newer columns.
    """
    with translating(options.path, options.table_prefix):
        exists = await executor.fetch(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name",
            {"name": f"{options.table_prefix}migration"},
        )
        if not exists:
            return
        applied = [row["name"] for row in await executor.fetch(q.migration_list)]
    unknown = sorted(set(applied) - set(MIGRATIONS))
    if unknown:
        raise _too_new(options, unknown)
    missing = [name for name in MIGRATIONS if name not in applied]
    if require_current and missing:
        raise SchemaNotMigratedError(
            f"SQLite database {options.path!r} has jobchain tables older than this library "
            f"(migration(s) {', '.join(missing)} not applied); "
            "run `jobchain migrate --state URL` (or `await adapter.migrate()`) first",
            options.path,
        )


async def apply_migrations(
    executor: Executor, options: SqliteOptions, q: Queries, now: datetime
) -> list[str]:
    """Apply missing migrations in one write transaction; returns the names applied."""
    applied_now: list[str] = []
    with translating(options.path, options.table_prefix):
        await executor.fetch("BEGIN IMMEDIATE")
        try:
            await executor.fetch(q.migration_table_create)
            applied = {row["name"] for row in await executor.fetch(q.migration_list)}
            unknown = sorted(applied - set(MIGRATIONS))
            if unknown:
                raise _too_new(options, unknown)
            for name in MIGRATIONS:
                if name in applied:
                    continue
                for statement in migration_statements(name, options.table_prefix):
                    await executor.fetch(statement)
                await executor.fetch(q.migration_record, {"name": name, "applied_at": fmt_time(now)})
                applied_now.append(name)
        except BaseException:
            if await executor.in_transaction():
                await executor.fetch("ROLLBACK")
            raise
        await executor.fetch("COMMIT")
    return applied_now


__all__ = ["apply_migrations", "check_schema_version"]
