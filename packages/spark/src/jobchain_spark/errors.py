"""Typed errors of jobchain-spark. Each names the option or column to change, and is raised
before anything is written."""

from __future__ import annotations

from collections.abc import Sequence

from jobchain.errors import InvalidArgumentError, JobchainError, SchemaNotMigratedError, UnknownSchemeError


class SparkOptionError(InvalidArgumentError):
    """An option of the jobchain data source or pipeline is invalid; the message names it."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"option {option!r}: {message}")


class BackendNotInstalledError(UnknownSchemeError):
    """No installed jobchain backend serves the URL's scheme; install the one the message names."""

    def __init__(self, message: str) -> None:
        self.option = "url"
        super().__init__(f"option 'url': {message}")


class UnsupportedBackendError(SparkOptionError):
    """The backend is installed but its state is not stored in SQL tables Spark can read."""


class UnknownTableError(SparkOptionError):
    """The ``table`` option names no table of the job history."""


class ColumnError(InvalidArgumentError):
    """A DataFrame column is missing or has the wrong type; the message names it."""

    def __init__(self, column: str, message: str) -> None:
        self.column = column
        super().__init__(f"column {column!r}: {message}")


class MissingColumnError(ColumnError):
    """The DataFrame lacks a column the job type's input needs."""


class ColumnTypeError(ColumnError):
    """A column's Spark type cannot hold the job type's declared field type."""


class NullKeyError(ColumnError):
    """The key column holds nulls; every row needs a key for exactly-once starting."""

    def __init__(self, column: str, count: int) -> None:
        self.count = count
        super().__init__(
            column,
            f"{count} row(s) have a null key; fill or drop them (the key makes each start exactly-once)",
        )


class DuplicateKeyError(ColumnError):
    """Two or more rows share a key; each key starts one chain, so the extra rows would vanish."""

    def __init__(self, column: str, keys: Sequence[str]) -> None:
        self.keys = tuple(keys)
        shown = ", ".join(repr(k) for k in self.keys[:5])
        super().__init__(
            column,
            f"duplicate keys within the DataFrame (e.g. {shown}); drop duplicates "
            "(df.dropDuplicates([...])) or choose a unique key column",
        )


class RowValidationError(InvalidArgumentError):
    """A row's input does not match the job type's declared input; nothing was written."""

    def __init__(self, key: str, reason: str, invalid_rows: int = 1) -> None:
        self.key = key
        self.reason = reason
        self.invalid_rows = invalid_rows
        super().__init__(
            f"row with key {key!r} is invalid: {reason} ({invalid_rows} invalid row(s) in total; "
            "fix them or pass on_invalid='reject' to set them aside)"
        )


class ArchivePathError(SparkOptionError):
    """The archive path cannot be written; choose a writable location."""


class FutureCutoffError(SparkOptionError):
    """The archive cutoff lies in the future; only chains finished before now can be archived."""


class SchemaVersionError(SchemaNotMigratedError):
    """The state's job table is missing (not migrated) or older than this jobchain-spark reads.

    jobchain-spark reads the current schema only (jobchain-postgres ``0006_job_lifecycle``,
    jobchain-sqlite ``0005_job_lifecycle``); ``missing`` lists the columns it did not find.
    Upgrade with ``jobchain migrate --state URL`` (migrations are additive), then read again.
    """

    def __init__(self, table: str, missing: Sequence[str], migration: str) -> None:
        self.table = table
        self.missing = tuple(missing)
        self.migration = migration
        if not self.missing:
            what = f"the state has no job table {table!r}"
        else:
            shown = ", ".join(self.missing[:6]) + (", …" if len(self.missing) > 6 else "")
            what = (
                f"job table {table!r} lacks column(s) {shown}: its schema is older than this jobchain-spark"
            )
        super().__init__(
            f"{what}; jobchain-spark reads the schema up to migration {migration}. "
            "Run `jobchain migrate --state URL` (additive, safe on a live database), then read again"
        )


class ArchiveVerificationError(JobchainError):
    """The Parquet files read back do not hold exactly the rows written; nothing was deleted."""


__all__ = [
    "ArchivePathError",
    "ArchiveVerificationError",
    "BackendNotInstalledError",
    "ColumnError",
    "ColumnTypeError",
    "DuplicateKeyError",
    "FutureCutoffError",
    "MissingColumnError",
    "NullKeyError",
    "RowValidationError",
    "SchemaVersionError",
    "SparkOptionError",
    "UnknownTableError",
    "UnsupportedBackendError",
]
