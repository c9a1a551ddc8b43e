"""Driver errors → jobchain errors, in one place, plus the SQLite-specific error classes.

Every statement the adapter runs goes through :func:`translating`; no sqlite3, aiosqlite or
SQLAlchemy exception crosses the contract. Each class's docstring says what to change.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from jobchain.errors import DuplicateJobIdError, JobchainError, TransientStateError
from jobchain.errors import SchemaNotMigratedError as CoreSchemaNotMigratedError


class SqliteStateError(JobchainError):
    """The SQLite database failed; the message names the file and what to do."""

    def __init__(self, message: str, path: str = "") -> None:
        self.path = path
        super().__init__(message)


class DatabaseNotWritableError(SqliteStateError):
    """The SQLite file (or its directory) is not writable; fix the path or its permissions."""


class NotASqliteDatabaseError(SqliteStateError):
    """The file exists but is not a SQLite database; point the URL at another file."""


class SchemaTooNewError(SqliteStateError):
    """The database was migrated by a newer jobchain-sqlite; upgrade this library."""


class SchemaNotMigratedError(SqliteStateError, CoreSchemaNotMigratedError):
    """The jobchain tables do not exist; run ``jobchain migrate --state URL`` or ``adapter.migrate()``."""


class SqliteVersionError(SqliteStateError):
    """The SQLite library is too old (RETURNING needs 3.35); upgrade Python or SQLite."""


class DatabaseLockedError(TransientStateError):
    """Another process held the SQLite write lock beyond the busy timeout; retry or raise the timeout."""

    def __init__(self, message: str, path: str = "") -> None:
        self.path = path
        super().__init__(message)


def _driver_error(exc: BaseException) -> BaseException:
    # SQLAlchemy wraps the DB-API error in DBAPIError.orig; use the driver's own error.
    orig = getattr(exc, "orig", None)
    return orig if isinstance(orig, BaseException) else exc


def _kind(exc: BaseException) -> str:
    names = {cls.__name__ for cls in type(exc).__mro__}
    for name in ("IntegrityError", "OperationalError", "DatabaseError"):
        if name in names:
            return name
    return ""


def translate(exc: BaseException, path: str, prefix: str, job_ids: Sequence[str] = ()) -> BaseException:
    """The jobchain error for driver error ``exc`` (``exc`` itself if it is not a driver error)."""
    if isinstance(exc, JobchainError):
        return exc
    driver = _driver_error(exc)
    kind = _kind(driver)
    if not kind and not isinstance(driver, sqlite3.Error):
        return exc
    message = str(driver)
    lowered = message.lower()
    where = f"SQLite database {path!r}"
    if kind == "IntegrityError" and f"unique constraint failed: {prefix}job.id".lower() in lowered:
        return DuplicateJobIdError(job_ids[0] if len(job_ids) == 1 else ", ".join(job_ids) or "?")
    if "could not decode to utf-8 column" in lowered:
        # The driver's message quotes the stored value; name the column only.
        column = message.split("'")[1] if message.count("'") >= 2 else "?"
        return SqliteStateError(
            f"{where} holds text that is not valid UTF-8 in column {column!r} (written by an older "
            "jobchain, before lone surrogates were refused); read it through jobchain's own "
            "connection (a transaction without connection=), which shows the bad bytes as U+FFFD",
            path,
        )
    if "database is locked" in lowered or "database table is locked" in lowered:
        return DatabaseLockedError(
            f"{where} stayed locked by another connection beyond the busy timeout ({message}); "
            "retry, or raise busy_timeout in the URL (?busy_timeout=seconds)",
            path,
        )
    if "file is not a database" in lowered or "not a database" in lowered:
        return NotASqliteDatabaseError(
            f"{where} exists but is not a SQLite database; point the URL at a new or jobchain file", path
        )
    if "no such table" in lowered and prefix.lower() in lowered:
        return SchemaNotMigratedError(
            f"{where} has no jobchain tables ({message}); "
            "run `jobchain migrate --state URL` (or `await adapter.migrate()`) first",
            path,
        )
    if "no such column" in lowered or "has no column named" in lowered:
        # jobchain's own statements name only columns its migrations create: a missing one
        # means a migration of this library version was not applied yet.
        return SchemaNotMigratedError(
            f"{where} has jobchain tables older than this library ({message}); "
            "run `jobchain migrate --state URL` (or `await adapter.migrate()`) first",
            path,
        )
    if "readonly database" in lowered or "unable to open database" in lowered:
        return DatabaseNotWritableError(
            f"{where} cannot be opened for writing ({message}); check that the file and its "
            "directory exist and are writable",
            path,
        )
    if "disk i/o error" in lowered:
        return TransientStateError(f"{where}: {message}; retry")
    return SqliteStateError(f"{where}: {message}", path)


def is_constraint_violation(error: BaseException) -> bool:
    """Whether ``error`` (translated or not) comes from a failed constraint (SQLite then undid
    only the failing statement; the transaction goes on)."""
    cause = error if error.__cause__ is None else error.__cause__
    return _kind(_driver_error(cause)) == "IntegrityError"


@contextmanager
def translating(path: str, prefix: str, job_ids: Sequence[str] = ()) -> Iterator[None]:
    """Re-raise driver errors raised inside the block as jobchain errors."""
    try:
        yield
    except JobchainError:
        raise
    except Exception as exc:
        translated = translate(exc, path, prefix, job_ids)
        if translated is exc:
            raise
        raise translated from exc


__all__ = [
    "DatabaseLockedError",
    "DatabaseNotWritableError",
    "NotASqliteDatabaseError",
    "SchemaNotMigratedError",
    "SchemaTooNewError",
    "SqliteStateError",
    "SqliteVersionError",
    "is_constraint_violation",
    "translate",
    "translating",
]
