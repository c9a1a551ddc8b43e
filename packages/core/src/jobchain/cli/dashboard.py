"""``jobchain dashboard``: serve the web dashboard with uvicorn (``pip install 'jobchain[dashboard]'``).

Credentials come from ``JOBCHAIN_DASHBOARD_TOKEN`` or ``JOBCHAIN_DASHBOARD_USER`` and
``JOBCHAIN_DASHBOARD_PASSWORD``. Without them the dashboard serves only on a loopback address,
behind a token made up for this run and printed once; any other address is refused.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
from dataclasses import replace
from types import FrameType

import click
import uvicorn  # imported here: a missing extra makes the CLI name the install line
from starlette.applications import Starlette

from jobchain.cli.common import NOTIFY_URL_HELP, STATE_URL_HELP
from jobchain.dashboard import DashboardSettings, check_bind, create_app
from jobchain.errors import JobchainError


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def server_config(
    app: Starlette, *, host: str, port: int, root_path: str, forwarded_allow_ips: str | None
) -> uvicorn.Config:
    """uvicorn's configuration for the dashboard ``app``.

    ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are believed only from the proxies in
    ``forwarded_allow_ips`` (uvicorn's comma-separated list); None believes no one. uvicorn
    itself believes 127.0.0.1 by default, which let anyone on this machine, or any proxy on
    it that passes the header through, pick the address the login throttle counts.
    """
    trusted = forwarded_allow_ips is not None
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        root_path=root_path,
        log_level="info",
        proxy_headers=trusted,
        forwarded_allow_ips=forwarded_allow_ips if trusted else None,
    )


def _proxies(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    names = [part.strip() for part in value.split(",") if part.strip()]
    if not names:
        raise click.BadParameter("name at least one proxy address (or network), e.g. 10.0.0.5")
    return ",".join(names)


async def _serve(
    state: str | None,
    notify: str | None,
    settings: DashboardSettings,
    host: str,
    port: int,
    root_path: str,
    forwarded_allow_ips: str | None,
) -> None:
    from jobchain.client import connect
    from jobchain.connect_backends import resolve_state_url
    from jobchain.job_types import JobTypes

    label = str(resolve_state_url(state))  # password masked
    # Connected before serving, so a wrong URL or an unmigrated database fails here, in one line.
    client = await connect(state, notify=notify, job_types=JobTypes(), migrate=False)
    try:
        await client.list_workers()  # reads a table: an unmigrated database fails now, not per page
        app = create_app(client, replace(settings, state_label=label))
        config = server_config(
            app, host=host, port=port, root_path=root_path, forwarded_allow_ips=forwarded_allow_ips
        )
        await uvicorn.Server(config).serve()
    finally:
        await client.close()


@click.command("dashboard")
@click.option("--state", default=None, help=STATE_URL_HELP)
@click.option("--notify", default=None, help=NOTIFY_URL_HELP + " Cancels reach running jobs at once.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="Port.")
@click.option("--read-only", is_flag=True, default=False, help="Hide and refuse retry, cancel and delete.")
@click.option("--root-path", default="", help="URL prefix when served behind a proxy under a path.")
@click.option(
    "--forwarded-allow-ips",
    default=None,
    callback=_proxies,
    metavar="ADDRESSES",
    help=(
        "Comma-separated addresses (or networks) of the reverse proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed; default: none, the login throttle counts the peer's address."
    ),
)
def dashboard_command(
    state: str | None,
    notify: str | None,
    host: str,
    port: int,
    read_only: bool,
    root_path: str,
    forwarded_allow_ips: str | None,
) -> None:
    """Serve the web dashboard: queues, chains, failed jobs (retry, cancel, delete), workers.

    Set JOBCHAIN_DASHBOARD_TOKEN (or JOBCHAIN_DASHBOARD_USER and JOBCHAIN_DASHBOARD_PASSWORD)
    to log in; without them it serves on 127.0.0.1 only, with a token printed at start.
    """
    try:
        settings = DashboardSettings.from_env(read_only=True if read_only else None)
        check_bind(host, settings)
    except JobchainError as exc:
        raise click.ClickException(_one_line(exc)) from exc
    if not settings.has_credentials:
        token = secrets.token_urlsafe(24)
        settings = replace(settings, token=token)
        shown = f"[{host}]" if ":" in host else host
        click.echo(
            f"No credentials set (JOBCHAIN_DASHBOARD_TOKEN); this run's token is {token}\n"
            f"Log in at http://{shown}:{port}{root_path}/login",
            err=True,
        )
    # uvicorn re-raises the signal it caught once it has shut down. Under asyncio.run's own
    # handler that cancels this task mid-cleanup (the client's close); a plain handler raising
    # KeyboardInterrupt lets the close finish first.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)  # a container's stop: the same clean shutdown
    try:
        asyncio.run(_serve(state, notify, settings, host, port, root_path, forwarded_allow_ips))
    except JobchainError as exc:
        raise click.ClickException(_one_line(exc)) from exc
    except KeyboardInterrupt:
        pass


__all__ = ["dashboard_command", "server_config"]
