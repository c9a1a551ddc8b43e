"""A private, empty database per test, on the backend you deploy: ``scratch_database(url)``."""

from __future__ import annotations

from contextlib import AbstractContextManager

from jobchain.plugins.registry import get_registry
from jobchain.url import BackendURL


def scratch_database(url: str) -> AbstractContextManager[str]:
    """A context manager yielding the URL of a new, empty database like ``url``, removed at exit.

    ``sqlite://`` (any path): a new file in a temporary folder. ``postgresql://…``: a new schema
    on that server (``?schema=jobchain_scratch_…``, other query options kept), dropped with
    everything in it at exit. ``memory://``: a new shared name, so a client, a worker and an app
    opened with the URL meet one store. Other backends provide theirs (``BackendSpec.scratch``);
    one that has none raises BackendUnavailableError. Synchronous, so it works in any test
    runner and fixture; connect with ``migrate=True`` to create the tables.
    """
    return get_registry().scratch(BackendURL.parse(url))


__all__ = ["scratch_database"]
