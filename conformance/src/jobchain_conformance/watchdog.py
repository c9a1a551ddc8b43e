"""Opt-in watchdogs for a test run, so that nothing hangs silently (issue 33).

Three independent switches, each an ini option or a command-line option, all off by default
(``plugin.py`` registers :class:`WatchdogPlugin` only when one is set, so an unrelated run is
unchanged). Under xdist the workers get the same options from their controller.

``jobchain_stack_dump_before_timeout = SECONDS`` (``--jobchain-stack-dump-before-timeout``)
    SECONDS before pytest-timeout's timeout for a test would fire (or at half the timeout,
    when that is later), print every thread's stack and every asyncio task of every running
    event loop, headed by the test's node id, to the real stderr (in a worker, the
    controller's stderr: it shows while the test still hangs), and attach the same text to
    the test's report if the test then fails (so the failure summary shows it too).
``jobchain_cancel_after_timeout = SECONDS`` (``--jobchain-cancel-after-timeout``)
    A test still running SECONDS after its timeout is stuck where pytest-timeout's signal
    could not end it: the exception its SIGALRM handler raises landed in another asyncio
    task or callback, which swallowed it (likely on a busy loop), or pytest-timeout already
    fired and the event loop's teardown then waits for a blocked executor thread. Print the
    stacks, cancel the future its thread's loop runs until, and deliver SIGALRM again to the
    installed handler (up to five tries, SECONDS apart).
``jobchain_watchdog_minutes = MINUTES`` (``--jobchain-watchdog-minutes``)
    In every process (plain run, xdist controller and each worker), a daemon thread ends the
    process with status 124 when nothing progressed for MINUTES (the controller waits a
    minute longer, so a stuck worker reports first), after printing the phase, the tests in
    flight (per worker in the controller) and every stack. It covers collection, tests and
    their fixtures (session fixtures are torn down in the last test's teardown), the
    session's end, and interpreter exit, where non-daemon threads are joined (bounded there
    by a minute). An xdist worker waiting for its controller is not counted as stuck.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass

import pytest

from jobchain_conformance._watchers import (
    EXIT_GRACE_SECONDS,
    RESCUES,
    WATCHDOG_EXIT_STATUS,
    RealStderr,
    SessionWatchdog,
    TestWatch,
)

__all__ = [
    "ALLOWANCE_MARGIN_SECONDS",
    "ALLOWANCE_PROPERTY",
    "CONTROLLER_GRACE_SECONDS",
    "EXIT_GRACE_SECONDS",
    "INI_CANCEL",
    "INI_DUMP",
    "INI_WATCHDOG",
    "PLUGIN_NAME",
    "WATCHDOG_EXIT_STATUS",
    "SessionWatchdog",
    "Settings",
    "WatchdogPlugin",
    "addoption",
    "configure",
    "item_timeout",
]

INI_DUMP = "jobchain_stack_dump_before_timeout"
INI_CANCEL = "jobchain_cancel_after_timeout"
INI_WATCHDOG = "jobchain_watchdog_minutes"
PLUGIN_NAME = "jobchain-watchdog"

CONTROLLER_GRACE_SECONDS = 60.0
"""The xdist controller waits this much longer than its workers, so a stuck worker's own
watchdog prints its stacks (the useful ones) and exits first; xdist then replaces it."""

ALLOWANCE_MARGIN_SECONDS = 60.0
"""Beyond its timeout (and the rescues after it), how long a test may run without progress."""

ALLOWANCE_PROPERTY = "jobchain_watchdog_allowance"
"""The user property that tells the xdist controller a test may run longer than the limit
(added only to such tests, so junit XML of an ordinary test is unchanged)."""

_SECTIONS = pytest.StashKey[list[tuple[str, str]]]()


def addoption(parser: pytest.Parser) -> None:
    """Declare the three switches (ini and command line); all off by default."""
    group = parser.getgroup("jobchain", "jobchain watchdogs (off unless set)")
    for name, help_text in (
        (INI_DUMP, "print every thread's stack and asyncio task this many seconds before a test's timeout"),
        (INI_CANCEL, "this many seconds after a test's timeout, cancel its event loop's future and re-alarm"),
        (INI_WATCHDOG, "end a process (controller or worker) that made no progress for this many minutes"),
    ):
        parser.addini(name, help_text, default="")
        group.addoption("--" + name.replace("_", "-"), dest=name, default=None, help=help_text)


@dataclass(frozen=True, slots=True)
class Settings:
    """The switches of one run; None is off."""

    dump_before: float | None = None
    cancel_after: float | None = None
    watchdog_seconds: float | None = None

    @classmethod
    def of(cls, config: pytest.Config) -> Settings:
        """Read the command line first, then the ini file; 0 or empty is off."""

        def number(name: str) -> float | None:
            raw = config.getoption(name, None) or config.getini(name)
            if raw in (None, ""):
                return None
            try:
                value = float(str(raw))
            except ValueError:
                raise pytest.UsageError(f"{name} must be a number, got {raw!r}") from None
            return value if value > 0 else None

        minutes = number(INI_WATCHDOG)
        return cls(number(INI_DUMP), number(INI_CANCEL), None if minutes is None else minutes * 60)

    @property
    def enabled(self) -> bool:
        """Whether any switch is on."""
        return any(v is not None for v in (self.dump_before, self.cancel_after, self.watchdog_seconds))

    @property
    def watches_tests(self) -> bool:
        """Whether each test with a timeout gets a watch thread."""
        return self.dump_before is not None or self.cancel_after is not None


def _positive(value: object) -> float | None:
    try:
        seconds = float(str(value))
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def item_timeout(item: pytest.Item) -> tuple[float | None, bool]:
    """The item's timeout and ``func_only``, resolved as pytest-timeout resolves them: the
    ``timeout`` marker, then ``--timeout``, ``PYTEST_TIMEOUT``, the ``timeout`` ini option."""
    config = item.config
    timeout: object = None
    func_only: object = None
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        timeout = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
        func_only = marker.kwargs.get("func_only")
    if timeout is None:
        timeout = config.getoption("timeout", None) or os.environ.get("PYTEST_TIMEOUT")
        timeout = timeout or _ini(config, "timeout")
    if func_only is None:
        func_only = _ini(config, "timeout_func_only")
    return (None if timeout is None else _positive(timeout)), func_only is True


def _ini(config: pytest.Config, name: str) -> object:
    try:
        return config.getini(name)
    except ValueError:  # pytest-timeout is not installed: nobody declared the option
        return None


def _worker_id(node: object) -> str:
    """The xdist worker id (``gw0``) of a controller's node object, '' for anything else."""
    return str(getattr(getattr(node, "gateway", None), "id", "") or "")


class WatchdogPlugin:
    """The hooks; :func:`configure` registers one per process when a switch is on."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self._config = config
        self._settings = settings
        self._out = RealStderr()
        workerinput = getattr(config, "workerinput", None)
        self._worker = workerinput is not None
        self._controller = False
        # Per test about to start here: how long it may run (see _allowance).
        self._allowed: dict[str, float] = {}
        self.session: SessionWatchdog | None = None
        if settings.watchdog_seconds is not None:
            role = f"xdist worker {workerinput['workerid']}" if workerinput is not None else "pytest process"
            self.session = SessionWatchdog(
                settings.watchdog_seconds, self._out, role=role, setting=INI_WATCHDOG
            )
            self.session.start()

    def _progress(self, event: str, *, phase: str | None = None, watching: bool | None = None) -> None:
        if self.session is not None:
            self.session.progress(event, phase=phase, watching=watching)

    # ------------------------------------------------------------------ session phases

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        controller = not self._worker and self._config.pluginmanager.has_plugin("dsession")
        self._controller = controller
        if self.session is not None and controller:
            self.session.role = "xdist controller"
            self.session.limit += CONTROLLER_GRACE_SECONDS
        self._progress("the session started", phase="collecting")

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        self._progress(f"collecting {collector.nodeid or 'the session'}")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._progress(f"collected {report.nodeid or 'the session'} ({report.outcome})")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # A worker then waits for its controller to hand it tests: not a stall of its own.
        self._progress("collection finished", phase="running tests", watching=not self._worker)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._progress("the session is finishing", phase="finishing the session", watching=True)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        # pytest returned to its caller, which may go on (an in-process run): watch again only
        # once the interpreter exits and joins non-daemon threads. threading's own atexit list
        # runs before that join (concurrent.futures joins its executor threads from it too).
        self._progress("pytest returned", phase="after pytest returned", watching=False)
        register = getattr(threading, "_register_atexit", None)  # private, since Python 3.9
        if self.session is not None and register is not None:
            try:
                register(self.session.interpreter_exiting)
            except RuntimeError:  # the interpreter is already exiting
                self.session.interpreter_exiting()

    # ------------------------------------------------------------------ xdist (optional hooks)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: object) -> None:
        self._progress(f"worker {_worker_id(node)} ready")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        self._progress(f"worker {_worker_id(node)} down" + (f": {error}" if error else ""))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self._progress(f"worker {_worker_id(node)} collected {len(ids)} items")

    # ------------------------------------------------------------------ tests

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if self.session is not None:
            self.session.test_started(nodeid, allowed=self._allowed.pop(nodeid, 0.0), watching=True)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.session is None:
            return
        # In the controller, xdist sets ``report.node`` to the worker it came from.
        where = _worker_id(getattr(report, "node", None))
        self.session.test_reported(report.nodeid, report.when or "", report.outcome, where)
        if self._controller:
            for name, value in report.user_properties:
                if name == ALLOWANCE_PROPERTY and isinstance(value, (int, float)):
                    self.session.allow(report.nodeid, float(value) + CONTROLLER_GRACE_SECONDS)

    def _allowance(self, item: pytest.Item) -> None:
        """Note how long ``item`` may run without progress: its timeout, the rescues after it,
        a margin. A test longer than the limit tells the controller so on its reports."""
        timeout, _ = item_timeout(item)
        if self.session is None or timeout is None:
            return
        rescues = RESCUES * self._settings.cancel_after if self._settings.cancel_after is not None else 0.0
        allowed = timeout + rescues + ALLOWANCE_MARGIN_SECONDS
        self._allowed[item.nodeid] = allowed
        if self._worker and allowed > self.session.limit:
            item.user_properties.append((ALLOWANCE_PROPERTY, allowed))

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if self.session is not None:
            self.session.test_finished(nodeid, watching=False if self._worker else None)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        self._allowance(item)
        watch = self._watch(item, func_only=False)
        try:
            return (yield)
        finally:
            if watch is not None:
                watch.stop()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        watch = self._watch(item, func_only=True)
        try:
            return (yield)
        finally:
            if watch is not None:
                watch.stop()

    def _watch(self, item: pytest.Item, *, func_only: bool) -> TestWatch | None:
        if not self._settings.watches_tests:
            return None
        timeout, only_call = item_timeout(item)
        # Timed over the same span as pytest-timeout: the whole protocol, or the call only.
        if timeout is None or only_call != func_only:
            return None
        watch = TestWatch(
            item.nodeid,
            timeout,
            self._out,
            item.stash.setdefault(_SECTIONS, []),
            dump_before=self._settings.dump_before,
            cancel_after=self._settings.cancel_after,
        )
        watch.start()
        return watch

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, object, object]:
        restore = self._arm_teardown_alarm(item)
        try:
            return (yield)
        finally:
            if restore is not None:
                restore()

    def _arm_teardown_alarm(self, item: pytest.Item) -> Callable[[], object] | None:
        """Once pytest-timeout fired it resets SIGALRM, and nothing times the rest of the test:
        a teardown that then hangs (an event loop closing waits for a blocked executor thread)
        hangs for ever. A handler of ours for the teardown lets the watch's alarm fail it."""
        sigalrm = getattr(signal, "SIGALRM", None)
        if (
            self._settings.cancel_after is None
            or item_timeout(item)[0] is None  # no watch will alarm it
            or sigalrm is None
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(sigalrm) != signal.SIG_DFL
        ):
            return None

        def overdue(signum: int, frame: object) -> None:
            pytest.fail(f"jobchain watchdog: the teardown of {item.nodeid} outlived its timeout")

        signal.signal(sigalrm, overdue)
        return lambda: signal.signal(sigalrm, signal.SIG_DFL)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        sections = item.stash.get(_SECTIONS, None)
        if sections and report.failed:
            # On the report, the dumps reach the xdist controller and the failure summary.
            report.sections.extend(sections)
            sections.clear()
        return report


def configure(config: pytest.Config) -> WatchdogPlugin | None:
    """Register the watchdog plugin when a switch is on; return it (None: all off)."""
    settings = Settings.of(config)
    if not settings.enabled:
        return None
    plugin = WatchdogPlugin(config, settings)
    config.pluginmanager.register(plugin, PLUGIN_NAME)
    return plugin
