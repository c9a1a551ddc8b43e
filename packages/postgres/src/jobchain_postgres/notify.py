"""PostgresNotifyAdapter: jobchain notifications over PostgreSQL LISTEN/NOTIFY.

Three channels under a configurable prefix (default ``jobchain``): ``{prefix}_sched`` (payload:
job type name), ``{prefix}_chainc`` (chain id) and ``{prefix}_owls`` (job id). Publishing uses
``pg_notify`` on a small publishing connection; listening uses one dedicated connection per
adapter that multiplexes every listener (see :mod:`jobchain_postgres._listener`).

There are no wake hints: every listening worker re-queries, which SKIP LOCKED makes cheap, so
``consume_wake_hint`` always answers True and the adapter does not declare WAKE_HINTS.

Delivery self-check (``ChecksDelivery``): whenever the LISTEN connection (re)connects, and on
``check_delivery()``, a probe notification is sent on ``{prefix}_probe``. If it does not come
back within ``probe_timeout`` (for example behind a transaction-pooling proxy that drops
LISTEN), the adapter logs one warning and reports ``degraded``; workers keep working by
polling. A check with no listener registered LISTENs for its own probe (no false alarm), and
the watchers of ``watch_delivery`` hear each change of ``degraded`` once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import psycopg

from jobchain.contracts.capabilities import Capability
from jobchain.contracts.notify import DeliveryWatcher, Listener, Unsubscribe
from jobchain.url import BackendURL
from jobchain_postgres._listener import ListenConnection
from jobchain_postgres.errors import closed, translated, unreachable
from jobchain_postgres.options import NotifyOptions, notify_options, parse_url, target
from jobchain_postgres.providers import database_of
from jobchain_postgres.queries import plain
from jobchain_postgres.state import PostgresStateAdapter

__all__ = ["PostgresNotifyAdapter", "open_notify_adapter"]

log = logging.getLogger("jobchain_postgres.notify")

SCHEDULED: Final = "sched"
CHAIN_COMPLETED: Final = "chainc"
OWNERSHIP_LOST: Final = "owls"
PROBE: Final = "probe"

_MAX_NOTIFICATIONS_PER_SEND: Final = 500
"""Most notifications one coalesced pg_notify statement carries."""


class _AllSent:
    """A bulk publish's outcome: done once its last notification was sent, or failed with the
    first send that failed (its notifications may span several coalesced sends)."""

    __slots__ = ("future", "left")

    def __init__(self, future: asyncio.Future[None], count: int) -> None:
        self.future = future
        self.left = count

    def done(self) -> bool:
        return self.future.done()

    def set_result(self, _: None) -> None:
        self.left -= 1
        if self.left == 0 and not self.future.done():
            self.future.set_result(None)

    def set_exception(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


@dataclass(eq=False)
class _Subscription:
    """One listen_* call: its listener under one or more keys of one channel."""

    channel: str
    keys: tuple[str, ...]
    listener: Listener
    active: bool = field(default=True)


class PostgresNotifyAdapter:
    """Notifications through LISTEN/NOTIFY; one listening connection multiplexes every listener.

    Guarantees (suite: NotifyAdapterSuite): ``listen_*`` returns once LISTEN is live; a throwing
    listener is logged and never reaches its peers or the publisher; the listening connection
    reconnects (with backoff) after a drop; ``close()`` is idempotent and later calls raise
    AdapterClosedError, except unsubscribes, which stay safe.
    """

    capabilities: frozenset[Capability] = frozenset()

    def __init__(
        self,
        conninfo: str,
        options: NotifyOptions | None = None,
        *,
        display: str = "postgresql",
        listen_conninfo: str | None = None,
    ) -> None:
        """``conninfo`` is a libpq connection string. ``listen_conninfo`` sends the LISTEN
        connection elsewhere, e.g. straight to PostgreSQL when publishing goes through a
        transaction-pooling proxy (which cannot LISTEN)."""
        self.options = options or NotifyOptions()
        self._conninfo = conninfo
        self._listen_database = database_of(listen_conninfo or conninfo)
        self._display = display
        prefix = self.options.channel_prefix
        self._channels = {
            suffix: f"{prefix}_{suffix}" for suffix in (SCHEDULED, CHAIN_COMPLETED, OWNERSHIP_LOST)
        }
        self._probe_channel = f"{prefix}_{PROBE}"
        self._suffix_of = {name: suffix for suffix, name in self._channels.items()}
        self._subscriptions: dict[str, dict[str, list[_Subscription]]] = {s: {} for s in self._channels}
        self._count = 0
        self._changes = asyncio.Lock()  # serializes start/stop against subscribe/unsubscribe
        self._listen = ListenConnection(
            listen_conninfo or conninfo,
            [*self._channels.values(), self._probe_channel],
            self._dispatch,
            on_connected=self._start_probe,
            reconnect_initial=self.options.reconnect_initial,
            reconnect_max=self.options.reconnect_max,
        )
        self._publisher: psycopg.AsyncConnection[object] | None = None
        self._publish_lock = asyncio.Lock()
        self._outbox: list[tuple[str, str, asyncio.Future[None] | _AllSent]] = []
        self._sender: asyncio.Task[None] | None = None
        self._probes: dict[str, asyncio.Future[None]] = {}  # token -> its check's arrival
        self._probe_task: asyncio.Task[None] | None = None
        self._degraded = False
        self._degraded_reason: str | None = None
        self._watchers: list[DeliveryWatcher] = []
        self._warned = False
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("listening" if self._listen.running else "idle")
        return f"<PostgresNotifyAdapter {self._display} channels {self.options.channel_prefix}_* ({state})>"

    @classmethod
    async def open(cls, url: BackendURL | str, options: NotifyOptions | None = None) -> PostgresNotifyAdapter:
        """Check that the server accepts us, then return an adapter that connects lazily."""
        parsed = parse_url(url)
        resolved = notify_options(parsed, options)
        where = target(parsed, resolved.connect_timeout)
        try:
            probe = await psycopg.AsyncConnection.connect(where.conninfo)
            await probe.close()
        except psycopg.Error as exc:
            raise unreachable(exc, where.display) from None
        return cls(where.conninfo, resolved, display=where.display)

    # ------------------------------------------------------------ state

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def degraded(self) -> bool:
        """True when the last delivery self-check failed: notifications do not arrive, workers poll."""
        return self._degraded

    @property
    def degraded_reason(self) -> str | None:
        """Why the last self-check failed (``no probe within 2 s``, …); None while not degraded."""
        return self._degraded_reason

    @property
    def listening(self) -> bool:
        """True while the dedicated LISTEN connection is running (some listener is registered)."""
        return self._listen.running

    @property
    def listen_backend_pid(self) -> int | None:
        """Server process id of the LISTEN connection, e.g. for ``pg_terminate_backend`` in tests."""
        return self._listen.backend_pid

    @property
    def reconnects(self) -> int:
        return self._listen.reconnects

    def _check_open(self) -> None:
        if self._closed:
            raise closed()

    # ------------------------------------------------------------ publishing

    def announce_channel_for(self, state: object) -> str | None:
        """The job-scheduled channel, when ``state`` is a PostgreSQL state adapter working in
        the database this adapter listens on (``AnnouncesWithinState``): its starts then
        announce themselves within their own transaction."""
        if not isinstance(state, PostgresStateAdapter) or self._listen_database is None:
            return None
        return self._channels[SCHEDULED] if state.database == self._listen_database else None

    async def publish_job_scheduled(self, type_name: str) -> None:
        await self._publish(self._channels[SCHEDULED], type_name)

    async def publish_chain_completed(self, chain_id: str) -> None:
        await self._publish(self._channels[CHAIN_COMPLETED], chain_id)

    async def publish_chains_completed(self, chain_ids: Sequence[str]) -> None:
        """Publish many chain completions at once (a group commit's): they join the coalesced
        sends with one future for all of them instead of one each."""
        self._check_open()
        if not chain_ids:
            return
        channel = self._channels[CHAIN_COMPLETED]
        sent = _AllSent(asyncio.get_running_loop().create_future(), len(chain_ids))
        self._outbox.extend((channel, chain_id, sent) for chain_id in chain_ids)
        self._ensure_sender()
        await asyncio.shield(sent.future)

    async def publish_job_ownership_lost(self, job_id: str) -> None:
        await self._publish(self._channels[OWNERSHIP_LOST], job_id)

    async def _publish(self, channel: str, payload: str) -> None:
        self._check_open()
        # Coalesced: what is published while a send is in flight goes out with the next send,
        # as one statement, so many completions committing together cost one round trip.
        sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._outbox.append((channel, payload, sent))
        self._ensure_sender()
        await asyncio.shield(sent)

    def _ensure_sender(self) -> None:
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_outbox())

    async def _send_outbox(self) -> None:
        while self._outbox:
            batch, self._outbox = (
                self._outbox[:_MAX_NOTIFICATIONS_PER_SEND],
                self._outbox[_MAX_NOTIFICATIONS_PER_SEND:],
            )
            try:
                async with self._publish_lock:
                    self._check_open()  # closed while this batch waited: fail it, reconnect nothing
                    with translated():
                        try:
                            await self._send(batch)
                        except psycopg.OperationalError:
                            # The publishing connection died (server restart, idle timeout): one
                            # retry on a fresh connection.
                            await self._drop_publisher()
                            await self._send(batch)
            except Exception as error:
                for _, _, sent in batch:
                    if not sent.done():
                        sent.set_exception(error)
            else:
                for _, _, sent in batch:
                    if not sent.done():
                        sent.set_result(None)

    async def _send(self, batch: Sequence[tuple[str, str, object]]) -> None:
        if self._publisher is None or self._publisher.closed:
            self._publisher = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        if len(batch) == 1:
            [(channel, payload, _)] = batch
            await self._publisher.execute(plain("notify_publish"), {"channel": channel, "payload": payload})
            return
        await self._publisher.execute(
            plain("notify_publish_many"),
            {
                "channels": [channel for channel, _, _ in batch],
                "payloads": [payload for _, payload, _ in batch],
            },
        )

    async def _drop_publisher(self) -> None:
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            with contextlib.suppress(Exception):
                await publisher.close()

    # ------------------------------------------------------------ listening

    async def listen_job_scheduled(self, type_names: Sequence[str], listener: Listener) -> Unsubscribe:
        return await self._subscribe(SCHEDULED, tuple(dict.fromkeys(type_names)), listener)

    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe:
        return await self._subscribe(CHAIN_COMPLETED, (chain_id,), listener)

    async def listen_job_ownership_lost(self, job_id: str, listener: Listener) -> Unsubscribe:
        return await self._subscribe(OWNERSHIP_LOST, (job_id,), listener)

    async def _subscribe(self, channel: str, keys: tuple[str, ...], listener: Listener) -> Unsubscribe:
        self._check_open()
        subscription = _Subscription(channel, keys, listener)
        async with self._changes:
            self._check_open()
            await self._start_listening()
            by_key = self._subscriptions[channel]
            for key in keys:
                by_key.setdefault(key, []).append(subscription)
            self._count += 1

        async def unsubscribe() -> None:
            await self._unsubscribe(subscription)

        return unsubscribe

    async def _unsubscribe(self, subscription: _Subscription) -> None:
        async with self._changes:
            if not subscription.active:
                return
            subscription.active = False
            by_key = self._subscriptions[subscription.channel]
            for key in subscription.keys:
                entries = by_key.get(key, [])
                with contextlib.suppress(ValueError):
                    entries.remove(subscription)
                if not entries:
                    by_key.pop(key, None)
            self._count -= 1
            if self._count == 0:
                await self._stop_listening()

    async def _start_listening(self) -> None:
        """Open the LISTEN connection unless it runs (called holding ``_changes``)."""
        if not self._listen.running:
            try:
                with translated():
                    await self._listen.start()
            except BaseException:
                await self._listen.stop()
                raise

    async def _stop_listening(self) -> None:
        if self._probe_task is not None:
            self._probe_task.cancel()
            self._probe_task = None
        await self._listen.stop()

    def _dispatch(self, channel: str, payload: str) -> None:
        if channel == self._probe_channel:
            arrived = self._probes.get(payload)
            if arrived is not None and not arrived.done():
                arrived.set_result(None)
            return
        suffix = self._suffix_of.get(channel)
        if suffix is None:
            return
        for subscription in list(self._subscriptions[suffix].get(payload, ())):
            if not subscription.active:
                continue
            try:
                subscription.listener(payload)
            except Exception:
                log.exception(
                    "jobchain notify listener failed on %s %r; other listeners still run", channel, payload
                )

    # ------------------------------------------------------------ delivery self-check

    def _start_probe(self) -> None:
        if self._probe_task is not None:
            self._probe_task.cancel()
        self._probe_task = asyncio.get_running_loop().create_task(
            self._probe(), name="jobchain-postgres-probe"
        )

    async def _probe(self) -> None:
        # The probe of a (re)connect: the LISTEN connection is up and held by its listeners
        # (stopping it cancels this task), so it only checks, holding nothing.
        with contextlib.suppress(Exception):
            await self._run_check()

    async def check_delivery(self) -> bool:
        """Send a probe notification and wait for it on the LISTEN connection (self-check).

        Runs by itself whenever the LISTEN connection (re)connects. Returns False, logs one
        warning per adapter and sets ``degraded`` when the probe does not arrive within
        ``probe_timeout`` (workers then rely on polling); True clears ``degraded``. With no
        listener registered it opens the LISTEN connection for its own probe and closes it
        afterwards, so nothing listening is never mistaken for notifications being lost.
        Watchers (:meth:`watch_delivery`) hear each change of ``degraded`` once.
        """
        self._check_open()
        # Held like a listener for the check's duration: a last listener leaving meanwhile
        # does not close the connection the probe must arrive on.
        async with self._changes:
            self._check_open()
            try:
                await self._start_listening()
            except Exception as error:
                return self._failed(f"cannot LISTEN: {error}", warn=True)
            self._count += 1
        try:
            return await self._run_check()
        finally:
            async with self._changes:
                if not self._closed:
                    self._count -= 1
                    if self._count == 0:
                        await self._stop_listening()

    async def _run_check(self) -> bool:
        """Publish one probe and wait for it; record the verdict (the LISTEN connection runs)."""
        if not self._listen.connected:
            # Between a drop and the reconnect nothing is delivered; the reconnect probes again.
            return self._failed("the LISTEN connection is down (reconnecting)", warn=False)
        token = uuid.uuid4().hex
        arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._probes[token] = arrived
        try:
            await self._publish(self._probe_channel, token)
            await asyncio.wait_for(arrived, self.options.probe_timeout)
        except TimeoutError:
            if not self._listen.connected:
                return self._failed("the LISTEN connection is down (reconnecting)", warn=False)
            return self._failed(f"no probe within {self.options.probe_timeout:g} s", warn=True)
        except Exception as error:
            if self._closed:
                raise  # closed while probing: no verdict
            return self._failed(f"probe not sent: {error}", warn=True)
        finally:
            del self._probes[token]
            if arrived.done() and not arrived.cancelled():
                arrived.exception()  # retrieved: close() may have failed it after this check ended
        self._set_delivery(degraded=False, reason=None)
        return True

    def _failed(self, reason: str, *, warn: bool) -> bool:
        if warn and not self._warned:
            self._warned = True
            log.warning(
                "jobchain LISTEN/NOTIFY self-check failed on %s (%s): notifications are not delivered, "
                "workers fall back to polling. A transaction-pooling proxy (PgBouncer in transaction "
                "mode) drops LISTEN; point the notify URL at PostgreSQL directly or use another "
                "notify backend.",
                self._display,
                reason,
            )
        self._set_delivery(degraded=True, reason=reason)
        return False

    def _set_delivery(self, *, degraded: bool, reason: str | None) -> None:
        changed = degraded != self._degraded
        self._degraded = degraded
        self._degraded_reason = reason
        if not changed:
            return
        for watcher in list(self._watchers):
            try:
                watcher(degraded, reason)
            except Exception:
                log.exception("jobchain delivery watcher %r failed; other watchers still run", watcher)

    def watch_delivery(self, watcher: DeliveryWatcher) -> Callable[[], None]:
        """Call ``watcher(degraded, reason)`` on each change of ``degraded`` (not on every check).

        Returns an unwatch, safe to call twice. A watcher that raises is logged and ignored.
        """
        self._watchers.append(watcher)

        def unwatch() -> None:
            with contextlib.suppress(ValueError):
                self._watchers.remove(watcher)

        return unwatch

    # ------------------------------------------------------------ wake hints (not tracked)

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        """No budget is tracked: every listener re-queries (SKIP LOCKED makes that cheap)."""
        self._check_open()

    async def consume_wake_hint(self, type_name: str) -> bool:
        """Always True: without a tracked budget every woken worker looks for work."""
        self._check_open()
        return True

    # ------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Stop listening and close both connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for arrived in self._probes.values():  # a check in flight ends now, without a verdict
            if not arrived.done():
                arrived.set_exception(closed())
        async with self._changes:
            for by_key in self._subscriptions.values():
                for entries in by_key.values():
                    for subscription in entries:
                        subscription.active = False
                by_key.clear()
            self._count = 0
            await self._stop_listening()
        async with self._publish_lock:
            await self._drop_publisher()

    async def __aenter__(self) -> PostgresNotifyAdapter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def open_notify_adapter(url: BackendURL) -> PostgresNotifyAdapter:
    """Factory behind ``postgresql://`` and ``postgres://`` (notify role), named in ``plugin.py``."""
    return await PostgresNotifyAdapter.open(url)
