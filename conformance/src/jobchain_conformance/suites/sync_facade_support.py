"""Fixtures and helpers of the jobchain.sync suites: a recording notify adapter, the caller's
connection, and the clients under test.

Adopters subclass ``SyncFacadeSuite`` (own transactions) and ``SyncJoinedSuite`` (the caller's
transaction) from :mod:`jobchain_conformance.suites.sync_facade` and override::

    @pytest.fixture
    def sync_state_url(self) -> str: ...          # a fresh, empty database or schema
    @pytest.fixture(params=[...])
    def caller_connection(self, request, sync_state_url) -> Iterator[CallerConnection]: ...

Every case is a plain (synchronous) test: no event loop runs in the test's thread. Wake-ups
are recorded by :class:`RecordingNotify`, which also asks, at the moment of each publish,
which chains another client can see: a wake-up that leaves before the commit finds nothing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

import jobchain.sync
from jobchain import JobType, JobTypes
from jobchain.contracts import StateAdapter
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.sync import SyncClient

WAIT_TIMEOUT = 30.0
"""Bound of every wait in the sync suites (seconds), as the integration suite's: a passing case
takes a small fraction of it, and a starved machine must not fail one on time alone."""


@dataclass
class Item:
    """A job input."""

    n: int


@dataclass(frozen=True)
class Publish:
    """One recorded publish: what, and which chains another client saw at that moment."""

    kind: str
    value: str
    visible: frozenset[str]


@dataclass
class CallerConnection:
    """The caller's own connection, as a backend's test fixture provides it.

    ``connection`` is what goes to ``client.transaction(connection=…)``; ``commit`` and
    ``rollback`` end the caller's transaction; ``reports_commit`` is True where jobchain sees
    the commit (an ORM session reporting its commits), False where the caller calls ``tx.flush()``
    after committing (a bare driver connection).
    """

    connection: object
    commit: Callable[[], None]
    rollback: Callable[[], None]
    reports_commit: bool
    name: str = ""


class RecordingNotify(MemoryNotifyAdapter):
    """The in-process notify adapter, recording every publish with what was visible then."""

    def __init__(self) -> None:
        super().__init__()
        self.probe: Callable[[], frozenset[str]] = frozenset
        self._published: list[Publish] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    async def _record(self, kind: str, value: str) -> None:
        # The probe reads through another client, on a thread without an event loop.
        visible = await asyncio.to_thread(self.probe)
        with self._changed:
            self._published.append(Publish(kind, value, visible))
            self._changed.notify_all()

    async def publish_job_scheduled(self, type_name: str) -> None:
        await self._record("job_scheduled", type_name)
        await super().publish_job_scheduled(type_name)

    async def publish_chain_completed(self, chain_id: str) -> None:
        await self._record("chain_completed", chain_id)
        await super().publish_chain_completed(chain_id)

    @property
    def published(self) -> list[Publish]:
        with self._lock:
            return list(self._published)

    def wait_published(self, count: int = 1, timeout: float = WAIT_TIMEOUT) -> list[Publish]:
        """Wait (bounded) until ``count`` publishes are recorded; return them all."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._published) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    pytest.fail(f"expected {count} publish(es) within {timeout:g} s, got {self._published}")
                self._changed.wait(remaining)
            return list(self._published)


@dataclass
class SyncEnv:
    """The clients of one case: ``client`` (under test, recording notify) and ``other`` (reads)."""

    client: SyncClient
    other: SyncClient
    notify: RecordingNotify
    job_types: JobTypes
    item: JobType[Item, int]
    follow: JobType[Item, int]
    clients: list[SyncClient] = field(default_factory=list)

    def visible(self) -> frozenset[str]:
        """Chain ids another client sees now (committed ones)."""
        return frozenset(c.id for c in self.other.list_chains(limit=500).items)

    def chain_ids(self) -> list[str]:
        return [c.id for c in self.other.list_chains(order="asc", limit=500).items]

    def scheduled_publishes(self) -> list[Publish]:
        return [p for p in self.notify.published if p.kind == "job_scheduled"]


def define_types() -> tuple[JobTypes, JobType[Item, int], JobType[Item, int]]:
    types = JobTypes()
    follow = types.define("sync_follow", input=Item, output=int)
    item = types.define("sync_item", input=Item, output=int, entry=True, continues_with=[follow])
    return types, item, follow


def build_env(state: str | StateAdapter, url: str) -> Iterator[SyncEnv]:
    """Connect the clients of a case (migrating first) and close them afterwards."""
    types, item, follow = define_types()
    jobchain.sync.connect(url, notify="none", job_types=types, migrate=True).close()
    notify = RecordingNotify()
    client = jobchain.sync.connect(state, notify=notify, job_types=types, migrate=False, observers=())
    other = jobchain.sync.connect(url, notify="none", job_types=types, migrate=False, observers=())
    env = SyncEnv(client, other, notify, types, item, follow, [client, other])
    notify.probe = env.visible
    try:
        yield env
    finally:
        for opened in env.clients:
            opened.close()


def in_thread(target: Callable[[], Any]) -> threading.Thread:
    """Run ``target`` on a new thread (started); join it to re-raise nothing, check effects instead."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


class SyncSuiteBase:
    """Fixtures shared by the sync suites; adopters override ``sync_state_url`` (and
    ``caller_connection`` for the joined suite)."""

    @pytest.fixture
    def sync_state_url(self) -> str:
        raise NotImplementedError("override sync_state_url: the URL of a fresh database or schema")

    @pytest.fixture
    def sync_state(self, sync_state_url: str) -> str | StateAdapter:
        """What the client under test connects to: the URL (override to pass an adapter)."""
        return sync_state_url

    @pytest.fixture
    def env(self, sync_state: str | StateAdapter, sync_state_url: str) -> Iterator[SyncEnv]:
        yield from build_env(sync_state, sync_state_url)


def ids(items: Sequence[Any]) -> list[str]:
    return [item.id for item in items]


__all__ = [
    "WAIT_TIMEOUT",
    "CallerConnection",
    "Item",
    "Publish",
    "RecordingNotify",
    "SyncEnv",
    "SyncSuiteBase",
    "build_env",
    "define_types",
    "ids",
    "in_thread",
]
