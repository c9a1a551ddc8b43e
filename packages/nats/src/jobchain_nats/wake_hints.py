"""Wake-hint budgets in a JetStream key-value bucket, updated by revision compare-and-swap.

Key: ``{prefix}.hint.{encoded type name}``; value: the remaining budget as ASCII digits.
The bucket's TTL (max age) expires a budget that nobody touched for ``kv_ttl``; every
provide and consume writes a new revision, which refreshes it.

* provide: create the key if missing, else ``update(current + n, last=revision)``;
* consume: missing key → wake; value <= 0 → don't; else ``update(value - 1, last=revision)`` → wake.

Both retry on a wrong-last-sequence answer at most ``attempts`` times. An exhausted consume
returns False (other workers are claiming the same budget right now); an exhausted provide
deletes the key, so that every listener wakes (no budget tracked) rather than too few.

Binding the bucket (:func:`bind_bucket`) retries JetStream's transient server errors
(:func:`is_transient`) a few times with a short doubling pause; see ``TRANSIENT_ERR_CODES``.
"""

from __future__ import annotations

import asyncio
import logging
import string
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from jobchain.errors import InvalidArgumentError
from jobchain_nats.options import NatsNotifyOptions

_PLAIN: Final = frozenset(string.ascii_letters + string.digits + "_-")

logger: Final = logging.getLogger("jobchain_nats")

_T = TypeVar("_T")

TRANSIENT_ERR_CODES: Final = frozenset(
    {
        # JSStreamCreateErrF (500). The server answers "error creating store for stream" when
        # it cannot make the stream's directory; on one server that happens when the create
        # meets the cleanup of the account's last deleted stream, which removes the account's
        # store directory from a goroutine of its own after the delete was answered.
        10049,
        # JSClusterNotAvailErr (503) "JetStream system temporarily unavailable": no meta
        # leader yet (a cluster starting or electing).
        10008,
        # JSClusterNotLeaderErr (500) "JetStream cluster can not handle request": leadership
        # is moving.
        10009,
    }
)
"""JetStream API error codes (``err_code``) that describe a passing state of the server."""

BIND_ATTEMPTS: Final = 6
"""Tries of each JetStream request made to bind or create the bucket."""

BIND_RETRY_DELAY: Final = 0.05
"""Seconds before the second try; doubles after each (0.05 … 0.8 s, 1.55 s in all)."""


def encode_key_token(text: str) -> str:
    """Encode ``text`` into KV-key characters, injectively: other bytes become ``=XX`` (hex)."""
    out: list[str] = []
    for char in text:
        if char in _PLAIN:
            out.append(char)
        else:
            out.extend(f"={byte:02X}" for byte in char.encode("utf-8"))
    return "".join(out)


class KvWakeHints:
    """The provide/consume pair on one bound bucket."""

    def __init__(self, kv: KeyValue, prefix: str, *, attempts: int = 5) -> None:
        self._kv = kv
        self._prefix = prefix
        self._attempts = attempts

    def key(self, type_name: str) -> str:
        return f"{self._prefix}.hint.{encode_key_token(type_name)}"

    async def provide(self, type_name: str, count: int) -> bool:
        """Add ``count`` to the budget; False if contention exhausted the CAS retries."""
        key = self.key(type_name)
        for _ in range(self._attempts):
            try:
                entry = await self._kv.get(key)
            except KeyNotFoundError:  # also a deleted or purged key
                try:
                    await self._kv.create(key, str(count).encode())
                except KeyWrongLastSequenceError:
                    continue
                return True
            current = _budget(entry.value)
            try:
                await self._kv.update(key, str(max(current or 0, 0) + count).encode(), last=entry.revision)
            except KeyWrongLastSequenceError:
                continue
            return True
        # Fail open: a missing key means "no budget tracked", so every listener wakes.
        await self._kv.delete(key)
        return False

    async def consume(self, type_name: str) -> bool:
        """Claim one slot: True on a claim or when no budget is tracked; False when exhausted."""
        key = self.key(type_name)
        for _ in range(self._attempts):
            try:
                entry = await self._kv.get(key)
            except KeyNotFoundError:
                return True
            current = _budget(entry.value)
            if current is None:
                return True
            if current <= 0:
                return False
            try:
                await self._kv.update(key, str(current - 1).encode(), last=entry.revision)
            except KeyWrongLastSequenceError:
                continue
            return True
        return False


def _budget(value: bytes | None) -> int | None:
    """The stored budget, or None when the value is not a number (treated as "not tracked")."""
    try:
        return int(value or b"")
    except ValueError:
        return None


def is_transient(error: BaseException) -> bool:
    """True for a JetStream server error (5xx) in ``TRANSIENT_ERR_CODES``: worth another try.

    Never true for client errors (4xx: bad name, conflicting configuration, limits), for
    "JetStream not enabled", nor for "no responders" (nats-py's code-less 503).
    """
    return (
        isinstance(error, nats.js.errors.APIError)
        and error.code is not None
        and error.code >= 500
        and error.err_code in TRANSIENT_ERR_CODES
    )


async def retry_transient(call: Callable[[], Awaitable[_T]], what: str, where: str) -> _T:
    """Await ``call()``, again after a transient JetStream error (``BIND_ATTEMPTS`` tries in all).

    Every other error, and the last transient one, propagates unchanged. Each retry is
    logged at INFO on ``jobchain_nats`` with the error's ``err_code`` in ``record.nats_err_code``.
    """
    delay = BIND_RETRY_DELAY
    for attempt in range(1, BIND_ATTEMPTS + 1):
        try:
            return await call()
        except nats.js.errors.APIError as exc:
            if attempt == BIND_ATTEMPTS or not is_transient(exc):
                raise
            logger.info(
                "NATS at %s answered %s to %s (transient, attempt %d of %d); retrying in %.2f s",
                where,
                exc,
                what,
                attempt,
                BIND_ATTEMPTS,
                delay,
                extra={"nats_err_code": exc.err_code},
            )
        await asyncio.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover


async def bind_bucket(nc: Client, opts: NatsNotifyOptions, where: str) -> KeyValue:
    """Bind ``opts.kv_bucket``, creating it first when missing and ``opts.kv_create`` is set.

    Raises InvalidArgumentError when the bucket is missing (without ``kv_create``), JetStream
    is not enabled, or the server refuses the bucket; transient JetStream errors are retried
    (:func:`retry_transient`); other nats-py errors propagate for the caller to translate.
    """
    bucket = opts.kv_bucket
    assert bucket is not None
    js = nc.jetstream(timeout=opts.request_timeout.total_seconds())

    async def lookup() -> KeyValue:
        return await retry_transient(
            lambda: js.key_value(bucket), f"the lookup of KV bucket {bucket!r}", where
        )

    try:
        return await lookup()
    except nats.js.errors.BucketNotFoundError:
        if not opts.kv_create:
            raise InvalidArgumentError(
                f"the JetStream KV bucket {bucket!r} does not exist on NATS at {where}; create it "
                "(nats kv add) or pass kv_create=true"
            ) from None
    except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError) as exc:
        if is_transient(exc):
            raise
        # nats-py reports "no responders on $JS.API" as a 503 ServiceUnavailableError.
        raise InvalidArgumentError(
            f"JetStream is not enabled (or not available) on NATS at {where}; start nats-server with -js "
            "or drop kv_bucket (wake hints then become no-ops)"
        ) from None
    try:
        return await retry_transient(
            lambda: js.create_key_value(
                bucket=bucket,
                history=1,
                ttl=opts.kv_ttl.total_seconds(),
                description="jobchain wake hints",
            ),
            f"the creation of KV bucket {bucket!r}",
            where,
        )
    except nats.js.errors.BadRequestError as refused:
        # Usually another process created it first (with its own settings): bind that one.
        try:
            return await lookup()
        except nats.js.errors.BucketNotFoundError:
            raise InvalidArgumentError(
                f"NATS at {where} refused to create the JetStream KV bucket {bucket!r}: "
                f"{refused.description} (err_code {refused.err_code}); resolve that on the server "
                f"(e.g. another stream already takes the subjects $KV.{bucket}.>) or choose another kv_bucket"
            ) from None
