"""Factories behind ``memory://`` for both roles, named in ``jobchain.memory.plugin``.

``memory://`` opens a fresh adapter on every call. ``memory://NAME`` returns the same adapter
for the same name (and role) within a process, so a client and its workers configured with the
same URL see one store and one set of listeners. Names are case-insensitive, like hosts.
Closing a shared adapter closes it for every holder; the next open of that name then creates
a fresh one. The state and notify adapters of one name are separate objects.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from jobchain.errors import InvalidURLError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.url import BackendURL, check_query_keys

if TYPE_CHECKING:
    from jobchain.memory.state import MemoryStateAdapter

_lock = threading.Lock()
_shared_state: dict[str, MemoryStateAdapter] = {}
_shared_notify: dict[str, MemoryNotifyAdapter] = {}


def _shared_name(url: BackendURL) -> str | None:
    check_query_keys(
        url, (), backend="memory://", also_note="they take only an optional name: memory:// or memory://NAME"
    )
    extras = [
        label
        for label, value in (
            ("driver", url.driver),
            ("user", url.username),
            ("port", url.port),
            ("path", url.database),
        )
        if value is not None
    ]
    if extras:
        raise InvalidURLError(
            f"{url} has a {', '.join(extras)}; memory URLs take only an optional name: memory:// or memory://NAME"
        )
    return url.host


async def open_state_adapter(url: BackendURL) -> MemoryStateAdapter:
    """Open an in-process state adapter; ``memory://NAME`` is shared per name (see module doc)."""
    return open_sync_state_adapter(url)


def open_sync_state_adapter(url: BackendURL) -> MemoryStateAdapter:
    """The same adapter for :mod:`jobchain.sync`: it can be driven without an event loop.

    Each operation runs synchronously; only a wait for a row another open transaction holds
    would suspend (SyncWiringError). The store is not thread-safe: use one thread (tests).
    """
    # Imported here so that merely declaring memory:// never loads the state model.
    from jobchain.memory.state import MemoryStateAdapter

    name = _shared_name(url)
    if name is None:
        return MemoryStateAdapter()
    with _lock:
        adapter = _shared_state.get(name)
        if adapter is None or adapter.closed:
            adapter = _shared_state[name] = MemoryStateAdapter()
        return adapter


async def open_notify_adapter(url: BackendURL) -> MemoryNotifyAdapter:
    """Open an in-process notify adapter; ``memory://NAME`` is shared per name (see module doc)."""
    name = _shared_name(url)
    if name is None:
        return MemoryNotifyAdapter()
    with _lock:
        adapter = _shared_notify.get(name)
        if adapter is None or adapter.closed:
            adapter = _shared_notify[name] = MemoryNotifyAdapter()
        return adapter


@contextmanager
def scratch(url: BackendURL) -> Iterator[str]:
    """``scratch`` behind ``memory://``: a new shared name, so every open of the URL meets one store.

    At exit the name is forgotten (its adapters stay usable by whoever still holds them).
    """
    _shared_name(url)
    name = f"scratch-{uuid.uuid4().hex[:16]}"
    try:
        yield f"memory://{name}"
    finally:
        with _lock:
            _shared_state.pop(name, None)
            _shared_notify.pop(name, None)


def forget_shared_adapters() -> None:
    """Drop every ``memory://NAME`` adapter from the process table without closing it (tests)."""
    with _lock:
        _shared_state.clear()
        _shared_notify.clear()


__all__ = [
    "forget_shared_adapters",
    "open_notify_adapter",
    "open_state_adapter",
    "open_sync_state_adapter",
    "scratch",
]
