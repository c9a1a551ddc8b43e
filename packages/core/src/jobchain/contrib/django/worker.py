"""Run jobchain's worker for a Django project (``manage.py jobchain_worker``).

Sync handlers run in threads (``asyncio.to_thread``), and Django's database connections are
per thread: each sync handler call is wrapped in ``close_old_connections()`` before and after
(:func:`close_connections_around`), as Django does around each request, so a handler never
inherits a connection that died or outlived ``CONN_MAX_AGE``. Async handlers run on the event
loop, where the ORM must be used through its async API (``await Model.objects.aget(...)``) or
``asgiref.sync.sync_to_async``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from jobchain.contrib.django._django import ImproperlyConfigured, close_old_connections
from jobchain.contrib.django.conf import JobchainSettings
from jobchain.contrib.django.databases import state_url_for
from jobchain.errors import InvalidArgumentError

if TYPE_CHECKING:
    from jobchain.contracts.observe import Observer

T = TypeVar("T")
log = logging.getLogger("jobchain.worker")


def close_connections_around(call: Callable[[], T]) -> T:
    """``call()`` between two ``close_old_connections()`` (the worker's sync_handler_wrapper)."""
    close_old_connections()
    try:
        return call()
    finally:
        close_old_connections()


async def run_worker(
    config: JobchainSettings,
    *,
    overrides: Mapping[str, Any] | None = None,
    migrate: bool = False,
    stop: asyncio.Event | None = None,
    observers: Sequence[Observer] = (),
) -> None:
    """Run the configured worker until ``stop`` is set, SIGINT/SIGTERM, or its own fatal error.

    ``overrides`` win over ``JOBCHAIN['WORKER']`` (the command's options). ``migrate`` applies
    jobchain's migrations first (what ``manage.py jobchain_migrate`` does). ``observers`` are
    added to the worker's client (``--otel``'s), their queue gauges sampled as the CLI does.
    """
    from jobchain.cli.worker import attach_observers
    from jobchain.client import connect
    from jobchain.worker import Worker

    slices = config.processor_slices()
    job_types = config.registry()
    options = {**config.worker, **(overrides or {})}
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        client = await connect(
            state_url_for(config.database, config),
            notify=config.notify_url,
            job_types=job_types,
            clock=config.clock(),
            migrate=migrate,
        )
        async with client:
            try:
                worker = Worker(client, slices, sync_handler_wrapper=close_connections_around, **options)
            except (InvalidArgumentError, TypeError) as exc:
                raise ImproperlyConfigured(f"JOBCHAIN['WORKER']: {exc}") from exc
            sampler = attach_observers(worker, None, observers, "cluster")
            await worker.start()
            if sampler is not None:
                sampler.start()
            log.info("worker %s processing %s", worker.worker_id, ", ".join(worker.type_names))
            stopped = asyncio.ensure_future(stop.wait())
            ended = asyncio.ensure_future(worker.wait())
            try:
                await asyncio.wait({stopped, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
                if not ended.done():
                    log.info("stopping worker %s", worker.worker_id)
                if sampler is not None:
                    await sampler.stop()
                await worker.stop()
                ended.cancel()
                await asyncio.gather(stopped, ended, return_exceptions=True)
            error = ended.exception() if ended.done() and not ended.cancelled() else None
            if error is not None:
                raise error
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


__all__ = ["close_connections_around", "run_worker"]
