"""What the admin commands share: backend options, the client they open, input types, errors.

The admin commands (``jobs``, ``chains``, ``retry``, ``cancel``, ``delete``, ``trigger``,
``workers``, ``stats``, ``health``, ``schedules``, ``pause``, ``resume``) run against any
jobchain database without the user's code: they connect with an empty job type registry,
which reads, retries, cancels, triggers, deletes and pauses never consult. They never
migrate: a database without jobchain tables is an error that names ``jobchain migrate``.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from jobchain.entities import MAX_DELAY, JobStatus, validate_id
from jobchain.errors import InvalidJobIdError, JobchainError, SchemaNotMigratedError

if TYPE_CHECKING:
    from jobchain.client import Client

STATE_URL_HELP = "State backend URL (default: $JOBCHAIN_STATE_URL, else sqlite:///jobchain.db)."
NOTIFY_URL_HELP = "Notify backend URL or 'none' (default: $JOBCHAIN_NOTIFY_URL, else none)."

EXIT_ERROR = 1
"""An error the command explains in one line (unknown id, refused change, unreachable backend)."""

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def state_option(f: F) -> F:
    """``--state URL`` (default: ``$JOBCHAIN_STATE_URL``, else the embedded SQLite file)."""
    return click.option("--state", default=None, metavar="URL", help=STATE_URL_HELP)(f)


def notify_option(f: F) -> F:
    """``--notify URL``: where writes announce themselves (wake workers, abort cancelled jobs)."""
    return click.option("--notify", default=None, metavar="URL", help=NOTIFY_URL_HELP)(f)


def json_option(f: F) -> F:
    """``--json``: machine-readable output on stdout (shapes in docs/reference/cli.md)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(f)


def yes_option(f: F) -> F:
    """``--yes``/``-y``: skip the confirmation prompt."""
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(f)


@asynccontextmanager
async def open_client(state: str | None, notify: str | None = "none") -> AsyncIterator[Client]:
    """A client on the state (and notify) backend with an empty job type registry; never migrates."""
    from jobchain.client import connect
    from jobchain.job_types import JobTypes

    client = await connect(state, notify=notify, job_types=JobTypes(), observers=(), migrate=False)
    async with client:
        yield client


def one_line(error: BaseException) -> str:
    """An error's message on one line (driver messages span several)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__


def run(main: Coroutine[Any, Any, T], *, state: str | None = None, exit_code: int = EXIT_ERROR) -> T:
    """Run ``main``; any jobchain or backend error becomes a one-line message and ``exit_code``.

    Adapters translate driver errors into jobchain errors; anything else that still escapes
    (a driver error an adapter missed) is shown as one line too, never as a traceback.
    """
    try:
        return asyncio.run(main)
    except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
        raise
    except SchemaNotMigratedError as exc:
        fail(unmigrated(exc, state), exit_code)
    except JobchainError as exc:
        fail(one_line(exc), exit_code)
    except Exception as exc:  # a driver error no adapter translated: still one line, no traceback
        fail(f"{type(exc).__name__}: {one_line(exc)}", exit_code)


class CommandError(click.ClickException):
    """A one-line error (``Error: message`` on stderr); exit code 1 unless a subclass says otherwise."""

    exit_code = EXIT_ERROR


@functools.cache
def _error_class(exit_code: int) -> type[CommandError]:
    # click reads exit_code from the class: one subclass per code (health exits 3 on a read error).
    return type(f"CommandError{exit_code}", (CommandError,), {"exit_code": exit_code})


def fail(message: str, exit_code: int = EXIT_ERROR) -> NoReturn:
    """Stop the command with ``Error: message`` on stderr and ``exit_code``."""
    raise _error_class(exit_code)(message)


def unmigrated(error: SchemaNotMigratedError, state: str | None) -> str:
    """One line for a database without jobchain tables, naming the real migrate command."""
    from jobchain.cli.worker import GENERIC_HINT  # only on this error path: worker.py is heavier

    text = one_line(error)
    command = f"run `jobchain migrate --state {shown_url(state)}` first"
    return text.replace(GENERIC_HINT, command) if GENERIC_HINT in text else f"{text}; {command}"


def shown_url(state: str | None) -> str:
    """The state URL as the command resolved it, password masked."""
    from jobchain.connect_backends import resolve_state_url

    try:
        return str(resolve_state_url(state))
    except JobchainError:
        return "URL"


# ---------------------------------------------------------------- input types


class IdType(click.ParamType[str, Any]):
    """A job or chain id (a UUID); anything else is a usage error."""

    name = "id"

    def __init__(self, what: str = "job") -> None:
        self.what = what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return validate_id(value)
        except InvalidJobIdError:
            self.fail(f"{value!r} is not a {self.what} id (a UUID such as 0190a3c4-...)", param, ctx)


JOB_ID = IdType("job")
CHAIN_ID = IdType("chain")

DURATION_MAX = MAX_DELAY
"""The longest duration an option accepts (36,500 days, the library's longest delay): a
``timedelta`` holds at most 999,999,999 days, and ``now`` minus 739,000 days is before year 1."""

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[smhdw]?)")


class Seconds(click.FloatRange):
    """A finite number of seconds from ``minimum`` to ``maximum`` (a FloatRange lets nan by)."""

    def __init__(self, minimum: float, maximum: float) -> None:
        super().__init__(min=minimum, max=maximum)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        converted = super().convert(value, param, ctx)
        if not math.isfinite(converted):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return converted


class DurationType(click.ParamType[timedelta, Any]):
    """``90`` (seconds), ``45s``, ``5m``, ``12h``, ``7d`` or ``2w`` as a positive timedelta,
    at most :data:`DURATION_MAX`."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        match = _DURATION.fullmatch(str(value).strip().lower())
        seconds = float(match["number"]) * DURATION_UNITS.get(match["unit"], 1) if match else math.nan
        # A digit string too long for a float is infinite: too long, not malformed.
        if seconds > DURATION_MAX.total_seconds():
            self.fail(f"{value!r} is too long; a duration is at most {DURATION_MAX.days} days", param, ctx)
        # Under half a microsecond rounds to a zero timedelta, which is no duration either.
        delta = timedelta(seconds=seconds) if math.isfinite(seconds) else timedelta(0)
        if delta <= timedelta(0):
            self.fail(f"{value!r} is not a positive duration; use e.g. 90, 45s, 5m, 12h or 7d", param, ctx)
        return delta


DURATION = DurationType()


class StatusType(click.Choice[str]):
    """A job status among ``allowed`` (all by default), case-insensitive."""

    def __init__(self, allowed: tuple[JobStatus, ...] = tuple(JobStatus)) -> None:
        super().__init__([s.value for s in allowed], case_sensitive=False)


def ago(moment: datetime, now: datetime | None = None) -> str:
    """A past event (started, last seen) as a short age (``3m12s ago``) relative to ``now``;
    ``just now`` when it reads ahead of ``now``. The moment was written by a worker's clock
    or the database's, which may run ahead of this machine's: "2.3s from now" for a
    heartbeat would be skew, not news."""
    delta = (now or datetime.now(UTC)) - moment
    if delta <= timedelta(0):
        return "just now"
    return short_duration(delta) + " ago"


def short_duration(delta: timedelta) -> str:
    """``1d2h``, ``3m12s``, ``4.2s`` or ``35ms``: two units at most."""
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    first = next(i for i, (n, _) in enumerate(parts) if n)
    return "".join(f"{n}{u}" for n, u in parts[first : first + 2] if n)
