"""RedisNotifyAdapter: the notify contract on Redis pub/sub plus Lua wake-hint budgets.

Layout (prefix ``jobchain`` by default):

* channels ``{prefix}:sched`` (type name), ``{prefix}:chainc`` (chain id), ``{prefix}:owls`` (job id);
* hint keys ``{prefix}:hint:{<type name>}``, strings holding the remaining wake budget, with a
  TTL refreshed by every provide.

Connections: one command connection (PUBLISH, EVALSHA) and one subscription connection that
carries one shared SUBSCRIBE per channel, multiplexing every listener.

Failure behaviour: a notification is a hint sent after commit. While Redis is unreachable,
publishing drops the message (logged once per outage), ``provide_wake_hint`` does nothing,
``consume_wake_hint`` returns True (a worker that wakes needlessly only polls once), and the
subscription connection reconnects and resubscribes by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Sequence
from datetime import timedelta
from typing import Final

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import AuthenticationError

from jobchain.contracts.capabilities import Capability
from jobchain.contracts.notify import Listener, Unsubscribe
from jobchain.errors import AdapterClosedError, BackendUnreachableError, InvalidArgumentError
from jobchain.notifying import Fanout, Outage
from jobchain.url import BackendURL
from jobchain_redis._subscriber import BROKER_ERRORS, Subscriber
from jobchain_redis.options import RedisNotifyOptions, check_payload, parse_url
from jobchain_redis.scripts import WAKE_HINT_CONSUME, WAKE_HINT_PROVIDE, load_script

KEEPALIVE_OPTIONS: Final = {
    socket.TCP_KEEPIDLE: 10,
    socket.TCP_KEEPINTVL: 5,
    socket.TCP_KEEPCNT: 3,
    socket.TCP_USER_TIMEOUT: 30_000,
}
"""TCP options of both connections, the bounds jobchain sets on PostgreSQL's too: an idle peer is
probed after 10 s of silence and given up after three unanswered probes 5 s apart (a subscription
waiting on a Redis that went silent notices within about 25 s, instead of the kernel's two
hours), and data Redis does not acknowledge for 30 s fails the call."""

MAX_CONNECT_RETRY_DELAY: Final = 10.0
"""Seconds: the doubling delay between connect attempts stops growing here."""

logger: Final = logging.getLogger("jobchain_redis")


class RedisNotifyAdapter:
    """The notify contract over Redis; build it with :meth:`connect` or :meth:`from_client`.

    Guarantees (suite: NotifyAdapterSuite): one subscription per channel shared by every
    listener, started with the first listener and stopped after the last; ``listen_*``
    returns once Redis confirmed SUBSCRIBE (or at once while Redis is down: the subscription
    comes back with the connection); a throwing listener never breaks its peers; after
    ``close()`` every call raises AdapterClosedError except unsubscribes.
    """

    capabilities: frozenset[Capability] = frozenset({Capability.WAKE_HINTS})

    def __init__(
        self,
        commands: Redis,
        subscriptions: Redis,
        *,
        options: RedisNotifyOptions | None = None,
        endpoint: str = "Redis",
        owns_commands: bool = True,
    ) -> None:
        """Use ``commands`` for PUBLISH/EVALSHA and ``subscriptions`` (owned, closed by us) for SUBSCRIBE.

        Prefer :meth:`connect`; ``subscriptions`` must be built with zero retries so the
        adapter alone handles its reconnects.
        """
        self.options = options or RedisNotifyOptions()
        self._commands = commands
        self._subscriptions = subscriptions
        self._owns_commands = owns_commands
        retry = self.options.retry_interval.total_seconds()
        self._commands_outage = Outage(f"{endpoint} (commands)", logger, retry_interval=retry)
        self._fanouts = {
            self.options.channel_scheduled: Fanout(logger),
            self.options.channel_chain_completed: Fanout(logger),
            self.options.channel_ownership_lost: Fanout(logger),
        }
        self._subscriber = Subscriber(
            subscriptions,
            self._dispatch,
            outage=Outage(f"{endpoint} (subscriptions)", logger, retry_interval=retry),
            retry_interval=retry,
            logger=logger,
        )
        self._provide: AsyncScript = commands.register_script(load_script(WAKE_HINT_PROVIDE))
        self._consume: AsyncScript = commands.register_script(load_script(WAKE_HINT_CONSUME))
        self._lock = asyncio.Lock()
        self._closed = False
        # Calls using the command client right now. close() waits for them: releasing the single
        # connection under a call lets redis-py open a fresh one on the closed client for the
        # next waiter, a connection nobody closes ("Unclosed Redis client" at garbage collection).
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._commands_closed = False

    @classmethod
    async def connect(
        cls, url: BackendURL | str, *, options: RedisNotifyOptions | None = None
    ) -> RedisNotifyAdapter:
        """Open both connections to ``url`` and load the scripts.

        ``options`` replaces the options read from the URL query when given. Raises
        InvalidURLError for a malformed URL and BackendUnreachableError (naming host and
        port) when Redis does not answer within ``connect_attempts`` attempts.
        """
        driver_url, url_options = parse_url(url)
        opts = options or url_options
        text = driver_url.render(hide_password=False)
        connect_timeout = opts.connect_timeout.total_seconds()
        command_timeout = opts.command_timeout.total_seconds()
        # One immediate retry covers a connection made stale by a Redis restart; no backoff, so
        # a publish during an outage never stalls the caller.
        commands = Redis.from_url(
            text,
            single_connection_client=True,
            retry=Retry(NoBackoff(), 1),
            client_name=f"jobchain:{opts.prefix}:commands",
            socket_connect_timeout=connect_timeout,
            socket_timeout=command_timeout,
            socket_keepalive=True,
            socket_keepalive_options=KEEPALIVE_OPTIONS,
        )
        subscriptions = Redis.from_url(
            text,
            retry=Retry(NoBackoff(), 0),
            client_name=f"jobchain:{opts.prefix}:subscriptions",
            socket_connect_timeout=connect_timeout,
            socket_timeout=command_timeout,
            socket_keepalive=True,
            socket_keepalive_options=KEEPALIVE_OPTIONS,
        )
        adapter = cls(commands, subscriptions, options=opts, endpoint=_endpoint(driver_url))
        try:
            await adapter._start(driver_url)
        except BaseException:
            await adapter.close()
            raise
        return adapter

    @classmethod
    async def from_client(
        cls, client: Redis, *, options: RedisNotifyOptions | None = None
    ) -> RedisNotifyAdapter:
        """Wrap the application's own client for commands (it stays open after ``close()``).

        The subscription connection is a new client with the same connection settings.
        """
        pool = client.connection_pool
        kwargs = dict(pool.connection_kwargs)
        kwargs["retry"] = Retry(NoBackoff(), 0)
        subscriptions = Redis.from_pool(ConnectionPool(connection_class=pool.connection_class, **kwargs))
        host, port = kwargs.get("host", "?"), kwargs.get("port", "?")
        adapter = cls(
            client, subscriptions, options=options, endpoint=f"Redis at {host}:{port}", owns_commands=False
        )
        try:
            await adapter._load_scripts()
        except BaseException:
            await adapter.close()
            raise
        return adapter

    async def _start(self, url: BackendURL) -> None:
        opts = self.options
        delay = opts.connect_retry_delay.total_seconds()
        where = f"{url.host or 'localhost'}:{url.port or 6379}"
        for attempt in range(1, opts.connect_attempts + 1):
            try:
                await self._load_scripts()
                return
            except AuthenticationError as exc:
                raise BackendUnreachableError(
                    f"Redis at {where} rejected the credentials ({exc}); fix the user name and "
                    f"password in {url}"
                ) from None
            except BROKER_ERRORS as exc:
                if attempt == opts.connect_attempts:
                    raise BackendUnreachableError(
                        f"cannot reach Redis at {where} after {attempt} attempt(s) "
                        f"({type(exc).__name__}: {exc}); start Redis, fix the host and port in {url}, "
                        "or allow more attempts with ?connect_attempts=N"
                    ) from None
                await asyncio.sleep(min(delay * 2 ** (attempt - 1), MAX_CONNECT_RETRY_DELAY))

    async def _load_scripts(self) -> None:
        # SCRIPT LOAD up front so the first EVALSHA hits; redis-py reloads on NOSCRIPT anyway
        # (e.g. after a restart or SCRIPT FLUSH).
        for script in (self._provide, self._consume):
            await self._commands.script_load(script.script)

    # -- publish ---------------------------------------------------------------------------

    async def publish_job_scheduled(self, type_name: str) -> None:
        await self._publish(self.options.channel_scheduled, check_payload("type name", type_name))

    async def publish_chain_completed(self, chain_id: str) -> None:
        await self._publish(self.options.channel_chain_completed, check_payload("chain id", chain_id))

    async def publish_chains_completed(self, chain_ids: Sequence[str]) -> None:
        """Publish many chain completions in one pipeline (one round trip)."""
        self._check_open()
        channel = self.options.channel_chain_completed
        payloads = [check_payload("chain id", chain_id) for chain_id in chain_ids]
        if not payloads or self._commands_outage.should_skip():
            return
        self._enter()
        try:
            async with self._commands.pipeline(transaction=False) as pipe:
                for payload in payloads:
                    pipe.publish(channel, payload)
                await pipe.execute()
        except BROKER_ERRORS as exc:
            self._commands_outage.failed(exc)
        else:
            self._commands_outage.recovered()
        finally:
            await self._leave()

    async def publish_job_ownership_lost(self, job_id: str) -> None:
        await self._publish(self.options.channel_ownership_lost, check_payload("job id", job_id))

    async def _publish(self, channel: str, payload: str) -> None:
        self._check_open()
        if self._commands_outage.should_skip():
            return
        self._enter()
        try:
            await self._commands.publish(channel, payload)
        except BROKER_ERRORS as exc:
            self._commands_outage.failed(exc)
        else:
            self._commands_outage.recovered()
        finally:
            await self._leave()

    # -- listen ----------------------------------------------------------------------------

    async def listen_job_scheduled(self, type_names: Sequence[str], listener: Listener) -> Unsubscribe:
        if isinstance(type_names, str):
            raise InvalidArgumentError("type_names must be a sequence of type names, not one string")
        keys = [check_payload("type name", name) for name in type_names]
        return await self._listen(self.options.channel_scheduled, keys, listener)

    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe:
        return await self._listen(
            self.options.channel_chain_completed, [check_payload("chain id", chain_id)], listener
        )

    async def listen_job_ownership_lost(self, job_id: str, listener: Listener) -> Unsubscribe:
        return await self._listen(
            self.options.channel_ownership_lost, [check_payload("job id", job_id)], listener
        )

    async def _listen(self, channel: str, keys: Sequence[str], listener: Listener) -> Unsubscribe:
        if not callable(listener):
            raise InvalidArgumentError(f"listener must be callable, got {listener!r}")
        fanout = self._fanouts[channel]
        async with self._lock:
            self._check_open()
            token = fanout.add(keys, listener)
            if len(fanout) == 1:
                confirmed = await self._subscriber.subscribe(channel)
                # Not live within the timeout (Redis slow or down): the subscription is still
                # wanted and comes back with the connection; the worker polls meanwhile.
                await asyncio.wait({confirmed}, timeout=self.options.subscribe_timeout.total_seconds())
        return _Unsubscriber(self, channel, token)

    async def _unlisten(self, channel: str, token: int) -> None:
        async with self._lock:
            if self._closed:
                return
            fanout = self._fanouts[channel]
            if fanout.remove(token) and len(fanout) == 0:
                await self._subscriber.unsubscribe(channel)

    def _dispatch(self, channel: str, payload: str) -> None:
        fanout = self._fanouts.get(channel)
        if fanout is not None:
            fanout.dispatch(payload)

    # -- wake hints ------------------------------------------------------------------------

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        """Add ``count`` wake slots for ``type_name`` (additive; TTL ``hint_ttl`` refreshed)."""
        self._check_open()
        key = self.options.hint_key(check_payload("type name", type_name))
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidArgumentError(f"count must be an integer >= 0, got {count!r}")
        if count == 0 or self._commands_outage.should_skip():
            return
        ttl = int(self.options.hint_ttl / timedelta(seconds=1))
        self._enter()
        try:
            await self._provide(keys=[key], args=[count, ttl])
        except BROKER_ERRORS as exc:
            self._commands_outage.failed(exc)
        else:
            self._commands_outage.recovered()
        finally:
            await self._leave()

    async def consume_wake_hint(self, type_name: str) -> bool:
        """Claim one wake slot: True on a claim, when no budget is tracked, or while Redis is down."""
        self._check_open()
        key = self.options.hint_key(check_payload("type name", type_name))
        if self._commands_outage.should_skip():
            return True
        self._enter()
        try:
            claimed = await self._consume(keys=[key])
        except BROKER_ERRORS as exc:
            self._commands_outage.failed(exc)
            return True
        finally:
            await self._leave()
        self._commands_outage.recovered()
        return bool(int(claimed))

    # -- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        """Tear down the shared subscriptions and connections; idempotent.

        Calls already accepted finish first (close waits up to ``connect_timeout`` plus
        ``command_timeout`` for them); one still running after that closes the command
        connection itself when it ends. The connections are closed even if this is cancelled.
        """
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            for fanout in self._fanouts.values():
                fanout.clear()
        try:
            await self._subscriber.close()
            bound = (self.options.connect_timeout + self.options.command_timeout).total_seconds()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), bound)
        finally:
            try:
                await self._subscriptions.aclose()
            finally:
                self._commands_closed = True
                await self._close_commands()

    def _check_open(self) -> None:
        if self._closed:
            raise AdapterClosedError("the Redis notify adapter is closed; open a new one")

    def _enter(self) -> None:
        self._inflight += 1
        self._idle.clear()

    async def _leave(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()
            if self._commands_closed:
                # close() stopped waiting for this call; redis-py may have opened a new
                # connection for it on the closed client: the last call out closes it.
                await self._close_commands()

    async def _close_commands(self) -> None:
        if self._owns_commands:
            await self._commands.aclose()


class _Unsubscriber:
    """The ``Unsubscribe`` callable ``listen_*`` returns: idempotent, safe after close."""

    __slots__ = ("_adapter", "_channel", "_done", "_token")

    def __init__(self, adapter: RedisNotifyAdapter, channel: str, token: int) -> None:
        self._adapter = adapter
        self._channel = channel
        self._token = token
        self._done = False

    async def __call__(self) -> None:
        if self._done:
            return
        self._done = True
        await self._adapter._unlisten(self._channel, self._token)


def _endpoint(url: BackendURL) -> str:
    return f"Redis at {url.host or 'localhost'}:{url.port or 6379}"


async def open_notify_adapter(url: BackendURL) -> RedisNotifyAdapter:
    """The ``jobchain`` entry-point factory for ``redis://`` and ``rediss://`` notify URLs."""
    return await RedisNotifyAdapter.connect(url)


__all__ = ["RedisNotifyAdapter", "open_notify_adapter"]
