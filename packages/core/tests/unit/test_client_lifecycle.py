"""Client lifecycle logic against the state contract: what the client sends, raises and buffers.

The state adapter here is the in-process one with the lifecycle operations scripted (each
returns the result a case sets): these cases pin the client's side of the contract —
validation before any write, refusals mapped to typed errors in input order, notifications
and events after commit — whatever an adapter does. The same API over the real adapters is
covered by ``test_client_lifecycle_memory.py`` and the conformance suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain import (
    Chain,
    ChainCancelledError,
    ChainFailedError,
    ChainNotCancellableError,
    ChainNotFoundError,
    Client,
    Completion,
    InvalidArgumentError,
    InvalidJobIdError,
    Job,
    JobNotFoundError,
    JobNotRetryableError,
    JobStatus,
    JobTypes,
    Schedule,
    TransactionRequiredError,
)
from jobchain.contracts.observe import Event
from jobchain.contracts.state import (
    ChainGet,
    ChainsCancel,
    ChainsCancelled,
    ChainsList,
    JobsCreate,
    JobsList,
    JobsRetried,
    JobsRetry,
    StateTx,
)
from jobchain.entities import Page, new_id
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter

START = datetime(2030, 1, 1, tzinfo=UTC)


@dataclass
class Item:
    n: int


types = JobTypes()
step = types.define("step", input=Item, output=None)
tail = types.define("tail", input=Item, output=None, runs_after_failed_blockers=True)
work = types.define("work", input=Item, output=None, entry=True, continues_with=[step, tail])
after = types.define("after", input=Item, output=None, entry=True, runs_after_failed_blockers=True)


class Script:
    """The scripted results and the params the client sent."""

    def __init__(self) -> None:
        self.cancel: ChainsCancelled = ChainsCancelled()
        self.retry: list[JobsRetried] = []
        self.chains: dict[str, Chain] = {}
        self.pages: list[Page[Job]] = []
        self.calls: list[Any] = []

    def sent(self, kind: type) -> list[Any]:
        return [c for c in self.calls if isinstance(c, kind)]


class ScriptedTx:
    """The memory adapter's transaction with the lifecycle operations scripted."""

    def __init__(self, inner: Any, script: Script) -> None:
        self._inner = inner
        self._script = script

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def jobs_create(self, params: JobsCreate) -> Any:
        self._script.calls.append(params)
        return await self._inner.jobs_create(params)

    async def chains_cancel(self, params: ChainsCancel) -> ChainsCancelled:
        self._script.calls.append(params)
        return self._script.cancel

    async def jobs_retry(self, params: JobsRetry) -> JobsRetried:
        self._script.calls.append(params)
        return self._script.retry.pop(0)

    async def jobs_list(self, params: JobsList) -> Page[Job]:
        self._script.calls.append(params)
        return self._script.pages.pop(0) if self._script.pages else Page(items=[])

    async def chains_list(self, params: ChainsList) -> Page[Chain]:
        scripted = [self._script.chains[c] for c in params.chain_ids if c in self._script.chains]
        if scripted:
            self._script.calls.append(params)
            return Page(items=scripted)
        page: Page[Chain] = await self._inner.chains_list(params)
        return page

    async def chain_get(self, params: ChainGet) -> Chain | None:
        if params.chain_id in self._script.chains:
            return self._script.chains[params.chain_id]
        chain: Chain | None = await self._inner.chain_get(params)
        return chain


class ScriptedState:
    def __init__(self, inner: MemoryStateAdapter, script: Script) -> None:
        self.inner = inner
        self.script = script
        self.capabilities = inner.capabilities
        self.time_precision = inner.time_precision

    @asynccontextmanager
    async def transaction(
        self, *, read_only: bool = False, connection: object | None = None
    ) -> AsyncIterator[StateTx]:
        async with self.inner.transaction(read_only=read_only, connection=connection) as tx:
            yield ScriptedTx(tx, self.script)

    async def migrate(self) -> None:
        await self.inner.migrate()

    async def close(self) -> None:
        await self.inner.close()


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.notices: list[tuple[str, str]] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e.attributes for e in self.events if e.name == name]


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def notify(recorder: Recorder) -> MemoryNotifyAdapter:
    return MemoryNotifyAdapter()


@pytest.fixture
async def client(script: Script, notify: MemoryNotifyAdapter, recorder: Recorder) -> AsyncIterator[Client]:
    state = ScriptedState(MemoryStateAdapter(), script)
    async with Client(state, notify, types, [recorder], clock=lambda: START) as c:
        yield c


async def listen(
    notify: MemoryNotifyAdapter, recorder: Recorder, chain_ids: list[str], job_ids: list[str]
) -> None:
    await notify.listen_job_scheduled(
        list(types.names()), lambda t: recorder.notices.append(("scheduled", t))
    )
    for chain_id in chain_ids:
        await notify.listen_chain_completed(chain_id, lambda c: recorder.notices.append(("finished", c)))
    for job_id in job_ids:
        await notify.listen_job_ownership_lost(job_id, lambda j: recorder.notices.append(("lost", j)))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def job(status: JobStatus, *, type_name: str = "work", chain_id: str | None = None, **fields: Any) -> Job:
    job_id = new_id()
    return Job(
        id=job_id,
        chain_id=chain_id or job_id,
        type_name=type_name,
        chain_type_name="work",
        chain_index=0 if chain_id is None else 1,
        status=status,
        input={"n": 1},
        created_at=START,
        scheduled_at=START,
        **fields,
    )


# ---------------------------------------------------------------- cancel


class TestCancelRefusals:
    async def test_the_first_refused_id_in_input_order_raises_and_nothing_is_published(
        self, client: Client, script: Script, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        ok, missing, done = new_id(), new_id(), new_id()
        script.cancel = ChainsCancelled(not_found=[missing], not_cancellable=[(done, "completed")])
        await listen(notify, recorder, [ok, missing, done], [])
        with pytest.raises(ChainNotCancellableError) as refused:
            async with client.transaction() as tx:
                await client.cancel_chains(tx, [ok, done, missing], reason="stop")
        assert (refused.value.chain_id, refused.value.status) == (done, "completed")
        assert "completed" in str(refused.value)
        with pytest.raises(ChainNotFoundError) as not_found:
            async with client.transaction() as tx:
                await client.cancel_chains(tx, [missing, done])
        assert not_found.value.chain_id == missing
        await settle()
        assert recorder.notices == []
        assert recorder.events == []

    @pytest.mark.parametrize(
        ("chain_ids", "reason", "error"),
        [
            ("0190a8a5-6b1e-7cc3-8a4e-3d2f7d1e9b10", None, InvalidArgumentError),
            (["not-an-id"], None, InvalidJobIdError),
            ([None], None, InvalidJobIdError),
            (["0190a8a5-6b1e-7cc3-8a4e-3d2f7d1e9b10"], 42, InvalidArgumentError),
            (["0190a8a5-6b1e-7cc3-8a4e-3d2f7d1e9b10"], b"why", InvalidArgumentError),
            (["0190a8a5-6b1e-7cc3-8a4e-3d2f7d1e9b10"], "x" * 2_001, InvalidArgumentError),
        ],
    )
    async def test_bad_input_is_refused_before_the_adapter_is_called(
        self, client: Client, script: Script, chain_ids: Any, reason: Any, error: type[Exception]
    ) -> None:
        with pytest.raises(error):
            async with client.transaction() as tx:
                await client.cancel_chains(tx, chain_ids, reason=reason)
        assert script.sent(ChainsCancel) == []

    async def test_needs_an_open_transaction_of_this_client(self, client: Client, script: Script) -> None:
        with pytest.raises(TransactionRequiredError):
            await client.cancel_chain(None, new_id())  # type: ignore[arg-type]
        assert script.sent(ChainsCancel) == []

    async def test_an_empty_list_sends_nothing(self, client: Client, script: Script) -> None:
        async with client.transaction() as tx:
            assert await client.cancel_chains(tx, []) == []
        assert script.sent(ChainsCancel) == []


class TestCancelEffects:
    async def test_results_keep_the_input_order_once_each_and_carry_the_reason_and_time(
        self, client: Client, script: Script
    ) -> None:
        first = job(JobStatus.CANCELLED, cancel_reason="dup", cancelled_at=START)
        second = job(JobStatus.CANCELLED, cancel_reason="dup", cancelled_at=START)
        script.cancel = ChainsCancelled(cancelled=[second, first])
        async with client.transaction() as tx:
            chains = await client.cancel_chains(tx, [first.id, second.id, first.id], reason="dup")
        assert [c.id for c in chains] == [first.id, second.id]
        assert all(c.status is JobStatus.CANCELLED for c in chains)
        [sent] = script.sent(ChainsCancel)
        assert list(sent.chain_ids) == [first.id, second.id]
        assert sent.reason == "dup"
        assert sent.now == START

    async def test_a_continued_chain_is_returned_with_its_root(self, client: Client, script: Script) -> None:
        async with client.transaction() as tx:
            started = await client.start_chain(tx, work, Item(1))
        root = started.chain.root
        last = job(JobStatus.CANCELLED, type_name="step", chain_id=root.id)
        script.cancel = ChainsCancelled(cancelled=[last])
        script.chains[root.id] = Chain(root=replace(root, status=JobStatus.COMPLETED), last=last)
        async with client.transaction() as tx:
            chain = await client.cancel_chain(tx, root.id)
        assert chain.root.id == root.id
        assert chain.last.id == last.id
        assert [list(p.chain_ids) for p in script.sent(ChainsList)] == [[root.id]]

    async def test_after_commit_it_tells_workers_wakes_waiters_and_schedules_unblocked_jobs(
        self, client: Client, script: Script, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        running = job(JobStatus.CANCELLED, cancel_reason="r")
        blocked = job(JobStatus.CANCELLED, cancel_reason="r")
        dependent = job(JobStatus.FAILED, failed_by_chain_id=blocked.id, last_attempt_error="blocker")
        opted_in = job(JobStatus.PENDING, type_name="after")
        script.cancel = ChainsCancelled(
            cancelled=[running, blocked],
            running_job_ids=[running.id],
            previous_leased_by={running.id: "w1"},
            failed_jobs=[dependent],
            unblocked_jobs=[opted_in],
        )
        await listen(notify, recorder, [running.id, blocked.id, dependent.id], [running.id])
        async with client.transaction() as tx:
            await client.cancel_chains(tx, [running.id, blocked.id], reason="r")
            await settle()
            assert recorder.notices == []  # nothing before commit
            assert recorder.events == []
        await settle()
        assert sorted(recorder.notices) == sorted(
            [
                ("lost", running.id),
                ("finished", running.id),
                ("finished", blocked.id),
                ("finished", dependent.id),
                ("scheduled", "after"),
            ]
        )
        assert [e["job_id"] for e in recorder.named("job_cancelled")] == [running.id, blocked.id]
        assert [e["was_running"] for e in recorder.named("job_cancelled")] == [True, False]
        assert {e["reason"] for e in recorder.named("chain_cancelled")} == {"r"}
        assert [e["failed_by_chain_id"] for e in recorder.named("job_failed")] == [blocked.id]
        assert [e["chain_id"] for e in recorder.named("chain_failed")] == [dependent.chain_id]
        assert [e["job_id"] for e in recorder.named("job_unblocked")] == [opted_in.id]

    async def test_a_rollback_publishes_nothing(
        self, client: Client, script: Script, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        running = job(JobStatus.CANCELLED)
        script.cancel = ChainsCancelled(cancelled=[running], running_job_ids=[running.id])
        await listen(notify, recorder, [running.id], [running.id])

        async def cancel_then_fail() -> None:
            async with client.transaction() as tx:
                await client.cancel_chain(tx, running.id)
                raise RuntimeError("domain write failed")

        with pytest.raises(RuntimeError):
            await cancel_then_fail()
        await settle()
        assert recorder.notices == []
        assert recorder.events == []


# ---------------------------------------------------------------- retry


class TestRetryJobs:
    async def test_refusals_map_to_typed_errors_in_input_order(self, client: Client, script: Script) -> None:
        a, b, c, blocker = new_id(), new_id(), new_id(), new_id()
        script.retry = [
            JobsRetried(not_found=[c], not_retryable=[(b, "running")], blocked_by_failed=[(a, blocker)]),
            JobsRetried(not_found=[c], not_retryable=[(b, "running")], blocked_by_failed=[(a, blocker)]),
            JobsRetried(not_found=[c], not_retryable=[(b, "running")], blocked_by_failed=[(a, blocker)]),
        ]
        with pytest.raises(JobNotRetryableError) as blocked:
            async with client.transaction() as tx:
                await client.retry_jobs(tx, [a, b, c])
        assert blocked.value.job_id == a
        assert blocked.value.blocked_by_chain_id == blocker
        assert blocker in str(blocked.value)
        with pytest.raises(JobNotRetryableError) as not_retryable:
            async with client.transaction() as tx:
                await client.retry_jobs(tx, [b, a])
        assert (not_retryable.value.status, not_retryable.value.blocked_by_chain_id) == ("running", None)
        assert "running" in str(not_retryable.value)
        with pytest.raises(JobNotFoundError) as missing:
            async with client.transaction() as tx:
                await client.retry_job(tx, c)
        assert missing.value.job_id == c

    @pytest.mark.parametrize(
        ("job_ids", "schedule"),
        [
            ("0190a8a5-6b1e-7cc3-8a4e-3d2f7d1e9b10", None),
            (["nope"], None),
            (["0190a8a5-6b1e-7cc3-8a4e-3d2f7d1e9b10"], 5),
            (["0190a8a5-6b1e-7cc3-8a4e-3d2f7d1e9b10"], timedelta(seconds=5)),
        ],
    )
    async def test_bad_input_is_refused_before_the_adapter_is_called(
        self, client: Client, script: Script, job_ids: Any, schedule: Any
    ) -> None:
        with pytest.raises(InvalidArgumentError):
            async with client.transaction() as tx:
                await client.retry_jobs(tx, job_ids, schedule=schedule)
        assert script.sent(JobsRetry) == []

    async def test_sends_the_schedule_and_wakes_only_pending_jobs_after_commit(
        self, client: Client, script: Script, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        pending = job(JobStatus.PENDING, attempt=25, attempt_base=25)
        waiting = job(JobStatus.BLOCKED, type_name="after")
        dependent = job(JobStatus.BLOCKED, type_name="step")
        script.retry = [JobsRetried(retried=[waiting, pending], reblocked=[dependent])]
        await listen(notify, recorder, [], [])
        later = Schedule.in_seconds(30)
        async with client.transaction() as tx:
            retried = await client.retry_jobs(tx, [pending.id, waiting.id], schedule=later)
        await settle()
        assert [j.id for j in retried] == [pending.id, waiting.id]
        [sent] = script.sent(JobsRetry)
        assert sent.schedule == later
        assert sent.now == START
        assert recorder.notices == [("scheduled", "work")]
        assert [e["job_id"] for e in recorder.named("job_retried")] == [waiting.id, pending.id]
        assert [e["job_id"] for e in recorder.named("job_reblocked")] == [dependent.id]


class TestRetryChains:
    async def test_lists_failed_and_cancelled_last_jobs_by_the_filters_oldest_first(
        self, client: Client, script: Script
    ) -> None:
        async with client.transaction() as tx:
            result = await client.retry_chains(
                tx, type_names=[work], chain_type_names=["work"], error_types=["TimeoutError"], limit=20
            )
        assert result.retried == []
        assert not result.has_more
        [sent] = script.sent(JobsList)
        assert list(sent.statuses) == ["failed", "cancelled"]
        assert list(sent.type_names) == ["work"]
        assert list(sent.error_types) == ["TimeoutError"]
        assert sent.order == "asc"
        assert sent.limit == 20
        assert script.sent(JobsRetry) == []

    async def test_skips_propagated_failures_and_jobs_changed_meanwhile(
        self, client: Client, script: Script, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        blocker = job(JobStatus.FAILED)
        follower = job(JobStatus.FAILED, failed_by_chain_id=blocker.id)
        raced = job(JobStatus.FAILED)
        last = job(JobStatus.FAILED, type_name="after")
        script.pages = [Page(items=[blocker, follower], next_cursor="c1"), Page(items=[raced, last])]
        retried_blocker = replace(blocker, status=JobStatus.PENDING)
        script.retry = [
            JobsRetried(retried=[retried_blocker], reblocked=[replace(follower, status=JobStatus.BLOCKED)]),
            JobsRetried(not_retryable=[(raced.id, "pending")]),  # another transaction retried it
            JobsRetried(retried=[replace(last, status=JobStatus.PENDING)]),
        ]
        await listen(notify, recorder, [], [])
        async with client.transaction() as tx:
            result = await client.retry_chains(tx, limit=10)
        await settle()
        assert [j.id for j in result.retried] == [blocker.id, last.id]
        assert [j.id for j in result.reblocked] == [follower.id]
        assert not result.has_more
        assert [list(p.job_ids) for p in script.sent(JobsRetry)] == [
            [blocker.id],
            [raced.id, last.id],
            [last.id],
        ]
        assert [p.cursor for p in script.sent(JobsList)] == [None, "c1"]
        assert sorted(recorder.notices) == [("scheduled", "after"), ("scheduled", "work")]
        assert len(recorder.named("job_retried")) == 2  # the refused attempt buffered nothing

    async def test_stops_at_the_limit_and_says_more_may_remain(self, client: Client, script: Script) -> None:
        jobs = [job(JobStatus.FAILED) for _ in range(3)]
        script.pages = [Page(items=jobs, next_cursor=None)]
        script.retry = [JobsRetried(retried=[replace(j, status=JobStatus.PENDING) for j in jobs[:2]])]
        async with client.transaction() as tx:
            result = await client.retry_chains(tx, limit=2)
        assert [j.id for j in result.retried] == [j.id for j in jobs[:2]]
        assert result.has_more
        [sent] = script.sent(JobsRetry)
        assert list(sent.job_ids) == [j.id for j in jobs[:2]]

    @pytest.mark.parametrize(
        "options",
        [
            {"statuses": ["completed"]},
            {"statuses": []},
            {"statuses": "failed"},
            {"error_types": [""]},
            {"error_types": "TimeoutError"},
            {"limit": 0},
            {"limit": True},
            {"created_from": datetime(2030, 1, 1)},
            {"schedule": 3},
        ],
    )
    async def test_bad_filters_are_refused_before_any_read(
        self, client: Client, script: Script, options: dict[str, Any]
    ) -> None:
        with pytest.raises(InvalidArgumentError):
            async with client.transaction() as tx:
                await client.retry_chains(tx, **options)
        assert script.calls == []


# ---------------------------------------------------------------- listings and starts


class TestListings:
    async def test_dead_letters_are_failed_jobs_by_type_and_error_type(
        self, client: Client, script: Script
    ) -> None:
        async with client.transaction() as tx:
            await client.list_dead_letters(type_names=[work], error_types=["FailJob"], limit=7, tx=tx)
        [sent] = script.sent(JobsList)
        assert list(sent.statuses) == ["failed"]
        assert list(sent.type_names) == ["work"]
        assert list(sent.error_types) == ["FailJob"]
        assert sent.limit == 7

    async def test_list_jobs_takes_the_new_statuses_and_error_types(
        self, client: Client, script: Script
    ) -> None:
        async with client.transaction() as tx:
            await client.list_jobs(statuses=["failed", JobStatus.CANCELLED], error_types=["X"], tx=tx)
        [sent] = script.sent(JobsList)
        assert list(sent.statuses) == ["failed", "cancelled"]
        assert list(sent.error_types) == ["X"]

    @pytest.mark.parametrize("error_types", ["X", [3], [""]])
    async def test_bad_error_types_are_refused(self, client: Client, error_types: Any) -> None:
        with pytest.raises(InvalidArgumentError):
            await client.list_jobs(error_types=error_types)


class TestStartsCarryTheDownstreamPolicy:
    async def test_roots_and_continuations_store_runs_after_failed_blockers(
        self, client: Client, script: Script
    ) -> None:
        async with client.transaction() as tx:
            plain = await client.start_chain(tx, work, Item(1))
            await client.start_chain(tx, after, Item(2))

        async def hand_over(completion: Completion[Any, Any]) -> None:
            await completion.continue_with(tail, Item(3))

        async with client.transaction() as tx:
            await client.complete_chain(tx, work, plain.id, hand_over)
        sent = [(j.type_name, j.runs_after_failed_blockers) for p in script.sent(JobsCreate) for j in p.jobs]
        assert sent == [("work", False), ("after", True), ("tail", True)]


# ---------------------------------------------------------------- await_chain


class TestAwaitRaises:
    async def _started(self, client: Client) -> Chain:
        async with client.transaction() as tx:
            return (await client.start_chain(tx, work, Item(1), schedule=Schedule.in_seconds(3600))).chain

    async def test_a_failed_chain_raises_with_its_job_and_last_error(
        self, client: Client, script: Script
    ) -> None:
        chain = await self._started(client)
        failed = replace(chain.root, status=JobStatus.FAILED, last_attempt_error="boom", failed_at=START)
        script.chains[chain.id] = Chain(root=failed, last=failed)
        with pytest.raises(ChainFailedError) as raised:
            await client.await_chain(chain.id, timeout=30, poll_interval=3600)
        assert raised.value.chain_id == chain.id
        assert raised.value.job.id == chain.id
        assert raised.value.error == "boom"

    async def test_a_cancelled_chain_raises_with_the_reason(self, client: Client, script: Script) -> None:
        chain = await self._started(client)
        cancelled = replace(chain.root, status=JobStatus.CANCELLED, cancel_reason="not needed")
        script.chains[chain.id] = Chain(root=cancelled, last=cancelled)
        with pytest.raises(ChainCancelledError) as raised:
            await client.await_chain(chain.id, timeout=30, poll_interval=3600)
        assert raised.value.reason == "not needed"
        assert raised.value.job.status is JobStatus.CANCELLED

    async def test_the_chain_finished_notification_ends_the_wait_at_once(
        self, client: Client, script: Script, notify: MemoryNotifyAdapter
    ) -> None:
        chain = await self._started(client)
        waiter = asyncio.ensure_future(client.await_chain(chain.id, timeout=30, poll_interval=3600))
        await settle()
        assert not waiter.done()
        failed = replace(chain.root, status=JobStatus.FAILED, last_attempt_error="gave up")
        script.chains[chain.id] = Chain(root=failed, last=failed)
        await notify.publish_chain_completed(chain.id)
        async with asyncio.timeout(5):  # the poll interval is an hour: only the notice can end it
            with pytest.raises(ChainFailedError):
                await waiter

    async def test_polling_alone_ends_the_wait_when_the_chain_is_cancelled(self, script: Script) -> None:
        async with Client(ScriptedState(MemoryStateAdapter(), script), None, types) as polling:
            chain = await self._started(polling)
            waiter = asyncio.ensure_future(polling.await_chain(chain.id, timeout=30, poll_interval=0.01))
            await settle()
            cancelled = replace(chain.root, status=JobStatus.CANCELLED, cancel_reason=None)
            script.chains[chain.id] = Chain(root=cancelled, last=cancelled)
            async with asyncio.timeout(5):
                with pytest.raises(ChainCancelledError) as raised:
                    await waiter
        assert raised.value.reason is None
        assert str(raised.value) == f"chain {chain.id} was cancelled"
