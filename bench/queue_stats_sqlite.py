"""Time ``queue_stats`` on an SQLite file holding a large, realistic job history.

    .venv/bin/python bench/queue_stats_sqlite.py [--jobs 1000000] [--path FILE] [--rounds 7]

Builds the file once (kept at ``--path``, rebuilt when ``--rebuild`` is given or the job count
differs) through the adapter's own migrations, then bulk-inserts the rows directly (one
transaction, in creation order, as a long-lived queue would have written them):

- 12 job types of unequal weight (the largest holds about a third of the jobs);
- a pending backlog of 50,000 jobs (45,000 due, waiting up to two hours; 5,000 scheduled
  for later), 200 running (20 with an expired lease), 2,000 blocked;
- 20,000 failed jobs with one to three recorded errors of five error types, 5,000 cancelled;
- every other job completed, created over the past week, 5 % of them in the last hour (so
  the 15-minute duration window holds more than the 1,000-completion sample for the large
  types), each with a claim-to-completion duration of 20 ms to 5 s.

Then runs, ``--rounds`` times each, in a read transaction of its own: the default call
(every type, windows of 1/5/15 minutes, durations), the same with an hour of throughput in
1-minute buckets, and one type by name. Prints the median and the spread in milliseconds,
and the file's size. Measured figures go to docs/adapters/sqlite.md; nothing asserts on them.

``--hot-path`` measures instead what migration 0006's indexes cost claims and completions,
in this process and without a worker around them (so a busy machine blurs it less than
bench/ab.py): two files, each holding ``--history`` completed jobs and then ``--backlog``
pending ones, one with the 0006 indexes and one with them dropped; each round drains a
slice of the backlog in both (alternating which goes first), as claim-and-complete
transactions of one job (atomic mode's statements) and of 100 jobs (a batch). Prints the
median process CPU time per 1,000 jobs of each side and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobchain.contracts.state import CompletesJobsInBatches, JobComplete, JobsAcquire, QueueStatsGet
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.rows import fmt_time

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
TYPES = [f"type_{index:02d}" for index in range(12)]
WEIGHTS = [34, 18, 12, 8, 6, 5, 4, 4, 3, 3, 2, 1]
ERROR_TYPES = ["TimeoutError", "ConnectionError", "ValueError", "KeyError", "HTTPError"]
COLUMNS = (
    "id, type_name, chain_id, chain_type_name, chain_index, status, input, output, created_at, "
    "scheduled_at, attempt, leased_by, leased_until, lease_generation, completed_at, completed_by, "
    "first_attempt_at, attempt_started_at, attempt_errors, failed_at, cancelled_at, last_attempt_error"
)


def job_id(at: datetime, rng: random.Random) -> str:
    """A version-7-like id whose time prefix is ``at`` (ids sort by creation, as new_id's do)."""
    stamp = f"{int(at.timestamp() * 1000) & 0xFFFF_FFFF_FFFF:012x}"
    rand = f"{rng.getrandbits(76):019x}"
    return f"{stamp[:8]}-{stamp[8:]}-7{rand[:3]}-8{rand[4:7]}-{rand[7:19]}"


def statuses(count: int) -> list[str]:
    fixed = {"pending": 50_000, "running": 200, "blocked": 2_000, "failed": 20_000, "cancelled": 5_000}
    scale = min(1.0, count / 1_000_000)
    plan = [status for status, n in fixed.items() for _ in range(int(n * scale))]
    return plan + ["completed"] * (count - len(plan))


def errors(at: datetime, rng: random.Random) -> str:
    entries = []
    for attempt in range(1, rng.randint(1, 3) + 1):
        error_type = rng.choices(ERROR_TYPES, weights=[40, 25, 20, 10, 5])[0]
        entries.append(
            {
                "attempt": attempt,
                "worker_id": "w-1",
                "error_type": error_type,
                "message": f"{error_type} while calling the upstream service",
                "traceback": 'Traceback (most recent call last):\n  File "app.py", line 12\n' * 3,
                "at": (at - timedelta(seconds=30 * (3 - attempt))).isoformat(),
            }
        )
    return json.dumps(entries, separators=(",", ":"))


def row(status: str, rng: random.Random) -> tuple[object, ...]:
    type_name = rng.choices(TYPES, weights=WEIGHTS)[0]
    if status == "completed":
        recent = rng.random() < 0.05
        finished = NOW - (timedelta(hours=rng.random()) if recent else timedelta(days=7 * rng.random()))
        created = finished - timedelta(seconds=rng.uniform(0.1, 30))
    elif status == "pending":
        created = NOW - timedelta(hours=2 * rng.random())
        finished = created
    else:
        created = NOW - timedelta(days=rng.random())
        finished = created + timedelta(seconds=rng.uniform(1, 60))
    duration = timedelta(seconds=rng.uniform(0.02, 5) if rng.random() < 0.9 else rng.uniform(5, 60))
    started = finished - duration
    scheduled = created
    values: dict[str, object] = {
        "status": status,
        "input": json.dumps({"order_id": rng.randrange(10**9), "note": "x" * rng.randint(20, 120)}),
        "created_at": fmt_time(created),
        "scheduled_at": fmt_time(scheduled),
        "attempt": 0,
        "lease_generation": 0,
    }
    if status == "completed":
        values |= {"attempt": 1, "lease_generation": 1, "completed_at": fmt_time(finished)}
        values |= {"completed_by": "w-1", "output": '{"ok":true}'}
        values |= {"first_attempt_at": fmt_time(started), "attempt_started_at": fmt_time(started)}
    elif status == "pending" and rng.random() < 0.1:
        values["scheduled_at"] = fmt_time(NOW + timedelta(minutes=rng.uniform(1, 600)))
    elif status == "running":
        started = NOW - timedelta(seconds=rng.uniform(1, 60))
        expired = rng.random() < 0.1
        lease_end = NOW - timedelta(seconds=5) if expired else NOW + timedelta(seconds=30)
        values |= {
            "attempt": 1,
            "lease_generation": 1,
            "leased_by": "w-1",
            "leased_until": fmt_time(lease_end),
        }
        values |= {"first_attempt_at": fmt_time(started), "attempt_started_at": fmt_time(started)}
    elif status == "failed":
        values |= {"attempt": 3, "lease_generation": 3, "failed_at": fmt_time(finished)}
        values |= {"attempt_errors": errors(finished, rng), "last_attempt_error": "boom"}
        values |= {"first_attempt_at": fmt_time(started), "attempt_started_at": fmt_time(started)}
    elif status == "cancelled":
        values["cancelled_at"] = fmt_time(finished)
    ident = job_id(created, rng)
    names = [name.strip() for name in COLUMNS.split(",")]
    values |= {"id": ident, "type_name": type_name, "chain_id": ident, "chain_type_name": type_name}
    values["chain_index"] = 0
    return tuple(values.get(name) for name in names)


async def build(path: Path, count: int) -> None:
    """Migrate a new file at ``path`` (which must not exist) and insert ``count`` jobs."""
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    await adapter.migrate()
    await adapter.close()
    rng = random.Random(18)
    plan = statuses(count)
    rng.shuffle(plan)
    rows = sorted((row(status, rng) for status in plan), key=lambda r: (str(r[8]), str(r[0])))
    marks = ", ".join("?" * len(rows[0]))
    with sqlite3.connect(path) as conn:
        conn.executemany(f"INSERT INTO jobchain_job ({COLUMNS}) VALUES ({marks})", rows)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


async def time_calls(path: Path, rounds: int) -> dict[str, list[float]]:
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    started = time.perf_counter()
    await adapter.migrate()  # a file built by an older checkout gets the newer indexes here
    print(f"migrate: {time.perf_counter() - started:.1f} s")
    calls = {
        "every type (defaults)": QueueStatsGet(now=NOW),
        "every type + 1 h of 1-min throughput": QueueStatsGet(now=NOW, throughput_window=timedelta(hours=1)),
        "one type by name (type_00)": QueueStatsGet(now=NOW, type_names=["type_00"]),
    }
    timings: dict[str, list[float]] = {label: [] for label in calls}
    try:
        for _ in range(rounds):
            for label, params in calls.items():
                started = time.perf_counter()
                async with adapter.transaction(read_only=True) as tx:
                    stats = await tx.queue_stats(params)
                timings[label].append((time.perf_counter() - started) * 1000)
                if label == next(iter(calls)):
                    every = stats
        print(f"types: {len(every.types)}; jobs: {sum(t.total for t in every.types):,}")
        for status in ("blocked", "pending", "running", "completed", "failed", "cancelled"):
            print(f"  {status}: {every.total(status):,}", end="")
        print(f"\n  due: {every.due:,}; durations of the largest type: {every.types[0].durations}")
    finally:
        await adapter.close()
    return timings


NEW_INDEXES = ("blocked_type", "completed_type", "failed_type", "cancelled_type")


async def fill_hot_path(path: Path, history: int, backlog: int, *, indexes: bool) -> None:
    """A migrated file with ``history`` completed jobs then ``backlog`` due pending ones."""
    await build(path, history)
    rng = random.Random(17)
    with sqlite3.connect(path) as conn:
        if not indexes:
            for name in NEW_INDEXES:
                conn.execute(f"DROP INDEX jobchain_job_{name}_idx")
        rows = [row("pending", rng) for _ in range(backlog)]
        marks = ", ".join("?" * len(rows[0]))
        conn.executemany(f"INSERT INTO jobchain_job ({COLUMNS}) VALUES ({marks})", rows)
        # Due at once and by creation: every claim takes the oldest ones, as a queue does.
        conn.execute("UPDATE jobchain_job SET scheduled_at = created_at WHERE status = 'pending'")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


async def drain(path: Path, jobs: int, batch: int) -> float:
    """Claim and complete ``jobs`` jobs, ``batch`` per transaction; CPU seconds per 1,000."""
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    types = TYPES
    now = NOW
    try:
        started = time.process_time()
        done = 0
        while done < jobs:
            now += timedelta(milliseconds=1)
            async with adapter.transaction() as tx:
                claimed = await tx.jobs_acquire(
                    JobsAcquire(
                        type_names=types, worker_id="w", lease_for=timedelta(minutes=5), limit=batch, now=now
                    )
                )
                items = [
                    JobComplete(job_id=j.id, worker_id="w", lease_generation=j.lease_generation, now=now)
                    for j in claimed.jobs
                ]
                if batch == 1:
                    for item in items:
                        await tx.job_complete(item)
                else:
                    assert isinstance(tx, CompletesJobsInBatches)
                    await tx.jobs_complete(items)
            done += len(items)
        return (time.process_time() - started) / done * 1000
    finally:
        await adapter.close()


def hot_path(args: argparse.Namespace) -> None:
    sides = {
        "without 0006": args.path.with_suffix(".without.db"),
        "with 0006": args.path.with_suffix(".with.db"),
    }
    for (label, path), indexes in zip(sides.items(), (False, True), strict=True):
        path.unlink(missing_ok=True)
        asyncio.run(fill_hot_path(path, args.history, args.backlog, indexes=indexes))
        print(f"{label}: {path} ({path.stat().st_size / 2**20:.0f} MiB)")
    per_round = args.backlog // args.rounds // 2  # each round drains two slices per side
    cpu: dict[tuple[str, int], list[float]] = {(label, batch): [] for label in sides for batch in (1, 100)}
    for round_ in range(args.rounds):
        order = list(sides.items()) if round_ % 2 == 0 else list(reversed(sides.items()))
        for batch in (1, 100):
            for label, path in order:
                cpu[(label, batch)].append(asyncio.run(drain(path, per_round, batch)))
        print(
            f"round {round_ + 1}: " + ", ".join(f"{k[0]} x{k[1]} {v[-1]:.1f}" for k, v in cpu.items()),
            flush=True,
        )
    for batch in (1, 100):
        before = statistics.median(cpu[("without 0006", batch)])
        after = statistics.median(cpu[("with 0006", batch)])
        print(
            f"{batch} job(s) per transaction: CPU per 1,000 jobs {before * 1000:.1f} ms without the 0006 "
            f"indexes, {after * 1000:.1f} ms with them: {after / before:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--path", type=Path, default=Path("/tmp/jobchain_queue_stats_sqlite.db"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--hot-path", action="store_true", help="measure claims and completions instead")
    parser.add_argument("--history", type=int, default=200_000)
    parser.add_argument("--backlog", type=int, default=60_000)
    args = parser.parse_args()
    if args.hot_path:
        hot_path(args)
        return
    existing = 0
    if args.path.exists() and not args.rebuild:
        with sqlite3.connect(args.path) as conn:
            existing = conn.execute("SELECT count(*) FROM jobchain_job").fetchone()[0]
        conn.close()
    if existing != args.jobs:
        started = time.perf_counter()
        args.path.unlink(missing_ok=True)
        asyncio.run(build(args.path, args.jobs))
        print(f"built {args.path} with {args.jobs:,} jobs in {time.perf_counter() - started:.0f} s")
    print(f"file: {args.path.stat().st_size / 2**20:.0f} MiB; sqlite {sqlite3.sqlite_version}")
    for label, values in asyncio.run(time_calls(args.path, args.rounds)).items():
        print(
            f"{label}: median {statistics.median(values):.1f} ms "
            f"(min {min(values):.1f}, max {max(values):.1f}, {len(values)} rounds)"
        )


if __name__ == "__main__":
    main()
