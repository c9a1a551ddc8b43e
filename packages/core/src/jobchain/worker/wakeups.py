"""Wake-ups: the worker's subscription to *job scheduled* and its use of wake hints.

Wake-ups are hints and the loop polls anyway, so a failed subscription never stops
claiming: it is logged and retried with the recovery backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobchain.worker.backoff import Backoff
from jobchain.worker.outage import FailureStreak
from jobchain.worker.rescues import Emit

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.contracts import Unsubscribe

log = logging.getLogger("jobchain.worker")


class WakeUps:
    """Listens for new jobs of ``type_names`` and calls ``wake`` when one is worth a claim."""

    def __init__(
        self,
        client: Client,
        type_names: list[str],
        worker_id: str,
        *,
        wake: Callable[[], None],
        wanted: Callable[[], bool],
        recovery: Backoff,
        emit: Emit,
    ) -> None:
        self._client = client
        self._type_names = type_names
        self._worker_id = worker_id
        self._wake = wake
        self._wanted = wanted
        self._recovery = recovery
        self._emit = emit
        self._unsubscribe: Unsubscribe | None = None
        self._streak = FailureStreak(log, f"worker {worker_id} subscription to wake-ups")
        self._retry_at = 0.0
        self._hint_checks: set[asyncio.Task[None]] = set()

    async def ensure_listening(self) -> None:
        """Subscribe if not subscribed yet (and not waiting out a failed try)."""
        if self._unsubscribe is not None or self._client.notify is None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._retry_at:
            return
        try:
            await self._listen()
        except Exception as error:
            delay = self._recovery.delay(self._streak.failures + 1).total_seconds()
            self._retry_at = loop.time() + delay
            self._streak.failed(error, f"polling meanwhile, next try in {delay:.1f} s")
            self._emit(
                "worker_error", {"error": repr(error), "operation": "listen_job_scheduled"}, log_line=False
            )
        else:
            self._streak.succeeded()

    async def _listen(self) -> None:
        notify = self._client.notify
        if notify is None:
            return
        self._unsubscribe = await notify.listen_job_scheduled(self._type_names, self._on_scheduled)

    async def close(self) -> None:
        """Unsubscribe and drop wake-hint checks still in flight."""
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            with contextlib.suppress(Exception):
                await unsubscribe()
        for task in list(self._hint_checks):
            task.cancel()
        await asyncio.gather(*self._hint_checks, return_exceptions=True)

    def _on_scheduled(self, type_name: str) -> None:
        if not self._wanted():
            return
        task = asyncio.get_running_loop().create_task(self._consume_hint(type_name))
        self._hint_checks.add(task)
        task.add_done_callback(self._hint_checks.discard)

    async def _consume_hint(self, type_name: str) -> None:
        notify = self._client.notify
        try:
            wake = notify is None or await notify.consume_wake_hint(type_name)
        except Exception:
            wake = True  # fail open: a needless wake-up is harmless, a missed one is not
        if wake:
            self._wake()
