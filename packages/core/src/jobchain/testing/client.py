"""An in-process client for tests: ``memory://`` with the test's registry and clock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from jobchain.client import Client
from jobchain.contracts.observe import Observer
from jobchain.errors import InvalidArgumentError
from jobchain.job_types import JobTypes


def memory_client(
    job_types: JobTypes,
    *,
    clock: Callable[[], datetime] | None = None,
    observers: Sequence[Observer] = (),
) -> Client:
    """A client on fresh, private ``memory://`` state and notify adapters.

    With ``clock`` (e.g. a :class:`~jobchain.testing.FrozenClock`), the adapters read it too,
    so every time the client and its state write or compare is the clock's. Built without
    awaiting anything, so synchronous fixtures can make one; ``await client.close()`` (or
    :func:`jobchain.sync.drive.drive` it) when done.
    """
    if not isinstance(job_types, JobTypes):
        raise InvalidArgumentError(f"job_types must be a JobTypes registry, got {job_types!r}")
    # Imported here: the memory model is loaded only by tests that use it.
    from jobchain.memory.notify import MemoryNotifyAdapter
    from jobchain.memory.state import MemoryStateAdapter

    return Client(
        MemoryStateAdapter(clock=clock),
        MemoryNotifyAdapter(clock=clock),
        job_types,
        observers=observers,
        clock=clock,
    )
