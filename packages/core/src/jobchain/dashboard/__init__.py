"""The web dashboard (``pip install 'jobchain[dashboard]'``): queues, chains, failed jobs, workers.

``create_app(client, settings)`` returns an ASGI (Starlette) app over your client, to serve
with uvicorn or mount in your own app; ``create_app_from_url(url, settings)`` connects by
itself. ``jobchain dashboard --state URL`` serves it from the command line.
"""

from jobchain.dashboard.app import create_app, create_app_from_url
from jobchain.dashboard.settings import DashboardCredentialsError, DashboardSettings, check_bind

__all__ = [
    "DashboardCredentialsError",
    "DashboardSettings",
    "check_bind",
    "create_app",
    "create_app_from_url",
]
