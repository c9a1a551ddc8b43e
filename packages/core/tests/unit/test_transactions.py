"""Transaction hooks: buffered side effects flushed after commit, discarded on rollback."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from jobchain.contracts.capabilities import Capability
from jobchain.contracts.notify import Listener, Unsubscribe
from jobchain.contracts.observe import Event
from jobchain.errors import HookNotRegisteredError, TransactionRequiredError
from jobchain.transactions import Hook, TransactionHooks


class RecordingNotify:
    """Records what a flush publishes; ``fail`` makes every publish raise."""

    capabilities: frozenset[Capability] = frozenset()

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail = fail

    async def _record(self, *call: Any) -> None:
        if self.fail:
            raise ConnectionError("notify is down")
        self.calls.append(call)

    async def publish_job_scheduled(self, type_name: str) -> None:
        await self._record("scheduled", type_name)

    async def publish_chain_completed(self, chain_id: str) -> None:
        await self._record("chain_completed", chain_id)

    async def publish_job_ownership_lost(self, job_id: str) -> None:
        await self._record("ownership_lost", job_id)

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        await self._record("hint", type_name, count)

    async def listen_job_scheduled(self, type_names: Sequence[str], listener: Listener) -> Unsubscribe:
        raise NotImplementedError

    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe:
        raise NotImplementedError

    async def listen_job_ownership_lost(self, job_id: str, listener: Listener) -> Unsubscribe:
        raise NotImplementedError

    async def consume_wake_hint(self, type_name: str) -> bool:
        return True

    async def close(self) -> None:
        return None


class BulkRecordingNotify(RecordingNotify):
    """Also publishes many chain completions in one call (PublishesChainsInBulk)."""

    async def publish_chains_completed(self, chain_ids: Sequence[str]) -> None:
        await self._record("chains_completed", list(chain_ids))


class RecordingObserver:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)


class BrokenObserver:
    def on_event(self, event: Event) -> None:
        raise RuntimeError("observer bug")


def fill(hooks: TransactionHooks, suffix: str = "") -> None:
    hooks.job_scheduled("email" + suffix, 2)
    hooks.chain_completed("chain" + suffix)
    hooks.ownership_lost("job" + suffix)
    hooks.event("chain_created" + suffix, chain_id="c" + suffix)


class TestFlush:
    async def test_flush_delivers_every_buffer(self) -> None:
        hooks, notify, observer = TransactionHooks(), RecordingNotify(), RecordingObserver()
        fill(hooks)
        hooks.job_scheduled("email")
        await hooks.flush(notify, [observer])
        calls = notify.calls
        assert calls.index(("hint", "email", 3)) < calls.index(("scheduled", "email"))
        assert ("chain_completed", "chain") in calls
        assert ("ownership_lost", "job") in calls
        assert len(calls) == 4
        assert observer.events == [Event("chain_created", {"chain_id": "c"})]
        assert hooks.closed

    async def test_without_observers_events_are_dropped_but_notifications_kept(self) -> None:
        hooks = TransactionHooks(record_events=False)
        notify, observer = RecordingNotify(), RecordingObserver()
        fill(hooks)
        assert hooks.events == []
        await hooks.flush(notify, [observer])
        assert len(notify.calls) == 4  # wake hint, scheduled, chain completed, ownership lost
        assert observer.events == []

    async def test_many_completed_chains_go_out_in_one_bulk_call_where_offered(self) -> None:
        hooks, notify = TransactionHooks(), BulkRecordingNotify()
        for n in range(3):
            hooks.chain_completed(f"chain{n}")
        await hooks.flush(notify)
        assert notify.calls == [("chains_completed", ["chain0", "chain1", "chain2"])]

    async def test_without_bulk_publishing_each_chain_is_published_alone(self) -> None:
        hooks, notify = TransactionHooks(), RecordingNotify()
        for n in range(3):
            hooks.chain_completed(f"chain{n}")
        await hooks.flush(notify)
        assert sorted(notify.calls) == [("chain_completed", f"chain{n}") for n in range(3)]

    async def test_events_reach_observers_in_order(self) -> None:
        hooks, observer = TransactionHooks(), RecordingObserver()
        for name in ("a", "b", "c"):
            hooks.event(name)
        await hooks.flush(None, [observer])
        assert [e.name for e in observer.events] == ["a", "b", "c"]

    async def test_notify_failure_is_logged_and_swallowed(self, caplog: pytest.LogCaptureFixture) -> None:
        hooks, observer = TransactionHooks(), RecordingObserver()
        fill(hooks)
        with caplog.at_level(logging.WARNING, logger="jobchain.transactions"):
            await hooks.flush(RecordingNotify(fail=True), [observer])
        warnings = [r for r in caplog.records if "notify failed" in r.getMessage()]
        assert len(warnings) == 1  # once per flush, not once per notification
        assert observer.events  # events still delivered

    async def test_observer_failure_does_not_stop_peers(self, caplog: pytest.LogCaptureFixture) -> None:
        hooks, observer = TransactionHooks(), RecordingObserver()
        hooks.event("x")
        with caplog.at_level(logging.ERROR, logger="jobchain.transactions"):
            await hooks.flush(None, [BrokenObserver(), observer])
        assert [e.name for e in observer.events] == ["x"]
        assert any("observer" in r.getMessage() for r in caplog.records)

    async def test_flush_twice_delivers_once(self) -> None:
        hooks, notify = TransactionHooks(), RecordingNotify()
        hooks.chain_completed("c")
        await hooks.flush(notify)
        await hooks.flush(notify)
        assert notify.calls == [("chain_completed", "c")]

    async def test_buffering_after_close_is_refused(self) -> None:
        hooks = TransactionHooks()
        await hooks.flush(None)
        with pytest.raises(TransactionRequiredError, match="open a new one"):
            hooks.job_scheduled("x")


class TestDiscard:
    async def test_discard_drops_everything(self) -> None:
        hooks, notify, observer = TransactionHooks(), RecordingNotify(), RecordingObserver()
        fill(hooks)
        hooks.discard()
        await hooks.flush(notify, [observer])
        assert notify.calls == []
        assert observer.events == []

    async def test_checkpoint_rollback_discards_only_what_came_after(self) -> None:
        hooks, notify, observer = TransactionHooks(), RecordingNotify(), RecordingObserver()
        fill(hooks, "-outer")
        checkpoint = hooks.checkpoint()
        fill(hooks, "-inner")
        hooks.job_scheduled("email-outer", 5)
        hooks.rollback_to(checkpoint)
        assert hooks.scheduled == {"email-outer": 2}
        await hooks.flush(notify, [observer])
        assert sorted(notify.calls) == sorted(
            [
                ("hint", "email-outer", 2),
                ("scheduled", "email-outer"),
                ("chain_completed", "chain-outer"),
                ("ownership_lost", "job-outer"),
            ]
        )
        assert [e.name for e in observer.events] == ["chain_created-outer"]

    async def test_nested_savepoints_roll_back_independently(self) -> None:
        hooks = TransactionHooks()
        hooks.event("outer")
        async with hooks.savepoint():
            hooks.event("kept")
            with pytest.raises(ValueError, match="boom"):
                await _buffer_then_fail(hooks)
            hooks.event("after")
        assert [e.name for e in hooks.events] == ["outer", "kept", "after"]


async def _buffer_then_fail(hooks: TransactionHooks) -> None:
    async with hooks.savepoint():
        hooks.event("dropped")
        raise ValueError("boom")


class TestKeyedHooks:
    async def test_set_get_has_delete(self) -> None:
        hooks = TransactionHooks()
        flushed: list[list[int]] = []

        async def flush(state: list[int]) -> None:
            flushed.append(state)

        hook: Hook[list[int]] = Hook(state=[1], flush=flush)
        hooks.set("k", hook)
        assert hooks.has("k")
        assert hooks.get("k") is hook
        hooks.delete("k")
        assert not hooks.has("k")
        with pytest.raises(HookNotRegisteredError, match="'k'"):
            hooks.get("k")
        inserted = hooks.get_or_insert("k", lambda: Hook(state=[2], flush=flush))
        assert hooks.get_or_insert("k", lambda: Hook(state=[3], flush=flush)) is inserted
        inserted.state.append(4)
        await hooks.flush(None)
        assert flushed == [[2, 4]]

    async def test_discard_callback_runs_on_rollback(self) -> None:
        hooks = TransactionHooks()
        discarded: list[str] = []

        async def flush(state: str) -> None:
            raise AssertionError("must not flush")

        hooks.set("k", Hook(state="s", flush=flush, discard=discarded.append))
        hooks.discard()
        assert discarded == ["s"]

    async def test_savepoint_rollback_restores_snapshotted_state_and_drops_new_hooks(self) -> None:
        hooks = TransactionHooks()
        discarded: list[object] = []

        async def flush(state: Any) -> None:
            return None

        counter: Hook[list[int]] = Hook(state=[1], flush=flush, snapshot=list)
        hooks.set("counter", counter)
        checkpoint = hooks.checkpoint()
        counter.state.append(2)
        hooks.set("new", Hook(state="n", flush=flush, discard=discarded.append))
        hooks.rollback_to(checkpoint)
        assert hooks.get("counter").state == [1]
        assert not hooks.has("new")
        assert discarded == ["n"]

    async def test_failing_hook_flush_is_logged_and_peers_still_flush(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        hooks, notify = TransactionHooks(), RecordingNotify()
        hooks.chain_completed("c")

        async def broken(state: None) -> None:
            raise RuntimeError("hook bug")

        hooks.set("broken", Hook(state=None, flush=broken))
        with caplog.at_level(logging.ERROR, logger="jobchain.transactions"):
            await hooks.flush(notify)
        assert notify.calls == [("chain_completed", "c")]
        assert any("'broken'" in r.getMessage() for r in caplog.records)
