"""The dashboard's settings: credentials, read-only mode, and the refusal to listen in the open.

Credentials come from :class:`DashboardSettings` or the environment
(:meth:`DashboardSettings.from_env`): a bearer token (``JOBCHAIN_DASHBOARD_TOKEN``) and/or a
user name and password (``JOBCHAIN_DASHBOARD_USER``, ``JOBCHAIN_DASHBOARD_PASSWORD``).
Neither is ever rendered or logged; the settings' ``repr`` hides them.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Final

from jobchain.errors import InvalidArgumentError, JobchainError

TOKEN_ENV: Final = "JOBCHAIN_DASHBOARD_TOKEN"
USER_ENV: Final = "JOBCHAIN_DASHBOARD_USER"
PASSWORD_ENV: Final = "JOBCHAIN_DASHBOARD_PASSWORD"
READ_ONLY_ENV: Final = "JOBCHAIN_DASHBOARD_READ_ONLY"
SECRET_KEY_ENV: Final = "JOBCHAIN_DASHBOARD_SECRET_KEY"

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})


class DashboardCredentialsError(JobchainError):
    """The dashboard has no credentials: set JOBCHAIN_DASHBOARD_TOKEN (or JOBCHAIN_DASHBOARD_USER
    and JOBCHAIN_DASHBOARD_PASSWORD), or listen on 127.0.0.1 only."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DashboardSettings:
    """How the dashboard authenticates and what it allows.

    ``token``: accepted as ``Authorization: Bearer <token>`` and on the login form.
    ``username``/``password``: accepted as HTTP basic credentials and on the login form.
    At least one of them is required unless ``allow_anonymous`` is set, which is only for an
    app that authenticates every request itself before it reaches the mounted dashboard.
    ``read_only`` hides the retry, cancel and delete actions and refuses them.
    ``secret_key`` signs the session cookie and CSRF tokens (None: a random key per process,
    so sessions end when the process restarts; set one when several processes serve it).
    ``state_label`` is shown in the header (pass a masked URL, never one with a password).
    """

    token: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    read_only: bool = False
    allow_anonymous: bool = False
    secret_key: bytes | None = field(default=None, repr=False)
    session_max_age: timedelta = timedelta(hours=12)
    title: str = "jobchain"
    state_label: str | None = None
    page_size: int = 50
    refresh_seconds: int = 10
    """How often the overview and workers pages reload themselves (0: never)."""

    def __post_init__(self) -> None:
        if self.token is not None and (not isinstance(self.token, str) or not self.token.strip()):
            raise InvalidArgumentError("the dashboard token must be a non-empty string")
        if (self.username is None) != (self.password is None):
            raise InvalidArgumentError(
                "the dashboard needs both a user name and a password "
                f"({USER_ENV} and {PASSWORD_ENV}), or neither"
            )
        if self.username is not None and (not self.username or ":" in self.username):
            raise InvalidArgumentError("the dashboard user name must be non-empty and contain no ':'")
        if self.password is not None and not self.password:
            raise InvalidArgumentError("the dashboard password must not be empty")
        if self.secret_key is not None and len(self.secret_key) < 16:
            raise InvalidArgumentError("the dashboard secret_key must be at least 16 bytes")
        if self.session_max_age <= timedelta(0):
            raise InvalidArgumentError("session_max_age must be positive")
        if isinstance(self.page_size, bool) or not 1 <= self.page_size <= 500:
            raise InvalidArgumentError(f"page_size must be from 1 to 500, got {self.page_size!r}")
        if isinstance(self.refresh_seconds, bool) or self.refresh_seconds < 0:
            raise InvalidArgumentError(f"refresh_seconds must be 0 or more, got {self.refresh_seconds!r}")

    @property
    def has_credentials(self) -> bool:
        """True when a token or a user name and password is set."""
        return self.token is not None or self.username is not None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> DashboardSettings:
        """Settings from ``JOBCHAIN_DASHBOARD_*`` variables; keyword ``overrides`` win when not None."""
        env = os.environ if environ is None else environ
        read_only = env.get(READ_ONLY_ENV, "").strip().lower()
        if read_only not in _TRUE | _FALSE:
            raise InvalidArgumentError(f"{READ_ONLY_ENV} must be true or false, got {read_only!r}")
        secret = env.get(SECRET_KEY_ENV) or None
        values: dict[str, object] = {
            "token": env.get(TOKEN_ENV) or None,
            "username": env.get(USER_ENV) or None,
            "password": env.get(PASSWORD_ENV) or None,
            "read_only": read_only in _TRUE,
            "secret_key": secret.encode() if secret else None,
        }
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls(**values)  # type: ignore[arg-type]  # keys are the dataclass's own fields


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to anything


def check_bind(host: str, settings: DashboardSettings) -> None:
    """Refuse to serve on a non-loopback ``host`` without credentials (DashboardCredentialsError)."""
    if is_loopback(host) or settings.has_credentials:
        return
    raise DashboardCredentialsError(
        f"refusing to serve the dashboard on {host} without credentials: set {TOKEN_ENV} "
        f"(or {USER_ENV} and {PASSWORD_ENV}), or use --host 127.0.0.1"
    )


def with_state_label(settings: DashboardSettings, label: str) -> DashboardSettings:
    """``settings`` showing ``label`` (already masked) as the state backend, unless it has one."""
    return settings if settings.state_label is not None else replace(settings, state_label=label)


__all__ = [
    "PASSWORD_ENV",
    "READ_ONLY_ENV",
    "SECRET_KEY_ENV",
    "TOKEN_ENV",
    "USER_ENV",
    "DashboardCredentialsError",
    "DashboardSettings",
    "check_bind",
    "is_loopback",
]
