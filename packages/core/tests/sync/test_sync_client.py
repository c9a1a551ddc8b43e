"""SyncClient specifics on memory://: backend selection, the notify thread, savepoints, the
driven writes, what cannot be driven, and notify failures after commit."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta

import pytest

import jobchain.sync
from jobchain import (
    BackendUnavailableError,
    InvalidArgumentError,
    JobStatus,
    JobTypes,
    Schedule,
    SyncInEventLoopError,
)
from jobchain.connect_backends import open_sync_state
from jobchain.entities import new_id
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.plugins.hookspecs import BackendSpec
from jobchain.plugins.registry import BackendRegistry
from jobchain.sync import SyncClient, SyncTransaction, SyncWiringError
from jobchain.url import BackendURL


@dataclass
class Item:
    n: int


TYPES = JobTypes()
ITEM = TYPES.define("item", input=Item, output=int, entry=True)


def memory_client(notify: str | MemoryNotifyAdapter = "none") -> SyncClient:
    return jobchain.sync.connect("memory://", notify=notify, job_types=TYPES, observers=())


def notify_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "jobchain-sync-notify"]


# ------------------------------------------------------------ backend selection


def test_a_state_backend_without_a_sync_factory_is_refused_naming_those_with_one() -> None:
    registry = BackendRegistry()
    registry.register(
        BackendSpec(scheme="memory", role="state", distribution="jobchain", factory="m:f", sync_factory="m:g")
    )
    registry.register(
        BackendSpec(scheme="asynconly", role="state", distribution="asynconly-dist", factory="m:f")
    )
    with pytest.raises(BackendUnavailableError) as raised:
        open_sync_state("asynconly://", registry=registry)
    message = str(raised.value)
    assert "asynconly:// (from asynconly-dist) has no synchronous adapter" in message
    assert "memory://" in message
    assert "jobchain.connect" in message


def test_an_async_sync_factory_is_refused() -> None:
    registry = BackendRegistry()
    registry.register(
        BackendSpec(
            scheme="wrong",
            role="state",
            distribution="wrong-dist",
            factory="jobchain.memory.factories:open_state_adapter",
            sync_factory="jobchain.memory.factories:open_state_adapter",
        )
    )
    with pytest.raises(InvalidArgumentError, match="must be a plain function"):
        open_sync_state(BackendURL.parse("wrong://"), registry=registry)


def test_memory_serves_jobchain_sync() -> None:
    with memory_client() as client:
        assert client.state.transaction is not None
        assert not client.closed
    assert client.closed


def test_connect_inside_a_running_event_loop_is_refused() -> None:
    async def inside() -> None:
        jobchain.sync.connect("memory://", job_types=TYPES)

    with pytest.raises(SyncInEventLoopError, match=r"jobchain\.sync\.connect"):
        asyncio.run(inside())


def test_connect_checks_the_registry_argument() -> None:
    with pytest.raises(InvalidArgumentError, match="JobTypes"):
        jobchain.sync.connect("memory://", job_types={})  # type: ignore[arg-type]  # the bad input


# ------------------------------------------------------------ the notify thread


def test_one_notify_thread_per_client_started_at_connect_and_joined_at_close() -> None:
    before = len(notify_threads())
    client = memory_client(notify="memory://")
    assert len(notify_threads()) == before + 1
    for n in range(5):
        with client.transaction() as tx:
            client.start_chain(tx, ITEM, Item(n))
    assert len(notify_threads()) == before + 1  # never one per call
    client.close()
    assert len(notify_threads()) == before


def test_without_notify_no_thread_runs() -> None:
    before = len(notify_threads())
    with memory_client() as client:
        with client.transaction() as tx:
            client.start_chain(tx, ITEM, Item(1))
        assert len(notify_threads()) == before


class FailingNotify(MemoryNotifyAdapter):
    async def publish_job_scheduled(self, type_name: str) -> None:
        raise ConnectionError("broker down")


def test_a_notify_failure_after_commit_logs_a_warning_and_keeps_the_chain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with memory_client(notify=FailingNotify()) as client:
        with caplog.at_level(logging.WARNING), client.transaction() as tx:
            started = client.start_chain(tx, ITEM, Item(1))
        assert client.get_chain(started.id) is not None
    assert any("notify failed after commit" in r.getMessage() for r in caplog.records)


def test_await_chain_wakes_on_the_notification() -> None:
    notify = MemoryNotifyAdapter()
    with memory_client(notify=notify) as client:
        with client.transaction() as tx:
            started = client.start_chain(tx, ITEM, Item(1))

        async def finish(completion: object) -> None:
            await completion.complete(3)  # type: ignore[attr-defined]  # a Completion

        with client.transaction() as tx:
            client.complete_chain(tx, ITEM, started.id, finish)
        # A poll interval of an hour: only the first read or the notification can end the wait.
        chain = client.await_chain(started.id, timeout=10, poll_interval=3600)
        assert chain.output == 3


# ------------------------------------------------------------ transactions and writes


def _start_in_failing_savepoint(client: SyncClient, tx: SyncTransaction) -> None:
    with tx.savepoint() as inner:
        client.start_chain(inner, ITEM, Item(2))
        raise RuntimeError("inner")


def test_a_failed_savepoint_drops_its_start_and_the_rest_commits() -> None:
    with memory_client() as client:
        with client.transaction() as tx:
            kept = client.start_chain(tx, ITEM, Item(1))
            with pytest.raises(RuntimeError, match="inner"):
                _start_in_failing_savepoint(client, tx)
        assert [c.id for c in client.list_chains().items] == [kept.id]


def test_driven_writes_trigger_cancel_and_delete() -> None:
    with memory_client() as client:
        with client.transaction() as tx:
            later = client.start_chain(tx, ITEM, Item(1), schedule=Schedule(after=timedelta(hours=1)))
            other = client.start_chain(tx, ITEM, Item(2))
        with client.transaction() as tx:
            triggered = client.trigger_job(tx, later.id)
            cancelled = client.cancel_chain(tx, other.id, reason="no longer needed")
        assert triggered.scheduled_at <= triggered.created_at + timedelta(seconds=1)
        assert cancelled.status is JobStatus.CANCELLED
        with client.transaction() as tx:
            assert client.delete_chain(tx, later.id) is not None
        assert client.get_chain(later.id) is None


def test_a_wait_for_a_row_held_by_another_open_transaction_cannot_be_driven() -> None:
    # memory:// under jobchain.sync serves one thread: an insert of an id another open
    # transaction of the same thread holds would wait, which a driven coroutine cannot do.
    chosen = new_id()
    with memory_client() as client, client.transaction() as first:
        client.start_chain(first, ITEM, Item(1), id=chosen)
        with pytest.raises(SyncWiringError), client.transaction() as second:
            client.start_chain(second, ITEM, Item(2), id=chosen)
