"""The synchronous façade (``jobchain.sync``) on a backend's synchronous state adapter.

``SyncFacadeSuite``: jobchain's own transactions (starts, batches, deduplication, schedules,
blockers, reads, await_chain, typed errors, refusal inside an event loop, wake-ups after
commit). ``SyncJoinedSuite``: the caller's own transaction (each driver object the backend joins):
visible only after the caller's commit, gone on rollback, wake-ups only after that commit.
Fixtures: :mod:`jobchain_conformance.suites.sync_facade_support`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from jobchain import (
    AdapterClosedError,
    ChainCancelledError,
    ChainNotFoundError,
    ChainStart,
    Completion,
    Deduplication,
    DuplicateJobIdError,
    InvalidArgumentError,
    InvalidJobIdError,
    JobStatus,
    JobTypeValidationError,
    Schedule,
    SyncInEventLoopError,
    TransactionRequiredError,
    UnknownJobTypeError,
    WaitChainTimeoutError,
)
from jobchain.entities import new_id
from jobchain.sync import SyncTransaction
from jobchain_conformance.suites.sync_facade_support import (
    WAIT_TIMEOUT,
    CallerConnection,
    Item,
    SyncEnv,
    SyncSuiteBase,
    ids,
    in_thread,
)


def _complete(env: SyncEnv, chain_id: str, output: int) -> None:
    """Complete a chain's job without a worker, through the other client."""

    async def finish(completion: Completion[Item, int]) -> None:
        await completion.complete(output)

    with env.other.transaction() as tx:
        env.other.complete_chain(tx, env.item, chain_id, finish)


# Bad input on purpose, typed Any so the calls type-check as a caller without mypy writes them.
BAD: Any = "not an item"
BAD_TYPE: Any = "no_such_type"


def _start_then_fail(env: SyncEnv) -> None:
    with env.client.transaction() as tx:
        env.client.start_chain(tx, env.item, Item(1))
        raise RuntimeError("boom")


class SyncOwnTransactionTests:
    """``with client.transaction()`` (no connection): committed at the end of the block."""

    def test_a_chain_started_in_its_own_transaction_is_visible_after_the_block(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            started = env.client.start_chain(tx, env.item, Item(1))
        assert not started.deduplicated
        chain = env.other.get_chain(started.id)
        assert chain is not None
        assert chain.status is JobStatus.PENDING
        assert chain.root.input == {"n": 1}

    def test_an_error_in_the_block_rolls_the_start_back(self, env: SyncEnv) -> None:
        with pytest.raises(RuntimeError, match="boom"):
            _start_then_fail(env)
        assert env.chain_ids() == []
        assert env.notify.published == []

    def test_start_chains_starts_a_batch_in_input_order(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            started = env.client.start_chains(
                tx, [ChainStart(job_type=env.item, input=Item(n)) for n in range(5)]
            )
        assert [s.chain.root.input for s in started] == [{"n": n} for n in range(5)]
        assert sorted(env.chain_ids()) == sorted(ids(started))

    def test_deduplication_returns_the_existing_chain(self, env: SyncEnv) -> None:
        key = Deduplication(key="sync-dedup")
        with env.client.transaction() as tx:
            first = env.client.start_chain(tx, env.item, Item(1), deduplication=key)
        with env.client.transaction() as tx:
            again = env.client.start_chain(tx, env.item, Item(2), deduplication=key)
        assert again.deduplicated
        assert again.id == first.id
        assert env.chain_ids() == [first.id]

    def test_a_scheduled_start_is_pending_until_its_time(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            started = env.client.start_chain(
                tx, env.item, Item(1), schedule=Schedule(after=timedelta(hours=1))
            )
        job = env.other.get_job(started.id)
        assert job is not None
        assert job.status is JobStatus.PENDING
        assert job.scheduled_at - job.created_at >= timedelta(minutes=59)

    def test_a_chain_with_an_incomplete_blocker_starts_blocked_and_unblocks(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            blocker = env.client.start_chain(tx, env.item, Item(1))
            blocked = env.client.start_chain(tx, env.item, Item(2), blockers=[blocker.chain])
        assert blocked.chain.status is JobStatus.BLOCKED
        assert ids(env.client.get_job_blockers(blocked.id)) == [blocker.id]
        _complete(env, blocker.id, 7)
        job = env.client.get_job(blocked.id)
        assert job is not None
        assert job.status is JobStatus.PENDING

    def test_priority_and_ordering_key_reach_the_job(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            first = env.client.start_chain(tx, env.item, Item(1), ordering_key="k")
            second = env.client.start_chain(tx, env.item, Item(2), ordering_key="k", priority=5)
        assert first.ordered_after is None
        assert second.ordered_after == first.id


class SyncReadTests:
    """Reads: get, list, chain jobs; inside a transaction they see its own writes."""

    def test_get_and_list_return_what_was_started(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            started = env.client.start_chain(tx, env.item, Item(3))
        chain = env.client.get_chain(started.id, job_type=env.item)
        job = env.client.get_job(started.id)
        assert chain is not None
        assert job is not None
        assert chain.id == job.id == started.id
        assert ids(env.client.list_chains(type_names=[env.item]).items) == [started.id]
        assert ids(env.client.list_jobs(statuses=["pending"]).items) == [started.id]
        assert ids(env.client.list_chain_jobs(started.id).items) == [started.id]
        assert env.client.get_chain(new_id()) is None

    def test_a_read_in_the_transaction_sees_its_uncommitted_chain(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            started = env.client.start_chain(tx, env.item, Item(1))
            assert env.client.get_chain(started.id, tx=tx) is not None
            assert env.other.get_chain(started.id) is None


class SyncAwaitTests:
    """``await_chain`` blocks (bounded) and raises the async client's typed errors."""

    def test_await_chain_returns_once_another_thread_completes_the_chain(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            started = env.client.start_chain(tx, env.item, Item(1))
        thread = in_thread(lambda: _complete(env, started.id, 42))
        chain = env.client.await_chain(started.id, timeout=WAIT_TIMEOUT, poll_interval=0.05)
        thread.join(WAIT_TIMEOUT)
        assert chain.status is JobStatus.COMPLETED
        assert chain.output == 42

    def test_await_chain_times_out_with_a_typed_error(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            started = env.client.start_chain(tx, env.item, Item(1))
        # A timeout that must fire: nothing completes the chain, however slow the machine.
        with pytest.raises(WaitChainTimeoutError):
            env.client.await_chain(started.id, timeout=0.05, poll_interval=0.01)

    def test_await_chain_raises_for_a_cancelled_or_missing_chain(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            started = env.client.start_chain(tx, env.item, Item(1))
        with env.client.transaction() as tx:
            env.client.cancel_chain(tx, started.id, reason="not needed")
        with pytest.raises(ChainCancelledError):
            env.client.await_chain(started.id, timeout=WAIT_TIMEOUT)
        with pytest.raises(ChainNotFoundError):
            env.client.await_chain(new_id(), timeout=WAIT_TIMEOUT)


class SyncBadInputTests:
    """Bad input raises the async client's typed error before writing; the transaction goes on."""

    @pytest.mark.parametrize(
        ("case", "error"),
        [
            ("unknown type", UnknownJobTypeError),
            ("not an entry type", InvalidArgumentError),
            ("invalid input", JobTypeValidationError),
            ("invalid id", InvalidJobIdError),
            ("missing blocker", ChainNotFoundError),
            ("priority out of range", InvalidArgumentError),
            ("not a list", InvalidArgumentError),
        ],
    )
    def test_bad_input_raises_a_typed_error_and_writes_nothing(
        self, env: SyncEnv, case: str, error: type[Exception]
    ) -> None:
        client = env.client
        with client.transaction() as tx:
            with pytest.raises(error):
                _bad_start(env, tx, case)
            good = client.start_chain(tx, env.item, Item(1))
        assert env.chain_ids() == [good.id]

    def test_an_explicit_id_that_exists_raises_duplicate_job_id(self, env: SyncEnv) -> None:
        chosen = new_id()
        with env.client.transaction() as tx:
            env.client.start_chain(tx, env.item, Item(1), id=chosen)
        with pytest.raises(DuplicateJobIdError), env.client.transaction() as tx:
            env.client.start_chain(tx, env.item, Item(2), id=chosen)
        assert env.chain_ids() == [chosen]

    def test_a_write_without_its_transaction_raises_transaction_required(self, env: SyncEnv) -> None:
        with pytest.raises(TransactionRequiredError):
            env.client.start_chain(BAD, env.item, Item(1))
        assert env.chain_ids() == []

    def test_a_sync_call_inside_a_running_event_loop_raises(self, env: SyncEnv) -> None:
        async def inside() -> None:
            with pytest.raises(SyncInEventLoopError):
                env.client.get_chain(new_id())
            with pytest.raises(SyncInEventLoopError), env.client.transaction():
                pass
            with pytest.raises(SyncInEventLoopError):
                env.client.close()

        asyncio.run(inside())
        assert not env.client.closed

    def test_a_closed_client_refuses_calls(self, env: SyncEnv) -> None:
        env.client.close()
        with pytest.raises(AdapterClosedError):
            env.client.get_chain(new_id())
        with pytest.raises(AdapterClosedError), env.client.transaction():
            pass


def _bad_start(env: SyncEnv, tx: SyncTransaction, case: str) -> object:
    client = env.client
    if case == "unknown type":
        return client.start_chain(tx, BAD_TYPE, Item(1))
    if case == "not an entry type":
        return client.start_chain(tx, env.follow, Item(1))
    if case == "invalid input":
        return client.start_chain(tx, env.item, BAD)
    if case == "invalid id":
        return client.start_chain(tx, env.item, Item(1), id="not-a-uuid")
    if case == "missing blocker":
        return client.start_chain(tx, env.item, Item(1), blockers=[new_id()])
    if case == "priority out of range":
        return client.start_chain(tx, env.item, Item(1), priority=1000)
    assert case == "not a list"
    single: Any = ChainStart(job_type=env.item, input=Item(1))
    return client.start_chains(tx, single)


class SyncWakeUpTests:
    """Wake-ups of jobchain's own transaction leave after its commit, never on rollback."""

    def test_wake_ups_leave_after_the_commit_and_find_the_chain(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            started = env.client.start_chain(tx, env.item, Item(1))
            # "Not yet": an early publish may still be on its way, so this can only pass
            # falsely; ``visible`` below is the check that fails for a publish before commit.
            assert env.notify.published == []
        [publish] = env.notify.wait_published(1)
        assert publish.value == env.item.name
        assert started.id in publish.visible

    def test_a_rolled_back_transaction_publishes_nothing(self, env: SyncEnv) -> None:
        with pytest.raises(RuntimeError, match="boom"):
            _start_then_fail(env)
        with env.client.transaction() as tx:
            kept = env.client.start_chain(tx, env.item, Item(2))
        [publish] = env.notify.wait_published(1)
        assert env.chain_ids() == [kept.id]
        assert publish.visible == {kept.id}


class SyncFacadeSuite(
    SyncSuiteBase,
    SyncOwnTransactionTests,
    SyncReadTests,
    SyncAwaitTests,
    SyncBadInputTests,
    SyncWakeUpTests,
):
    """Everything ``jobchain.sync`` promises over jobchain's own transactions."""


# ---------------------------------------------------------------- the caller's transaction


class SyncJoinedTests:
    """``with client.transaction(connection=yours)``: your commit decides, wake-ups follow it."""

    @pytest.fixture
    def caller_connection(self) -> Iterator[CallerConnection]:
        raise NotImplementedError("override caller_connection: the caller's connection, in a transaction")

    def test_a_chain_started_in_the_callers_transaction_appears_with_its_commit(
        self, env: SyncEnv, caller_connection: CallerConnection
    ) -> None:
        with env.client.transaction(connection=caller_connection.connection) as tx:
            started = env.client.start_chain(tx, env.item, Item(1))
            assert env.client.get_chain(started.id, tx=tx) is not None
        assert env.other.get_chain(started.id) is None, "visible before the caller committed"
        caller_connection.commit()
        tx.flush()
        chain = env.other.get_chain(started.id)
        assert chain is not None
        assert chain.status is JobStatus.PENDING

    def test_the_callers_rollback_leaves_nothing(
        self, env: SyncEnv, caller_connection: CallerConnection
    ) -> None:
        with env.client.transaction(connection=caller_connection.connection) as tx:
            env.client.start_chains(tx, [ChainStart(job_type=env.item, input=Item(n)) for n in range(3)])
        caller_connection.rollback()
        assert env.chain_ids() == []

    def test_a_batch_with_deduplication_and_blockers_commits_with_the_caller(
        self, env: SyncEnv, caller_connection: CallerConnection
    ) -> None:
        key = Deduplication(key="joined")
        with env.client.transaction(connection=caller_connection.connection) as tx:
            first, again = env.client.start_chains(
                tx,
                [
                    ChainStart(job_type=env.item, input=Item(1), deduplication=key),
                    ChainStart(job_type=env.item, input=Item(2), deduplication=key),
                ],
            )
            blocked = env.client.start_chain(tx, env.item, Item(3), blockers=[first.id])
            later = env.client.start_chain(tx, env.item, Item(4), schedule=Schedule(after=timedelta(hours=1)))
        assert env.chain_ids() == []
        caller_connection.commit()
        tx.flush()
        assert again.deduplicated
        assert again.id == first.id
        assert sorted(env.chain_ids()) == sorted([first.id, blocked.id, later.id])
        job = env.other.get_job(blocked.id)
        assert job is not None
        assert job.status is JobStatus.BLOCKED

    def test_bad_input_in_the_callers_transaction_writes_nothing_and_it_goes_on(
        self, env: SyncEnv, caller_connection: CallerConnection
    ) -> None:
        with env.client.transaction(connection=caller_connection.connection) as tx:
            with pytest.raises(JobTypeValidationError):
                env.client.start_chain(tx, env.item, BAD)
            with pytest.raises(ChainNotFoundError):
                env.client.start_chain(tx, env.item, Item(1), blockers=[new_id()])
            good = env.client.start_chain(tx, env.item, Item(2))
        caller_connection.commit()
        tx.flush()
        assert env.chain_ids() == [good.id]

    def test_nothing_is_published_before_the_callers_commit(
        self, env: SyncEnv, caller_connection: CallerConnection
    ) -> None:
        with env.client.transaction(connection=caller_connection.connection) as tx:
            started = env.client.start_chain(tx, env.item, Item(1))
        # "Not yet" checks can only pass falsely (a publish on its way); ``visible`` below is
        # the check that fails for a wake-up sent before the commit.
        assert env.notify.published == [], "a wake-up left before the caller's commit"
        caller_connection.commit()
        if not caller_connection.reports_commit:
            assert env.notify.published == []
            tx.flush()
        [publish] = env.notify.wait_published(1)
        assert publish.kind == "job_scheduled"
        assert started.id in publish.visible, "the wake-up left before the commit finished"

    def test_the_callers_rollback_publishes_nothing(
        self, env: SyncEnv, caller_connection: CallerConnection
    ) -> None:
        with env.client.transaction(connection=caller_connection.connection) as tx:
            env.client.start_chain(tx, env.item, Item(1))
        caller_connection.rollback()
        if caller_connection.reports_commit:
            assert tx.hooks.closed, "jobchain still holds the rolled-back transaction's wake-ups"
        # Then a committed start of jobchain's own: exactly its wake-up is published.
        with env.client.transaction() as own:
            kept = env.client.start_chain(own, env.item, Item(2))
        [publish] = env.notify.wait_published(1)
        assert publish.visible == {kept.id}

    def test_flush_sends_once(self, env: SyncEnv, caller_connection: CallerConnection) -> None:
        with env.client.transaction(connection=caller_connection.connection) as tx:
            env.client.start_chain(tx, env.item, Item(1))
            tx.flush()  # inside the block: nothing to send yet
        caller_connection.commit()
        tx.flush()
        tx.flush()
        env.notify.wait_published(1)
        with env.client.transaction() as own:
            env.client.start_chain(own, env.item, Item(2))
        # A second send of the first flush may land after this count: it can only pass falsely.
        assert len(env.notify.wait_published(2)) == 2


class SyncJoinedSuite(SyncSuiteBase, SyncJoinedTests):
    """Everything ``jobchain.sync`` promises inside the caller's own transaction."""


__all__ = [
    "SyncAwaitTests",
    "SyncBadInputTests",
    "SyncFacadeSuite",
    "SyncJoinedSuite",
    "SyncJoinedTests",
    "SyncOwnTransactionTests",
    "SyncReadTests",
    "SyncWakeUpTests",
]
