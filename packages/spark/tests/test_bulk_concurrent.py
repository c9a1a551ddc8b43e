"""Bulk start: two attempts of one partition at once (speculative execution) start each row once.

Both attempts are the real ``start_partition``, each in a thread of its own (as two executors'
tasks would be, each with its own connection). Attempt 0 is held at ``before_commit`` by a test
hook (``Faults.hook``): its transaction is open and every row is inserted. Attempt 1 then starts
the same rows. It must wait for attempt 0 to end: on PostgreSQL the test sees it blocked on a
lock held by attempt 0 (``pg_blocking_pids``); on SQLite, where a waiting writer is invisible
from outside, it waits in the busy handler and the test only checks that it has not finished
after a grace period. A correct backend can never finish it while attempt 0 is open, so the
grace only bounds how soon a broken one is caught. Then attempt 0 commits (attempt 1 answers
every row from its chains) or rolls back (attempt 1 starts every row itself).

No Spark session: Spark's speculation only runs this same function twice at once, and a direct
call lets the test decide when each attempt reaches the database.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pytest
import sparkkit
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from jobchain import JobTypes, connect
from jobchain_spark.bulk import build_settings
from jobchain_spark.bulk_partition import PartitionResult, start_partition
from jobchain_spark.bulk_rows import chain_id_for
from jobchain_spark.faults import Faults, InjectedFaultError

pytestmark = pytest.mark.timeout(120)

ROWS = 45
BATCH_SIZE = 20  # three start_chains calls in each attempt's transaction
WAIT = 60.0
"""Upper bound for anything the test waits on (generous: the machine may be loaded)."""
GRACE = 1.0
"""How long attempt 1 must stay unfinished while attempt 0 is held."""

SCHEMA = StructType(
    [
        StructField("order_id", StringType()),
        StructField("to", StringType()),
        StructField("subject", StringType()),
        StructField("priority", IntegerType()),
    ]
)
KEYS = [f"order-{i:04d}" for i in range(ROWS)]


def _batches() -> list[pa.RecordBatch]:
    rows = [
        {"order_id": key, "to": f"user{i}@example.com", "subject": f"receipt {i}", "priority": i % 3}
        for i, key in enumerate(KEYS)
    ]
    return [pa.RecordBatch.from_pylist(rows)]


class Hold:
    """A ``Faults`` hook that holds attempt 0 at ``before_commit`` until released."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, point: str, partition: int | None, attempt: int) -> None:
        if attempt == 0 and point == "before_commit":
            self.reached.set()
            if not self.release.wait(WAIT):
                raise TimeoutError("the test never released attempt 0")


class Attempt(threading.Thread):
    """One task attempt of partition 0: ``start_partition`` and what it returned or raised."""

    def __init__(self, settings: Any, attempt: int) -> None:
        super().__init__(name=f"partition-0-attempt-{attempt}", daemon=True)
        self.settings = settings
        self.attempt = attempt
        self.result: PartitionResult | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = start_partition(_batches(), self.settings, partition=0, attempt=self.attempt)
        except BaseException as exc:  # reported by the test thread
            self.error = exc

    def outcome(self) -> PartitionResult:
        self.join(WAIT)
        assert not self.is_alive(), f"attempt {self.attempt} did not finish within {WAIT} s"
        if self.error is not None:
            raise AssertionError(f"attempt {self.attempt} failed: {self.error!r}") from self.error
        assert self.result is not None
        return self.result


@pytest.fixture
def url(state_url: str) -> str:
    # Attempt 1 waits in SQLite's busy handler while attempt 0 is held: give it more than the
    # default 5 s, so a slow machine never turns the wait into "database is locked".
    return f"{state_url}?busy_timeout={WAIT}" if state_url.startswith("sqlite") else state_url


def _wait_until_blocked_on_postgres(url: str, second: Attempt) -> None:
    """Until a backend working on this test's schema waits for another backend's lock."""
    import psycopg

    schema = parse_qs(urlsplit(url).query)["schema"][0]
    deadline = time.monotonic() + WAIT
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        while True:
            # By the locks it holds on the schema's tables: the query text is no use, as
            # pg_stat_activity cuts it at 1 kB, inside the SQL files' leading comments.
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity AS a"
                " WHERE cardinality(pg_blocking_pids(a.pid)) > 0 AND EXISTS ("
                "  SELECT FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation"
                "  JOIN pg_namespace AS n ON n.oid = c.relnamespace"
                "  WHERE l.pid = a.pid AND n.nspname = %s)",
                (schema,),
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            assert second.is_alive(), "attempt 1 finished while attempt 0's transaction was open"
            assert time.monotonic() < deadline, f"attempt 1 never waited on a lock within {WAIT} s"
            time.sleep(0.02)


def _race(url: str, *, rollback: bool) -> tuple[Attempt, Attempt]:
    """Attempt 0 held open with every row inserted, attempt 1 running meanwhile; then release."""
    hold = Hold()
    # With ``rollback`` the before_commit rule fails attempt 0 after the hook lets it go (the
    # rule fires on first attempts only, so attempt 1 is untouched).
    faults = Faults.at("before_commit", hook=hold) if rollback else Faults(hook=hold)
    settings = build_settings(
        SCHEMA,
        url=url,
        job_type="send_email",
        job_types=sparkkit.types,
        key="order_id",
        batch_size=BATCH_SIZE,
        faults=faults,
    )
    first, second = Attempt(settings, 0), Attempt(settings, 1)
    first.start()
    try:
        assert hold.reached.wait(WAIT), f"attempt 0 did not reach before_commit: {first.error!r}"
        second.start()
        if url.startswith("postgresql"):
            _wait_until_blocked_on_postgres(url, second)
        second.join(GRACE)
        assert second.is_alive(), (
            f"attempt 1 finished while attempt 0's transaction was open: {second.result or second.error!r}"
        )
    finally:
        hold.release.set()
    return first, second


def _chains(url: str) -> dict[str, list[str]]:
    """Deduplication key -> ids of the send_email chains carrying it."""

    async def read() -> dict[str, list[str]]:
        client = await connect(url, notify="none", job_types=JobTypes())
        found: dict[str, list[str]] = {}
        try:
            cursor = None
            while True:
                page = await client.list_chains(type_names=["send_email"], cursor=cursor, limit=500)
                for chain in page.items:
                    found.setdefault(chain.root.deduplication_key or "", []).append(chain.id)
                cursor = page.next_cursor
                if cursor is None:
                    return found
        finally:
            await client.close()

    return asyncio.run(read())


def _one_chain_per_key(url: str) -> None:
    assert _chains(url) == {key: [chain_id_for("send_email", key)] for key in KEYS}


def test_a_second_attempt_waits_for_the_first_then_finds_its_chains(url: str) -> None:
    first, second = _race(url, rollback=False)
    assert first.outcome() == PartitionResult(
        partition=0, attempt=0, rows=ROWS, started=ROWS, deduplicated=0, rejected=0
    )
    assert second.outcome() == PartitionResult(
        partition=0, attempt=1, rows=ROWS, started=0, deduplicated=ROWS, rejected=0
    )
    _one_chain_per_key(url)


def test_a_second_attempt_waits_for_the_first_then_starts_what_it_rolled_back(url: str) -> None:
    first, second = _race(url, rollback=True)
    first.join(WAIT)
    assert isinstance(first.error, InjectedFaultError), f"attempt 0 should have rolled back: {first.error!r}"
    assert second.outcome() == PartitionResult(
        partition=0, attempt=1, rows=ROWS, started=ROWS, deduplicated=0, rejected=0
    )
    _one_chain_per_key(url)
