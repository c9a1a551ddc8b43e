"""Start chains inside ``transaction.atomic()`` on Django's own database connection.

One :class:`~jobchain.sync.SyncClient` per database alias, opened at first use and shared by
every thread (it joins each thread's own Django connection, and keeps its own pool for the
reads and writes it makes alone). Wake-ups leave with ``transaction.on_commit``: after the
outermost commit only, never after a rollback (a rolled-back savepoint drops them too).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from jobchain.contrib.django._django import atomic, on_commit, setting_changed
from jobchain.contrib.django.conf import JobchainSettings, database_wrapper, load_settings
from jobchain.contrib.django.databases import state_url_for

if TYPE_CHECKING:
    from jobchain.client import ChainStart, ChainStarted
    from jobchain.entities import Chain, Deduplication, Schedule
    from jobchain.job_types import JobType
    from jobchain.sync import SyncClient, SyncTransaction

I = TypeVar("I")  # noqa: E741 -- conventional input type variable name

_clients: dict[str | None, SyncClient] = {}
_settings: list[JobchainSettings] = []
_lock = threading.Lock()


def settings() -> JobchainSettings:
    """``settings.JOBCHAIN``, validated once (again after ``override_settings``)."""
    with _lock:
        if not _settings:
            _settings.append(load_settings())
        return _settings[0]


def client(using: str | None = None) -> SyncClient:
    """The shared SyncClient of database alias ``using`` (default: ``JOBCHAIN['DATABASE']``).

    For reads and waits: ``client().get_chain(id)``, ``client().await_chain(id, timeout=30)``.
    """
    found = _clients.get(using)
    if found is not None:
        return found
    config = settings()
    alias = config.database if using is None else using
    with _lock:
        found = _clients.get(alias)
        if found is None:
            from jobchain.sync import connect

            found = connect(
                state_url_for(alias, config),
                notify=config.notify_url,
                job_types=config.registry(),
                clock=config.clock(),
                migrate=False,
            )
            _clients[alias] = found
        if using is None:
            _clients[None] = found
    return found


def close_clients() -> None:
    """Close every shared client (they reopen at next use): after settings change, at exit."""
    with _lock:
        opened = {id(one): one for one in _clients.values()}
        _clients.clear()
        _settings.clear()
    for one in opened.values():
        one.close()


@contextmanager
def _joined(using: str | None) -> Iterator[tuple[SyncClient, SyncTransaction]]:
    alias = settings().database if using is None else using
    chains = client(alias)
    with atomic(using=alias):
        wrapper = database_wrapper(alias)
        wrapper.ensure_connection()
        with chains.transaction(connection=wrapper.connection) as tx:
            yield chains, tx
        on_commit(tx.flush, using=alias)


@contextmanager
def transaction(using: str | None = None) -> Iterator[SyncTransaction]:
    """A jobchain transaction on Django's connection ``using``, inside ``atomic(using=...)``.

    Joins the caller's atomic block (or opens its own, committed at exit). Your ORM writes and
    the chains started with the yielded ``tx`` commit or roll back together; the wake-ups are
    sent by ``transaction.on_commit`` after the outermost commit.
    """
    with _joined(using) as (_, tx):
        yield tx


def start_chain(
    job_type: JobType[I, Any, Any, Literal[True]],
    input: I,
    *,
    using: str | None = None,
    id: str | None = None,
    deduplication: Deduplication | None = None,
    schedule: Schedule | None = None,
    blockers: Sequence[Chain | str] = (),
    priority: int | None = None,
    ordering_key: str | None = None,
) -> ChainStarted:
    """Start a chain of ``job_type`` in the current (or a new) ``atomic`` block of ``using``.

    The options are those of :meth:`jobchain.Client.start_chain`, with the same typed errors.
    """
    with _joined(using) as (chains, tx):
        return chains.start_chain(
            tx,
            job_type,
            input,
            id=id,
            deduplication=deduplication,
            schedule=schedule,
            blockers=blockers,
            priority=priority,
            ordering_key=ordering_key,
        )


def start_chains(starts: Sequence[ChainStart[Any]], *, using: str | None = None) -> list[ChainStarted]:
    """Start several chains (``jobchain.ChainStart`` items) in one round trip; input order kept."""
    with _joined(using) as (chains, tx):
        return chains.start_chains(tx, starts)


def _on_setting_changed(*, setting: str, **_: Any) -> None:
    # override_settings() and friends: the next use reopens with the new configuration.
    if setting in ("JOBCHAIN", "JOBCHAIN_STATE_URL", "DATABASES"):
        close_clients()


setting_changed.connect(_on_setting_changed, dispatch_uid="jobchain.contrib.django.close_clients")
atexit.register(close_clients)

__all__ = ["client", "close_clients", "settings", "start_chain", "start_chains", "transaction"]
