"""The subscription connection: desired channels, SUBSCRIBE confirmations, reader task, reconnects.

One reader task owns one redis-py ``PubSub`` per connection *epoch*. When the connection fails
the epoch ends: the reader logs the outage once, waits ``retry_interval``, opens a new PubSub
and subscribes every desired channel again, so subscriptions come back by themselves after a
Redis restart. redis-py's own reconnect-and-resubscribe path is never used: an epoch's
connection is *sealed* once open, so when redis-py tries to reopen it in place (redis-py 8 does
so inside its failure handler even with zero retries, from whichever task saw the failure) the
attempt fails like the broken socket did. Only a new epoch opens a socket, so no two tasks ever
read one connection, and the confirmation bookkeeping below stays exact.

Confirmations: Redis answers SUBSCRIBE/UNSUBSCRIBE in order, one reply per channel, so each
channel keeps a FIFO with one entry per command sent in this epoch; a reply pops the oldest
entry and resolves its future. ``listen_*`` waits on that future, so it returns once Redis has
the subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.connection import Connection, ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from jobchain.notifying import Outage

BROKER_ERRORS = (RedisError, OSError, asyncio.TimeoutError)
"""Errors that mean "Redis is not answering", never a bug in the caller's input."""

Dispatch = Callable[[str, str], None]


if TYPE_CHECKING:
    _ConnectionBase = Connection
else:
    # A plain mixin at run time, so it goes before any connection class (TCP, TLS, Unix socket).
    _ConnectionBase = object


class _EpochConnection(_ConnectionBase):
    """Mixed in before the pool's connection class: a sealed connection is never reopened."""

    jobchain_sealed = False

    async def _connect(self) -> None:
        if self.jobchain_sealed:
            raise RedisConnectionError("the subscription connection broke; a new epoch reconnects")
        # Through a typed alias: redis-py leaves _connect unannotated in some releases only.
        connect: Callable[[], Awaitable[None]] = super()._connect
        await connect()


def seal_reconnects(pool: ConnectionPool) -> None:
    """Make ``pool``'s connections sealable (the pool must not have made one yet)."""
    base = pool.connection_class
    if not issubclass(base, _EpochConnection):
        pool.connection_class = type(f"Epoch{base.__name__}", (_EpochConnection, base), {})


class Subscriber:
    """Keeps the desired channels subscribed on one connection, across reconnects."""

    def __init__(
        self,
        client: Redis,
        dispatch: Dispatch,
        *,
        outage: Outage,
        retry_interval: float,
        logger: logging.Logger,
    ) -> None:
        self._client = client
        seal_reconnects(client.connection_pool)
        self._dispatch = dispatch
        self._outage = outage
        self._retry_interval = retry_interval
        self._logger = logger
        self._desired: set[str] = set()
        self._pubsub: PubSub | None = None
        self._acks: dict[str, deque[asyncio.Future[bool] | None]] = {}
        self._waiting: dict[str, list[asyncio.Future[bool]]] = {}
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def subscribe(self, channel: str) -> asyncio.Future[bool]:
        """Want ``channel``; the future becomes True once Redis confirms, False if it can't now.

        While Redis is known to be down the future is False at once; the channel is still
        desired and is subscribed when the connection comes back.
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        async with self._lock:
            self._desired.add(channel)
            if self._task is None:
                self._task = asyncio.create_task(self._run(), name="jobchain-redis-subscriber")
            pubsub = self._pubsub
            if pubsub is None:
                if self._outage.down:
                    done.set_result(False)
                else:
                    self._waiting.setdefault(channel, []).append(done)
                return done
            if not await self._send(pubsub, "subscribe", channel, done):
                done.set_result(False)
        return done

    async def unsubscribe(self, channel: str) -> None:
        """Stop wanting ``channel``; best effort while Redis is down (a new epoch won't resubscribe)."""
        async with self._lock:
            self._desired.discard(channel)
            for waiter in self._waiting.pop(channel, ()):
                _resolve(waiter, False)
            if self._pubsub is not None:
                await self._send(self._pubsub, "unsubscribe", channel, None)

    async def close(self) -> None:
        """Stop the reader and drop the connection; pending waiters resolve False."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        async with self._lock:
            self._desired.clear()
            await self._end_epoch()

    async def _send(
        self, pubsub: PubSub, command: str, channel: str, done: asyncio.Future[bool] | None
    ) -> bool:
        # Register the confirmation slot before sending: the reply may be read while we await.
        acks = self._acks.setdefault(channel, deque())
        acks.append(done)
        try:
            if command == "subscribe":
                await pubsub.subscribe(channel)
            else:
                await pubsub.unsubscribe(channel)
        except BROKER_ERRORS as exc:
            # The reader sees the same broken connection and starts a new epoch.
            self._outage.failed(exc)
            with contextlib.suppress(ValueError):
                acks.remove(done)
            return False
        return True

    async def _run(self) -> None:
        while True:
            try:
                pubsub = await self._start_epoch()
                while True:
                    message = await pubsub.get_message(timeout=None)
                    if message is not None:
                        self._handle(message)
            except BROKER_ERRORS as exc:
                self._outage.failed(exc)
            except Exception:
                # A bug must not end the subscription for good: log it and start a new epoch.
                self._logger.exception("jobchain Redis subscriber failed; reconnecting")
            async with self._lock:
                await self._end_epoch()
            await asyncio.sleep(self._retry_interval)

    async def _start_epoch(self) -> PubSub:
        async with self._lock:
            pubsub = self._client.pubsub()
            try:
                await pubsub.connect()  # type: ignore[no-untyped-call]  # redis-py leaves PubSub untyped
            except BaseException:
                await _close(pubsub)
                raise
            _seal(pubsub, True)
            self._pubsub = pubsub
            waiting, self._waiting = self._waiting, {}
            try:
                for channel in sorted(self._desired):
                    futures = waiting.pop(channel, [])
                    done = futures[0] if futures else None
                    if not await self._send(pubsub, "subscribe", channel, done):
                        raise ConnectionError(f"SUBSCRIBE {channel} failed")
                    for extra in futures[1:]:
                        self._chain(done, extra)
            finally:
                for futures in waiting.values():
                    for waiter in futures:
                        _resolve(waiter, False)
            self._outage.recovered()
            return pubsub

    @staticmethod
    def _chain(source: asyncio.Future[bool] | None, target: asyncio.Future[bool]) -> None:
        if source is None:
            _resolve(target, False)
            return
        source.add_done_callback(lambda f: _resolve(target, not f.cancelled() and f.result()))

    async def _end_epoch(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        for acks in self._acks.values():
            for done in acks:
                if done is not None:
                    _resolve(done, False)
        self._acks.clear()
        for futures in self._waiting.values():
            for waiter in futures:
                _resolve(waiter, False)
        self._waiting.clear()
        if pubsub is not None:
            # Closing hands the connection back to the pool, where the next epoch may reopen it.
            _seal(pubsub, False)
            with contextlib.suppress(*BROKER_ERRORS):
                await _close(pubsub)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        channel = _text(message.get("channel"))
        if kind == "message":
            self._dispatch(channel, _text(message.get("data")))
        elif kind in ("subscribe", "unsubscribe"):
            acks = self._acks.get(channel)
            if acks:
                done = acks.popleft()
                if done is not None:
                    _resolve(done, kind == "subscribe")


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


def _seal(pubsub: PubSub, sealed: bool) -> None:
    connection = pubsub.connection
    if isinstance(connection, _EpochConnection):
        connection.jobchain_sealed = sealed


def _close(pubsub: PubSub) -> Awaitable[None]:
    """``pubsub.aclose()``, typed: redis-py 8.2 annotates it, earlier releases leave it untyped,
    and a ``type: ignore`` would be wrong for one or the other under ``mypy --strict``."""
    aclose: Callable[[], Awaitable[None]] = pubsub.aclose
    return aclose()
