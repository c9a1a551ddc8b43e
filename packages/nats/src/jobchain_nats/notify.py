"""NatsNotifyAdapter: the notify contract on core NATS subjects plus JetStream KV wake hints.

Layout (prefix ``jobchain`` by default): subjects ``{prefix}.sched`` (type name),
``{prefix}.chainc`` (chain id), ``{prefix}.owls`` (job id); optional KV bucket with keys
``{prefix}.hint.{type}`` (see :mod:`jobchain_nats.wake_hints`).

One connection carries one shared subscription per subject, multiplexing every listener.

Failure behaviour: nats-py reconnects forever and replays the subscriptions by itself. While
the server is unreachable, publishing drops the message (logged once per outage) instead of
buffering stale wake-ups, ``provide_wake_hint`` does nothing and ``consume_wake_hint``
returns True (fail open: a worker that wakes needlessly only polls once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Sequence
from typing import Final

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.kv import KeyValue

from jobchain.contracts.capabilities import Capability
from jobchain.contracts.notify import Listener, Unsubscribe
from jobchain.errors import AdapterClosedError, BackendUnreachableError, InvalidArgumentError
from jobchain.notifying import Fanout, Outage
from jobchain.url import BackendURL
from jobchain_nats.options import NatsNotifyOptions, check_payload, parse_url
from jobchain_nats.wake_hints import KvWakeHints, bind_bucket

MAX_CONNECT_RETRY_DELAY: Final = 10.0
"""Seconds: the doubling delay between connect attempts stops growing here."""

logger: Final = logging.getLogger("jobchain_nats")

BROKER_ERRORS = (nats.errors.Error, OSError, asyncio.TimeoutError)
"""Errors that mean "NATS is not answering", never a bug in the caller's input."""


class NatsNotifyAdapter:
    """The notify contract over NATS; build it with :meth:`connect` or :meth:`from_connection`.

    Guarantees (suite: NotifyAdapterSuite): one subscription per subject shared by every
    listener, started with the first listener and stopped after the last; ``listen_*``
    returns once the server acknowledged the subscription (a flush round trip), or at once
    while NATS is down; a throwing listener never breaks its peers; after ``close()`` every
    call raises AdapterClosedError except unsubscribes. Declares WAKE_HINTS only with a KV bucket.
    """

    def __init__(
        self,
        connection: Client,
        *,
        options: NatsNotifyOptions | None = None,
        kv: KeyValue | None = None,
        owns_connection: bool = False,
        outage: Outage | None = None,
    ) -> None:
        """Use ``connection`` (closed by ``close()`` only if ``owns_connection``) and bucket ``kv``."""
        self.options = options or NatsNotifyOptions()
        self._nc = connection
        self._owns_connection = owns_connection
        self._outage = outage or Outage("NATS", logger, retry_interval=0.0)
        # JetStream can fail while the connection is fine (e.g. still recovering its streams
        # after a server restart): report that apart, once per episode.
        self._kv_outage = Outage(
            f"JetStream KV bucket {self.options.kv_bucket!r}", logger, retry_interval=0.0
        )
        self._hints = (
            None if kv is None else KvWakeHints(kv, self.options.prefix, attempts=self.options.cas_attempts)
        )
        self.capabilities: frozenset[Capability] = (
            frozenset({Capability.WAKE_HINTS}) if kv is not None else frozenset()
        )
        self._fanouts = {
            self.options.subject_scheduled: Fanout(logger),
            self.options.subject_chain_completed: Fanout(logger),
            self.options.subject_ownership_lost: Fanout(logger),
        }
        self._subscriptions: dict[str, Subscription] = {}
        self._flushes: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def connect(
        cls, url: BackendURL | str, *, options: NatsNotifyOptions | None = None
    ) -> NatsNotifyAdapter:
        """Connect to ``url`` and bind (or create) the KV bucket if one is configured.

        ``options`` replaces the options read from the URL query when given. Raises
        InvalidURLError for a malformed URL and BackendUnreachableError (naming host and
        port) when NATS does not answer within ``connect_attempts`` attempts.
        """
        server, url_options = parse_url(url)
        opts = options or url_options
        where = f"{server.host or 'localhost'}:{server.port or 4222}"
        outage = Outage(f"NATS at {where}", logger, retry_interval=0.0)
        nc = await _connect(server, opts, outage, where)
        adapter: NatsNotifyAdapter | None = None
        try:
            kv = await bind_bucket(nc, opts, where) if opts.kv_bucket else None
            adapter = cls(nc, options=opts, kv=kv, owns_connection=True, outage=outage)
        except BROKER_ERRORS as exc:
            raise BackendUnreachableError(
                f"NATS at {where} did not answer the JetStream KV request for bucket {opts.kv_bucket!r} "
                f"({type(exc).__name__}: {exc}); check that JetStream is enabled and reachable"
            ) from None
        finally:
            if adapter is None:
                outage.closing = True
                await nc.close()
        return adapter

    @classmethod
    async def from_connection(
        cls, connection: Client, *, options: NatsNotifyOptions | None = None
    ) -> NatsNotifyAdapter:
        """Wrap the application's own connection (it stays open after ``close()``).

        Its reconnect settings are the application's; binds or creates ``options.kv_bucket``.
        """
        opts = options or NatsNotifyOptions()
        kv = await bind_bucket(connection, opts, "the given connection") if opts.kv_bucket else None
        return cls(connection, options=opts, kv=kv)

    # -- publish ---------------------------------------------------------------------------

    async def publish_job_scheduled(self, type_name: str) -> None:
        await self._publish(self.options.subject_scheduled, check_payload("type name", type_name))

    async def publish_chain_completed(self, chain_id: str) -> None:
        await self._publish(self.options.subject_chain_completed, check_payload("chain id", chain_id))

    async def publish_chains_completed(self, chain_ids: Sequence[str]) -> None:
        """Publish many chain completions: nats-py's flusher writes them out together."""
        for chain_id in chain_ids:
            await self._publish(self.options.subject_chain_completed, check_payload("chain id", chain_id))

    async def publish_job_ownership_lost(self, job_id: str) -> None:
        await self._publish(self.options.subject_ownership_lost, check_payload("job id", job_id))

    async def _publish(self, subject: str, payload: str) -> None:
        self._check_open()
        if not self._nc.is_connected:
            # Don't let nats-py buffer it: a stale wake-up replayed after the outage is noise.
            self._outage.failed(ConnectionError("not connected"))
            return
        try:
            # nats-py's flusher task writes it at once; no flush round trip on the caller's path.
            await self._nc.publish(subject, payload.encode())
        except BROKER_ERRORS as exc:
            self._outage.failed(exc)
        else:
            self._outage.recovered()

    # -- listen ----------------------------------------------------------------------------

    async def listen_job_scheduled(self, type_names: Sequence[str], listener: Listener) -> Unsubscribe:
        if isinstance(type_names, str):
            raise InvalidArgumentError("type_names must be a sequence of type names, not one string")
        keys = [check_payload("type name", name) for name in type_names]
        return await self._listen(self.options.subject_scheduled, keys, listener)

    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe:
        keys = [check_payload("chain id", chain_id)]
        return await self._listen(self.options.subject_chain_completed, keys, listener)

    async def listen_job_ownership_lost(self, job_id: str, listener: Listener) -> Unsubscribe:
        keys = [check_payload("job id", job_id)]
        return await self._listen(self.options.subject_ownership_lost, keys, listener)

    async def _listen(self, subject: str, keys: Sequence[str], listener: Listener) -> Unsubscribe:
        if not callable(listener):
            raise InvalidArgumentError(f"listener must be callable, got {listener!r}")
        fanout = self._fanouts[subject]
        async with self._lock:
            self._check_open()
            if self._nc.is_closed:
                raise AdapterClosedError("the NATS connection is closed; open a new adapter")
            token = fanout.add(keys, listener)
            if subject not in self._subscriptions:
                try:
                    await self._subscribe(subject, fanout)
                except BaseException:
                    fanout.remove(token)
                    raise
        return _Unsubscriber(self, subject, token)

    async def _subscribe(self, subject: str, fanout: Fanout) -> None:
        async def deliver(message: Msg) -> None:
            fanout.dispatch(message.data.decode("utf-8", "replace"))

        # While reconnecting nats-py records the subscription and replays it on reconnect.
        self._subscriptions[subject] = await self._nc.subscribe(subject, cb=deliver)
        if not self._nc.is_connected:
            self._outage.failed(ConnectionError("not connected"))
            return
        await self._await_live()

    async def _await_live(self) -> None:
        """Wait (at most ``request_timeout``) for a PONG: the server then has processed SUB.

        Leaky: nats-py's ``flush(timeout)`` cancels its PONG future on timeout, and a PONG
        arriving later hits the cancelled future and kills nats-py's read loop (the
        connection then stays "connected" but hears nothing). So the flush itself gets a
        timeout of hours and runs as a task we merely stop waiting for; a reconnect orphans
        it and ``close()`` cancels it.
        """
        flush = asyncio.create_task(self._nc.flush(timeout=_FLUSH_FOREVER), name="jobchain-nats-flush")
        self._flushes.add(flush)
        flush.add_done_callback(self._flush_done)
        done, _ = await asyncio.wait({flush}, timeout=self.options.request_timeout.total_seconds())
        if flush in done and not flush.cancelled() and flush.exception() is not None:
            error = flush.exception()
            assert error is not None
            self._outage.failed(error)

    def _flush_done(self, flush: asyncio.Task[None]) -> None:
        self._flushes.discard(flush)
        if not flush.cancelled():
            flush.exception()  # retrieved: a late failure is the outage's business, not the loop's

    async def _unlisten(self, subject: str, token: int) -> None:
        async with self._lock:
            if self._closed:
                return
            fanout = self._fanouts[subject]
            if fanout.remove(token) and len(fanout) == 0:
                subscription = self._subscriptions.pop(subject, None)
                if subscription is not None:
                    await _drop(subscription)

    # -- wake hints ------------------------------------------------------------------------

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        """Add ``count`` wake slots for ``type_name``; a no-op without a KV bucket or while down."""
        self._check_open()
        check_payload("type name", type_name)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidArgumentError(f"count must be an integer >= 0, got {count!r}")
        if self._hints is None or count == 0:
            return
        if not self._nc.is_connected:
            self._outage.failed(ConnectionError("not connected"))
            return
        try:
            await self._hints.provide(type_name, count)
        except BROKER_ERRORS as exc:
            self._hints_failed(exc)
        else:
            self._kv_outage.recovered()

    async def consume_wake_hint(self, type_name: str) -> bool:
        """Claim one wake slot: True on a claim, with no budget tracked, without a bucket, or while down."""
        self._check_open()
        check_payload("type name", type_name)
        if self._hints is None:
            return True
        if not self._nc.is_connected:
            self._outage.failed(ConnectionError("not connected"))
            return True
        try:
            claimed = await self._hints.consume(type_name)
        except BROKER_ERRORS as exc:
            self._hints_failed(exc)
            return True
        self._kv_outage.recovered()
        return claimed

    def _hints_failed(self, error: BaseException) -> None:
        # A request sent just before nats-py noticed a dead connection times out; by now it
        # knows, and that outage is the connection's (logged once there), not JetStream's.
        if self._nc.is_connected:
            self._kv_outage.failed(error)
        else:
            self._outage.failed(error)

    # -- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        """Tear down the shared subscriptions (and the connection if owned); idempotent."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            self._outage.closing = True
            for fanout in self._fanouts.values():
                fanout.clear()
            subscriptions = list(self._subscriptions.values())
            self._subscriptions.clear()
        if self._owns_connection:
            if not self._nc.is_connected:
                # Leaky: nats-py's close() writes its pending buffer (e.g. a SUB queued while
                # reconnecting) to the dead socket and raises BrokenPipeError halfway through,
                # leaving subscription tasks behind. Nothing buffered can be delivered now.
                self._nc._pending = []
                self._nc._pending_data_size = 0
            try:
                with contextlib.suppress(*BROKER_ERRORS):
                    await self._nc.close()
            except asyncio.CancelledError:
                # Leaky: nats-py's close() cancels its reconnect task, which may be awaiting
                # the same "transport closed" future that close() then awaits; that future
                # is cancelled with the task. Only a cancel of our own task propagates.
                current = asyncio.current_task()
                if current is None or current.cancelling():
                    raise
            await _end_reconnecting(self._nc)
        else:
            for subscription in subscriptions:
                await _drop(subscription)
        for flush in list(self._flushes):
            flush.cancel()

    def _check_open(self) -> None:
        if self._closed:
            raise AdapterClosedError("the NATS notify adapter is closed; open a new one")


class _Unsubscriber:
    """The ``Unsubscribe`` callable ``listen_*`` returns: idempotent, safe after close."""

    __slots__ = ("_adapter", "_done", "_subject", "_token")

    def __init__(self, adapter: NatsNotifyAdapter, subject: str, token: int) -> None:
        self._adapter = adapter
        self._subject = subject
        self._token = token
        self._done = False

    async def __call__(self) -> None:
        if self._done:
            return
        self._done = True
        await self._adapter._unlisten(self._subject, self._token)


async def _end_reconnecting(nc: Client) -> None:
    """Leaky: nats-py's close() cancels its reconnect task once, and Python 3.11's wait_for
    swallows that cancel when a connect attempt fails in the same loop iteration; the task
    then reconnects forever (and blocks the event loop's shutdown). Cancel until it ends."""
    task = nc._reconnection_task
    for _ in range(100):
        if task is None or task.done():
            return
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)


async def _drop(subscription: Subscription) -> None:
    # Connection gone: the server dropped the subscription with it.
    with contextlib.suppress(*BROKER_ERRORS):
        await subscription.unsubscribe()


_FLUSH_FOREVER: Final = 6 * 3600
"""Seconds: a flush that never times out in practice (see ``_await_live``)."""


def _whole_seconds(seconds: float) -> int:
    # nats-py types its timeouts as int seconds.
    return max(1, math.ceil(seconds))


async def _connect(server: BackendURL, opts: NatsNotifyOptions, outage: Outage, where: str) -> Client:
    """Connect with the caller's retry policy, then reconnect forever after that."""

    async def on_error(error: Exception) -> None:
        # Every failed reconnect attempt lands here; the outage was already logged once.
        logger.debug("NATS at %s: %s: %s", where, type(error).__name__, error)

    async def on_disconnected() -> None:
        if not outage.closing:
            outage.failed(ConnectionError("disconnected"))

    async def on_reconnected() -> None:
        outage.recovered()

    text = server.render(hide_password=False)
    delay = opts.connect_retry_delay.total_seconds()
    for attempt in range(1, opts.connect_attempts + 1):
        try:
            nc = await nats.connect(
                servers=[text],
                error_cb=on_error,
                disconnected_cb=on_disconnected,
                reconnected_cb=on_reconnected,
                allow_reconnect=True,
                # nats-py tries a server (max_reconnect_attempts + 1) times before giving up;
                # our own loop is the user's retry policy, so keep each attempt short.
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                connect_timeout=_whole_seconds(opts.connect_timeout.total_seconds()),
                ping_interval=_whole_seconds(opts.ping_interval.total_seconds()),
                max_outstanding_pings=opts.max_outstanding_pings,
            )
        except nats.errors.Error as exc:
            if isinstance(exc, nats.errors.AuthorizationError) or "authorization" in str(exc).lower():
                raise BackendUnreachableError(
                    f"NATS at {where} rejected the credentials ({exc}); "
                    f"fix the user name and password in {server}"
                ) from None
            if attempt == opts.connect_attempts:
                raise BackendUnreachableError(
                    f"cannot reach NATS at {where} after {attempt} attempt(s) ({type(exc).__name__}: {exc}); "
                    f"start nats-server, fix the host and port in {server}, or allow more attempts "
                    "with ?connect_attempts=N"
                ) from None
            await asyncio.sleep(min(delay * 2 ** (attempt - 1), MAX_CONNECT_RETRY_DELAY))
            continue
        # Connected: from now on reconnect forever, waiting reconnect_wait between attempts.
        # nats-py reads these options at every reconnect; its connect() only takes int seconds.
        nc.options["max_reconnect_attempts"] = -1
        nc.options["reconnect_time_wait"] = opts.reconnect_wait.total_seconds()
        return nc
    raise AssertionError("unreachable")  # pragma: no cover


async def open_notify_adapter(url: BackendURL) -> NatsNotifyAdapter:
    """The ``jobchain`` entry-point factory for ``nats://`` notify URLs."""
    return await NatsNotifyAdapter.connect(url)


__all__ = ["NatsNotifyAdapter", "open_notify_adapter"]
