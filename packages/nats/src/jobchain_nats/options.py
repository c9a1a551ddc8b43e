"""NatsNotifyOptions: every setting of the NATS notify adapter, validated on construction.

The same settings come from the URL query, e.g.
``nats://127.0.0.1:4222?prefix=app&kv_bucket=jobchain_hints&kv_create=true&kv_ttl=60``.
Any other key is rejected with InvalidURLError naming a close match.
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

# Subject tokens: no whitespace, no wildcards ('*', '>'), no empty tokens.
_PREFIX_RE: Final = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
_BUCKET_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,100}")


@dataclass(frozen=True, kw_only=True, slots=True)
class NatsNotifyOptions:
    """Settings of :class:`~jobchain_nats.NatsNotifyAdapter`.

    ``prefix`` namespaces subjects (``{prefix}.sched`` …) and hint keys. ``kv_bucket`` names
    the JetStream key-value bucket holding wake-hint budgets; without it the hint methods
    are no-ops (every listener wakes) and the adapter does not declare WAKE_HINTS.
    ``kv_create`` creates the bucket (history 1, TTL ``kv_ttl``) when it does not exist; an
    existing bucket is bound as it is. ``connect_attempts``/``connect_retry_delay`` are the
    retry policy at start (the delay doubles per attempt); ``reconnect_wait`` is the pause
    between reconnect attempts after an outage (they never stop); ``request_timeout`` bounds
    each JetStream request (a hint request that times out fails open) and the flush that
    makes ``listen_*`` return once live (nats-py rounds it up to whole seconds).
    """

    prefix: str = DEFAULT_PREFIX
    kv_bucket: str | None = None
    kv_create: bool = False
    kv_ttl: timedelta = timedelta(seconds=60)
    cas_attempts: int = 5
    connect_timeout: timedelta = timedelta(seconds=5)
    connect_attempts: int = 1
    connect_retry_delay: timedelta = timedelta(milliseconds=500)
    reconnect_wait: timedelta = timedelta(milliseconds=500)
    request_timeout: timedelta = timedelta(seconds=1)
    ping_interval: timedelta = timedelta(seconds=10)
    max_outstanding_pings: int = 3
    """A server that answers none of ``max_outstanding_pings`` pings sent ``ping_interval``
    apart counts as gone and the adapter reconnects: about 30 s here, four minutes with
    nats-py's defaults (120 s, 2). nats-py rounds ``ping_interval`` up to whole seconds."""

    def __post_init__(self) -> None:
        if (
            not isinstance(self.prefix, str)
            or len(self.prefix) > 100
            or not _PREFIX_RE.fullmatch(self.prefix)
        ):
            raise InvalidArgumentError(
                f"NATS prefix {self.prefix!r} is invalid; use 1 to 100 letters, digits, '_' or '-', "
                "optionally in dot-separated tokens ('app.jobs'); no spaces, '*' or '>'"
            )
        if self.kv_bucket is not None and not _BUCKET_RE.fullmatch(self.kv_bucket):
            raise InvalidArgumentError(
                f"kv_bucket {self.kv_bucket!r} is invalid; use 1 to 100 letters, digits, '_' or '-'"
            )
        if self.kv_create and self.kv_bucket is None:
            raise InvalidArgumentError("kv_create needs kv_bucket: name the bucket to create")
        if self.kv_ttl < timedelta(seconds=1):
            raise InvalidArgumentError(f"kv_ttl must be at least 1 second, got {self.kv_ttl}")
        if self.cas_attempts < 1:
            raise InvalidArgumentError(f"cas_attempts must be >= 1, got {self.cas_attempts}")
        if self.connect_attempts < 1:
            raise InvalidArgumentError(f"connect_attempts must be >= 1, got {self.connect_attempts}")
        if self.max_outstanding_pings < 1:
            raise InvalidArgumentError(
                f"max_outstanding_pings must be >= 1, got {self.max_outstanding_pings}"
            )
        if not timedelta(0) < self.ping_interval <= timedelta(hours=1):
            raise InvalidArgumentError(f"ping_interval must be from 1 s to 3600 s, got {self.ping_interval}")
        for name in ("connect_timeout", "reconnect_wait", "request_timeout"):
            if getattr(self, name) <= timedelta(0):
                raise InvalidArgumentError(f"{name} must be positive, got {getattr(self, name)}")
        if self.connect_retry_delay < timedelta(0):
            raise InvalidArgumentError(f"connect_retry_delay must be >= 0, got {self.connect_retry_delay}")

    @property
    def subject_scheduled(self) -> str:
        return f"{self.prefix}.sched"

    @property
    def subject_chain_completed(self) -> str:
        return f"{self.prefix}.chainc"

    @property
    def subject_ownership_lost(self) -> str:
        return f"{self.prefix}.owls"


def _seconds(value: str) -> timedelta:
    seconds = float(value)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(value)
    return timedelta(seconds=seconds)


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


_QUERY_OPTIONS: Final[Mapping[str, Callable[[str], object]]] = {
    "prefix": str,
    "kv_bucket": str,
    "kv_create": _bool,
    "kv_ttl": _seconds,
    "cas_attempts": int,
    "connect_timeout": _seconds,
    "connect_attempts": int,
    "connect_retry_delay": _seconds,
    "reconnect_wait": _seconds,
    "request_timeout": _seconds,
    "ping_interval": _seconds,
    "max_outstanding_pings": int,
}


def parse_url(url: BackendURL | str) -> tuple[BackendURL, NatsNotifyOptions]:
    """Split ``url`` into the server URL nats-py should see and the adapter's options.

    Raises InvalidURLError naming the part to change.
    """
    parsed = url if isinstance(url, BackendURL) else BackendURL.parse(url)
    if parsed.scheme != "nats":
        raise InvalidURLError(f"{parsed} is not a NATS URL; expected nats://host:4222")
    if parsed.driver is not None:
        raise InvalidURLError(f"{parsed} names a driver ({parsed.driver!r}); the NATS backend takes none")
    if parsed.database is not None:
        raise InvalidURLError(f"{parsed} has a path ({parsed.database!r}); a NATS URL is nats://host:port")
    check_query_keys(parsed, _QUERY_OPTIONS, backend="jobchain-nats")
    ours: dict[str, object] = {}
    for key, value in parsed.query.items():
        convert = _QUERY_OPTIONS[key]
        try:
            ours[key] = convert(value)
        except ValueError:
            raise InvalidURLError(f"the query parameter {key}={value!r} of {parsed} is not valid") from None
    try:
        options = NatsNotifyOptions(**ours)  # type: ignore[arg-type]  # values converted per field above
    except InvalidArgumentError as exc:
        raise InvalidURLError(f"{exc} (in {parsed})") from None
    server = BackendURL(
        scheme="nats",
        username=parsed.username,
        password=parsed.password,
        host=parsed.host,
        port=parsed.port,
    )
    return server, options


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


__all__ = ["DEFAULT_PREFIX", "MAX_PAYLOAD_BYTES", "NatsNotifyOptions", "check_payload", "parse_url"]
