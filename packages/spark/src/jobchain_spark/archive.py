"""Archive: copy finished chains to Parquet, verify the copy, then delete them from the hot tables.

A chain is finished when its last job is ``completed``, ``failed`` or ``cancelled``. A run
archives the finished chains whose status is one of ``statuses`` (default ``completed`` and
``cancelled``) and that finished (``finished_at``: the last job's ``completed_at``,
``failed_at`` or ``cancelled_at``) before the cutoff. Failed chains are dead letters, work
still to be redriven or deleted, so they are archived only when ``failed`` is named. Chains
still blocked, pending or running are never archived. ``dry_run=True`` plans and counts
without writing or deleting anything.

One run, in order (each step is safe to crash in; the next run finishes the job):

1. Leftovers: files of runs still ``writing`` are removed with their manifest (they were
   never verified, so nothing was deleted for them). Runs ``verified`` but not ``deleted``
   get their deletions finished first.
2. Plan: chains of the chosen statuses that finished before the cutoff, minus chains already
   in the archive, minus chains that still block a job outside the set (repeated until
   stable), so every deletion can go through the normal path without cascading.
3. Write chains, jobs and blocker rows, partitioned by the date the chain finished (the
   ``completed_date`` partition column, named so since the first archives: for a failed or
   cancelled chain it is the day it failed or was cancelled), chain type and run.
4. Verify by reading the run's files back: row counts and key sets must equal the plan.
   Only then does the manifest say ``verified``.
5. Delete through ``Client.delete_chains`` in bounded batches (blocker references are
   respected: a chain blocking a job still present is retried after the others, and kept
   if it stays referenced). Then the manifest says ``deleted``.

No row is lost (nothing is deleted before its verified copy exists) and none is archived
twice (a run only plans chains absent from every verified run, and an unverified run's
files are removed before planning).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from jobchain.entities import TERMINAL_STATUSES, JobStatus
from jobchain_spark.archive_delete import delete_chains_in_batches
from jobchain_spark.archive_store import TABLES, ArchiveStore, Manifest
from jobchain_spark.dialects import check_url
from jobchain_spark.errors import ArchiveVerificationError, FutureCutoffError, SparkOptionError
from jobchain_spark.faults import Faults
from jobchain_spark.source import read_table
from jobchain_spark.tables import spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KEYS: Final = {"chains": ["id"], "jobs": ["id"], "blockers": ["job_id", "blocked_by_chain_id"]}
PARTITION_COLUMNS: Final = ["completed_date", "chain_type", "run_id"]
MAX_PLAN_ROUNDS: Final = 50
FINISHED_STATUSES: Final = tuple(sorted(s.value for s in TERMINAL_STATUSES))
"""A chain whose last job has one of these statuses is finished: it can be archived."""
ARCHIVABLE_STATUSES: Final = ("completed", "cancelled", "failed")
"""The statuses ``archive`` can take, in the order results name them."""
DEFAULT_STATUSES: Final = ("completed", "cancelled")
"""What ``archive`` takes unless told: failed chains (dead letters) stay until named."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: called as deletion batches commit (the CLI draws a bar)."""


@dataclass(frozen=True, slots=True)
class ArchiveResult:
    """What a run archived and deleted, or with ``dry_run`` what it would.

    ``chains``, ``jobs`` and ``blockers``: rows archived (would be); ``by_status``: the
    archived chains per status; ``finished_from`` / ``finished_to``: when the first and the
    last of them finished (None when there are none); ``statuses``: the statuses the run took.
    ``deleted``: chains deleted from the hot tables, ``retained``: archived chains kept there
    because they still block a live job (both 0 in a dry run). ``resumed``: earlier verified
    runs whose deletions it finished (would finish); ``pending_deletions``: in a dry run, how
    many of their chains are still in the hot tables and would be deleted.
    """

    run_id: str | None
    cutoff: datetime
    chains: int
    jobs: int
    blockers: int
    deleted: int
    retained: int
    resumed: tuple[str, ...] = ()
    statuses: tuple[str, ...] = DEFAULT_STATUSES
    by_status: Mapping[str, int] = field(default_factory=dict)
    finished_from: datetime | None = None
    finished_to: datetime | None = None
    dry_run: bool = False
    pending_deletions: int = 0


def archive_schema(table: str) -> str:
    """The archive's schema of ``table``: the table's columns plus the partition columns."""
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in spark_schema(table).fields)
    return f"{columns}, completed_date date, chain_type string, run_id string"


def read_archive(spark: SparkSession, to: str, table: str = "jobs") -> DataFrame | None:
    """The archived rows of ``table`` from verified runs only, or None when there are none."""
    from pyspark.sql import functions as sf

    store = ArchiveStore(spark, to)
    runs = [m.run_id for m in store.manifests() if m.state != "writing"]
    if not runs or not store.has_table(table):
        return None
    df = spark.read.schema(archive_schema(table)).parquet(store.table_path(table))
    return df.where(sf.col("run_id").isin(runs))


def resolve_cutoff(older_than: timedelta | None, cutoff: datetime | None, now: datetime) -> datetime:
    """The cutoff instant from ``older_than`` or ``cutoff``; FutureCutoffError if it is after now."""
    if (older_than is None) == (cutoff is None):
        raise SparkOptionError("older_than", "give exactly one of older_than (e.g. 30d) or cutoff")
    if cutoff is not None and cutoff.tzinfo is None:
        raise SparkOptionError("cutoff", "must be timezone-aware (e.g. datetime(..., tzinfo=UTC))")
    if older_than is not None and older_than < timedelta(0):
        raise FutureCutoffError("older_than", f"{older_than} is negative: the cutoff would be in the future")
    resolved = cutoff if cutoff is not None else now - (older_than or timedelta(0))
    if resolved > now:
        raise FutureCutoffError(
            "cutoff",
            f"{resolved.isoformat()} is in the future; only chains finished before now can be archived",
        )
    return resolved


def resolve_statuses(statuses: str | Iterable[str | JobStatus]) -> tuple[str, ...]:
    """``statuses`` (names, or one comma-separated string such as ``"completed,failed"``) as
    a tuple in ARCHIVABLE_STATUSES order; SparkOptionError says what to change otherwise."""
    choices = ", ".join(ARCHIVABLE_STATUSES)
    if isinstance(statuses, str):
        names = statuses.split(",")
    elif isinstance(statuses, Iterable):
        names = [str(name) for name in statuses]
    else:
        raise SparkOptionError(
            "statuses", f"expected status names such as 'completed,cancelled', got {statuses!r}"
        )
    chosen = {name.strip().lower() for name in names} - {""}
    if not chosen:
        raise SparkOptionError(
            "statuses", f"name at least one of {choices} (default: {','.join(DEFAULT_STATUSES)})"
        )
    for name in sorted(chosen):
        if name in {s.value for s in JobStatus} and name not in ARCHIVABLE_STATUSES:
            raise SparkOptionError(
                "statuses",
                f"{name!r} chains are live work and are never archived; choose from {choices}",
            )
        if name not in ARCHIVABLE_STATUSES:
            raise SparkOptionError(
                "statuses",
                f"unknown status {name!r}; choose from {choices} "
                "(failed chains are dead letters: name failed to archive them too)",
            )
    return tuple(s for s in ARCHIVABLE_STATUSES if s in chosen)


def archive(
    spark: SparkSession,
    *,
    url: str,
    to: str,
    older_than: timedelta | None = None,
    cutoff: datetime | None = None,
    statuses: str | Iterable[str | JobStatus] = DEFAULT_STATUSES,
    dry_run: bool = False,
    batch_size: int = 500,
    partitions: int = 4,
    now: datetime | None = None,
    progress: Progress | None = None,
    faults: Faults | None = None,
) -> ArchiveResult:
    """Archive chains of ``statuses`` (default completed and cancelled) that finished before
    the cutoff to Parquet at ``to``, then delete them from the hot tables.

    Failed chains (dead letters) are archived only when ``statuses`` names ``failed``
    (``statuses=("completed", "cancelled", "failed")``). ``dry_run=True`` plans the run and
    returns what it would archive (counts per status, the time range) and which earlier
    runs' deletions it would finish, writing and deleting nothing (``to`` is not even created).

    Raises (before writing anything) SparkOptionError (a bad ``statuses``, ``batch_size``…),
    BackendNotInstalledError, ArchivePathError (``to`` not writable), FutureCutoffError;
    ArchiveVerificationError if the files read back differ from the plan (nothing is deleted
    then).
    """
    check_url(url)
    when = now or datetime.now(UTC)
    limit = resolve_cutoff(older_than, cutoff, when)
    chosen = resolve_statuses(statuses)
    if not isinstance(batch_size, int) or not 1 <= batch_size <= 500:
        raise SparkOptionError("batch_size", f"must be an integer from 1 to 500, got {batch_size!r}")
    store = ArchiveStore(spark, to)
    if dry_run:
        return _dry_run(spark, store, url, limit, chosen, partitions)
    store.check_writable()

    resumed: list[str] = []
    deleted = retained = 0
    for manifest in store.manifests():
        if manifest.state == "writing":
            store.delete_run_files(manifest.run_id)
            store.delete_manifest(manifest.run_id)
        elif manifest.state == "verified":
            done, kept = _delete_run(spark, store, url, manifest, batch_size, progress, faults)
            deleted, retained, resumed = deleted + done, retained + kept, [*resumed, manifest.run_id]

    run_id = f"{when.strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
    planned = _plan(spark, store, url, limit, chosen, partitions)
    if planned.isEmpty():
        return ArchiveResult(None, limit, 0, 0, 0, deleted, retained, tuple(resumed), chosen)
    by_status, first, last = _summary(planned)
    manifest = Manifest(run_id=run_id, state="writing", cutoff=limit.isoformat())
    store.save(manifest)
    frames = _snapshot(spark, url, planned, run_id, partitions)
    for table in TABLES:
        frames[table].write.mode("append").partitionBy(*PARTITION_COLUMNS).parquet(store.table_path(table))
        if faults is not None:
            faults.hit(f"after_write_{table}")
    counts = {table: _verify(spark, store, table, frames[table], run_id) for table in TABLES}
    if faults is not None:
        faults.hit("before_verified")
    manifest = replace(
        manifest, state="verified", chains=counts["chains"], jobs=counts["jobs"], blockers=counts["blockers"]
    )
    store.save(manifest)
    if faults is not None:
        faults.hit("after_verify")
    done, kept = _delete_run(spark, store, url, manifest, batch_size, progress, faults)
    for frame in frames.values():
        frame.unpersist()
    return ArchiveResult(
        run_id,
        limit,
        counts["chains"],
        counts["jobs"],
        counts["blockers"],
        deleted + done,
        retained + kept,
        tuple(resumed),
        chosen,
        by_status,
        first,
        last,
    )


def _dry_run(
    spark: SparkSession,
    store: ArchiveStore,
    url: str,
    limit: datetime,
    statuses: tuple[str, ...],
    partitions: int,
) -> ArchiveResult:
    """What a run would do now, read-only: the earlier runs it would finish, then its plan.

    The plan is made before those runs' deletions, as if they were kept: a chain pinned only
    by a chain they would delete is counted by the next dry run, after they are done."""
    from pyspark.sql import functions as sf

    resumable = [m.run_id for m in store.manifests() if m.state == "verified"]
    pending = sum(len(_hot_ids(spark, store, url, run_id)) for run_id in resumable)
    planned = _plan(spark, store, url, limit, statuses, partitions)
    by_status, first, last = _summary(planned)
    ids = planned.select(sf.col("id").alias("chain_id"))
    jobs = blockers = 0
    if by_status:
        job_rows = read_table(spark, url, "jobs", partitioning="id", partitions=partitions)
        jobs = job_rows.join(ids, "chain_id", "left_semi").count()
        edges = read_table(spark, url, "blockers", partitioning="id", partitions=partitions)
        blockers = edges.join(ids, "chain_id", "left_semi").count()
    return ArchiveResult(
        None,
        limit,
        sum(by_status.values()),
        jobs,
        blockers,
        0,
        0,
        tuple(resumable),
        statuses,
        by_status,
        first,
        last,
        dry_run=True,
        pending_deletions=pending,
    )


def _summary(planned: DataFrame) -> tuple[dict[str, int], datetime | None, datetime | None]:
    """The planned chains per status (in ARCHIVABLE_STATUSES order) and when the first and the
    last of them finished, in UTC (one small Spark job)."""
    from pyspark.sql import functions as sf

    rows = (
        planned.groupBy("status")
        .agg(
            sf.count("*").alias("chains"),
            sf.min(sf.unix_micros("finished_at")).alias("first"),
            sf.max(sf.unix_micros("finished_at")).alias("last"),
        )
        .collect()
    )
    counts = {r["status"]: int(r["chains"]) for r in rows}
    by_status = {s: counts[s] for s in ARCHIVABLE_STATUSES if s in counts}
    if not rows:
        return by_status, None, None
    first = _EPOCH + timedelta(microseconds=min(int(r["first"]) for r in rows))
    last = _EPOCH + timedelta(microseconds=max(int(r["last"]) for r in rows))
    return by_status, first, last


def _plan(
    spark: SparkSession,
    store: ArchiveStore,
    url: str,
    limit: datetime,
    statuses: tuple[str, ...],
    partitions: int,
) -> DataFrame:
    """Chains to archive (id, status, finished_at): of ``statuses``, finished before ``limit``,
    not archived yet, not pinned as a blocker of a chain left out."""
    from pyspark.sql import functions as sf

    chains = read_table(spark, url, "chains", partitioning="id", partitions=partitions)
    chosen = sf.col("status").isin(*[s for s in statuses if s in FINISHED_STATUSES])
    candidates = chains.where(chosen & (sf.col("finished_at") < sf.lit(limit)))
    candidates = candidates.select("id", "status", "finished_at")
    archived = read_archive(spark, store.root, "chains")
    if archived is not None:
        candidates = candidates.join(archived.select("id"), "id", "left_anti")
    candidates = candidates.localCheckpoint()
    edges = read_table(spark, url, "blockers", partitioning="id", partitions=partitions)
    edges = edges.select("chain_id", "blocked_by_chain_id").localCheckpoint()
    for _ in range(MAX_PLAN_ROUNDS):
        # A candidate that blocks a job of a chain outside the set cannot be deleted now.
        pinned = (
            edges.join(
                candidates.withColumnRenamed("id", "blocked_by_chain_id"), "blocked_by_chain_id", "left_semi"
            )
            .join(candidates.withColumnRenamed("id", "chain_id"), "chain_id", "left_anti")
            .select(sf.col("blocked_by_chain_id").alias("id"))
            .distinct()
        )
        if pinned.isEmpty():
            return candidates
        candidates = candidates.join(pinned, "id", "left_anti").localCheckpoint()
    return candidates


def _snapshot(
    spark: SparkSession, url: str, planned: DataFrame, run_id: str, partitions: int
) -> dict[str, DataFrame]:
    """The rows to write, tagged with the date their chain finished and its type (persisted)."""
    from pyspark.sql import functions as sf

    chains = read_table(spark, url, "chains", partitioning="id", partitions=partitions).join(
        planned, "id", "left_semi"
    )
    # The date the chain finished, in UTC whatever the session time zone.
    utc = sf.convert_timezone(sf.current_timezone(), sf.lit("UTC"), sf.col("finished_at"))
    tags = chains.select(
        sf.col("id").alias("chain_id"),
        sf.to_date(utc).alias("completed_date"),
        sf.col("type_name").alias("chain_type"),
    ).withColumn("run_id", sf.lit(run_id))
    chains = chains.join(tags.withColumnRenamed("chain_id", "id"), "id")
    jobs = read_table(spark, url, "jobs", partitioning="id", partitions=partitions).join(tags, "chain_id")
    blockers = read_table(spark, url, "blockers", partitioning="id", partitions=partitions).join(
        tags, "chain_id"
    )
    frames = {"chains": chains, "jobs": jobs, "blockers": blockers}
    return {
        table: frame.select(*[f.name for f in spark_schema(table).fields], *PARTITION_COLUMNS).persist()
        for table, frame in frames.items()
    }


def _verify(spark: SparkSession, store: ArchiveStore, table: str, expected: DataFrame, run_id: str) -> int:
    """Read the run's files of ``table`` back; their keys must equal the plan's, once each."""
    from pyspark.sql import functions as sf

    written = spark.read.schema(archive_schema(table)).parquet(store.table_path(table))
    written = written.where(sf.col("run_id") == run_id).select(*KEYS[table])
    planned = expected.select(*KEYS[table])
    want, got = planned.count(), written.count()
    missing = planned.exceptAll(written).limit(1).collect()
    extra = written.exceptAll(planned).limit(1).collect()
    if want != got or missing or extra:
        raise ArchiveVerificationError(
            f"archive run {run_id}: {table} read back {got} rows, planned {want}"
            f" (missing e.g. {missing[:1]}, unexpected e.g. {extra[:1]}); nothing was deleted"
        )
    return want


def _delete_run(
    spark: SparkSession,
    store: ArchiveStore,
    url: str,
    manifest: Manifest,
    batch_size: int,
    progress: Progress | None,
    faults: Faults | None,
) -> tuple[int, int]:
    """Delete a verified run's chains still in the hot tables; mark the run deleted when none remain."""
    from pyspark.sql import functions as sf

    ids = _hot_ids(spark, store, url, manifest.run_id)
    # Chains that block other archived chains go last, after their dependants are gone.
    blockers: set[str] = set()
    if store.has_table("blockers"):
        edges = spark.read.schema(archive_schema("blockers")).parquet(store.table_path("blockers"))
        edges = edges.where(sf.col("run_id") == manifest.run_id).select("blocked_by_chain_id").distinct()
        blockers = {r["blocked_by_chain_id"] for r in edges.collect()}
    ids.sort(key=lambda chain_id: (chain_id in blockers, chain_id))
    deleted, kept = delete_chains_in_batches(url, ids, batch_size, progress, faults)
    store.save(replace(manifest, state="verified" if kept else "deleted", retained=len(kept)))
    return deleted, len(kept)


def _hot_ids(spark: SparkSession, store: ArchiveStore, url: str, run_id: str) -> list[str]:
    """The ids of a run's archived chains still in the hot tables, sorted."""
    from pyspark.sql import functions as sf

    archived = spark.read.schema(archive_schema("chains")).parquet(store.table_path("chains"))
    archived = archived.where(sf.col("run_id") == run_id).select("id")
    hot = read_table(spark, url, "chains", partitioning="id").select("id")
    return sorted(r["id"] for r in archived.join(hot, "id", "left_semi").collect())


__all__ = [
    "ARCHIVABLE_STATUSES",
    "DEFAULT_STATUSES",
    "ArchiveResult",
    "archive",
    "archive_schema",
    "read_archive",
    "resolve_cutoff",
    "resolve_statuses",
]
