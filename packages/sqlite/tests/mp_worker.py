"""A worker process for test_multiprocess.py: ``python mp_worker.py MODE DB READY_DIR NAME COUNT``.

MODE ``work``: wait until COUNT workers are ready, then claim and complete jobs (staged:
claim in one transaction, complete in the next) until none are left; print the claimed ids
as JSON. MODE ``migrate``: wait the same way, then run migrate() once.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta
from pathlib import Path

from jobchain.contracts import JobComplete, JobsAcquire
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter


def wait_for_peers(ready_dir: Path, name: str, count: int) -> None:
    (ready_dir / f"{name}.ready").touch()
    deadline = time.monotonic() + 60
    while len(list(ready_dir.glob("*.ready"))) < count:
        if time.monotonic() > deadline:
            raise SystemExit("peers never became ready")
        time.sleep(0.005)  # a start barrier, not a timing assertion


async def work(db: str, name: str) -> list[str]:
    claimed: list[str] = []
    adapter = SqliteStateAdapter(SqliteOptions(path=db, busy_timeout=60))
    try:
        while True:
            async with adapter.transaction() as tx:
                acquired = await tx.jobs_acquire(
                    JobsAcquire(type_names=["mp"], worker_id=name, lease_for=timedelta(minutes=10), limit=3)
                )
            if not acquired.jobs:
                return claimed
            claimed.extend(job.id for job in acquired.jobs)
            await asyncio.sleep(0.002)  # the handlers' work, outside any transaction (staged mode)
            async with adapter.transaction() as tx:
                for job in acquired.jobs:
                    await tx.job_complete(
                        JobComplete(
                            job_id=job.id,
                            worker_id=name,
                            lease_generation=job.lease_generation,
                            output={"by": name},
                        )
                    )
    finally:
        await adapter.close()


async def migrate(db: str) -> None:
    adapter = SqliteStateAdapter(SqliteOptions(path=db, busy_timeout=60))
    try:
        await adapter.migrate()
    finally:
        await adapter.close()


def main() -> None:
    mode, db, ready_dir, name, count = sys.argv[1:6]
    wait_for_peers(Path(ready_dir), name, int(count))
    if mode == "work":
        print(json.dumps(asyncio.run(work(db, name))))
    else:
        asyncio.run(migrate(db))
        print("[]")


if __name__ == "__main__":
    main()
