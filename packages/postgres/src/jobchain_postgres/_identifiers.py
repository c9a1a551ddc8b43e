"""The one audited place where SQL text is built: schema, prefix and fixed fragments.

Every SQL file is a template whose ``{placeholders}`` name tables, types and indexes of the
job schema, plus the two listing fragments ``{order}`` and ``{after}``. Names are validated
(``[A-Za-z0-9_]``, PostgreSQL's 63-byte limit) before any SQL is built, rendered with
``psycopg.sql.Identifier`` (always quoted), and fragments come from a fixed whitelist. Nothing
else is ever interpolated into SQL: values travel as bound parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal

from psycopg import sql

from jobchain.errors import InvalidArgumentError

MAX_IDENTIFIER = 63
"""PostgreSQL truncates longer identifiers (NAMEDATALEN - 1)."""

_NAME = re.compile(r"[A-Za-z0-9_]+")

QUALIFIED: Final = (
    "job",
    "job_blocker",
    "migration",
    "job_status",
    "deduplication_lock",
    "worker",
    "ordering_key",
    "type_control",
    "schedule",
    "session_revocation",
    "type_hook",
    "job_end_hooks",
)
"""Objects named ``{schema}.{prefix}{name}`` (tables, types, and the trigger function
``job_end_hooks``)."""

INDEXES: Final = (
    "job_acquisition_idx",
    "job_chain_index_idx",
    "job_deduplication_idx",
    "job_expired_lease_idx",
    "job_blocker_chain_idx",
    "job_chain_listing_idx",
    "job_listing_idx",
    "job_listing_status_idx",
    "job_listing_type_name_idx",
    "job_chain_listing_type_name_idx",
    "worker_alive_idx",
    "job_stats_idx",
    "job_finished_idx",
    "job_priority_idx",
    "session_revocation_expires_idx",
)
"""Indexes, named ``{prefix}{name}`` (CREATE INDEX takes no schema; it lives beside its table).

job_chain_listing_idx and job_chain_listing_type_name_idx no longer exist after migration 0009;
their names stay for the migrations that create and drop them (and fix the longest name, which
bounds the table prefix)."""

Order = Literal["asc", "desc"]

_ORDER_FRAGMENTS: Final[Mapping[Order, Mapping[str, sql.SQL]]] = {
    "asc": {"order": sql.SQL("ASC"), "after": sql.SQL(">")},
    "desc": {"order": sql.SQL("DESC"), "after": sql.SQL("<")},
}

TRIGGERS: Final = (
    "job_end_hooks_update",
    "job_end_hooks_insert",
)
"""Triggers, named ``{prefix}{name}`` (a trigger's name is scoped to its table, not a schema)."""

_LONGEST = max(len(name) for name in (*QUALIFIED, *INDEXES, *TRIGGERS))


def check_name(kind: str, value: object, *, reserve: int = 0, allow_empty: bool = False) -> str:
    """Return ``value`` if it is a safe identifier part, else raise InvalidArgumentError.

    ``reserve`` is the length of what will be appended to it (table names after a prefix).
    """
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{kind} must be a string, got {type(value).__name__}")
    if value == "" and allow_empty:
        return value
    if not _NAME.fullmatch(value):
        raise InvalidArgumentError(
            f"{kind} {value!r} may only contain letters, digits and '_' (it becomes part of SQL identifiers)"
        )
    if len(value) + reserve > MAX_IDENTIFIER:
        raise InvalidArgumentError(
            f"{kind} {value!r} is too long: at most {MAX_IDENTIFIER - reserve} characters"
        )
    return value


def check_schema(schema: object) -> str:
    """Validate a PostgreSQL schema name."""
    return check_name("schema", schema)


def check_prefix(prefix: object) -> str:
    """Validate a table prefix (may be empty); the longest object name must still fit."""
    return check_name("table prefix", prefix, reserve=_LONGEST, allow_empty=True)


def identifiers(schema: str, prefix: str) -> dict[str, sql.Composable]:
    """The placeholder → identifier map for one schema and prefix (both validated here)."""
    check_schema(schema)
    check_prefix(prefix)
    names: dict[str, sql.Composable] = {"schema": sql.Identifier(schema)}
    for name in QUALIFIED:
        names[name] = sql.Identifier(schema, prefix + name)
    for name in (*INDEXES, *TRIGGERS):
        names[name] = sql.Identifier(prefix + name)
    return names


def render(template: str, schema: str, prefix: str, order: Order | None = None) -> bytes:
    """Render a SQL template for ``schema``/``prefix`` (and a listing ``order``) to query bytes."""
    names = identifiers(schema, prefix)
    if order is not None:
        names.update(_ORDER_FRAGMENTS[order])
    # The template is a file shipped in this package (never user input): the one place where a
    # non-literal string becomes SQL. Values are never interpolated, only validated identifiers.
    statement = sql.SQL(template).format(**names)
    return statement.as_string(None).encode()


def listen_statement(channels: list[str]) -> bytes:
    """``LISTEN a; LISTEN b; …`` for validated channel names (one simple-protocol round trip)."""
    for name in channels:
        check_name("notify channel", name)
    statement = sql.SQL("; ").join(sql.SQL("LISTEN {}").format(sql.Identifier(name)) for name in channels)
    return statement.as_string(None).encode()


def savepoint_statements(number: int) -> tuple[bytes, bytes, bytes]:
    """(SAVEPOINT, RELEASE, ROLLBACK TO + RELEASE) for the ``number``-th nested savepoint."""
    name = sql.Identifier(f"jobchain_sp_{int(number)}")
    save = sql.SQL("SAVEPOINT {}").format(name)
    release = sql.SQL("RELEASE SAVEPOINT {}").format(name)
    rollback = sql.SQL("ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}").format(name=name)
    return save.as_string(None).encode(), release.as_string(None).encode(), rollback.as_string(None).encode()


__all__ = [
    "INDEXES",
    "QUALIFIED",
    "TRIGGERS",
    "Order",
    "check_prefix",
    "check_schema",
    "identifiers",
    "render",
    "listen_statement",
    "savepoint_statements",
]
