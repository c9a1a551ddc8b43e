"""The state URL of a Django database alias: jobchain's tables live in that same database.

A chain started in ``transaction.atomic(using=alias)`` is written on Django's own connection;
the worker and jobchain's own transactions (reads, ``await_chain``, migrations) open their
connections from the URL derived here, so both must name the same database. Django's
backend vendor maps onto a jobchain URL scheme: ``postgresql`` (psycopg 3) and ``sqlite``
(a file; an in-memory database is invisible to the worker, so it is refused).

A PostgreSQL alias whose ``OPTIONS['options']`` sets ``-c search_path=<schema>,…`` keeps
jobchain's tables in that first schema too (``schema=<schema>`` in the derived URL), unless
``JOBCHAIN['STATE_OPTIONS']`` names another.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from jobchain.contrib.django._django import ImproperlyConfigured
from jobchain.contrib.django.conf import JobchainSettings, database_wrapper
from jobchain.url import BackendURL

DJANGO_ONLY_OPTIONS = frozenset(
    {
        "isolation_level",
        "server_side_binding",
        "pool",
        "assume_role",
        "cursor_factory",
        "context",
        "prepare_threshold",
    }
)
"""Keys of ``DATABASES[alias]['OPTIONS']`` that Django consumes itself (not libpq parameters)."""

_SEARCH_PATH = re.compile(r"(?:^|\s)(?:-c\s*|--)search_path=([^\s,]+)")
_UNQUOTED = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def state_url_for(alias: str, config: JobchainSettings) -> str:
    """The jobchain state URL for ``alias``: ``STATE_URL`` for the configured DATABASE, else derived."""
    if alias == config.database and config.state_url is not None:
        return config.state_url
    wrapper = database_wrapper(alias)
    vendor = wrapper.vendor
    where = f"DATABASES[{alias!r}]"
    if vendor == "postgresql":
        url = _postgresql(wrapper.settings_dict, config.state_options)
    elif vendor == "sqlite":
        url = _sqlite(wrapper.settings_dict, config.state_options, where)
    else:
        raise ImproperlyConfigured(
            f"{where} uses {wrapper.settings_dict.get('ENGINE')!r} (vendor {vendor!r}); jobchain keeps "
            "its tables in PostgreSQL (psycopg 3) "
            "or SQLite: point JOBCHAIN['DATABASE'] at such an alias, or set JOBCHAIN['STATE_URL']"
        )
    return url.render(hide_password=False)


def _postgresql(settings_dict: Mapping[str, Any], options: Mapping[str, str]) -> BackendURL:
    query: dict[str, str] = {}
    for key, value in (settings_dict.get("OPTIONS") or {}).items():
        if key not in DJANGO_ONLY_OPTIONS and isinstance(value, (str, int)) and not isinstance(value, bool):
            query[key] = str(value)  # libpq parameters: sslmode, options, application_name …
    host = settings_dict.get("HOST") or None
    if host is not None and host.startswith("/"):
        query["host"] = host  # a Unix socket directory is a libpq parameter, not a URL host
        host = None
    port = settings_dict.get("PORT") or None
    schema = _search_path_schema(query.get("options", ""))
    if schema is not None:
        query["schema"] = schema  # Django's tables are there: jobchain's go beside them
    query.update(options)
    return BackendURL(
        scheme="postgresql",
        username=settings_dict.get("USER") or None,
        password=settings_dict.get("PASSWORD") or None,
        host=host,
        port=int(port) if port is not None else None,
        database=settings_dict.get("NAME") or None,
        query=query,
    )


def _search_path_schema(libpq_options: str) -> str | None:
    """The first schema of a ``-c search_path=…`` in libpq ``options`` (None: none set, or ``$user``)."""
    found = _SEARCH_PATH.search(libpq_options)
    if found is None:
        return None
    first = found.group(1)
    if len(first) > 2 and first[0] == first[-1] == '"':
        return first[1:-1]  # quoted: PostgreSQL keeps the case
    return first.lower() if _UNQUOTED.fullmatch(first) else None  # unquoted names fold to lower case


def _sqlite(settings_dict: Mapping[str, Any], options: Mapping[str, str], where: str) -> BackendURL:
    name = str(settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or "mode=memory" in name:
        raise ImproperlyConfigured(
            f"{where} is an in-memory SQLite database ({name!r}); jobchain's worker could never see "
            "its chains: use a file (for tests, set DATABASES[...]['TEST']['NAME'] to a file path)"
        )
    return BackendURL(scheme="sqlite", database=os.path.abspath(name), query=dict(options))


__all__ = ["state_url_for"]
