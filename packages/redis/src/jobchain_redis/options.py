"""RedisNotifyOptions: every setting of the Redis notify adapter, validated on construction.

The same settings come from the URL query (``redis://host:6379/0?prefix=app&hint_ttl=60``);
query parameters the adapter does not own are passed to redis-py when redis-py knows them
(``socket_keepalive``, ``health_check_interval``, …) and rejected otherwise, with
InvalidURLError naming a close match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from jobchain.errors import InvalidArgumentError, InvalidURLError
from jobchain.url import BackendURL, check_query_keys

DEFAULT_PREFIX: Final = "jobchain"
MAX_PAYLOAD_BYTES: Final = 1024
"""Longest type name, chain id or job id a notification carries, in UTF-8 bytes."""

_PREFIX_RE: Final = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
_SCHEMES: Final = frozenset({"redis", "rediss"})


@dataclass(frozen=True, kw_only=True, slots=True)
class RedisNotifyOptions:
    """Settings of :class:`~jobchain_redis.RedisNotifyAdapter`.

    ``prefix`` namespaces channels and hint keys, so several apps (or test runs) can share one
    Redis. ``hint_ttl`` is how long an unused wake budget lives (refreshed by every provide).
    ``connect_attempts`` and ``connect_retry_delay`` are the retry policy at start (the delay
    doubles per attempt); ``retry_interval`` is how long, after a failure, the adapter stops
    trying (publishes are dropped, hints fail open) before it tries Redis again.
    ``command_timeout`` bounds one command (PUBLISH, a hint script) so a stalled Redis delays
    the caller briefly, then counts as down. ``subscribe_timeout`` bounds how long
    ``listen_*`` waits for Redis to confirm SUBSCRIBE.
    """

    prefix: str = DEFAULT_PREFIX
    hint_ttl: timedelta = timedelta(seconds=60)
    connect_timeout: timedelta = timedelta(seconds=5)
    command_timeout: timedelta = timedelta(seconds=1)
    connect_attempts: int = 1
    connect_retry_delay: timedelta = timedelta(milliseconds=500)
    retry_interval: timedelta = timedelta(seconds=1)
    subscribe_timeout: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not _PREFIX_RE.fullmatch(self.prefix):
            raise InvalidArgumentError(
                f"Redis prefix {self.prefix!r} is invalid; use 1 to 100 letters, digits, '_', '-', "
                "'.' or ':' (no braces: they would change the Redis Cluster hash tag)"
            )
        if self.hint_ttl < timedelta(seconds=1) or self.hint_ttl % timedelta(seconds=1):
            raise InvalidArgumentError(
                f"hint_ttl must be a whole number of seconds >= 1, got {self.hint_ttl}"
            )
        if self.connect_attempts < 1:
            raise InvalidArgumentError(f"connect_attempts must be >= 1, got {self.connect_attempts}")
        for name in ("connect_timeout", "command_timeout", "retry_interval", "subscribe_timeout"):
            if getattr(self, name) <= timedelta(0):
                raise InvalidArgumentError(f"{name} must be positive, got {getattr(self, name)}")
        if self.connect_retry_delay < timedelta(0):
            raise InvalidArgumentError(f"connect_retry_delay must be >= 0, got {self.connect_retry_delay}")

    @property
    def channel_scheduled(self) -> str:
        return f"{self.prefix}:sched"

    @property
    def channel_chain_completed(self) -> str:
        return f"{self.prefix}:chainc"

    @property
    def channel_ownership_lost(self) -> str:
        return f"{self.prefix}:owls"

    def hint_key(self, type_name: str) -> str:
        """``{prefix}:hint:{<type name>}``: the braces are a Redis Cluster hash tag (see README)."""
        return f"{self.prefix}:hint:{{{type_name}}}"


def _seconds(value: str) -> timedelta:
    seconds = float(value)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(value)
    return timedelta(seconds=seconds)


_QUERY_OPTIONS: Final[Mapping[str, Callable[[str], object]]] = {
    "prefix": str,
    "hint_ttl": _seconds,
    "connect_timeout": _seconds,
    "command_timeout": _seconds,
    "connect_attempts": int,
    "connect_retry_delay": _seconds,
    "retry_interval": _seconds,
    "subscribe_timeout": _seconds,
}


def _driver_query_names() -> frozenset[str]:
    # Imported here so that plugin discovery (which imports options only through notify) stays light.
    from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS

    return frozenset(URL_QUERY_ARGUMENT_PARSERS) | {"ssl_cert_reqs", "ssl_ca_certs", "client_name"}


def parse_url(url: BackendURL | str) -> tuple[BackendURL, RedisNotifyOptions]:
    """Split ``url`` into the URL redis-py should see and the adapter's options.

    Raises InvalidURLError naming the part to change.
    """
    parsed = url if isinstance(url, BackendURL) else BackendURL.parse(url)
    if parsed.scheme not in _SCHEMES:
        raise InvalidURLError(f"{parsed} is not a Redis URL; expected redis:// or rediss://")
    if parsed.driver is not None:
        raise InvalidURLError(f"{parsed} names a driver ({parsed.driver!r}); the Redis backend takes none")
    if parsed.database is not None and not parsed.database.isdigit():
        raise InvalidURLError(
            f"the database of {parsed} must be a number (redis://host:6379/0), got {parsed.database!r}"
        )
    driver_names = _driver_query_names()
    check_query_keys(
        parsed,
        _QUERY_OPTIONS,
        backend="jobchain-redis",
        also=driver_names,
        also_note=f"redis-py connection options are accepted too ({', '.join(sorted(driver_names))})",
    )
    ours: dict[str, object] = {}
    theirs: dict[str, str] = {}
    for key, value in parsed.query.items():
        convert = _QUERY_OPTIONS.get(key)
        if convert is not None:
            try:
                ours[key] = convert(value)
            except ValueError:
                raise InvalidURLError(
                    f"the query parameter {key}={value!r} of {parsed} is not valid"
                ) from None
        else:
            theirs[key] = value  # a redis-py option: check_query_keys let only those through
    try:
        options = RedisNotifyOptions(**ours)  # type: ignore[arg-type]  # values converted per field above
    except InvalidArgumentError as exc:
        raise InvalidURLError(f"{exc} (in {parsed})") from None
    return BackendURL(
        scheme=parsed.scheme,
        username=parsed.username,
        password=parsed.password,
        host=parsed.host,
        port=parsed.port,
        database=parsed.database,
        query=theirs,
    ), options


def check_payload(what: str, value: object) -> str:
    """Validate a type name / chain id / job id carried by a notification."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{what} must be a non-empty string, got {value!r}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{what} {value!r} is not valid Unicode text (lone surrogate)") from None
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidArgumentError(
            f"{what} is {size} bytes long; notifications carry at most {MAX_PAYLOAD_BYTES} bytes, "
            f"shorten the {what}"
        )
    return value


__all__ = ["DEFAULT_PREFIX", "MAX_PAYLOAD_BYTES", "RedisNotifyOptions", "check_payload", "parse_url"]
