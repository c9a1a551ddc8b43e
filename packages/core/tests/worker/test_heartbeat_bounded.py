"""A heartbeat that gets no answer is abandoned within a stated bound, even when the driver
does not give up on its own cancellation (issue 35, deliver 4).

psycopg waits up to about ten seconds for a cancelled query (a cancel request, then the
query's end) before it closes the connection; on a vanished peer that wait is the whole ten
seconds. The heartbeat abandons its call after ``give_up`` and does not wait for the driver's
cleanup: the call is left to finish in the background."""

from __future__ import annotations

import asyncio
from typing import Any

from jobchain import Client, JobTypes
from jobchain.contracts import WorkerHeartbeat
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker.heartbeat import Heartbeat, WorkerIdentity

BOUND = 30.0


class StubbornHeartbeats(MemoryStateAdapter):
    """Heartbeats never answer once ``hang`` is set, and ignore their cancellation until
    ``release`` is set: a driver stuck in its own cancellation."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.release = asyncio.Event()
        self.cleaned_up = asyncio.Event()

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        opened = super().transaction(read_only=read_only, connection=connection)
        owner = self

        class Wrapped:
            async def __aenter__(self) -> Any:
                tx = await opened.__aenter__()
                beat = tx.worker_heartbeat

                async def worker_heartbeat(params: WorkerHeartbeat) -> Any:
                    if not owner.hang:
                        return await beat(params)
                    try:
                        await asyncio.Event().wait()
                    finally:
                        # Swallow cancellation until released, as a stuck driver would.
                        while not owner.release.is_set():
                            try:
                                await owner.release.wait()
                            except asyncio.CancelledError:
                                continue
                        owner.cleaned_up.set()

                tx.worker_heartbeat = worker_heartbeat
                return tx

            async def __aexit__(self, *exc: Any) -> Any:
                return await opened.__aexit__(*exc)

        return Wrapped()


async def test_a_stuck_heartbeat_is_abandoned_without_waiting_for_the_drivers_cleanup() -> None:
    state = StubbornHeartbeats()
    client = Client(state, None, JobTypes())
    identity = WorkerIdentity(worker_id="me-1", name="me", type_names=("t",), concurrency=1)
    heartbeat = Heartbeat(
        client,
        identity,
        interval=2.0,
        missed=3,
        inflight=lambda: 0,
        on_beat=lambda result, recovered: None,
        on_fatal=lambda error: None,
        emit=lambda name, attributes, /, *, log_line=True: None,
    )
    assert await heartbeat.beat() is not None
    state.hang = True
    try:
        # A task and wait(): asyncio.timeout could not interrupt a beat stuck on the driver.
        stuck = asyncio.ensure_future(heartbeat.beat(give_up_after=0.05))
        done, _ = await asyncio.wait({stuck}, timeout=BOUND)
        assert stuck in done, "beat() waited for a driver stuck in its cancellation"
        assert stuck.result() is None
        assert not state.cleaned_up.is_set()  # still stuck: beat() did not wait for it
        state.hang = False
        # The next heartbeat is not held behind the abandoned one.
        async with asyncio.timeout(BOUND):
            assert await heartbeat.beat() is not None
    finally:
        state.release.set()
        async with asyncio.timeout(BOUND):
            await state.cleaned_up.wait()
        await heartbeat.stop()
