"""jobchain-spark: read, bulk-start, archive and report jobchain job history with PySpark."""

from typing import TYPE_CHECKING, Any

from jobchain_spark.archive import ArchiveResult, archive, read_archive
from jobchain_spark.bulk import BulkStartResult, start_chains
from jobchain_spark.errors import (
    ArchivePathError,
    ArchiveVerificationError,
    BackendNotInstalledError,
    ColumnError,
    ColumnTypeError,
    DuplicateKeyError,
    FutureCutoffError,
    MissingColumnError,
    NullKeyError,
    RowValidationError,
    SchemaVersionError,
    SparkOptionError,
    UnknownTableError,
    UnsupportedBackendError,
)
from jobchain_spark.faults import Faults, InjectedFaultError
from jobchain_spark.source import JobchainDataSource, attempt_errors, parse_json, read_table, register
from jobchain_spark.tables import ATTEMPT_ERRORS_SCHEMA, spark_schema

if TYPE_CHECKING:
    from jobchain_spark.report import Report, build_report
    from jobchain_spark.report_output import write_report

_LAZY = {
    "Report": "jobchain_spark.report",
    "build_report": "jobchain_spark.report",
    "write_report": "jobchain_spark.report_output",
}


def __getattr__(name: str) -> Any:
    # The report pulls in pandas and matplotlib; Spark's Python workers never need them.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jobchain_spark' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "ATTEMPT_ERRORS_SCHEMA",
    "ArchiveResult",
    "Faults",
    "InjectedFaultError",
    "Report",
    "archive",
    "attempt_errors",
    "build_report",
    "read_archive",
    "write_report",
    "ArchivePathError",
    "ArchiveVerificationError",
    "BackendNotInstalledError",
    "BulkStartResult",
    "ColumnError",
    "ColumnTypeError",
    "DuplicateKeyError",
    "FutureCutoffError",
    "JobchainDataSource",
    "MissingColumnError",
    "NullKeyError",
    "RowValidationError",
    "SchemaVersionError",
    "SparkOptionError",
    "UnknownTableError",
    "UnsupportedBackendError",
    "parse_json",
    "read_table",
    "register",
    "spark_schema",
    "start_chains",
]
