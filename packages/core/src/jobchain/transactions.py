"""Transaction hooks: side effects buffered during a transaction and flushed after commit.

A notification or observability event about a write must not escape before the write is
durable, and must never escape if the write rolls back. :class:`TransactionHooks` buffers
them; the client flushes the buffer after the state transaction commits and discards it
on rollback. Savepoints take a checkpoint, so rolling a savepoint back discards exactly
what was buffered inside it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from jobchain.contracts.notify import NotifyAdapter, PublishesChainsInBulk
from jobchain.contracts.observe import Event, Observer
from jobchain.contracts.state import StateTx
from jobchain.errors import HookNotRegisteredError, TransactionRequiredError

if TYPE_CHECKING:
    from jobchain.end_hooks import EndHookWakes
    from jobchain.entities import Job

logger = logging.getLogger("jobchain.transactions")

S = TypeVar("S")


@dataclass(slots=True)
class Hook(Generic[S]):
    """A user-defined buffer: ``state`` plus what to do with it after commit.

    ``flush(state)`` runs after commit (errors are logged, never raised); ``discard(state)``
    runs on rollback. ``snapshot(state)`` returns a copy taken at a savepoint, restored if
    that savepoint rolls back; without it the state is kept as is on savepoint rollback.
    """

    state: S
    flush: Callable[[S], Awaitable[None]]
    discard: Callable[[S], None] | None = None
    snapshot: Callable[[S], S] | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The buffers' contents at a savepoint (opaque; pass it to :meth:`TransactionHooks.rollback_to`)."""

    scheduled: dict[str, int]
    chains_completed: tuple[str, ...]
    ownership_lost: tuple[str, ...]
    events: int
    hooks: dict[object, tuple[Hook[Any], Any]] = field(default_factory=dict)
    witnesses: int = 0


class TransactionHooks:
    """Buffers the side effects of one transaction until it commits.

    Built-in buffers: per-type scheduled counts, completed chain ids, ownership-lost job
    ids and an ordered list of observability events. Generic keyed hooks
    (:meth:`set`/:meth:`get`/...) carry anything else.
    """

    def __init__(self, *, record_events: bool = True, end_hooks: EndHookWakes | None = None) -> None:
        self.records_events = record_events
        self._end_hooks = end_hooks
        """False when nobody observes: :meth:`event` then drops events without building them."""
        self._scheduled: dict[str, int] = {}  # a plain dict: a Counter costs more to create
        self._chains_completed: dict[str, None] = {}
        self._ownership_lost: dict[str, None] = {}
        self._events: list[Event] = []
        self._hooks: dict[object, Hook[Any]] = {}
        self._witnesses: list[str] = []
        self._closed = False

    # ------------------------------------------------------------ built-in buffers

    def job_scheduled(self, type_name: str, count: int = 1) -> None:
        """Buffer ``count`` newly eligible jobs of ``type_name`` (wake hint + scheduled notify)."""
        self._check_open()
        if count > 0:
            self._scheduled[type_name] = self._scheduled.get(type_name, 0) + count

    def job_ended(self, job: Job) -> None:
        """Buffer wake-ups for the hook jobs ``job``'s failure or cancellation started."""
        if self._end_hooks is not None:
            for hook_type in self._end_hooks.started_by(job):
                self.job_scheduled(hook_type)

    def chain_completed(self, chain_id: str) -> None:
        """Buffer a chain-completed notification."""
        self._check_open()
        self._chains_completed[chain_id] = None

    def ownership_lost(self, job_id: str) -> None:
        """Buffer an ownership-lost notification for a job a worker may be running."""
        self._check_open()
        self._ownership_lost[job_id] = None

    def event(self, name: str, **attributes: Any) -> None:
        """Buffer an observability event; observers receive it after commit, in order."""
        self._check_open()
        if self.records_events:
            self._events.append(Event(name, dict(attributes)))

    def witness(self, chain_id: str) -> None:
        """Remember a chain this transaction created: finding it later proves the commit.

        Kept once (the first); a savepoint rollback forgets a witness created inside it.
        Used for joined transactions, whose commit jobchain cannot see (see ``jobchain.joined``).
        """
        self._check_open()
        if not self._witnesses:
            self._witnesses.append(chain_id)

    @property
    def witness_id(self) -> str | None:
        """The chain remembered by :meth:`witness`, if any."""
        return self._witnesses[0] if self._witnesses else None

    def pending(self, *, notify: bool = True) -> bool:
        """True while something waits to be flushed: an event, a hook, or (with ``notify``) a wake-up."""
        wakeups = notify and bool(self._scheduled or self._chains_completed or self._ownership_lost)
        return wakeups or bool(self._events or self._hooks)

    @property
    def scheduled(self) -> dict[str, int]:
        """Buffered scheduled counts by type name (a copy)."""
        return dict(self._scheduled)

    @property
    def chains_completed(self) -> list[str]:
        return list(self._chains_completed)

    @property
    def ownership_lost_ids(self) -> list[str]:
        return list(self._ownership_lost)

    @property
    def events(self) -> list[Event]:
        return list(self._events)

    # ------------------------------------------------------------ generic keyed hooks

    def set(self, key: object, hook: Hook[Any]) -> None:
        """Register (or replace) the hook under ``key``."""
        self._check_open()
        self._hooks[key] = hook

    def get(self, key: object) -> Hook[Any]:
        """The hook under ``key``; HookNotRegisteredError if there is none."""
        try:
            return self._hooks[key]
        except KeyError:
            raise HookNotRegisteredError(f"no transaction hook registered under {key!r}") from None

    def get_or_insert(self, key: object, factory: Callable[[], Hook[S]]) -> Hook[S]:
        """The hook under ``key``, registering ``factory()`` first if there is none."""
        self._check_open()
        if key not in self._hooks:
            self._hooks[key] = factory()
        return self._hooks[key]

    def has(self, key: object) -> bool:
        return key in self._hooks

    def delete(self, key: object) -> None:
        """Remove the hook under ``key`` (no-op if absent); its discard is not called."""
        self._hooks.pop(key, None)

    # ------------------------------------------------------------ savepoints

    def checkpoint(self) -> Checkpoint:
        """Remember the buffers' current contents (taken when a savepoint opens)."""
        self._check_open()
        return Checkpoint(
            scheduled=dict(self._scheduled),
            chains_completed=tuple(self._chains_completed),
            ownership_lost=tuple(self._ownership_lost),
            events=len(self._events),
            witnesses=len(self._witnesses),
            hooks={
                key: (hook, hook.snapshot(hook.state) if hook.snapshot else hook.state)
                for key, hook in self._hooks.items()
            },
        )

    def rollback_to(self, checkpoint: Checkpoint) -> None:
        """Discard everything buffered since ``checkpoint`` (a savepoint rolled back)."""
        self._scheduled = dict(checkpoint.scheduled)
        self._chains_completed = dict.fromkeys(checkpoint.chains_completed)
        self._ownership_lost = dict.fromkeys(checkpoint.ownership_lost)
        del self._events[checkpoint.events :]
        del self._witnesses[checkpoint.witnesses :]
        for key, hook in list(self._hooks.items()):
            if key not in checkpoint.hooks or checkpoint.hooks[key][0] is not hook:
                _discard(key, hook)
        restored: dict[object, Hook[Any]] = {}
        for key, (hook, state) in checkpoint.hooks.items():
            if hook.snapshot is not None:
                hook.state = state
            restored[key] = hook
        self._hooks = restored

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """Checkpoint on entry; roll back to it if the block raises."""
        checkpoint = self.checkpoint()
        try:
            yield
        except BaseException:
            self.rollback_to(checkpoint)
            raise

    # ------------------------------------------------------------ end of transaction

    @property
    def closed(self) -> bool:
        """True once flushed or discarded."""
        return self._closed

    def discard(self) -> None:
        """Drop every buffer (the transaction rolled back)."""
        if self._closed:
            return
        self._closed = True
        for key, hook in self._hooks.items():
            _discard(key, hook)
        self._clear()

    async def flush(self, notify: NotifyAdapter | None, observers: Sequence[Observer] = ()) -> None:
        """Deliver every buffer (the transaction committed). Never raises for delivery errors."""
        if self._closed:
            return
        self._closed = True
        for event in self._events:
            for observer in observers:
                try:
                    observer.on_event(event)
                except Exception:
                    logger.exception("observer %r failed on event %s", observer, event.name)
        jobs: list[Awaitable[None]] = []
        if notify is not None:
            jobs += [_scheduled(notify, t, n) for t, n in self._scheduled.items()]
            chains = list(self._chains_completed)
            if len(chains) > 1 and isinstance(notify, PublishesChainsInBulk):
                jobs.append(notify.publish_chains_completed(chains))  # a group: one call for all
            else:
                jobs += [notify.publish_chain_completed(c) for c in chains]
            jobs += [notify.publish_job_ownership_lost(j) for j in self._ownership_lost]
        notify_count = len(jobs)
        jobs += [hook.flush(hook.state) for hook in self._hooks.values()]
        keys = list(self._hooks)
        self._clear()
        if not jobs:
            return
        results = await asyncio.gather(*jobs, return_exceptions=True)
        notify_errors = [r for r in results[:notify_count] if isinstance(r, BaseException)]
        if notify_errors:
            # Notifications are hints: workers and await_chain fall back to polling, so a
            # notify outage must not fail a caller whose transaction already committed.
            logger.warning(
                "notify failed after commit (%d of %d notifications lost; workers fall back to polling)",
                len(notify_errors),
                notify_count,
                exc_info=notify_errors[0],
            )
        for key, result in zip(keys, results[notify_count:], strict=True):
            if isinstance(result, BaseException):
                logger.error("transaction hook %r failed to flush", key, exc_info=result)

    def _clear(self) -> None:
        self._scheduled = {}
        self._chains_completed = {}
        self._ownership_lost = {}
        self._events = []
        self._hooks = {}
        self._witnesses = []

    def _check_open(self) -> None:
        if self._closed:
            raise TransactionRequiredError(
                "this transaction already committed or rolled back; open a new one with "
                "`async with client.transaction() as tx`"
            )


async def _scheduled(notify: NotifyAdapter, type_name: str, count: int) -> None:
    # The hint goes first so a woken worker finds the budget it may consume.
    await notify.provide_wake_hint(type_name, count)
    await notify.publish_job_scheduled(type_name)


def _discard(key: object, hook: Hook[Any]) -> None:
    if hook.discard is None:
        return
    try:
        hook.discard(hook.state)
    except Exception:
        logger.exception("transaction hook %r failed to discard", key)


class Transaction:
    """What a caller holds inside ``async with client.transaction() as tx``.

    ``state`` is the open state transaction (run your own adapter-level reads there);
    ``hooks`` buffers side effects until commit. Use :meth:`savepoint` for a nested unit
    of work whose writes *and* buffered side effects roll back together.
    """

    __slots__ = ("_active", "_deferred", "_owner", "hooks", "state")

    def __init__(self, state: StateTx, hooks: TransactionHooks, owner: object) -> None:
        self.state = state
        self.hooks = hooks
        self._owner = owner
        self._active = True
        self._deferred: Callable[[], Awaitable[None]] | None = None

    def defer_flush(self, flush: Callable[[], Awaitable[None]]) -> None:
        """Keep the buffered side effects for :meth:`flush` (a joined caller transaction)."""
        self._deferred = flush

    async def flush(self) -> None:
        """Send the side effects of a joined transaction; call it after your own commit.

        A no-op when jobchain committed the transaction itself (it flushed already).
        """
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            await deferred()

    @property
    def active(self) -> bool:
        """False once the transaction (or this savepoint) has ended."""
        return self._active and not self.hooks.closed

    def belongs_to(self, owner: object) -> bool:
        """True if this transaction was opened by ``owner`` and is still open."""
        return self._owner is owner and self.active

    def close(self) -> None:
        """Mark the transaction ended (done by whoever opened it)."""
        self._active = False

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[Transaction]:
        """A state savepoint plus a hooks checkpoint: an error inside rolls back both."""
        if not self.active:
            raise TransactionRequiredError("this transaction has ended; open a new one")
        checkpoint = self.hooks.checkpoint()
        inner: Transaction | None = None
        try:
            async with self.state.savepoint() as state_sp:
                inner = Transaction(state_sp, self.hooks, self._owner)
                yield inner
        except BaseException:
            self.hooks.rollback_to(checkpoint)
            raise
        finally:
            if inner is not None:
                inner.close()
