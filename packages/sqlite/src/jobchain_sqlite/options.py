"""SqliteOptions: the adapter's settings, from keyword arguments or a ``sqlite://`` URL.

URL forms::

    sqlite:///relative/path.db          a file relative to the working directory
    sqlite:////absolute/path.db         an absolute path (four slashes)
    sqlite:///:memory:                  a private in-memory database (also sqlite://:memory:)
    sqlite+aiosqlite:///path.db         the same; aiosqlite is the only driver

Query options: ``table_prefix`` (default ``jobchain_``), ``busy_timeout`` (seconds, default
5), ``synchronous`` (``full`` default, or ``normal``: faster, and still never corrupt, but
the last commits may roll back after a power loss), ``max_readers`` (default 4). Any other
key is rejected with InvalidURLError naming a close match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from jobchain.errors import InvalidURLError
from jobchain.url import BackendURL, check_query_keys
from jobchain_sqlite.queries import validate_prefix

DEFAULT_PREFIX: Final = "jobchain_"
MEMORY: Final = ":memory:"
_SYNCHRONOUS: Final = ("off", "normal", "full", "extra")
_QUERY_KEYS: Final = ("table_prefix", "busy_timeout", "synchronous", "max_readers")


@dataclass(frozen=True, slots=True, kw_only=True)
class SqliteOptions:
    """Settings of one SqliteStateAdapter."""

    path: str
    table_prefix: str = DEFAULT_PREFIX
    busy_timeout: float = 5.0
    synchronous: str = "full"
    max_readers: int = 4

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise InvalidURLError("the SQLite path is empty; expected e.g. 'sqlite:///jobchain.db'")
        if "\x00" in self.path:
            raise InvalidURLError("the SQLite path holds a NUL character (%00 in a URL); remove it")
        validate_prefix(self.table_prefix)
        if not self.busy_timeout >= 0:
            raise InvalidURLError(
                f"busy_timeout must be a non-negative number of seconds, got {self.busy_timeout!r}"
            )
        if self.synchronous.lower() not in _SYNCHRONOUS:
            raise InvalidURLError(
                f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {self.synchronous!r}"
            )
        object.__setattr__(self, "synchronous", self.synchronous.upper())
        if not isinstance(self.max_readers, int) or self.max_readers < 1:
            raise InvalidURLError(f"max_readers must be a positive integer, got {self.max_readers!r}")

    @property
    def in_memory(self) -> bool:
        """True for ``:memory:``: one connection, so reads queue behind writes."""
        return self.path == MEMORY

    @classmethod
    def from_url(cls, url: BackendURL) -> SqliteOptions:
        """Options for a ``sqlite://`` or ``sqlite+aiosqlite://`` URL (see module doc)."""
        if url.scheme != "sqlite":
            raise InvalidURLError(f"{url} is not a sqlite:// URL")
        if url.driver not in (None, "aiosqlite"):
            raise InvalidURLError(f"{url}: the SQLite adapter's only driver is aiosqlite, got {url.driver!r}")
        if url.host or url.port or url.username:
            raise InvalidURLError(
                f"{url} has a host part; SQLite URLs have none: 'sqlite:///relative.db' or "
                "'sqlite:////absolute/path.db' (note the slashes)"
            )
        if not url.database:
            raise InvalidURLError(
                f"{url} names no file; expected e.g. 'sqlite:///jobchain.db' or 'sqlite:///:memory:'"
            )
        check_query_keys(url, _QUERY_KEYS, backend="jobchain-sqlite")
        query = url.query
        try:
            busy_timeout = float(query.get("busy_timeout", "5"))
            max_readers = int(query.get("max_readers", "4"))
        except ValueError:
            raise InvalidURLError(
                f"{url}: busy_timeout must be a number and max_readers an integer"
            ) from None
        return cls(
            path=url.database,
            table_prefix=query.get("table_prefix", DEFAULT_PREFIX),
            busy_timeout=busy_timeout,
            synchronous=query.get("synchronous", "full"),
            max_readers=max_readers,
        )


__all__ = ["DEFAULT_PREFIX", "MEMORY", "SqliteOptions"]
