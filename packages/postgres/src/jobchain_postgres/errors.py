"""The one boundary where psycopg errors become jobchain errors.

Every statement the adapters send runs inside :func:`translated`; no psycopg exception crosses
the contract. Unknown database errors become :class:`PostgresStateError` with the server's
message and SQLSTATE, chained to the original.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg import errors as pg
from psycopg_pool import PoolTimeout

from jobchain.errors import (
    AdapterClosedError,
    BackendUnreachableError,
    ChainNotFoundError,
    DuplicateJobIdError,
    JobchainError,
    TransientStateError,
)
from jobchain.errors import SchemaNotMigratedError as CoreSchemaNotMigratedError

_KEY_VALUE = re.compile(r"Key \((?P<columns>[^)]*)\)=\((?P<values>[^)]*)\)")

MIGRATE_HINT = "run `jobchain migrate --state URL` (or `await adapter.migrate()`) first"


class PostgresStateError(JobchainError):
    """PostgreSQL refused a statement; the message carries the server's reason and SQLSTATE."""


class SchemaNotMigratedError(CoreSchemaNotMigratedError):
    """The jobchain tables are missing here; run `jobchain migrate --state URL` or `adapter.migrate()`."""


class StatementTimeoutError(TransientStateError):
    """A statement outlived the server's statement_timeout and was cancelled; retry or raise the timeout."""


def _key_value(error: psycopg.Error) -> tuple[list[str], list[str]] | None:
    detail = error.diag.message_detail or ""
    match = _KEY_VALUE.search(detail)
    if match is None:
        return None
    columns = [c.strip() for c in match["columns"].split(",")]
    values = [v.strip() for v in match["values"].split(",")]
    return columns, values


def _duplicate_id(error: psycopg.Error, ids: Sequence[str]) -> DuplicateJobIdError:
    # "Key (id)=(…)" on the primary key, or "Key (chain_id, chain_index)=(…, 0)" for a root
    # whose id is already a chain: either way the first value is the clashing job id.
    parsed = _key_value(error)
    job_id = parsed[1][0] if parsed else (ids[0] if ids else "?")
    return DuplicateJobIdError(job_id)


def _missing_chain(error: psycopg.Error) -> ChainNotFoundError:
    parsed = _key_value(error)
    return ChainNotFoundError(parsed[1][0] if parsed else "?")


def _describe(error: psycopg.Error) -> str:
    state = error.sqlstate or "?"
    return f"{str(error).strip() or type(error).__name__} (SQLSTATE {state})"


def translate(error: BaseException, *, ids: Sequence[str] = ()) -> BaseException:
    """The jobchain error for a driver error (non-driver errors are returned unchanged)."""
    if isinstance(error, PoolTimeout):
        return TransientStateError(f"no PostgreSQL connection became available in time: {error}")
    if isinstance(error, psycopg.errors.UniqueViolation):
        constraint = error.diag.constraint_name or ""
        if constraint.endswith("job_pkey") or constraint.endswith("job_chain_index_idx"):
            return _duplicate_id(error, ids)
    if isinstance(error, psycopg.errors.ForeignKeyViolation):
        # Only job_blocker's keys are foreign keys (chain_id has none since 0009: jobs_create
        # reports a missing chain itself): a blocker chain deleted under the statement.
        return _missing_chain(error)
    if isinstance(error, (pg.UndefinedTable, pg.UndefinedObject, pg.InvalidSchemaName)):
        # One line: the server's primary message, without the LINE/caret context lines.
        reason = error.diag.message_primary or str(error).strip().splitlines()[0]
        return SchemaNotMigratedError(
            f"the jobchain tables are missing ({reason}, SQLSTATE {error.sqlstate}): {MIGRATE_HINT}"
        )
    if isinstance(error, pg.UndefinedColumn):
        # jobchain's own statements name only columns its migrations create: a missing one
        # means a migration of this library version was not applied yet.
        reason = error.diag.message_primary or str(error).strip().splitlines()[0]
        return SchemaNotMigratedError(
            f"the jobchain tables are older than this library ({reason}, SQLSTATE {error.sqlstate}): "
            f"{MIGRATE_HINT}"
        )
    if isinstance(error, pg.QueryCanceled):
        return StatementTimeoutError(f"statement cancelled: {_describe(error)}")
    if isinstance(error, (pg.SerializationFailure, pg.DeadlockDetected, pg.LockNotAvailable)):
        return TransientStateError(f"transaction conflict, retry: {_describe(error)}")
    if isinstance(error, pg.InFailedSqlTransaction):
        return TransientStateError(
            "the transaction is poisoned by an earlier failed statement; roll back (or roll back "
            "to a savepoint) before issuing more statements"
        )
    # 57P01 is sent both for pg_terminate_backend and for a server's fast shutdown: name both.
    if isinstance(error, pg.AdminShutdown):
        return TransientStateError(
            "the PostgreSQL server closed the connection (terminated by an administrator, "
            f"or the server is shutting down): {_describe(error)}"
        )
    if isinstance(error, pg.CrashShutdown):
        return TransientStateError(
            f"the PostgreSQL server is recovering from a crash of another backend: {_describe(error)}"
        )
    if isinstance(error, pg.CannotConnectNow):
        return TransientStateError(
            f"the PostgreSQL server is starting up or shutting down: {_describe(error)}"
        )
    if isinstance(error, psycopg.OperationalError):
        # Connection refused, lost mid-transaction, server closed the connection, …
        return TransientStateError(f"PostgreSQL connection failed: {str(error).strip()}")
    if isinstance(error, psycopg.InterfaceError):
        if "closed" in str(error):
            return TransientStateError(f"the PostgreSQL connection is closed: {str(error).strip()}")
        return PostgresStateError(_describe(error))
    if isinstance(error, psycopg.Error):
        return PostgresStateError(_describe(error))
    return error


@contextmanager
def translated(*, ids: Sequence[str] = ()) -> Iterator[None]:
    """Run a block, re-raising any driver error as its jobchain error (cause chained)."""
    try:
        yield
    except (psycopg.Error, PoolTimeout) as error:
        raise translate(error, ids=ids) from error


def unreachable(error: BaseException, where: str) -> JobchainError:
    """The error for a server that cannot be reached (or refuses us) when an adapter opens."""
    if isinstance(error, JobchainError):
        return error
    reason = str(error).strip() or type(error).__name__
    return BackendUnreachableError(f"cannot connect to PostgreSQL at {where}: {reason}")


def closed() -> AdapterClosedError:
    return AdapterClosedError("the PostgreSQL adapter is closed; open a new one")


__all__ = [
    "MIGRATE_HINT",
    "PostgresStateError",
    "SchemaNotMigratedError",
    "StatementTimeoutError",
    "closed",
    "translate",
    "translated",
    "unreachable",
]
