"""Per-backend readers of the documented job tables, chosen by the state URL's scheme.

Reading SQL directly is what lets Spark split one table into parallel range scans; every
other operation (bulk start, deletion) goes through the jobchain client instead.
"""

from __future__ import annotations

from typing import Final

from jobchain.errors import InvalidURLError, UnknownSchemeError
from jobchain.url import BackendURL
from jobchain_spark.dialects.base import Dialect, Predicate
from jobchain_spark.errors import BackendNotInstalledError, SparkOptionError, UnsupportedBackendError

_DIALECTS: Final = {
    "sqlite": "jobchain_spark.dialects.sqlite:SqliteDialect",
    "postgresql": "jobchain_spark.dialects.postgres:PostgresDialect",
    "postgres": "jobchain_spark.dialects.postgres:PostgresDialect",
}


def check_url(url: object) -> BackendURL:
    """Parse the ``url`` option and check an installed backend serves it (typed errors otherwise)."""
    from jobchain.plugins.registry import get_registry

    if url is None or url == "":
        raise SparkOptionError("url", "required: the jobchain state URL, e.g. sqlite:///jobchain.db")
    try:
        parsed = BackendURL.parse(url)
    except InvalidURLError as exc:
        raise SparkOptionError("url", str(exc)) from None
    try:
        get_registry().lookup(parsed.scheme, "state")
    except UnknownSchemeError as exc:
        raise BackendNotInstalledError(str(exc)) from None
    return parsed


def dialect_for(url: object) -> Dialect:
    """The dialect reading the state behind ``url``; typed errors name the ``url`` option."""
    import importlib

    parsed = check_url(url)
    target = _DIALECTS.get(parsed.scheme)
    if target is None:
        readable = ", ".join(f"{s}://" for s in sorted(_DIALECTS))
        raise UnsupportedBackendError(
            "url",
            f"{parsed.scheme}:// state is not stored in SQL tables Spark can read; "
            f"jobchain-spark reads {readable}",
        )
    module, _, name = target.partition(":")
    cls: type[Dialect] = getattr(importlib.import_module(module), name)
    return cls(parsed.render(hide_password=False))


__all__ = ["Dialect", "Predicate", "check_url", "dialect_for"]
