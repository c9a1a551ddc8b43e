"""The dashboard's ASGI app: :func:`create_app` over a client, :func:`create_app_from_url` over URLs.

Both return a Starlette app that also works mounted inside your own ASGI app
(``Mount("/jobs", app=create_app(client, settings))``): every link and cookie carries the
mount point (``root_path``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobchain.client import Client
from jobchain.dashboard import actions, formatting, pages
from jobchain.dashboard.context import ClientSource
from jobchain.dashboard.revocation import Revocations
from jobchain.dashboard.security import Guard, GuardMiddleware
from jobchain.dashboard.settings import DashboardSettings, with_state_label
from jobchain.errors import JobchainError

HERE = Path(__file__).parent


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html", "svg"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    formatting.install(env)
    return env


class ErrorPages:
    """The innermost middleware: notes the dashboard's mount point before routing, and turns
    an unhandled exception into the 500 page here, inside GuardMiddleware, so that the page
    gets its security headers and the login-dependent layout (Starlette's own 500 handler
    runs outside every middleware)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})["jobchain_base"] = scope.get("root_path", "")
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            if started:  # too late for a page: the outer handler logs it
                raise
            response = await pages.server_error(Request(scope, receive), exc)
            await response(scope, receive, send)


def _build(source: ClientSource, settings: DashboardSettings) -> Starlette:
    guard = Guard(settings)
    guard.revocations = Revocations(source)  # logout revokes sessions in the state backend

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await source.aclose()

    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/chains", pages.chains, name="chains"),
        Route("/chains/{chain_id}", pages.chain, name="chain"),
        Route("/jobs", pages.jobs, name="jobs"),
        Route("/workers", pages.workers, name="workers"),
        Route("/schedules", pages.schedules, name="schedules"),
        Route("/login", actions.login_form, methods=["GET"], name="login"),
        Route("/login", actions.login, methods=["POST"]),
        Route("/logout", actions.logout, methods=["POST"], name="logout"),
        Route("/actions/retry", actions.retry, methods=["POST"], name="retry"),
        Route("/actions/retry-all", actions.retry_all, methods=["POST"], name="retry_all"),
        Route("/actions/cancel", actions.cancel, methods=["POST"], name="cancel"),
        Route("/actions/delete", actions.delete, methods=["POST"], name="delete"),
        Route("/actions/pause", actions.pause, methods=["POST"], name="pause"),
        Route("/actions/resume", actions.resume, methods=["POST"], name="resume"),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(GuardMiddleware, guard=guard), Middleware(ErrorPages)],
        exception_handlers={
            HTTPException: pages.http_error,
            JobchainError: pages.server_error,
            Exception: pages.server_error,
        },
        lifespan=lifespan,
    )
    app.state.jobchain_dashboard = source
    app.state.jobchain_guard = guard
    app.state.jobchain_settings = settings
    app.state.jobchain_templates = _environment()
    return app


def create_app(client: Client, settings: DashboardSettings) -> Starlette:
    """The dashboard over ``client`` (which you open and close); mountable in your own app.

    Raises DashboardCredentialsError when ``settings`` has no credentials and does not
    ``allow_anonymous``.
    """
    # Only the adapter's class: a URL held by your client could carry a password.
    return _build(ClientSource(client), with_state_label(settings, type(client.state).__name__))


def create_app_from_url(
    state_url: str | None, settings: DashboardSettings, *, notify: str | None = None
) -> Starlette:
    """The dashboard over the state at ``state_url`` (None: ``$JOBCHAIN_STATE_URL``).

    It connects on its first request and closes at the app's shutdown (lifespan). Mounted in
    another app, whose lifespan does not reach it, close it yourself:
    ``await app.state.jobchain_dashboard.aclose()``. ``notify`` (a URL, ``none``, or None
    for ``$JOBCHAIN_NOTIFY_URL``) tells workers at once that a running job was cancelled.
    """
    from jobchain.connect_backends import resolve_state_url

    label = str(resolve_state_url(state_url))  # parsed now: a malformed URL fails here; password masked
    return _build(ClientSource(None, state_url, notify), with_state_label(settings, label))


__all__ = ["create_app", "create_app_from_url"]
