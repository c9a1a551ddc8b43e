"""Migrated schemas reused by the suite cases of one test process.

A fresh schema per case costs a CREATE SCHEMA, every migration and a DROP SCHEMA CASCADE:
about 0.1 s on a quiet machine and 0.5-0.9 s on a loaded one, over two thousand suite cases,
and a trail of dead catalog rows on a server that runs without autovacuum. A case takes a
schema from the pool instead (the first ones are created by the case's own ``migrate()``,
which later cases find up to date) and gives it back emptied: every table but the migration
ledger loses its rows. A schema that cannot be emptied (a lock still held, a case that never
migrated) is dropped instead of going back; the pool drops every schema it made when the
process ends.
"""

from __future__ import annotations

import uuid

import psycopg
from psycopg import sql

LEDGER = "jobchain_migration"
EMPTY_TIMEOUT_MS = 30_000
"""How long emptying waits for a lock a finished case left behind before dropping instead."""

_TABLES = (
    "SELECT table_name FROM information_schema.tables"
    " WHERE table_schema = %s AND table_type = 'BASE TABLE' AND table_name <> %s"
)


class SchemaPool:
    """Schemas of one process: ``take`` one for a case, ``give_back`` it after."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._free: list[str] = []
        self._made: list[str] = []

    def take(self) -> str:
        if self._free:
            return self._free.pop()
        name = f"jc_pool_{uuid.uuid4().hex[:12]}"
        self._made.append(name)
        return name

    def give_back(self, name: str) -> None:
        options = f"-c lock_timeout={EMPTY_TIMEOUT_MS}"
        try:
            with psycopg.connect(self._conninfo, autocommit=True, options=options) as connection:
                tables = [row[0] for row in connection.execute(_TABLES, (name, LEDGER)).fetchall()]
                ledger = connection.execute(_TABLES.replace("<>", "="), (name, LEDGER)).fetchall()
                if not ledger:  # never migrated: nothing worth keeping
                    raise LookupError(name)
                with connection.transaction():
                    for table in tables:
                        connection.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(name, table)))
        except (psycopg.Error, LookupError):
            self._drop(name)
            return
        self._free.append(name)

    def close(self) -> None:
        for name in self._made:
            self._drop(name)
        self._free.clear()
        self._made.clear()

    def _drop(self, name: str) -> None:
        try:
            with psycopg.connect(self._conninfo, autocommit=True) as connection:
                connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        except psycopg.Error:
            pass  # the server is gone or busy: the name is random, nothing else will use it
        if name in self._free:
            self._free.remove(name)
