"""The ``jobchain_testing`` pytest plugin (entry point ``pytest11``), shipped with jobchain.

Fixtures for projects that test their own jobs (see the guide "Testing your jobs"):

* ``jobchain_job_types``: your registry. Override it in your ``conftest.py``; the default
  fails the test with a message saying so.
* ``jobchain_processors``: your processor slice(s), for ``jobchain_run``. Override it too.
* ``jobchain_clock``: a :class:`jobchain.testing.FrozenClock` at the real time, whole seconds.
* ``jobchain_client``: a :class:`jobchain.Client` on private ``memory://`` adapters with your
  registry and the clock, closed after the test.
* ``jobchain_run``: ``await jobchain_run()`` runs every due job of ``jobchain_client`` with
  ``jobchain_processors`` (:func:`jobchain.testing.run_until_idle`); keywords pass through.
* ``jobchain_database``: the database your tests run on, as a URL: ``JOBCHAIN_TEST_DATABASE_URL``,
  else ``sqlite://``. Override it to pin one (``postgresql://app@localhost/app_test``).
* ``jobchain_database_url``: a new, empty database like ``jobchain_database`` for this test
  (a SQLite file, a PostgreSQL schema; :func:`jobchain.testing.scratch_database`), removed after.
  Connect to it with ``migrate=True``; close your clients before the test ends.

This module lives outside the ``jobchain`` package on purpose: loading the plugin imports
nothing but pytest, so a test run that uses none of the fixtures pays nothing for it.
jobchain is imported when a fixture is first used.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from jobchain import Client, JobTypes
    from jobchain.testing import FrozenClock, JobRun
    from jobchain.worker import Processors

_OVERRIDE = """\
{name} is not set: define it in your conftest.py, for example

    @pytest.fixture
    def {name}():
        from myapp.jobs import {example}
        return {example}
"""


@pytest.fixture
def jobchain_job_types() -> JobTypes:
    """Your job-type registry: override this fixture to return it."""
    pytest.fail(_OVERRIDE.format(name="jobchain_job_types", example="job_types"), pytrace=False)


@pytest.fixture
def jobchain_processors() -> Processors:
    """Your processor slice (or a list of slices) for ``jobchain_run``: override this fixture."""
    pytest.fail(_OVERRIDE.format(name="jobchain_processors", example="processors"), pytrace=False)


@pytest.fixture
def jobchain_clock() -> FrozenClock:
    """A clock that moves only when the test calls ``advance()`` or ``set()``."""
    from jobchain.testing import FrozenClock

    return FrozenClock()


@pytest.fixture
def jobchain_client(jobchain_job_types: JobTypes, jobchain_clock: FrozenClock) -> Iterator[Client]:
    """A client on private ``memory://`` state and notify, with your registry and the clock."""
    from jobchain.testing import memory_client

    client = memory_client(jobchain_job_types, clock=jobchain_clock)
    yield client
    _close(client)


@pytest.fixture
def jobchain_run(
    jobchain_client: Client, jobchain_processors: Processors
) -> Callable[..., Awaitable[list[JobRun]]]:
    """``await jobchain_run(**options)``: run_until_idle(jobchain_client, jobchain_processors)."""
    from jobchain.testing import run_until_idle

    def run(**options: Any) -> Awaitable[list[JobRun]]:
        return run_until_idle(jobchain_client, jobchain_processors, **options)

    return run


@pytest.fixture
def jobchain_database() -> str:
    """The URL your tests' databases are made like: ``JOBCHAIN_TEST_DATABASE_URL`` or ``sqlite://``."""
    return os.environ.get("JOBCHAIN_TEST_DATABASE_URL") or "sqlite://"


@pytest.fixture
def jobchain_database_url(jobchain_database: str) -> Iterator[str]:
    """A new, empty database like ``jobchain_database`` for this test, removed after it."""
    from jobchain.testing import scratch_database

    with scratch_database(jobchain_database) as url:
        yield url


def _close(client: Client) -> None:
    # A synchronous fixture, so it works whichever async plugin (pytest-asyncio in any mode,
    # anyio) runs the tests: the memory adapters close without suspending, so the coroutine
    # is driven to its end here, without an event loop.
    from jobchain.sync.drive import SyncWiringError, drive

    try:
        drive(client.close())
    except SyncWiringError:
        # Something was still pending (a late wake-up of the test's loop): close the adapters.
        if client.notify is not None:
            drive(client.notify.close())
        drive(client.state.close())
