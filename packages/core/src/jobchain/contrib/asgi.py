"""FastAPI, Starlette and other ASGI apps: a lifespan that opens a client and runs a worker beside the app.

```python
lifespan = JobchainLifespan("postgresql://app@db/app", job_types=registry, processors=processors)
app = FastAPI(lifespan=lifespan)


@app.post("/signups")
async def signup(chains: Annotated[jobchain.Client, Depends(get_client)]) -> dict[str, str]:
    async with chains.transaction() as tx:
        started = await chains.start_chain(tx, send_welcome, Welcome(...))
    return {"chain": started.id}
```

At startup the lifespan connects a :class:`~jobchain.Client` (``jobchain.connect``), runs
the wrapped lifespan of your own (``lifespan=``), then starts a
:class:`~jobchain.worker.Worker` for ``processors`` (or the one ``worker=`` builds), so that
handlers run only once your resources are ready. At shutdown it goes the other way: the
worker stops as ``Worker.stop`` does (no new claims, in-flight attempts finish within its
``shutdown_timeout``, buffered jobs are released), your lifespan's shutdown runs, and the
client closes.

The client is reachable from request handlers three ways: the lifespan state (Starlette
copies it into ``request.state.jobchain``), ``app.state.jobchain`` while the app runs, and
:func:`get_client`, a function FastAPI takes as a dependency. Nothing here imports FastAPI;
Starlette is needed only to annotate :func:`get_client`, and a bare ASGI app enters the
lifespan itself (``async with lifespan(app) as state: ...``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from jobchain.client import Client, connect
from jobchain.contracts import NotifyAdapter, Observer, StateAdapter
from jobchain.errors import InvalidArgumentError, JobchainError
from jobchain.job_types import JobTypes
from jobchain.worker import Processors, Worker

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

    from jobchain.client_queries import Clock
else:
    try:
        # At run time too: FastAPI reads get_client's annotation to hand it the request.
        from starlette.requests import HTTPConnection
    except ImportError:  # a bare ASGI app without Starlette: only get_client's annotation needs it
        HTTPConnection = object

log = logging.getLogger("jobchain.contrib.asgi")

STATE_KEY = "jobchain"
"""Where the client is found: the lifespan state key and the ``app.state`` attribute."""

UserLifespan = Callable[[Any], AbstractAsyncContextManager[Mapping[str, Any] | None]]
"""An ASGI lifespan of your own: ``app -> async context manager`` yielding None or a state dict."""

WorkerFactory = Callable[[Client], Worker]
"""Builds the worker that runs beside the app from the lifespan's client."""


class LifespanNotRunningError(JobchainError, RuntimeError):
    """No jobchain client is available: pass ``lifespan=JobchainLifespan(...)`` to the app.

    Raised by :func:`get_client` for a request of an app whose lifespan is not a
    :class:`JobchainLifespan` (or whose server does not run lifespans), and by
    :attr:`JobchainLifespan.client` outside the app's lifetime.
    """


class JobchainLifespan:
    """An ASGI lifespan that owns a jobchain client and, optionally, a worker beside the app.

    Pass it as the app's lifespan (``FastAPI(lifespan=...)``, ``Starlette(lifespan=...)``).
    ``state_url``, ``notify``, ``job_types``, ``observers``, ``clock`` and ``migrate`` go to
    :func:`jobchain.connect` unchanged (so ``JOBCHAIN_STATE_URL`` and ``JOBCHAIN_NOTIFY_URL``
    apply when they are left out).

    The worker: ``processors`` (one :class:`~jobchain.worker.Processors` or several) runs a
    worker with the default settings; ``worker`` (``client -> Worker``) builds one with
    yours, e.g. ``worker=lambda c: Worker(c, processors, concurrency=8)``. Neither: the
    app only starts and reads chains, and workers run elsewhere (``jobchain worker``).

    ``lifespan`` is your own lifespan, run inside this one: the client is ready (and in
    ``app.state``) during its startup, the worker starts after it and stops before its
    shutdown; the state it yields is merged with ``{key: client}``. Or enter this one inside
    yours: ``async with jobchain_lifespan(app) as state: yield {**state, ...}``.

    ``key`` names the lifespan state entry and the ``app.state`` attribute (default
    ``"jobchain"``, which :func:`get_client` reads).
    """

    def __init__(
        self,
        state_url: str | StateAdapter | None = None,
        *,
        job_types: JobTypes,
        notify: str | NotifyAdapter | None = None,
        processors: Processors | Sequence[Processors] | None = None,
        worker: WorkerFactory | None = None,
        lifespan: UserLifespan | None = None,
        observers: Sequence[Observer] | None = None,
        clock: Clock | None = None,
        migrate: bool | None = None,
        key: str = STATE_KEY,
    ) -> None:
        if not isinstance(job_types, JobTypes):
            raise InvalidArgumentError(f"job_types must be a JobTypes registry, got {job_types!r}")
        if processors is not None and worker is not None:
            raise InvalidArgumentError(
                "pass processors= (a worker with default settings) or worker= (your own), not both"
            )
        if worker is not None and not callable(worker):
            raise InvalidArgumentError(f"worker must be a callable client -> Worker, got {worker!r}")
        if not key.isidentifier():
            raise InvalidArgumentError(f"key must be a Python identifier (an attribute name), got {key!r}")
        self._state_url = state_url
        self._notify = notify
        self._job_types = job_types
        self._observers = observers
        self._clock = clock
        self._migrate = migrate
        self._make_worker: WorkerFactory | None = worker
        if processors is not None:
            slices = processors
            self._make_worker = lambda client: Worker(client, slices)
        self._user_lifespan = lifespan
        self.key = key
        self._client: Client | None = None
        self._worker: Worker | None = None
        self._running = False

    @property
    def client(self) -> Client:
        """The client while the app runs; LifespanNotRunningError before startup and after shutdown."""
        if self._client is None:
            raise LifespanNotRunningError("the app's lifespan is not running: no jobchain client now")
        return self._client

    @property
    def worker(self) -> Worker | None:
        """The worker beside the app (None without processors/worker), set at startup."""
        return self._worker

    def __call__(self, app: object) -> AbstractAsyncContextManager[dict[str, Any]]:
        """The lifespan context of ``app``: the ASGI server enters it at startup, exits at shutdown."""
        return self._run(app)

    @asynccontextmanager
    async def _run(self, app: object) -> AsyncIterator[dict[str, Any]]:
        if self._running:
            raise InvalidArgumentError("this JobchainLifespan is already running; create one per app")
        self._running = True  # before the first await: a second startup meanwhile is refused too
        try:
            client = await connect(
                self._state_url,
                notify=self._notify,
                job_types=self._job_types,
                observers=self._observers,
                clock=self._clock,
                migrate=self._migrate,
            )
        except BaseException:
            self._running = False
            raise
        app_state = getattr(app, "state", None)
        self._client = client
        self._worker = None
        try:
            if app_state is not None:
                setattr(app_state, self.key, client)
            async with self._user_context(app) as user_state:
                worker = self._make_worker(client) if self._make_worker is not None else None
                if worker is not None:
                    await worker.start()
                    self._worker = worker
                    names = ", ".join(worker.type_names)
                    log.info("worker %s runs beside the app (%s)", worker.worker_id, names)
                try:
                    yield {**(user_state or {}), self.key: client}
                finally:
                    if worker is not None:
                        # In-flight attempts finish (up to shutdown_timeout) before the user's
                        # resources go away; buffered jobs are handed back.
                        await worker.stop()
        finally:
            if app_state is not None and getattr(app_state, self.key, None) is client:
                delattr(app_state, self.key)
            self._client = None
            try:
                await client.close()
            finally:
                self._running = False

    def _user_context(self, app: object) -> AbstractAsyncContextManager[Mapping[str, Any] | None]:
        if self._user_lifespan is None:
            return _no_state()
        return self._user_lifespan(app)


@asynccontextmanager
async def _no_state() -> AsyncIterator[None]:
    yield None


def get_client(request: HTTPConnection) -> Client:
    """The jobchain client of the request's app; a FastAPI dependency (``Depends(get_client)``).

    Reads the lifespan state (``request.state.jobchain``), then ``request.app.state.jobchain``.
    LifespanNotRunningError if neither holds a client (the app's lifespan is not a
    :class:`JobchainLifespan` with the default key).
    """
    found = getattr(request.state, STATE_KEY, None)
    if not isinstance(found, Client):
        app_state = getattr(getattr(request, "app", None), "state", None)
        found = getattr(app_state, STATE_KEY, None)
    if not isinstance(found, Client):
        raise LifespanNotRunningError(
            "no jobchain client on this app: pass lifespan=JobchainLifespan(...) to FastAPI/Starlette"
        )
    return found


__all__ = [
    "STATE_KEY",
    "JobchainLifespan",
    "LifespanNotRunningError",
    "UserLifespan",
    "WorkerFactory",
    "get_client",
]
