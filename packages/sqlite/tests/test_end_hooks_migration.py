"""Migration 0011_end_hooks (issue 37, deliver 3: failure and cancel hooks) on a 0010 database
holding jobs of every status (a failed and a cancelled one among them): every row kept, no hook
job started for a job that ended before the migration, the same schema as a fresh database; the
hook rules then hold for the old rows (a failure, its propagation, a retry failing again, a
cancel), and a plain claim or completion starts nothing."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import timedelta
from pathlib import Path

import msgspec

from jobchain.contracts import (
    ChainsCancel,
    EndHooksRegister,
    JobComplete,
    JobFail,
    JobsAcquire,
    JobsList,
    JobsRetry,
    TypeEndHooks,
)
from jobchain.end_hooks import JobEnded
from jobchain.entities import CANONICAL_ID, Job, JobStatus, new_id
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import MIGRATIONS, queries

from .test_scheduling_migration import OLD, SCHEMA, T0, dump, migrate_to

LEASED_UNTIL = "2030-01-01T12:05:00.000000Z"
FAILED_ERRORS = json.dumps(
    [
        {
            "attempt": 1,
            "worker_id": "w",
            "error_type": "ValueError",
            "message": "boom",
            "traceback": None,
            "at": "2029-12-31T00:00:00+00:00",
        }
    ]
)
HOOKS = ("t.failed", "t.cancelled")


def seed_0010(path: Path) -> dict[str, str]:
    """A 0010 database: running (blocking a blocked job), pending, completed, failed and
    cancelled jobs of type ``t``, and a pending one due later (spare)."""
    migrate_to(path, "0010_worker_load")
    ids = {
        name: new_id() for name in ("running", "blocked", "pending", "done", "failed", "cancelled", "spare")
    }
    insert = (
        "INSERT INTO jobchain_job (id, type_name, chain_id, chain_type_name, chain_index, status,"
        " created_at, scheduled_at, leased_by, leased_until, lease_generation, attempt, completed_at,"
        " failed_at, cancelled_at, cancel_reason, last_attempt_error, attempt_errors)"
        " VALUES (?, 't', ?, 't', 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    with sqlite3.connect(path) as conn:
        for name, job_id in ids.items():
            running, failed = name == "running", name == "failed"
            # spare is due after the claim below, so that claim takes "pending".
            scheduled_at = "2031-01-01T00:00:00.000000Z" if name == "spare" else OLD
            status = {"done": "completed", "spare": "pending"}.get(name, name)
            conn.execute(
                insert,
                (
                    job_id,
                    job_id,
                    status,
                    OLD,
                    scheduled_at,
                    "w" if running else None,
                    LEASED_UNTIL if running else None,
                    1 if running or failed else 0,
                    1 if running or failed else 0,
                    OLD if name == "done" else None,
                    OLD if failed else None,
                    OLD if name == "cancelled" else None,
                    "old reason" if name == "cancelled" else None,
                    "boom" if failed else None,
                    FAILED_ERRORS if failed else None,
                ),
            )
        conn.execute(
            "INSERT INTO jobchain_job_blocker (job_id, blocked_by_chain_id, idx) VALUES (?, ?, 0)",
            (ids["blocked"], ids["running"]),
        )
    conn.close()
    return ids


async def _hook_jobs(adapter: SqliteStateAdapter) -> list[Job]:
    async with adapter.transaction(read_only=True) as tx:
        return list((await tx.jobs_list(JobsList(type_names=HOOKS, order="asc", limit=50))).items)


def _ended(job: Job) -> JobEnded:
    return msgspec.convert(job.input, JobEnded)


async def test_upgrade_from_0010_keeps_every_row_and_starts_no_hook_for_old_endings(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    seed_0010(path)
    jobs_before = dump(path, "SELECT * FROM jobchain_job ORDER BY id")
    blockers_before = dump(path, "SELECT * FROM jobchain_job_blocker ORDER BY job_id")
    assert {row[5] for row in jobs_before} == {
        "running",
        "blocked",
        "pending",
        "completed",
        "failed",
        "cancelled",
    }
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        await adapter.migrate()
    finally:
        await adapter.close()
    assert dump(path, "SELECT * FROM jobchain_job ORDER BY id") == jobs_before
    assert dump(path, "SELECT * FROM jobchain_job_blocker ORDER BY job_id") == blockers_before
    assert dump(path, "SELECT COUNT(*) FROM jobchain_type_hook") == [(0,)]
    assert ("0011_end_hooks",) in dump(path, "SELECT name FROM jobchain_migration")
    assert dump(path, "PRAGMA integrity_check") == [("ok",)]
    assert dump(path, "PRAGMA foreign_key_check") == []
    fresh = tmp_path / "fresh.db"
    adapter = SqliteStateAdapter(SqliteOptions(path=str(fresh)))
    try:
        await adapter.migrate()
    finally:
        await adapter.close()
    assert dump(path, SCHEMA) == dump(fresh, SCHEMA)
    triggers = dump(fresh, "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
    assert triggers == [("jobchain_job_end_hooks",)]


# The statements of the plain path (create, claim, renew, reschedule, complete, reap, release):
# none may carry the trigger. It runs only in statements that set failed_at or cancelled_at.
PLAIN_PATH = (
    "jobs_create",
    "jobs_acquire",
    "jobs_acquire_ids",
    "job_renew_lease",
    "job_reschedule",
    "job_complete",
    "jobs_complete",
    "jobs_complete_known",
    "job_unblock",
    "jobs_unblock",
    "jobs_reap_expired",
    "worker_jobs_release",
    "jobs_trigger",
)
ENDING = ("job_fail", "chains_cancel", "jobs_propagate", "job_wait", "jobs_create_extras")


def _trigger_programs(conn: sqlite3.Connection, sql: str) -> int:
    """How many trigger sub-programs the compiled statement calls (EXPLAIN's Program opcodes)."""
    names = {name: None for name in re.findall(r":(\w+)", sql)}
    return sum(1 for row in conn.execute(f"EXPLAIN {sql}", names) if row[1] == "Program")


def test_the_plain_path_compiles_without_the_trigger_and_the_endings_with_it(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    migrate_to(path, MIGRATIONS[-1])
    q = queries("jobchain_")
    with sqlite3.connect(path) as conn:
        assert {name: _trigger_programs(conn, getattr(q, name)) for name in PLAIN_PATH} == dict.fromkeys(
            PLAIN_PATH, 0
        )
        assert all(_trigger_programs(conn, getattr(q, name)) > 0 for name in ENDING)
    conn.close()


def test_the_triggers_lookups_use_the_primary_key(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    migrate_to(path, MIGRATIONS[-1])
    [(trigger,)] = dump(path, "SELECT sql FROM sqlite_master WHERE name = 'jobchain_job_end_hooks'")
    text = str(trigger)
    body = re.sub(
        r"NEW\.(\w+)", r":\1", text[text.index("BEGIN") + 5 : text.rindex("END")].strip().rstrip(";")
    )
    with sqlite3.connect(path) as conn:
        plan = [
            row[3]
            for row in conn.execute(f"EXPLAIN QUERY PLAN {body}", dict.fromkeys(re.findall(r":(\w+)", body)))
        ]
    conn.close()
    # The owner's row and the hook type's row: one primary-key search each, never a scan.
    assert [line for line in plan if " o " in f"{line} " or " t " in f"{line} "] == [
        "SEARCH o USING PRIMARY KEY (type_name=?)",
        "SEARCH t USING PRIMARY KEY (type_name=?) LEFT-JOIN",
    ]


async def test_after_the_upgrade_old_rows_start_their_hooks_when_they_end(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    ids = seed_0010(path)
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        await adapter.migrate()
        async with adapter.transaction() as tx:
            await tx.end_hooks_register(
                EndHooksRegister(
                    types=[
                        TypeEndHooks(type_name="t", on_failed="t.failed", on_cancelled="t.cancelled"),
                        TypeEndHooks(type_name="t.failed", priority=3),
                    ],
                    now=T0,
                )
            )
        async with adapter.transaction() as tx:
            # A plain claim and completion of old rows start nothing.
            [claimed] = (
                await tx.jobs_acquire(
                    JobsAcquire(
                        type_names=["t"], worker_id="w2", lease_for=timedelta(minutes=5), now=T0, limit=1
                    )
                )
            ).jobs
            await tx.job_complete(JobComplete(job_id=claimed.id, worker_id="w2", now=T0))
        assert await _hook_jobs(adapter) == []
        at = T0 + timedelta(seconds=1)
        async with adapter.transaction() as tx:
            failed = await tx.job_fail(
                JobFail(job_id=ids["running"], error="card declined", worker_id="w", now=at)
            )
            await tx.jobs_retry(JobsRetry(job_ids=[ids["failed"]], now=at))
            await tx.job_fail(JobFail(job_id=ids["failed"], error="again", now=at))
            await tx.chains_cancel(ChainsCancel(chain_ids=[ids["spare"]], now=at, reason="stop"))
        assert [job.id for job in failed.failed_jobs] == [ids["blocked"]]
        hooks = await _hook_jobs(adapter)
        by_job = {_ended(hook).job_id: hook for hook in hooks}
        assert len(hooks) == len(by_job) == 4
        assert sorted(by_job) == sorted([ids["running"], ids["blocked"], ids["failed"], ids["spare"]])
        for hook in hooks:
            assert (hook.status, hook.chain_id, hook.chain_index, hook.created_at) == (
                JobStatus.PENDING,
                hook.id,
                0,
                at,
            )
        assert {(h.type_name, h.priority) for h in hooks} == {("t.failed", 3), ("t.cancelled", 0)}
        # Ids drawn by the trigger: canonical lowercase UUIDs, version 4, RFC 4122 variant.
        assert all(CANONICAL_ID.fullmatch(h.id) and h.id[14] == "4" and h.id[19] in "89ab" for h in hooks)
        running = _ended(by_job[ids["running"]])
        assert (running.event, running.scope, running.error, running.error_type) == (
            "failed",
            "job",
            "card declined",
            None,
        )
        blocked = _ended(by_job[ids["blocked"]])
        assert (blocked.error_type, blocked.failed_by_chain_id) == ("BlockerChainFailed", ids["running"])
        # The retried row kept its pre-migration history; its new failure added no entry.
        retried = _ended(by_job[ids["failed"]])
        assert (retried.error, retried.error_type) == ("again", "ValueError")
        cancelled = _ended(by_job[ids["spare"]])
        assert (cancelled.event, cancelled.reason, cancelled.error) == ("cancelled", "stop", None)
        assert dump(path, "PRAGMA foreign_key_check") == []
    finally:
        await adapter.close()
