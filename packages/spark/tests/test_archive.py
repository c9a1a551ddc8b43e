"""Archive: verify-then-delete, crash recovery at every stage, the statuses it takes (dead
letters stay unless named), dry runs, and bad input."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sparkkit

from jobchain import JobTypes, connect
from jobchain.connect_backends import open_state
from jobchain_spark import ArchivePathError, FutureCutoffError, SparkOptionError
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


# ---------------------------------------------------------------- statuses: dead letters stay


async def _seed_dead_letter(url: str) -> dict[str, str]:
    """Old (before the cutoff): a completed chain, a cancelled one, a dead letter (a chain that
    failed for good on day 3) and the completed chain its job waited on; recent: a completed
    chain. Returns their ids by name."""
    state = await open_state(url)
    try:
        [done] = await sparkkit.create(state, "resize", 1, day(0))
        await sparkkit.run(state, done, started=day(0, 1), finished=day(0, 2))
        email = {"to": "x", "subject": "y"}
        [gone] = await sparkkit.create(state, "send_email", 1, day(1), input=email)
        await sparkkit.cancel(state, [gone.id], at=day(1, 5), reason="user left")
        [waited] = await sparkkit.create(state, "send_email", 1, day(2), input=email)
        [dead] = await sparkkit.create(state, "notify_step", 1, day(2), blockers=(waited.id,))
        await sparkkit.run(state, waited, started=day(2, 1), finished=day(2, 2))
        await sparkkit.run(
            state, dead, started=day(3), finished=day(3, 1), fail_with="card expired",
            error_type="CardExpired", give_up=True,
        )  # fmt: skip
        [recent] = await sparkkit.create(state, "resize", 1, day(25))
        await sparkkit.run(state, recent, started=day(25, 1), finished=day(25, 2))
    finally:
        await state.close()
    return {"done": done.id, "gone": gone.id, "waited": waited.id, "dead": dead.id, "recent": recent.id}


async def _dead_letters_then_retry(url: str, job_id: str) -> tuple[list[str], str]:
    """The ids ``list_dead_letters`` lists, then the status of ``job_id`` after ``retry_job``."""
    client = await connect(url, notify="none", job_types=JobTypes())
    try:
        listed = [j.id for j in (await client.list_dead_letters(limit=500)).items]
        async with client.transaction() as tx:
            retried = await client.retry_job(tx, job_id)
        return listed, str(retried.status)
    finally:
        await client.close()


def test_a_dead_letter_survives_a_default_archive_and_can_still_be_retried(
    spark: Any, state_url: str, tmp_path: Path
) -> None:
    ids = asyncio.run(_seed_dead_letter(state_url))
    root = str(tmp_path / "archive")
    result = archive(spark, url=state_url, to=root, older_than=OLDER_THAN, now=NOW)
    hot = _hot(state_url)
    # The failed chain is actionable work: it stays, and so does the chain its job waited on
    # (a blocker row of a live job); only the completed and the cancelled chain go.
    assert ids["dead"] in hot
    assert hot == {ids["waited"], ids["dead"], ids["recent"]}
    assert sorted(_archived(spark, root)) == sorted([ids["done"], ids["gone"]])
    assert (result.chains, result.jobs, result.blockers, result.deleted, result.retained) == (2, 2, 0, 2, 0)
    assert result.statuses == ("completed", "cancelled")
    assert dict(result.by_status) == {"completed": 1, "cancelled": 1}
    listed, status = asyncio.run(_dead_letters_then_retry(state_url, ids["dead"]))
    assert listed == [ids["dead"]]
    assert status == "pending"  # redriven: its blocker chain is still there, completed


def test_naming_failed_archives_dead_letters_too(spark: Any, sqlite_url: str, tmp_path: Path) -> None:
    ids = asyncio.run(_seed_dead_letter(sqlite_url))
    root = str(tmp_path / "archive")
    result = archive(
        spark, url=sqlite_url, to=root, older_than=OLDER_THAN, now=NOW, statuses="completed,cancelled,failed"
    )
    assert _hot(sqlite_url) == {ids["recent"]}
    assert sorted(_archived(spark, root)) == sorted(ids[n] for n in ("done", "gone", "waited", "dead"))
    assert (result.chains, result.jobs, result.blockers, result.deleted, result.retained) == (4, 4, 1, 4, 0)
    assert result.statuses == ("completed", "cancelled", "failed")
    assert dict(result.by_status) == {"completed": 2, "cancelled": 1, "failed": 1}
    archived = read_archive(spark, root, "jobs")
    assert archived is not None
    dead = archived.where(archived.id == ids["dead"]).first()
    assert dead is not None
    assert (dead["status"], dead["last_attempt_error"]) == ("failed", "card expired")


def test_a_dry_run_says_what_would_go_and_changes_nothing(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    ids = asyncio.run(_seed_dead_letter(sqlite_url))
    before = _hot(sqlite_url)
    root = tmp_path / "archive"
    plan = archive(spark, url=sqlite_url, to=str(root), older_than=OLDER_THAN, now=NOW, dry_run=True)
    assert plan.dry_run
    assert plan.run_id is None
    assert (plan.chains, plan.jobs, plan.blockers, plan.deleted, plan.retained) == (2, 2, 0, 0, 0)
    assert dict(plan.by_status) == {"completed": 1, "cancelled": 1}
    assert (plan.finished_from, plan.finished_to) == (day(0, 2), day(1, 5))
    assert plan.cutoff == NOW - OLDER_THAN
    every = archive(
        spark, url=sqlite_url, to=str(root), older_than=OLDER_THAN, now=NOW, dry_run=True,
        statuses=("completed", "cancelled", "failed"),
    )  # fmt: skip
    assert (every.chains, every.jobs, every.blockers) == (4, 4, 1)
    assert dict(every.by_status) == {"completed": 2, "cancelled": 1, "failed": 1}
    assert (every.finished_from, every.finished_to) == (day(0, 2), day(3, 1))
    assert _hot(sqlite_url) == before
    assert not root.exists()  # not even the archive root was created

    # After a crash between verification and deletion, a dry run names the run it would
    # finish and how many of its chains would still go, and deletes none of them.
    with pytest.raises(InjectedFaultError):
        _run(spark, sqlite_url, str(root), Faults.at("after_verify"))
    [crashed] = ArchiveStore(spark, str(root)).manifests()
    plan = archive(spark, url=sqlite_url, to=str(root), older_than=OLDER_THAN, now=NOW, dry_run=True)
    assert plan.resumed == (crashed.run_id,)
    assert (plan.pending_deletions, plan.chains, plan.deleted) == (2, 0, 0)
    assert _hot(sqlite_url) == before
    assert [m.state for m in ArchiveStore(spark, str(root)).manifests()] == ["verified"]
    finished = _run(spark, sqlite_url, str(root))
    assert (finished.resumed, finished.deleted) == ((crashed.run_id,), 2)
    assert _hot(sqlite_url) == {ids["waited"], ids["dead"], ids["recent"]}


def test_bad_statuses_raise_a_typed_error_and_change_nothing(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    ids = asyncio.run(_seed_dead_letter(sqlite_url))
    root = tmp_path / "archive"

    def attempt(statuses: Any) -> None:
        archive(spark, url=sqlite_url, to=str(root), older_than=OLDER_THAN, now=NOW, statuses=statuses)

    with pytest.raises(
        SparkOptionError, match=r"option 'statuses': unknown status 'faild'.*completed, cancelled, failed"
    ):
        attempt("completed,faild")
    with pytest.raises(SparkOptionError, match=r"'pending'.*never archived"):
        attempt(["completed", "pending"])
    with pytest.raises(SparkOptionError, match="at least one"):
        attempt(" , ")
    with pytest.raises(SparkOptionError, match="statuses"):
        attempt(None)
    assert _hot(sqlite_url) == set(ids.values())
    assert not root.exists()
