"""The ``jobchain`` Spark data source and the helper that registers it.

::

    from jobchain_spark import register
    register(spark)
    jobs = spark.read.format("jobchain").option("url", "sqlite:///jobchain.db").load()
    chains = (spark.read.format("jobchain").option("url", url).option("table", "chains")
              .option("partitioning", "id").option("partitions", 8).load())
    df.write.format("jobchain").option("url", url).option("type", "send_email") \\
        .option("job_types", "myapp.jobs:types").option("key", "order_id").mode("append").save()
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

NAME: Final = "jobchain"


class JobchainDataSource(DataSource):
    """Reads the job history (``table``: jobs, chains, blockers) and bulk-starts chains on write."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        from jobchain_spark.tables import spark_schema

        return spark_schema(self.options.get("table", "jobs"))

    def reader(self, schema: StructType) -> DataSourceReader:
        from jobchain_spark.reader import JobchainReader, ReadOptions

        return JobchainReader(ReadOptions.parse(dict(self.options)))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from jobchain_spark.bulk_writer import JobchainWriter

        return JobchainWriter.create(dict(self.options), schema, overwrite)


def register(spark: SparkSession) -> None:
    """Register the ``jobchain`` format on ``spark``."""
    spark.dataSource.register(JobchainDataSource)


def read_table(
    spark: SparkSession,
    url: str,
    table: str = "jobs",
    *,
    partitioning: str = "created_at",
    partitions: int | None = None,
    created_from: datetime | None = None,
    created_until: datetime | None = None,
    type_names: Sequence[str] | None = None,
    statuses: Sequence[str] | None = None,
) -> DataFrame:
    """``spark.read.format("jobchain")`` for ``table`` of the state at ``url`` (registers first).

    ``created_from`` (inclusive), ``created_until`` (exclusive), ``type_names`` and
    ``statuses`` narrow the rows in SQL, for every query of the DataFrame.

    Raises SchemaVersionError here, on the driver, when the state's schema is older than this
    version reads (a plain ``spark.read.format("jobchain")`` raises it wrapped in Spark's
    error when the read is planned)."""
    check_schema(url)
    register(spark)
    reader = spark.read.format(NAME).option("url", url).option("table", table)
    reader = reader.option("partitioning", partitioning)
    subset = options_dict(
        partitions=partitions,
        created_from=created_from.isoformat() if created_from is not None else None,
        created_until=created_until.isoformat() if created_until is not None else None,
        type_name=",".join(type_names) if type_names is not None else None,
        status=",".join(statuses) if statuses is not None else None,
    )
    for name, value in subset.items():
        reader = reader.option(name, value)
    return reader.load()


def check_schema(url: str) -> None:
    """SchemaVersionError unless the job table at ``url`` has every column the reader reads."""
    from jobchain_spark.dialects import dialect_for

    dialect = dialect_for(url)
    with dialect.connect() as conn:
        dialect.check_schema(conn)


def parse_json(df: DataFrame, column: str, schema: StructType | str, *, into: str | None = None) -> DataFrame:
    """Parse the JSON text in ``column`` (e.g. ``input``) with ``schema``; ``into`` names the result."""
    from pyspark.sql import functions as sf

    parsed: Column = sf.from_json(sf.col(column), schema)
    return df.withColumn(into or column, parsed)


def attempt_errors(jobs: DataFrame, *columns: str) -> DataFrame:
    """One row per entry of each job's error history (``attempt_errors``), oldest first.

    Keeps ``columns`` of the job (default ``id``, ``type_name``, ``status``) and adds
    ``attempt``, ``worker_id``, ``error_type``, ``message``, ``traceback`` and ``at`` (a
    timestamp). Jobs with an empty history, or none (archives written before it existed),
    give no rows.
    """
    from pyspark.sql import functions as sf

    from jobchain_spark.tables import ATTEMPT_ERRORS_SCHEMA

    kept = columns or ("id", "type_name", "status")
    entries = sf.from_json(sf.col("attempt_errors"), ATTEMPT_ERRORS_SCHEMA)
    return jobs.select(*kept, sf.explode(entries).alias("_entry")).select(*kept, "_entry.*")


def options_dict(**options: Any) -> dict[str, str]:
    """Spark options are strings; drop None and stringify the rest."""
    return {k: str(v) for k, v in options.items() if v is not None}


__all__ = [
    "NAME",
    "JobchainDataSource",
    "attempt_errors",
    "check_schema",
    "parse_json",
    "read_table",
    "register",
]
