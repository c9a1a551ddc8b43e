"""What every request handler shares: the app's client and the page renderer."""

from __future__ import annotations

import asyncio
from typing import Any

from jinja2 import Environment
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from jobchain.client import Client
from jobchain.dashboard.security import Guard


class ClientSource:
    """Hands the app its client: a given one, or one connected from URLs on first use."""

    def __init__(
        self, client: Client | None, state_url: str | None = None, notify_url: str | None = None
    ) -> None:
        self._client = client
        self._owned = client is None
        self._state_url = state_url
        self._notify_url = notify_url
        self._lock = asyncio.Lock()

    async def get(self) -> Client:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                from jobchain.client import connect
                from jobchain.job_types import JobTypes

                # No job types: the dashboard reads and administers jobs by name only.
                self._client = await connect(
                    self._state_url, notify=self._notify_url, job_types=JobTypes(), migrate=False
                )
            return self._client

    async def aclose(self) -> None:
        """Close the client if this app connected it (a client you passed stays open)."""
        client, self._client = self._client, (None if self._owned else self._client)
        if self._owned and client is not None:
            await client.close()


async def client_of(request: Request) -> Client:
    """The client of the app serving ``request``."""
    source: ClientSource = request.app.state.jobchain_dashboard
    return await source.get()


def render(request: Request, template: str, context: dict[str, Any], status_code: int = 200) -> Response:
    """Render ``template`` with what every page needs (base path, session's CSRF token, settings)."""
    env: Environment = request.app.state.jobchain_templates
    guard: Guard = request.app.state.jobchain_guard
    session = request.scope["state"]["jobchain_session"]
    # The dashboard's own mount point (recorded before routing): under /static the scope's
    # root_path is the static files' one.
    base = request.scope["state"].get("jobchain_base", request.scope.get("root_path", ""))
    values = {
        "request": request,
        "base": base,
        "settings": guard.settings,
        "csrf_token": guard.csrf_token(session),
        "authenticated": request.scope["state"].get("jobchain_authenticated", False),
        "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        **context,
    }
    return HTMLResponse(env.get_template(template).render(values), status_code=status_code)


__all__ = ["ClientSource", "client_of", "render"]
