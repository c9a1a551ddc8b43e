"""Archive: verify-then-delete, crash recovery at every stage, and bad input."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sparkkit

from jobchain.connect_backends import open_state
from jobchain_spark import ArchivePathError, FutureCutoffError
from jobchain_spark.archive import archive, read_archive
from jobchain_spark.archive_store import ArchiveStore
from jobchain_spark.faults import Faults, InjectedFaultError

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

T0 = sparkkit.T0
NOW = T0 + timedelta(days=30)
OLDER_THAN = timedelta(days=10)  # cutoff: day 20


def day(d: float, minutes: int = 0) -> Any:
    return T0 + timedelta(days=d, minutes=minutes)


async def _seed(url: str) -> dict[str, Any]:
    """12 chains to archive (14 jobs, 1 blocker row); 7 to keep."""
    state = await open_state(url)
    try:
        for i in range(8):  # single-job chains completed on days 0..3
            [job] = await sparkkit.create(state, "resize", 1, day(i // 2))
            await sparkkit.run(state, job, started=day(i // 2, 1), finished=day(i // 2, 2))
        for _ in range(2):  # two-job chains: resize, then its notify_step continuation, on day 4
            [job] = await sparkkit.create(state, "resize", 1, day(4))
            await sparkkit.run(state, job, started=day(4, 1), finished=day(4, 2), continue_with="notify_step")
            await sparkkit.run(state, "notify_step", started=day(4, 3), finished=day(4, 4))
        [b] = await sparkkit.create(state, "send_email", 1, day(5), input={"to": "x", "subject": "b"})
        await sparkkit.run(state, b, started=day(5, 1), finished=day(5, 2))
        [c] = await sparkkit.create(state, "resize", 1, day(6), blockers=(b.id,))
        await sparkkit.run(state, c, started=day(6, 1), finished=day(6, 2))
        # Kept: e blocks f, which is still pending; three recent chains; two pending ones.
        [e] = await sparkkit.create(state, "send_email", 1, day(5), input={"to": "x", "subject": "e"})
        await sparkkit.run(state, e, started=day(5, 3), finished=day(5, 4))
        for _ in range(3):
            [r] = await sparkkit.create(state, "resize", 1, day(25))
            await sparkkit.run(state, r, started=day(25, 1), finished=day(25, 2))
        [f] = await sparkkit.create(state, "notify_step", 1, day(6), blockers=(e.id,))
        await sparkkit.create(state, "resize", 2, day(1))
    finally:
        await state.close()
    return {"pinned": e.id, "dependant": f.id}


def _hot(url: str) -> set[str]:
    """The chains in the hot tables, as the client lists them (no Spark job: the reader is
    tested elsewhere, and these checks are the archive's)."""
    return asyncio.run(sparkkit.chain_ids(url))


def _archived(spark: Any, root: str, table: str = "chains") -> list[str]:
    df = read_archive(spark, root, table)
    key = "id"
    return [] if df is None else sorted(r[key] for r in df.select(key).collect())


def _run(spark: Any, url: str, root: str, faults: Faults | None = None, batch_size: int = 500) -> Any:
    return archive(
        spark, url=url, to=root, older_than=OLDER_THAN, now=NOW, faults=faults, batch_size=batch_size
    )


def test_archive_copies_verifies_and_deletes_old_completed_chains(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    seeds = asyncio.run(_seed(sqlite_url))
    before = _hot(sqlite_url)
    root = str(tmp_path / "archive")
    result = _run(spark, sqlite_url, root)
    assert (result.chains, result.jobs, result.blockers, result.deleted, result.retained) == (
        12,
        14,
        1,
        12,
        0,
    )
    hot = _hot(sqlite_url)
    archived = _archived(spark, root)
    assert len(hot) == 7
    assert seeds["pinned"] in hot  # it still blocks a pending job
    assert set(archived) | hot == before
    assert not set(archived) & hot
    # Partitioned by completion date and chain type; readable as plain Parquet.
    assert (tmp_path / "archive/chains/completed_date=2024-03-01/chain_type=resize").is_dir()
    jobs = spark.read.parquet(root + "/jobs")
    assert jobs.count() == 14
    assert {r["chain_type"] for r in jobs.select("chain_type").distinct().collect()} == {
        "resize",
        "send_email",
    }
    again = _run(spark, sqlite_url, root)
    assert (again.run_id, again.chains, again.deleted) == (None, 0, 0)


def test_crashes_at_every_stage_lose_and_double_nothing(spark: Any, state_url: str, tmp_path: Path) -> None:
    asyncio.run(_seed(state_url))
    before = _hot(state_url)
    root = str(tmp_path / "archive")

    # 1. Crash after writing some tables, before verification: nothing deleted, files unverified.
    with pytest.raises(InjectedFaultError):
        _run(spark, state_url, root, Faults.at("after_write_jobs"))
    assert _hot(state_url) == before
    assert _archived(spark, root) == []
    assert [m.state for m in ArchiveStore(spark, root).manifests()] == ["writing"]

    # 2. Re-run, crash after verification, before any deletion.
    with pytest.raises(InjectedFaultError):
        _run(spark, state_url, root, Faults.at("after_verify"))
    assert _hot(state_url) == before
    assert len(_archived(spark, root)) == 12

    # 3. Re-run: it first finishes the verified run's deletions; crash after one batch of 5.
    with pytest.raises(InjectedFaultError):
        _run(spark, state_url, root, Faults.at("delete_batch", after_batches=1), batch_size=5)
    assert len(before - _hot(state_url)) == 5

    # 4. Re-run without faults: the job is finished, nothing doubled.
    result = _run(spark, state_url, root, batch_size=5)
    assert result.chains == 0
    assert result.deleted == 7
    assert len(result.resumed) == 1
    archived = _archived(spark, root)
    hot = _hot(state_url)
    assert len(archived) == len(set(archived)) == 12
    assert len(_archived(spark, root, "jobs")) == 14
    assert set(archived) | hot == before
    assert not set(archived) & hot
    assert [m.state for m in ArchiveStore(spark, root).manifests()] == ["deleted"]


def test_bad_archive_input_raises_typed_errors_and_writes_nothing(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ArchivePathError, match="'to'"):
        archive(spark, url=sqlite_url, to=str(blocker / "archive"), older_than=OLDER_THAN)
    with pytest.raises(FutureCutoffError, match="future"):
        archive(spark, url=sqlite_url, to=str(tmp_path / "a"), cutoff=NOW + timedelta(days=1), now=NOW)
    with pytest.raises(FutureCutoffError):
        archive(spark, url=sqlite_url, to=str(tmp_path / "a"), older_than=timedelta(days=-1))
    assert not (tmp_path / "a").exists()
