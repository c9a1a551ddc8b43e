"""The budget's mechanics: slot files locked with ``flock``, and one process's share of them.

:class:`Slots` is a counting semaphore shared by processes: ``size`` lock files in one
directory; the kernel drops a dead process's locks, so nothing leaks. :class:`Budget` is this
process's view: the slots it holds, which of them a test reserved and has spare, and who waits.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

SIZE_ENV: Final = "JOBCHAIN_TEST_PG_CONNECTIONS"
REPORT_ENV: Final = "JOBCHAIN_TEST_PG_REPORT"
DIR_ENV: Final = "JOBCHAIN_TEST_PG_BUDGET_DIR"
WAIT_ENV: Final = "JOBCHAIN_TEST_PG_WAIT"
DEFAULT_SIZE: Final = 60
DEFAULT_WAIT: Final = 600.0
"""Seconds a connection (or a reservation) waits for slots before it gives up with an error
naming the holders: far beyond a test's own timeout, which ends a waiting test first."""
_PAUSE: Final = (0.02, 0.25)  # first and longest sleep between tries: waiting never spins


class BudgetExhaustedError(Exception):
    """No connection slot came free in time: the holders are listed; lower their need or wait."""


def _pause(tries: int) -> float:
    first, longest = _PAUSE
    return float(min(longest, first * 2 ** min(tries, 8))) * (0.5 + random.random())


class Slots:
    """``size`` lock files in ``directory``: a counting semaphore shared by processes.

    Not thread-safe; :class:`Budget` serializes its calls. A process keeps one open file per
    slot it has tried, so taking and giving back a slot is one ``flock`` call.
    """

    def __init__(self, directory: Path, size: int) -> None:
        if size < 1:
            raise ValueError(f"a budget needs at least one slot, got {size}")
        self.directory = directory
        self.size = size
        directory.mkdir(parents=True, exist_ok=True)
        self._files: dict[int, int] = {}
        self._guard: int | None = None

    def _file(self, slot: int) -> int:
        fd = self._files.get(slot)
        if fd is None:
            fd = self._files[slot] = os.open(
                self.directory / f"slot-{slot:03d}", os.O_RDWR | os.O_CREAT, 0o666
            )
        return fd

    def try_take(self, count: int, skip: set[int], label: str) -> list[int]:
        """Lock up to ``count`` free slots (never one in ``skip``, which this process holds)."""
        taken: list[int] = []
        start = random.randrange(self.size)  # spread processes over the files
        for offset in range(self.size):
            if len(taken) == count:
                break
            slot = (start + offset) % self.size
            if slot in skip:
                continue
            fd = self._file(slot)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {label}\n".encode(), 0)
            taken.append(slot)
        return taken

    def give(self, slot: int) -> None:
        fd = self._files[slot]
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)

    def try_guard(self) -> bool:
        """Take the guard that reservations hold while they gather slots (False: someone has it)."""
        if self._guard is None:
            self._guard = os.open(self.directory / "guard", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(self._guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def release_guard(self) -> None:
        if self._guard is not None:
            fcntl.flock(self._guard, fcntl.LOCK_UN)

    def holders(self) -> collections.Counter[str]:
        """What holds slots now (``pid label`` of each held file): for error messages."""
        found: collections.Counter[str] = collections.Counter()
        for slot in range(self.size):
            with contextlib.suppress(OSError):
                text = (self.directory / f"slot-{slot:03d}").read_text().strip()
                if text:
                    found[text] += 1
        return found


@dataclass
class Reservation:
    """Slots a test holds from its start to its end (see :meth:`Budget.reserve`)."""

    label: str
    inside: int
    outside: int
    complete: bool = False
    waited: float = 0.0
    aside: list[int] = field(default_factory=list)
    base: int = 0
    """Counted connections this process had open when the reservation began."""
    peak: int = 0
    """The most counted connections open at once during the reservation (``base`` included)."""
    overflow: int = 0
    """Connections that found no spare reserved slot and took (or waited for) a free one."""


class Budget:
    """This process's share of the slots: which it holds, which are spare, who waits."""

    def __init__(self, slots: Slots, *, wait: float = DEFAULT_WAIT) -> None:
        self.slots = slots
        self.wait = wait
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._held: set[int] = set()
        self._spare: list[int] = []
        self._open = 0
        self._returned: collections.deque[int] = collections.deque()
        self.reservation: Reservation | None = None

    @property
    def size(self) -> int:
        return self.slots.size

    @property
    def forked(self) -> bool:
        """True in a forked child: its inherited locks are the parent's, never to be touched."""
        return os.getpid() != self._pid

    @property
    def open_connections(self) -> int:
        with self._lock:
            self._drain()
            return self._open

    def _drain(self) -> None:
        # Finalizers only queue the slot (they may run inside a locked section, during GC).
        while self._returned:
            slot = self._returned.popleft()
            self._open -= 1
            if self.reservation is not None:
                self._spare.append(slot)
            else:
                self._held.discard(slot)
                self.slots.give(slot)

    def _try_take_one(self) -> int | None:
        with self._lock:
            self._drain()
            reservation = self.reservation
            if self._spare:
                slot = self._spare.pop()
            else:
                label = f"connection {reservation.label}" if reservation else "connection"
                taken = self.slots.try_take(1, self._held, label)
                if not taken:
                    return None
                slot = taken[0]
                self._held.add(slot)
                if reservation is not None:
                    reservation.overflow += 1
            self._open += 1
            if reservation is not None:
                reservation.peak = max(reservation.peak, self._open)
            return slot

    def _exhausted(self, waited: float, what: str) -> BudgetExhaustedError:
        holders = ", ".join(f"{count} x {label}" for label, count in self.slots.holders().most_common(8))
        return BudgetExhaustedError(
            f"{what} waited {waited:.0f} s for one of the {self.size} PostgreSQL connection slots "
            f"({SIZE_ENV}, in {self.slots.directory}); held by: {holders or 'nobody (retry)'}"
        )

    def take(self) -> int:
        """A slot for a new connection: spare reserved, else free, else wait (sleeping)."""
        started, tries = time.monotonic(), 0
        while (slot := self._try_take_one()) is None:
            if time.monotonic() - started > self.wait:
                raise self._exhausted(time.monotonic() - started, "a connection")
            time.sleep(_pause(tries))
            tries += 1
        return slot

    async def take_async(self) -> int:
        """:meth:`take` for an event loop: waits with ``asyncio.sleep``."""
        started, tries = time.monotonic(), 0
        while (slot := self._try_take_one()) is None:
            if time.monotonic() - started > self.wait:
                raise self._exhausted(time.monotonic() - started, "a connection")
            await asyncio.sleep(_pause(tries))
            tries += 1
        return slot

    def give_back(self, slot: int) -> None:
        """The connection holding ``slot`` is closed (safe from a finalizer: only queues)."""
        self._returned.append(slot)
        if self._lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self._lock.release()

    @contextlib.contextmanager
    def reserve(self, inside: int, outside: int = 0, label: str = "") -> Iterator[Reservation]:
        """Hold ``inside`` slots for this process's connections and ``outside`` for its
        subprocesses' until the block ends; waits (sleeping) until all are free.

        A need beyond the whole budget is cut to it. A reservation that cannot complete in
        ``wait`` seconds goes on with what it has (``complete`` False): its connections then
        wait one by one, within the test's own timeout.
        """
        if self.reservation is not None:
            raise RuntimeError(f"{label}: a reservation is already open ({self.reservation.label})")
        need_outside = min(outside, self.size)
        need_inside = min(inside, self.size - need_outside)
        reservation = Reservation(label=label, inside=need_inside, outside=need_outside)
        with self._lock:
            self._drain()
            reservation.base = reservation.peak = self._open
            self.reservation = reservation
        try:
            if need_inside + need_outside:
                self._gather(reservation, need_inside, need_outside)
            else:
                reservation.complete = True
            yield reservation
        finally:
            with self._lock:
                self._drain()
                self.reservation = None
                for slot in self._spare + reservation.aside:
                    self._held.discard(slot)
                    self.slots.give(slot)
                self._spare.clear()
                reservation.aside.clear()

    def _gather(self, reservation: Reservation, inside: int, outside: int) -> None:
        started, tries, guarded = time.monotonic(), 0, False
        try:
            while True:
                guarded = guarded or self.slots.try_guard()
                if guarded:
                    with self._lock:
                        self._drain()
                        if len(reservation.aside) < outside:
                            wanted = outside - len(reservation.aside)
                            got = self.slots.try_take(wanted, self._held, f"outside {reservation.label}")
                            self._held.update(got)
                            reservation.aside.extend(got)
                        if len(reservation.aside) == outside and len(self._spare) < inside:
                            wanted = inside - len(self._spare)
                            got = self.slots.try_take(wanted, self._held, f"reserved {reservation.label}")
                            self._held.update(got)
                            self._spare.extend(got)
                        if len(reservation.aside) == outside and len(self._spare) >= inside:
                            reservation.complete = True
                            return
                if time.monotonic() - started > self.wait:
                    return  # go on with what is held; the connections wait one by one
                time.sleep(_pause(tries))
                tries += 1
        finally:
            reservation.waited = time.monotonic() - started
            if guarded:
                self.slots.release_guard()
