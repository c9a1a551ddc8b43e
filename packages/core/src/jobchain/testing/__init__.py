"""Helpers for testing code that uses jobchain: run due jobs, control time, pytest fixtures.

* :func:`run_until_idle` runs every due job of a client through the real worker code, one at
  a time, and returns what ran (:class:`JobRun`).
* :class:`FrozenClock` is a ``clock=`` that moves only when the test moves it;
  :func:`clocked_state` makes it the clock of every operation of a state adapter (claims,
  leases, renewals, reaps, heartbeats), so a lease runs out when the test says so.
* :func:`scratch_database` gives a test a new, empty database on the backend you deploy
  (a SQLite file, a PostgreSQL schema), removed afterwards.
* The pytest plugin (installed with jobchain, registered as ``jobchain_testing``) provides
  the ``jobchain_client``, ``jobchain_clock``, ``jobchain_job_types``,
  ``jobchain_processors``, ``jobchain_run``, ``jobchain_database`` and
  ``jobchain_database_url`` fixtures; see the guide "Testing your jobs".
"""

from jobchain.testing._clocked import clocked_state
from jobchain.testing.client import memory_client
from jobchain.testing.clock import FrozenClock
from jobchain.testing.run import JobRun, RunLimitError, RunOutcome, run_until_idle
from jobchain.testing.scratch import scratch_database

__all__ = [
    "FrozenClock",
    "JobRun",
    "RunLimitError",
    "RunOutcome",
    "clocked_state",
    "memory_client",
    "run_until_idle",
    "scratch_database",
]
