"""The watchdogs' threads: one per test (:class:`TestWatch`), one per process
(:class:`SessionWatchdog`). The pytest side (options, hooks) is :mod:`.watchdog`.

Both write through :class:`RealStderr`, a copy of the process's stderr taken before pytest
captures it: what a hung test prints must reach the user while the test still hangs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from jobchain_conformance import _stacks

WATCHDOG_EXIT_STATUS = 124
"""The status a process ended by the session watchdog exits with (as ``timeout(1)``'s)."""

EXIT_GRACE_SECONDS = 60.0
"""At most this long (or the watchdog's limit, if shorter) for the interpreter to exit once
it started to: the run's work is done by then, and only a leaked thread keeps it alive."""

RESCUES = 5
"""How many times a test past its timeout is cancelled or alarmed before its watch gives up."""


class RealStderr:
    """A copy of fd 2 taken while pytest does not capture it: the user's terminal (in an
    xdist worker, the controller's stderr, which the worker inherits).

    Kept open for the life of the process: the session watchdog writes at interpreter exit.
    """

    def __init__(self) -> None:
        self._fd = os.dup(2)

    def write(self, text: str) -> None:
        """Write all of ``text`` (raw fd writes: no buffer shared with a hung main thread)."""
        data = text.encode("utf-8", "replace")
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:  # nowhere left to report; the caller still acts
            pass


def banner(title: str) -> str:
    """A line that stands out in a long log."""
    return f"\n{'+' * 20} jobchain watchdog: {title} {'+' * 20}\n"


class TestWatch:
    """One test's watch thread: every stack shortly before the test's timeout; after it, if
    the test still runs, the stacks again and attempts to end it (see :meth:`_rescue`).

    ``sections`` receives each dump (title, text), for the test's report.
    """

    __test__ = False  # a helper class, not a test class pytest should collect

    def __init__(
        self,
        nodeid: str,
        timeout: float,
        out: RealStderr,
        sections: list[tuple[str, str]],
        *,
        dump_before: float | None,
        cancel_after: float | None,
    ) -> None:
        self._nodeid = nodeid
        self._timeout = timeout
        self._out = out
        self._sections = sections
        self._dump_before = dump_before
        self._cancel_after = cancel_after
        # The test runs in the thread that creates its watch.
        self._thread_ident = threading.get_ident()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"jobchain-test-watch {nodeid}", daemon=True)

    def start(self) -> None:
        """Start watching (the test starts now)."""
        self._thread.start()

    def stop(self) -> None:
        """The test ended: stop watching."""
        self._done.set()

    def _run(self) -> None:
        started = time.monotonic()
        if self._dump_before is not None:
            dump_at = max(self._timeout - self._dump_before, self._timeout / 2)
            if self._done.wait(dump_at):
                return
            self._dump(f"{self._nodeid} has run {dump_at:.1f} s of its {self._timeout:g} s timeout")
        if self._cancel_after is None:
            return
        due = started + self._timeout + self._cancel_after
        for attempt in range(RESCUES):
            if self._done.wait(max(0.0, due - time.monotonic())):
                return
            if attempt == 0:
                overdue = time.monotonic() - started - self._timeout
                self._dump(f"{self._nodeid} still runs {overdue:.1f} s after its {self._timeout:g} s timeout")
            self._rescue(alarm=attempt > 0)
            due += self._cancel_after
        self._out.write(banner(f"{self._nodeid} still runs; giving up (the session watchdog may end it)"))

    def _dump(self, title: str) -> None:
        text = _stacks.format_everything(skip_thread=threading.get_ident())
        self._sections.append((f"jobchain watchdog: {title}", text))
        self._out.write(banner(title) + text + banner("end of " + title))

    def _rescue(self, *, alarm: bool) -> None:
        """Cancel the future the test's thread runs its event loop until (the test's task, or
        the loop's teardown); with ``alarm``, or without a loop, deliver SIGALRM again to the
        handler installed (pytest-timeout's, or the teardown's), which fails the test
        wherever its thread is blocked."""
        running = _stacks.loop_future(self._thread_ident)
        if running is not None:
            loop, future = running
            message = f"jobchain watchdog: {self._nodeid} outlived its {self._timeout:g} s timeout"
            try:
                loop.call_soon_threadsafe(future.cancel, message)
                self._out.write(banner(f"{self._nodeid}: cancelled the future its event loop runs"))
            except RuntimeError:  # the loop closed meanwhile
                pass
        if (alarm or running is None) and self._alarm():
            self._out.write(banner(f"{self._nodeid}: delivered SIGALRM again to its timeout handler"))

    def _alarm(self) -> bool:
        sigalrm = getattr(signal, "SIGALRM", None)
        if sigalrm is None or self._thread_ident != threading.main_thread().ident:
            return False
        # Only to a Python handler: under SIG_DFL the alarm would kill the process.
        if not callable(signal.getsignal(sigalrm)):
            return False
        signal.pthread_kill(self._thread_ident, sigalrm)
        return True


@dataclass
class _InFlight:
    nodeid: str
    started: float
    allowed: float = 0.0
    where: str = ""
    phase: str = "setup"


@dataclass
class _Progress:
    at: float
    event: str = "the watchdog started"
    phase: str = "configuring"
    watching: bool = True
    in_flight: dict[str, _InFlight] = field(default_factory=dict)


class SessionWatchdog:
    """Ends the process when nothing progressed for ``limit`` seconds while it was watching.

    Progress is a test starting or finishing (in the xdist controller: any worker's report),
    a collection step, a worker going up or down. Watching is paused while waiting is
    expected: an xdist worker between tests waits for its controller (whose own watchdog
    covers that), and once pytest returned only the interpreter's exit is watched. A test in
    flight may run its own ``allowed`` seconds (its timeout, with a margin) without progress,
    however short the limit.
    """

    def __init__(
        self,
        limit: float,
        out: RealStderr,
        *,
        role: str = "pytest process",
        setting: str = "",
        clock: Callable[[], float] = time.monotonic,
        exit: Callable[[int], object] = os._exit,
    ) -> None:
        self.limit = limit
        self.role = role
        self._setting = setting
        self._out = out
        self._clock = clock
        self._exit = exit
        self._lock = threading.Lock()
        self._state = _Progress(at=clock())
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jobchain-session-watchdog", daemon=True)

    # ------------------------------------------------------------------ progress

    def progress(self, event: str, *, phase: str | None = None, watching: bool | None = None) -> None:
        """Something moved: restart the count; optionally name the phase and pause or resume."""
        with self._lock:
            state = self._state
            state.at, state.event = self._clock(), event
            if phase is not None:
                state.phase = phase
            if watching is not None:
                state.watching = watching

    def test_started(self, nodeid: str, *, allowed: float = 0.0, watching: bool | None = None) -> None:
        """A test's protocol started (here, or in a worker, seen from the controller); it may
        run ``allowed`` seconds, if that is longer than the limit."""
        with self._lock:
            self._state.in_flight[nodeid] = _InFlight(nodeid, self._clock(), allowed)
        self.progress(f"{nodeid} started", phase="running tests", watching=watching)

    def allow(self, nodeid: str, allowed: float) -> None:
        """The test in flight ``nodeid`` may run ``allowed`` seconds (learnt from its report)."""
        with self._lock:
            entry = self._state.in_flight.get(nodeid)
            if entry is not None:
                entry.allowed = max(entry.allowed, allowed)

    def test_reported(self, nodeid: str, when: str, outcome: str, where: str = "") -> None:
        """The report of one phase of a test arrived (``where``: the xdist worker, if known)."""
        with self._lock:
            entry = self._state.in_flight.get(nodeid)
            if entry is not None:
                entry.phase = {"setup": "call", "call": "teardown"}.get(when, "finishing")
                entry.where = where or entry.where
        self.progress(f"{when} of {nodeid} {outcome}" + (f" on {where}" if where else ""))

    def test_finished(self, nodeid: str, *, watching: bool | None = None) -> None:
        """A test's protocol ended."""
        with self._lock:
            self._state.in_flight.pop(nodeid, None)
        self.progress(f"{nodeid} finished", watching=watching)

    def interpreter_exiting(self) -> None:
        """The interpreter started to exit (threading's atexit): watch again, with a short limit."""
        self.limit = min(self.limit, EXIT_GRACE_SECONDS)
        self.progress("the interpreter started to exit", phase="interpreter exit", watching=True)

    # ------------------------------------------------------------------ watching

    def stalled_for(self, now: float) -> float | None:
        """Seconds without progress when watching, at least ``limit``, and past every test in
        flight's own allowance; else None."""
        with self._lock:
            state = self._state
            deadline = max(
                [state.at + self.limit, *(e.started + e.allowed for e in state.in_flight.values())]
            )
            return now - state.at if state.watching and now >= deadline else None

    def start(self) -> None:
        """Start the daemon thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the daemon thread (for tests; a run leaves it to the process's end)."""
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(min(5.0, max(0.1, self.limit / 10))):
            idle = self.stalled_for(self._clock())
            if idle is not None:
                self.fire(idle)
                return

    def report(self, idle: float) -> str:
        """The message: which process, which phase, what is in flight and since when."""
        now = self._clock()
        with self._lock:
            state = self._state
            lines = [
                f"no progress for {idle:.0f} s in the {self.role} (pid {os.getpid()}):"
                f" ending it with status {WATCHDOG_EXIT_STATUS}",
                f"phase: {state.phase}",
                f"last progress {now - state.at:.0f} s ago: {state.event}",
            ]
            entries = sorted(state.in_flight.values(), key=lambda e: e.started)
        lines.append("in flight:" if entries else "in flight: no test")
        lines += [
            f"  {e.nodeid} ({e.phase}{', on ' + e.where if e.where else ''}, for {now - e.started:.0f} s)"
            for e in entries
        ]
        blocking = [t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
        if blocking:
            lines.append("non-daemon threads (the interpreter waits for them at exit):")
            lines += [f"  {t.name} (ident {t.ident})" for t in blocking]
        lines.append(f"(limit {self.limit:g} s{', set by ' + self._setting if self._setting else ''})")
        return "\n".join(lines) + "\n"

    def fire(self, idle: float) -> None:
        """Print the report and every stack, then end the process."""
        try:
            text = self.report(idle) + _stacks.format_everything(skip_thread=threading.get_ident())
        except Exception as error:  # the report must never keep the process alive
            text = f"no progress for {idle:.0f} s; the report failed: {error!r}\n"
        self._out.write(banner(f"{self.role} stuck") + text + banner(f"exit {WATCHDOG_EXIT_STATUS}"))
        for stream in (sys.stdout, sys.stderr):
            # A closed or broken stream: exiting matters more.
            with contextlib.suppress(Exception):
                stream.flush()
        self._exit(WATCHDOG_EXIT_STATUS)
