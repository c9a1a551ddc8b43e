"""``queue_stats`` says when notifications are not arriving (issue 36, deliver 7): a notify
backend whose delivery self-check found it degraded shows in the stats an operator reads
(``jobchain stats``, the dashboard), with the reason, so slow wake-ups have a visible cause."""

from __future__ import annotations

from collections.abc import Callable

from jobchain import Client, JobTypes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter


class SelfChecked(MemoryNotifyAdapter):
    """The in-process notify backend with a delivery self-check whose verdict the test sets."""

    degraded = False
    degraded_reason: str | None = None

    async def check_delivery(self) -> bool:
        return not self.degraded

    def watch_delivery(self, watcher: Callable[[bool, str | None], None]) -> Callable[[], None]:
        return lambda: None


async def test_a_degraded_delivery_shows_in_queue_stats_with_its_reason() -> None:
    notify = SelfChecked()
    async with Client(MemoryStateAdapter(), notify, JobTypes()) as client:
        healthy = await client.queue_stats()
        assert (healthy.notify_degraded, healthy.notify_reason) == (False, None)
        notify.degraded, notify.degraded_reason = True, "no probe within 2 s"
        degraded = await client.queue_stats()
        assert (degraded.notify_degraded, degraded.notify_reason) == (True, "no probe within 2 s")


async def test_without_a_self_check_nothing_is_claimed() -> None:
    for notify in (None, MemoryNotifyAdapter()):
        async with Client(MemoryStateAdapter(), notify, JobTypes()) as client:
            stats = await client.queue_stats()
            assert (stats.notify_degraded, stats.notify_reason) == (False, None)
