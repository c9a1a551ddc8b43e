"""The opt-in watchdogs (issue 33): deliberately hung runs end, with the stacks that explain them.

The hung runs are pytest subprocesses on generated test files with timeouts of a couple of
seconds: each case asserts that a hang is ended and what it printed, never how fast.
"""

from __future__ import annotations

import threading

import pytest

from jobchain_conformance import _watchers, watchdog

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

# Generous: a hung case must end, but on a starved machine starting pytest alone takes seconds
# (importing the conformance suite, which the plugin's package does, costs most of them).
RUN_BOUND = 240.0
SUBPROCESS_TIMEOUT = pytest.mark.timeout(300)

SYNC_HANG = """
import threading

import pytest


@pytest.mark.timeout(2)
def test_blocked_on_an_event():
    never = threading.Event()
    never.wait()  # the hung frame
"""

ASYNC_HANG = """
import asyncio

import pytest


async def wait_for_nothing(never):
    await never  # the hung await


@pytest.mark.timeout(2)
async def test_awaits_a_future_that_never_completes():
    await wait_for_nothing(asyncio.get_running_loop().create_future())
"""

THREAD_HANG = """
import asyncio
import threading

import pytest

NEVER = threading.Event()


def block_in_thread():
    NEVER.wait()  # the hung thread


@pytest.mark.timeout(2)
async def test_blocked_in_a_thread():
    await asyncio.to_thread(block_in_thread)
"""

BUSY_LOOP_HANG = """
import asyncio
import time

import pytest


async def keep_the_loop_busy():
    while True:
        started = time.monotonic()
        while time.monotonic() - started < 0.05:
            pass
        await asyncio.sleep(0)


@pytest.mark.timeout(2)
async def test_hangs_while_another_task_keeps_the_loop_busy():
    busy = asyncio.create_task(keep_the_loop_busy())
    await asyncio.get_running_loop().create_future()
"""

SESSION_TEARDOWN_HANG = """
import threading

import pytest


@pytest.fixture(scope="session")
def resource():
    yield "resource"
    threading.Event().wait()  # a session fixture whose teardown blocks


def test_uses_the_resource(resource):
    assert resource == "resource"
"""

COLLECTION_HANG = """
import threading

threading.Event().wait()  # an import that blocks


def test_never_collected():
    pass
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini(INI)
    return pytester.runpytest_subprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", *args, timeout=RUN_BOUND
    )


def output(result: pytest.RunResult) -> str:
    return result.stdout.str() + "\n" + result.stderr.str()


# ---------------------------------------------------------------------------- per test


@SUBPROCESS_TIMEOUT
class TestStackDumpBeforeTimeout:
    def test_a_sync_test_blocked_on_an_event_fails_with_its_hung_frame_printed(
        self, pytester: pytest.Pytester
    ) -> None:
        pytester.makepyfile(test_sync=SYNC_HANG)
        result = run(pytester, "-o", f"{watchdog.INI_DUMP}=1")
        result.assert_outcomes(failed=1)
        nodeid = "test_sync.py::test_blocked_on_an_event"
        # Live, on the real stderr, while the test still hung...
        live = result.stderr.str()
        assert f"jobchain watchdog: {nodeid} has run 1.0 s of its 2 s timeout" in live
        assert "never.wait()  # the hung frame" in live
        assert "--- thread MainThread" in live
        # ...and again on the failed test's report.
        report = result.stdout.str()
        assert "Timeout (>2.0s) from pytest-timeout" in report
        assert f"- jobchain watchdog: {nodeid} has run 1.0 s of its 2 s timeout -" in report
        assert "never.wait()  # the hung frame" in report.split("jobchain watchdog:", 1)[1]

    def test_an_async_test_awaiting_forever_fails_with_its_task_printed(
        self, pytester: pytest.Pytester
    ) -> None:
        pytester.makepyfile(test_async=ASYNC_HANG)
        result = run(pytester, "-o", f"{watchdog.INI_DUMP}=1")
        result.assert_outcomes(failed=1)
        live = result.stderr.str()
        assert "=== asyncio tasks of the loop run by thread MainThread ===" in live
        assert "test_awaits_a_future_that_never_completes [pending]" in live
        assert "await never  # the hung await" in live
        assert "awaiting <Future pending" in live

    def test_an_async_test_blocked_in_a_thread_ends_and_so_does_the_interpreter(
        self, pytester: pytest.Pytester
    ) -> None:
        """pytest-timeout fails the call, then the event loop's teardown waits for the blocked
        executor thread with no timer left (Python 3.11 waits for ever), and interpreter exit
        joins that thread: the per-test rescue fails the teardown, the session watchdog ends
        the exit."""
        pytester.makepyfile(test_thread=THREAD_HANG)
        # The session watchdog must come last: the teardown rescue fires 2 s into a teardown
        # that starts only once the call's failure is reported, which a starved machine can
        # delay by seconds (with 6 s, a run under 8 CPU burners saw the watchdog win). 18 s of
        # no progress leaves that margin and still ends the hung interpreter exit.
        result = run(
            pytester,
            "-o",
            f"{watchdog.INI_DUMP}=1",
            "-o",
            f"{watchdog.INI_CANCEL}=1",
            "-o",
            f"{watchdog.INI_WATCHDOG}=0.3",
        )
        text = output(result)
        assert "NEVER.wait()  # the hung thread" in result.stderr.str()
        assert "Timeout (>2.0s) from pytest-timeout" in text
        assert (
            "jobchain watchdog: the teardown of test_thread.py::test_blocked_in_a_thread outlived its timeout"
            in text
        )
        assert "1 failed, 1 error" in text
        assert result.ret == watchdog.WATCHDOG_EXIT_STATUS
        assert "phase: interpreter exit" in text
        assert "non-daemon threads (the interpreter waits for them at exit):" in text


@SUBPROCESS_TIMEOUT
class TestCancelAfterTimeout:
    def test_a_timeout_lost_in_a_busy_loop_is_rescued_by_cancelling_the_test(
        self, pytester: pytest.Pytester
    ) -> None:
        """pytest-timeout's exception lands in the busy task, which it ends: the test itself
        would wait for ever."""
        pytester.makepyfile(test_busy=BUSY_LOOP_HANG)
        result = run(pytester, "-o", f"{watchdog.INI_CANCEL}=1")
        result.assert_outcomes(failed=1)
        text = output(result)
        nodeid = "test_busy.py::test_hangs_while_another_task_keeps_the_loop_busy"
        assert f"jobchain watchdog: {nodeid} still runs" in text
        assert f"{nodeid}: cancelled the future its event loop runs" in text
        assert f"CancelledError: jobchain watchdog: {nodeid} outlived its 2 s timeout" in text


# ---------------------------------------------------------------------------- per process


@SUBPROCESS_TIMEOUT
class TestSessionWatchdog:
    def test_a_session_fixture_whose_teardown_blocks_is_ended_with_a_message(
        self, pytester: pytest.Pytester
    ) -> None:
        pytester.makepyfile(test_session=SESSION_TEARDOWN_HANG)
        result = run(pytester, "-o", "timeout=0", "-o", f"{watchdog.INI_WATCHDOG}=0.05")
        assert result.ret == watchdog.WATCHDOG_EXIT_STATUS
        text = result.stderr.str()
        assert "jobchain watchdog: pytest process stuck" in text
        assert "ending it with status 124" in text
        assert "phase: running tests" in text
        assert "  test_session.py::test_uses_the_resource (teardown, for " in text
        assert "threading.Event().wait()  # a session fixture whose teardown blocks" in text

    def test_an_import_that_blocks_collection_is_ended_with_a_message(
        self, pytester: pytest.Pytester
    ) -> None:
        pytester.makepyfile(test_import=COLLECTION_HANG)
        result = run(pytester, "-o", f"{watchdog.INI_WATCHDOG}=0.05")
        assert result.ret == watchdog.WATCHDOG_EXIT_STATUS
        text = result.stderr.str()
        assert "phase: collecting" in text
        assert "last progress" in text
        assert "collecting test_import.py" in text
        assert "threading.Event().wait()  # an import that blocks" in text

    def test_under_xdist_a_stuck_worker_reports_and_ends_and_the_run_goes_on(
        self, pytester: pytest.Pytester
    ) -> None:
        pytester.makepyfile(
            test_a_dump=SYNC_HANG,
            test_b_stuck="""
import threading
import time

import pytest


@pytest.mark.timeout(0)
def test_stuck_without_a_timeout():
    threading.Event().wait()  # only the watchdog ends this


def test_passes():
    pass


@pytest.mark.timeout(60)
def test_slower_than_the_watchdog_but_within_its_timeout():
    time.sleep(8)
""",
        )
        result = run(
            pytester,
            "-n",
            "2",
            "--max-worker-restart=1",
            "-o",
            f"{watchdog.INI_DUMP}=1",
            "-o",
            f"{watchdog.INI_WATCHDOG}=0.1",
        )
        text = output(result)
        live = result.stderr.str()
        # The worker's dump reaches the controller's stderr while the test hangs...
        assert "jobchain watchdog: test_a_dump.py::test_blocked_on_an_event has run 1.0 s" in live
        assert "never.wait()  # the hung frame" in live
        # ...and the failed report carries it to the summary.
        assert (
            "- jobchain watchdog: test_a_dump.py::test_blocked_on_an_event has run 1.0 s"
            in result.stdout.str()
        )
        # The stuck worker's watchdog says what it ran, prints its stack, and ends it.
        assert "stuck ++++" in live
        assert "in the xdist worker gw" in live
        assert "  test_b_stuck.py::test_stuck_without_a_timeout (call, for " in live
        assert "threading.Event().wait()  # only the watchdog ends this" in live
        # xdist reports the crash as the test's failure; the other tests still ran, and one
        # slower than the watchdog's limit passed: it may run its own timeout.
        assert "test_b_stuck.py::test_stuck_without_a_timeout" in text
        assert "crashed" in text
        assert "2 passed" in text
        assert result.ret not in (0, watchdog.WATCHDOG_EXIT_STATUS)


class RecordingOut(_watchers.RealStderr):
    """A RealStderr that keeps what it is given instead of writing fd 2."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TestSessionWatchdogState:
    def make(self, limit: float = 60.0) -> tuple[watchdog.SessionWatchdog, Clock, list[int], RecordingOut]:
        clock, exits, out = Clock(), [], RecordingOut()
        dog = watchdog.SessionWatchdog(limit, out, role="xdist worker gw3", clock=clock, exit=exits.append)
        return dog, clock, exits, out

    def test_a_stall_counts_from_the_last_progress(self) -> None:
        dog, clock, _, _ = self.make()
        clock.now += 59
        assert dog.stalled_for(clock.now) is None
        dog.test_started("t.py::test_x")
        clock.now += 59
        assert dog.stalled_for(clock.now) is None
        clock.now += 1
        assert dog.stalled_for(clock.now) == 60

    def test_a_test_with_a_long_timeout_may_run_it_without_progress(self) -> None:
        dog, clock, _, _ = self.make(limit=60.0)
        dog.test_started("t.py::test_spark", allowed=900.0)
        clock.now += 899
        assert dog.stalled_for(clock.now) is None
        clock.now += 1
        assert dog.stalled_for(clock.now) == 900

    def test_the_controller_learns_a_long_allowance_from_the_report(self) -> None:
        dog, clock, _, _ = self.make(limit=60.0)
        dog.test_started("t.py::test_spark")
        dog.allow("t.py::test_spark", 900.0)
        clock.now += 120
        assert dog.stalled_for(clock.now) is None
        dog.test_finished("t.py::test_spark")
        assert dog.stalled_for(clock.now + 60) == 60

    def test_a_worker_waiting_between_tests_is_not_stalled(self) -> None:
        dog, clock, _, _ = self.make()
        dog.test_started("t.py::test_x", watching=True)
        dog.test_finished("t.py::test_x", watching=False)
        clock.now += 3600
        assert dog.stalled_for(clock.now) is None
        dog.test_started("t.py::test_y", watching=True)
        clock.now += 60
        assert dog.stalled_for(clock.now) == 60

    def test_interpreter_exit_is_watched_with_a_short_limit(self) -> None:
        dog, clock, _, _ = self.make(limit=600.0)
        dog.progress("pytest returned", watching=False)
        clock.now += 3600
        assert dog.stalled_for(clock.now) is None
        dog.interpreter_exiting()
        assert dog.limit == watchdog.EXIT_GRACE_SECONDS
        clock.now += watchdog.EXIT_GRACE_SECONDS
        assert dog.stalled_for(clock.now) == watchdog.EXIT_GRACE_SECONDS

    def test_firing_reports_what_was_in_flight_then_exits_with_its_status(self) -> None:
        dog, clock, exits, out = self.make()
        dog.test_started("t.py::test_x")
        dog.test_reported("t.py::test_x", "setup", "passed", where="gw3")
        clock.now += 75
        dog.fire(75)
        assert exits == [watchdog.WATCHDOG_EXIT_STATUS]
        assert "no progress for 75 s in the xdist worker gw3" in out.text
        assert "last progress 75 s ago: setup of t.py::test_x passed on gw3" in out.text
        assert "  t.py::test_x (call, on gw3, for 75 s)" in out.text
        assert "=== threads ===" in out.text  # every thread's stack but the watchdog's own


class TestSwitches:
    def test_all_off_by_default_and_nothing_registered(self, pytester: pytest.Pytester) -> None:
        pytester.makeini(INI)
        pytester.makepyfile("def test_passes():\n    pass\n")
        seen: dict[str, object] = {}
        # The run this test is part of may have its own watchdogs on (the workspace's ini does):
        # only threads the inline run starts count.
        before = set(threading.enumerate())

        class Probe:
            def pytest_sessionfinish(self, session: pytest.Session) -> None:
                config = session.config
                seen["settings"] = watchdog.Settings.of(config)
                seen["plugin"] = config.pluginmanager.get_plugin(watchdog.PLUGIN_NAME)
                seen["threads"] = [
                    t.name
                    for t in threading.enumerate()
                    if t.name.startswith("jobchain-") and t not in before
                ]

        result = pytester.inline_run("-p", "no:randomly", plugins=[Probe()])
        result.assertoutcome(passed=1)
        assert seen == {"settings": watchdog.Settings(), "plugin": None, "threads": []}

    def test_the_command_line_and_the_ini_turn_them_on(self, pytester: pytest.Pytester) -> None:
        pytester.makeini(INI + f"{watchdog.INI_DUMP} = 5\n{watchdog.INI_WATCHDOG} = 0\n")
        config = pytester.parseconfig("--jobchain-watchdog-minutes=2", "--jobchain-cancel-after-timeout=3")
        assert watchdog.Settings.of(config) == watchdog.Settings(5.0, 3.0, 120.0)

    def test_a_switch_that_is_not_a_number_is_a_usage_error(self, pytester: pytest.Pytester) -> None:
        config = pytester.parseconfig("--jobchain-watchdog-minutes=soon")
        with pytest.raises(pytest.UsageError, match="jobchain_watchdog_minutes must be a number"):
            watchdog.Settings.of(config)

    def test_an_items_timeout_is_read_as_pytest_timeout_reads_it(self, pytester: pytest.Pytester) -> None:
        pytester.makeini(INI + "timeout = 7\n")
        items = pytester.getitems(
            """
import pytest

def test_ini():
    pass

@pytest.mark.timeout(3)
def test_marker():
    pass

@pytest.mark.timeout(timeout=4, func_only=True)
def test_marker_func_only():
    pass

@pytest.mark.timeout(0)
def test_disabled():
    pass
"""
        )
        assert [watchdog.item_timeout(item) for item in items] == [
            (7.0, False),
            (3.0, False),
            (4.0, True),
            (None, False),
        ]
