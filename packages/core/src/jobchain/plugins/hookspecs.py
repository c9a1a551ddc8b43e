"""The pluggy hook specifications of project "jobchain" and the BackendSpec they return.

A backend distribution declares an entry point in group ``jobchain`` pointing at a light
``plugin.py`` module whose ``@hookimpl`` functions implement these specs.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import pluggy

from jobchain.contracts.observe import Observer
from jobchain.errors import InvalidArgumentError

PROJECT_NAME: Final = "jobchain"
"""The pluggy project name, which is also the entry-point group."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

Role = Literal["state", "notify"]
ROLES: Final[tuple[Role, ...]] = ("state", "notify")

_SCHEME_CHARS: Final = frozenset(string.ascii_lowercase + string.digits + "-.")


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendSpec:
    """One URL scheme a distribution serves for one role.

    ``factory`` is a ``"module:attr"`` string naming an async callable that takes a
    BackendURL and returns the adapter (``StateAdapter`` for role ``state``,
    ``NotifyAdapter`` for ``notify``). It is imported only when the scheme is first used,
    so declaring a backend never imports its driver.

    ``sync_factory`` (state role, optional) names a plain callable that takes a BackendURL and
    returns a StateAdapter for :mod:`jobchain.sync`: its own transactions run on a synchronous
    driver, ``transaction(connection=…)`` joins the caller's synchronous connection, and none of
    its coroutines ever suspends (they are run by :func:`jobchain.sync.drive.drive`).

    ``scratch`` (state role, optional) names a plain callable that takes a BackendURL and
    returns a context manager yielding the URL (a string) of a private, empty database of the
    same backend (a new SQLite file, a new PostgreSQL schema), removed when it exits: what
    :func:`jobchain.testing.scratch_database` gives each test.
    """

    scheme: str
    role: Role
    distribution: str
    factory: str
    description: str = ""
    sync_factory: str = ""
    scratch: str = ""

    def __post_init__(self) -> None:
        if not self.scheme or not self.scheme[0].isalpha() or not set(self.scheme) <= _SCHEME_CHARS:
            raise InvalidArgumentError(
                f"BackendSpec scheme {self.scheme!r} must be lower-case letters, digits, '-' or '.', "
                "starting with a letter (no '+driver' part)"
            )
        if self.role not in ROLES:
            raise InvalidArgumentError(f"BackendSpec role must be 'state' or 'notify', got {self.role!r}")
        if not self.distribution:
            raise InvalidArgumentError("BackendSpec distribution must name the distribution to install")
        module, colon, attr = self.factory.partition(":")
        if not (module and colon and attr) or ":" in attr:
            raise InvalidArgumentError(f"BackendSpec factory must be 'module:attr', got {self.factory!r}")
        if self.sync_factory:
            module, colon, attr = self.sync_factory.partition(":")
            if not (module and colon and attr) or ":" in attr or self.role != "state":
                raise InvalidArgumentError(
                    "BackendSpec sync_factory must be 'module:attr' on a state backend, "
                    f"got {self.sync_factory!r}"
                )
        if self.scratch:
            module, colon, attr = self.scratch.partition(":")
            if not (module and colon and attr) or ":" in attr or self.role != "state":
                raise InvalidArgumentError(
                    f"BackendSpec scratch must be 'module:attr' on a state backend, got {self.scratch!r}"
                )


@hookspec
def jobchain_backends() -> Sequence[BackendSpec]:
    """Describe the URL schemes this plugin serves, one BackendSpec per (scheme, role).

    Must not import drivers: factories are ``"module:attr"`` strings imported on first use.
    Two plugins claiming the same (scheme, role) make every lookup fail with
    BackendConflictError naming both distributions; there is never a silent winner.
    """
    raise NotImplementedError  # pluggy never calls a spec's body


@hookspec
def jobchain_observers() -> Sequence[Observer]:
    """Return observers to attach to every client (logging, OpenTelemetry, metrics). May return [].

    An observer's exceptions are logged and swallowed; they never reach a job.
    """
    raise NotImplementedError  # pluggy never calls a spec's body


__all__ = [
    "PROJECT_NAME",
    "ROLES",
    "BackendSpec",
    "Role",
    "hookimpl",
    "hookspec",
    "jobchain_backends",
    "jobchain_observers",
]
