"""Several worker processes on one SQLite file: no job claimed twice, none lost."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from jobchain.contracts import JobsCreate, JobsList, NewJob
from jobchain.entities import JobStatus, new_id
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import MIGRATIONS

WORKER_SCRIPT = Path(__file__).with_name("mp_worker.py")
PROCESSES = 4
JOBS = 600


async def run_processes(mode: str, db: Path, tmp_path: Path) -> list[list[str]]:
    ready = tmp_path / f"ready-{mode}"
    ready.mkdir()
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER_SCRIPT),
            mode,
            str(db),
            str(ready),
            f"worker-{n}",
            str(PROCESSES),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for n in range(PROCESSES)
    ]
    outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), timeout=100)
    results = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        results.append(json.loads(out))
    return results


async def all_jobs(adapter: SqliteStateAdapter) -> list:  # type: ignore[type-arg]  # Job list
    jobs = []
    cursor = None
    async with adapter.transaction(read_only=True) as tx:
        while True:
            page = await tx.jobs_list(JobsList(limit=500, cursor=cursor, order="asc"))
            jobs.extend(page.items)
            if page.next_cursor is None:
                return jobs
            cursor = page.next_cursor


async def test_worker_processes_claim_every_job_exactly_once(db_path: Path, tmp_path: Path) -> None:
    adapter = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
    await adapter.migrate()
    batch = [NewJob(id=new_id(), type_name="mp", chain_type_name="mp", input=i) for i in range(JOBS)]
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=batch))

    claimed = await run_processes("work", db_path, tmp_path)

    flat = [job_id for per_worker in claimed for job_id in per_worker]
    assert len(flat) == len(set(flat)), "a job was claimed by two workers"
    assert set(flat) == {job.id for job in batch}, "a job was lost"
    assert sum(1 for per_worker in claimed if per_worker) >= 2, "the processes never competed"
    owner = {job_id: f"worker-{n}" for n, per_worker in enumerate(claimed) for job_id in per_worker}
    jobs = await all_jobs(adapter)
    assert len(jobs) == JOBS
    for job in jobs:
        assert job.status is JobStatus.COMPLETED
        assert job.attempt == 1
        assert job.lease_generation == 1
        assert job.completed_by == owner[job.id] == job.output["by"]
    await adapter.close()


async def test_concurrent_migrations_from_several_processes_apply_once(db_path: Path, tmp_path: Path) -> None:
    await run_processes("migrate", db_path, tmp_path)
    adapter = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
    await adapter.migrate()  # and once more: idempotent
    async with adapter.transaction(read_only=True) as tx:
        assert (await tx.jobs_list(JobsList())).items == []
    await adapter.close()
    import sqlite3

    with sqlite3.connect(db_path) as conn:
        names = [row[0] for row in conn.execute("SELECT name FROM jobchain_migration")]
    conn.close()
    assert names == list(MIGRATIONS)
    assert names[-1] == "0011_end_hooks"
