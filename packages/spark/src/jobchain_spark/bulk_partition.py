"""Start one Spark partition's chains: validate, then one transaction of batched starts."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobchain import ChainStart, Deduplication
from jobchain.client import connect
from jobchain.job_types import JobType
from jobchain_spark.bulk_rows import BulkSettings, Checked, chain_id_for, check_row, load_job_types, rows_of
from jobchain_spark.errors import DuplicateKeyError, NullKeyError, RowValidationError


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """What one task did: rows seen, chains started, rows already started before, rows set aside."""

    partition: int
    attempt: int
    rows: int
    started: int
    deduplicated: int
    rejected: int


def check_partition(batches: Iterable[pa.RecordBatch], s: BulkSettings) -> list[Checked]:
    """Validate every row of a partition before anything is written (typed errors otherwise)."""
    job_type = s.job_type()
    checked = [check_row(row, s, job_type) for row in rows_of(batches)]
    key_name = s.key or "(hash of the input)"
    nulls = sum(1 for c in checked if c.key is None)
    if nulls:
        raise NullKeyError(key_name, nulls)
    counts = Counter(c.key for c in checked)
    duplicates = sorted(k for k, n in counts.items() if k is not None and n > 1)
    if duplicates:
        raise DuplicateKeyError(key_name, duplicates)
    invalid = [c for c in checked if c.error is not None]
    if invalid and s.on_invalid == "fail":
        first = invalid[0]
        raise RowValidationError(first.key or "?", first.error or "", len(invalid))
    return checked


def start_partition(
    batches: Iterable[pa.RecordBatch], s: BulkSettings, *, partition: int, attempt: int
) -> PartitionResult:
    """Validate the partition, then start its valid rows in one transaction (see bulk_rows)."""
    checked = check_partition(batches, s)
    valid = [c for c in checked if c.error is None]
    started, deduplicated = asyncio.run(_start(valid, s, s.job_type(), partition, attempt))
    return PartitionResult(
        partition=partition,
        attempt=attempt,
        rows=len(checked),
        started=started,
        deduplicated=deduplicated,
        rejected=len(checked) - len(valid),
    )


async def _start(
    rows: Sequence[Checked], s: BulkSettings, job_type: JobType[Any, Any], partition: int, attempt: int
) -> tuple[int, int]:
    faults = s.faults
    if not rows:
        return 0, 0
    client = await connect(s.url, notify=s.notify, job_types=load_job_types(s.job_types))
    started = deduplicated = 0
    try:
        # One transaction for the whole partition: all of its rows commit, or none do. The
        # client buffers one wake hint per type with the partition's count, sent after commit.
        async with client.transaction() as tx:
            for offset in range(0, len(rows), s.batch_size):
                chunk = rows[offset : offset + s.batch_size]
                starts = [
                    ChainStart(
                        job_type=job_type,
                        input=c.input,
                        id=chain_id_for(job_type.name, c.key or ""),
                        deduplication=Deduplication(key=c.key or "", scope="any", window=s.window),
                    )
                    for c in chunk
                ]
                for result in await client.start_chains(tx, starts):
                    if result.deduplicated:
                        deduplicated += 1
                    else:
                        started += 1
                if faults is not None:
                    faults.hit("mid_partition", partition=partition, attempt=attempt)
            if faults is not None:
                faults.hit("before_commit", partition=partition, attempt=attempt)
        if faults is not None:
            faults.hit("after_commit", partition=partition, attempt=attempt)
    finally:
        await client.close()
    return started, deduplicated


__all__ = ["PartitionResult", "check_partition", "start_partition"]
