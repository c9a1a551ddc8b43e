"""Typed, validated options of the PostgreSQL adapters, and how a URL maps onto them.

``postgresql[+psycopg]://user:password@host:port/dbname?schema=jobs&table_prefix=jc_&claim=atomic-update``

Query keys that are libpq connection parameters (``sslmode``, ``application_name``,
``options``, ``connect_timeout`` …; the list comes from the installed libpq) are handed to
libpq unchanged; any other key is rejected with InvalidURLError before connecting, naming a
close match. The state and the notify adapter accept each other's keys, so one URL can serve
both roles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Final, Literal, get_args

import psycopg
from psycopg.conninfo import make_conninfo

from jobchain.errors import InvalidArgumentError, InvalidURLError
from jobchain.url import BackendURL, check_query_keys
from jobchain_postgres._identifiers import check_name, check_prefix, check_schema

Claim = Literal["skip-locked", "atomic-update"]
"""How jobs are claimed: ``FOR UPDATE SKIP LOCKED`` (PostgreSQL) or an atomic ``UPDATE … RETURNING``
with a status re-check (CockroachDB, YugabyteDB, Citus, where SKIP LOCKED is slow or unreliable)."""

SCHEMES: Final = ("postgresql", "postgres")
DRIVERS: Final = (None, "psycopg")


@dataclass(frozen=True, slots=True, kw_only=True)
class StateOptions:
    """Options of :class:`~jobchain_postgres.state.PostgresStateAdapter` (validated on construction)."""

    schema: str = "public"
    table_prefix: str = "jobchain_"
    claim: Claim = "skip-locked"
    pool_min_size: int = 1
    pool_max_size: int = 10
    prepare_threshold: int | None = 5
    """Executions after which psycopg prepares a statement server-side (0: at once; None: never,
    for transaction-pooling proxies such as PgBouncer in transaction mode)."""
    connect_timeout: float = 10.0

    def __post_init__(self) -> None:
        check_schema(self.schema)
        check_prefix(self.table_prefix)
        if self.claim not in get_args(Claim):
            raise InvalidArgumentError(f"claim must be 'skip-locked' or 'atomic-update', got {self.claim!r}")
        if self.pool_min_size < 0 or self.pool_max_size < max(1, self.pool_min_size):
            raise InvalidArgumentError(
                f"pool sizes must satisfy 0 <= pool_min_size <= pool_max_size and pool_max_size >= 1, "
                f"got {self.pool_min_size} and {self.pool_max_size}"
            )
        if self.prepare_threshold is not None and self.prepare_threshold < 0:
            raise InvalidArgumentError("prepare_threshold must be >= 0 or None")
        if self.connect_timeout <= 0:
            raise InvalidArgumentError("connect_timeout must be positive")


@dataclass(frozen=True, slots=True, kw_only=True)
class NotifyOptions:
    """Options of :class:`~jobchain_postgres.notify.PostgresNotifyAdapter`."""

    channel_prefix: str = "jobchain"
    probe_timeout: float = 2.0
    """Seconds the delivery self-check waits for its probe notification."""
    reconnect_initial: float = 0.1
    reconnect_max: float = 5.0
    connect_timeout: float = 10.0

    def __post_init__(self) -> None:
        check_name("channel_prefix", self.channel_prefix, reserve=len("_chainc") + 1)
        if (
            self.probe_timeout <= 0
            or self.reconnect_initial <= 0
            or self.reconnect_max < self.reconnect_initial
        ):
            raise InvalidArgumentError("probe_timeout and reconnect delays must be positive, initial <= max")


@dataclass(frozen=True, slots=True)
class Target:
    """Where to connect: a libpq conninfo string (with the password) and a printable form."""

    conninfo: str = field(repr=False)
    display: str


_STATE_KEYS: Final = {
    "schema": "schema",
    "table_prefix": "table_prefix",
    "prefix": "table_prefix",
    "claim": "claim",
    "pool_min_size": "pool_min_size",
    "pool_max_size": "pool_max_size",
    "prepare_threshold": "prepare_threshold",
}
_NOTIFY_KEYS: Final = {"channel_prefix": "channel_prefix", "probe_timeout": "probe_timeout"}
_ALL_KEYS: Final = frozenset(_STATE_KEYS) | frozenset(_NOTIFY_KEYS)


@cache
def libpq_keys() -> frozenset[str]:
    """The connection parameters the installed libpq knows (``sslmode``, ``application_name`` …)."""
    return frozenset(option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults())


def parse_url(url: BackendURL | str) -> BackendURL:
    """``url`` as a BackendURL whose scheme and driver this package serves.

    Raises InvalidURLError for a query key that is neither jobchain's nor libpq's.
    """
    parsed = url if isinstance(url, BackendURL) else BackendURL.parse(url)
    if parsed.scheme not in SCHEMES:
        raise InvalidURLError(f"{parsed} is not a PostgreSQL URL; use postgresql://user@host/dbname")
    if parsed.driver not in DRIVERS:
        raise InvalidURLError(
            f"{parsed} asks for driver {parsed.driver!r}; jobchain-postgres uses psycopg: postgresql+psycopg://…"
        )
    check_query_keys(
        parsed,
        _ALL_KEYS,
        backend="jobchain-postgres",
        also=libpq_keys(),
        also_note=(
            "libpq connection parameters (sslmode, application_name, connect_timeout, …) are accepted too"
        ),
    )
    return parsed


CONNECTION_BOUNDS: Final[tuple[tuple[str, str], ...]] = (
    ("keepalives", "1"),
    ("keepalives_idle", "10"),
    ("keepalives_interval", "5"),
    ("keepalives_count", "3"),
    ("tcp_user_timeout", "30000"),
)
"""libpq parameters every connection jobchain opens gets unless its URL sets them: a silent
peer is probed after 10 s idle and given up after three unanswered probes 5 s apart (25 s),
and data the peer does not acknowledge for 30 s fails the statement. The kernel's defaults
(two hours of silence, about fifteen minutes of retransmits) would keep a statement on a
vanished server waiting for as long."""


def target(url: BackendURL, connect_timeout: float) -> Target:
    """The libpq connection string for ``url`` (jobchain's own query keys removed), with
    :data:`CONNECTION_BOUNDS` where the URL sets none."""
    libpq: dict[str, str] = {key: value for key, value in url.query.items() if key not in _ALL_KEYS}
    libpq.setdefault("connect_timeout", str(max(1, round(connect_timeout))))
    for key, value in CONNECTION_BOUNDS:
        libpq.setdefault(key, value)
    params: dict[str, str | int | None] = {"host": url.host, "port": url.port, "user": url.username}
    params.update({"password": url.password, "dbname": url.database, **libpq})
    try:
        conninfo = make_conninfo("", **{key: value for key, value in params.items() if value is not None})
    except psycopg.Error as exc:  # a value libpq cannot parse; keys were checked in parse_url
        raise InvalidURLError(f"{url.render(hide_password=True)}: {str(exc).strip()}") from None
    return Target(conninfo=conninfo, display=url.render(hide_password=True))


def _int(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidURLError(f"URL option {key}={value!r} must be an integer") from None


def state_options(url: BackendURL, base: StateOptions | None = None) -> StateOptions:
    """``base`` (or the defaults) overridden by the URL's query keys."""
    changes: dict[str, object] = {}
    for key, value in url.query.items():
        name = _STATE_KEYS.get(key)
        if name is None:
            continue
        if name in ("pool_min_size", "pool_max_size"):
            changes[name] = _int(key, value)
        elif name == "prepare_threshold":
            changes[name] = None if value.lower() in ("none", "off", "") else _int(key, value)
        else:
            changes[name] = value
    try:
        return replace(base or StateOptions(), **changes)  # type: ignore[arg-type]  # values checked in __post_init__
    except InvalidArgumentError as exc:
        raise InvalidURLError(f"{url}: {exc}") from None


def notify_options(url: BackendURL, base: NotifyOptions | None = None) -> NotifyOptions:
    """``base`` (or the defaults) overridden by the URL's query keys."""
    changes: dict[str, object] = {}
    for key, value in url.query.items():
        name = _NOTIFY_KEYS.get(key)
        if name == "probe_timeout":
            try:
                changes[name] = float(value)
            except ValueError:
                raise InvalidURLError(f"URL option {key}={value!r} must be a number of seconds") from None
        elif name is not None:
            changes[name] = value
    try:
        return replace(base or NotifyOptions(), **changes)  # type: ignore[arg-type]  # values checked in __post_init__
    except InvalidArgumentError as exc:
        raise InvalidURLError(f"{url}: {exc}") from None


def query_keys() -> Mapping[str, str]:
    """URL query keys understood by this package (others go to libpq)."""
    return {**_STATE_KEYS, **_NOTIFY_KEYS}


__all__ = [
    "Claim",
    "NotifyOptions",
    "StateOptions",
    "Target",
    "libpq_keys",
    "notify_options",
    "parse_url",
    "query_keys",
    "state_options",
    "target",
]
