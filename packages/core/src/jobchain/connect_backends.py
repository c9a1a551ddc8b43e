"""Turn backend URLs (argument, environment or default) into opened adapters.

Precedence for each role: the explicit argument, then ``JOBCHAIN_STATE_URL`` /
``JOBCHAIN_NOTIFY_URL``, then the default. State defaults to the embedded SQLite file
``sqlite:///jobchain.db`` (needs ``jobchain-sqlite``); notify defaults to none, meaning
workers poll. An empty environment variable counts as unset.

``memory://`` works for both roles. ``memory://NAME`` returns one shared adapter per name
and role within the process; plain ``memory://`` opens a fresh, private one each time.
"""

from __future__ import annotations

import os
from typing import Final

from jobchain.contracts.notify import NotifyAdapter
from jobchain.contracts.state import StateAdapter
from jobchain.errors import InvalidArgumentError, InvalidURLError
from jobchain.plugins.hookspecs import Role
from jobchain.plugins.registry import BackendRegistry, get_registry
from jobchain.url import BackendURL

STATE_URL_ENV: Final = "JOBCHAIN_STATE_URL"
NOTIFY_URL_ENV: Final = "JOBCHAIN_NOTIFY_URL"
DEFAULT_STATE_URL: Final = "sqlite:///jobchain.db"
"""The embedded default: an SQLite file in the working directory, so a first run needs no server."""


def _coerce(url: str | BackendURL) -> BackendURL:
    return url if isinstance(url, BackendURL) else BackendURL.parse(url)


def _from_env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def state_url_configured() -> bool:
    """True if ``JOBCHAIN_STATE_URL`` names a state backend (else the embedded default applies)."""
    return _from_env(STATE_URL_ENV) is not None


def resolve_state_url(url: str | BackendURL | None = None) -> BackendURL:
    """The state URL to use: ``url``, else ``$JOBCHAIN_STATE_URL``, else ``sqlite:///jobchain.db``."""
    resolved = _coerce(url if url is not None else _from_env(STATE_URL_ENV) or DEFAULT_STATE_URL)
    if resolved.is_none:
        raise InvalidURLError(
            "'none' is only valid for notify; state needs a backend such as sqlite:///jobchain.db"
        )
    return resolved


def resolve_notify_url(url: str | BackendURL | None = None) -> BackendURL | None:
    """The notify URL to use, or None for no notify backend (``none`` or nothing configured)."""
    chosen = url if url is not None else _from_env(NOTIFY_URL_ENV)
    if chosen is None:
        return None
    resolved = _coerce(chosen)
    return None if resolved.is_none else resolved


async def open_state(
    url: str | BackendURL | None = None, *, registry: BackendRegistry | None = None
) -> StateAdapter:
    """Open the state adapter for ``url`` (see module doc for defaults).

    Raises InvalidURLError, UnknownSchemeError (naming the distribution to install) or
    BackendUnavailableError (the backend's driver is missing).
    """
    resolved = resolve_state_url(url)
    adapter = await (registry or get_registry()).open(resolved, "state")
    # Structural checks only (member names present): cheap, and they catch a factory wired to
    # the wrong role before the first call fails somewhere far away.
    if not isinstance(adapter, StateAdapter):
        raise _wrong_type(adapter, "StateAdapter", resolved, "state")
    return adapter


def open_sync_state(
    url: str | BackendURL | None = None, *, registry: BackendRegistry | None = None
) -> StateAdapter:
    """Open the synchronous state adapter for ``url`` (for :mod:`jobchain.sync`; same defaults).

    Raises what :func:`open_state` raises, and BackendUnavailableError when the backend has no
    ``sync_factory`` (the message names the state backends that have one).
    """
    resolved = resolve_state_url(url)
    adapter = (registry or get_registry()).open_sync(resolved)
    if not isinstance(adapter, StateAdapter):
        raise _wrong_type(adapter, "StateAdapter", resolved, "state")
    return adapter


async def open_notify(
    url: str | BackendURL | None = None, *, registry: BackendRegistry | None = None
) -> NotifyAdapter | None:
    """Open the notify adapter for ``url``, or return None when notify is ``none`` or unset."""
    resolved = resolve_notify_url(url)
    if resolved is None:
        return None
    adapter = await (registry or get_registry()).open(resolved, "notify")
    if not isinstance(adapter, NotifyAdapter):
        raise _wrong_type(adapter, "NotifyAdapter", resolved, "notify")
    return adapter


def _wrong_type(adapter: object, protocol: str, url: BackendURL, role: Role) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"the {role} factory for {url.scheme}:// returned {type(adapter).__name__}, "
        f"which does not implement {protocol}"
    )


__all__ = [
    "DEFAULT_STATE_URL",
    "NOTIFY_URL_ENV",
    "STATE_URL_ENV",
    "state_url_configured",
    "open_notify",
    "open_state",
    "open_sync_state",
    "resolve_notify_url",
    "resolve_state_url",
]
