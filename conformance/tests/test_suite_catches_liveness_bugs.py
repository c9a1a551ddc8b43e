"""The integration suite catches broken liveness: deliberately wrong variants of the in-process
adapter must fail named integration cases, while the correct control passes every case it runs.

Each variant is the memory adapter behind the suite's own :class:`StateProxy` with one
operation overridden: a heartbeat that always raises, one that reports success and writes
nothing, a reap that always raises, a claim that raises every other call. Jobs still get done
on all but the silent one (the worker catches every loop error and retries), so what catches
them is the suite's liveness rule (an undeclared ``worker_error`` fails the case at teardown)
and the liveness cases (``LivenessTests``). A loop that keeps failing must fail most of the
cases, not one. Only a few integration classes run, on memory state and memory notify,
which keeps this run short. (Not ``LeaseTests``: a case of it that fails with its stalled
worker still frozen cannot stop that worker, and the run would hang.)
"""

from __future__ import annotations

import pytest

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

VARIANTS = '''
from collections.abc import AsyncIterator

import pytest

from jobchain.contracts import WorkerHeartbeatResult
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain_conformance.suites._integration_base import IntegrationSuiteBase
from jobchain_conformance.suites._integration_wrappers import StateProxy, as_state
from jobchain_conformance.suites.integration_liveness import LivenessTests
from jobchain_conformance.suites.integration_processing import ChainTests, ProcessingTests
from jobchain_conformance.suites.integration_rescue import RescueTests
from jobchain_conformance.suites.integration_resilience import StateResilienceTests


class BrokenError(RuntimeError):
    """What a broken variant raises."""


def correct():
    return {}


def heartbeat_raises():
    """Bug (a): worker_heartbeat always raises."""

    async def heartbeat(tx, params):
        raise BrokenError("broken variant: worker_heartbeat always raises")

    return {"worker_heartbeat": heartbeat}


def heartbeat_silent():
    """Bug (b): worker_heartbeat reports success and writes nothing: no worker is ever listed."""

    async def heartbeat(tx, params):
        return WorkerHeartbeatResult()

    return {"worker_heartbeat": heartbeat}


def reap_raises():
    """Bug (c): jobs_reap_expired always raises."""

    async def reap(tx, params):
        raise BrokenError("broken variant: jobs_reap_expired always raises")

    return {"jobs_reap_expired": reap}


def acquire_every_other_call_raises():
    """Bug (d): jobs_acquire raises on every second call (the first one works)."""
    calls = 0

    async def acquire(tx, params):
        nonlocal calls
        calls += 1
        if calls % 2 == 0:
            raise BrokenError("broken variant: jobs_acquire raises every other call")
        return await tx.jobs_acquire(params)

    return {"jobs_acquire": acquire}


def liveness_suite(overrides, *, wait_timeout=IntegrationSuiteBase.wait_timeout):
    class Suite(
        LivenessTests,
        RescueTests,
        ProcessingTests,
        ChainTests,
        StateResilienceTests,
        IntegrationSuiteBase,
    ):
        @pytest.fixture
        async def state_adapter(self) -> AsyncIterator[object]:
            inner = MemoryStateAdapter()
            proxy = StateProxy(inner)
            proxy.overrides.update(overrides())
            yield as_state(proxy)
            await inner.close()

        @pytest.fixture
        async def notify_adapter(self) -> AsyncIterator[object]:
            adapter = MemoryNotifyAdapter()
            yield adapter
            await adapter.close()

    Suite.wait_timeout = wait_timeout
    return Suite


# A broken variant's waits end sooner: a case that waits for what never comes fails anyway.
TestCorrect = liveness_suite(correct)
TestHeartbeatRaises = liveness_suite(heartbeat_raises, wait_timeout=10.0)
TestHeartbeatSilent = liveness_suite(heartbeat_silent, wait_timeout=10.0)
TestReapRaises = liveness_suite(reap_raises, wait_timeout=10.0)
TestAcquireEveryOtherCallRaises = liveness_suite(acquire_every_other_call_raises, wait_timeout=10.0)
'''

# variant class → cases that must fail against it (and pass against the correct control).
MUST_FAIL = {
    "TestHeartbeatRaises": [
        "test_a_running_worker_is_listed_and_its_heartbeats_follow_the_clock",
        "test_a_worker_whose_heartbeats_stop_is_presumed_dead_and_its_job_rescued",
        "test_the_registry_lists_a_running_worker_then_a_stopped_one",
        "test_a_dead_workers_running_job_runs_again_before_its_lease_ends",
        "test_linear_chain_runs_every_step_in_order",
        "test_jobs_started_before_the_worker_and_while_it_runs_are_all_processed",
    ],
    "TestHeartbeatSilent": [
        "test_a_running_worker_is_listed_and_its_heartbeats_follow_the_clock",
        "test_a_worker_whose_heartbeats_stop_is_presumed_dead_and_its_job_rescued",
        "test_the_registry_lists_a_running_worker_then_a_stopped_one",
        "test_a_dead_workers_running_job_runs_again_before_its_lease_ends",
        # The reaper learns when a lease expires from the heartbeat's answer.
        "test_an_expired_lease_is_rescued_while_the_queue_stays_full",
    ],
    "TestReapRaises": [
        "test_a_running_worker_is_listed_and_its_heartbeats_follow_the_clock",
        "test_an_expired_lease_is_rescued_while_the_queue_stays_full",
        "test_linear_chain_runs_every_step_in_order",
        "test_jobs_started_before_the_worker_and_while_it_runs_are_all_processed",
    ],
    "TestAcquireEveryOtherCallRaises": [
        "test_a_running_worker_is_listed_and_its_heartbeats_follow_the_clock",
        "test_a_worker_whose_heartbeats_stop_is_presumed_dead_and_its_job_rescued",
        "test_linear_chain_runs_every_step_in_order",
        "test_jobs_started_before_the_worker_and_while_it_runs_are_all_processed",
    ],
}
CONTROL = "TestCorrect"

# variant class → the share of the cases it runs that must fail (a loop that keeps failing
# fails whichever case meets it; the resilience cases, which declare their errors, may pass).
MOST_CASES = {
    "TestHeartbeatRaises": 0.75,
    "TestReapRaises": 0.75,
    "TestAcquireEveryOtherCallRaises": 0.5,
}

# variant class → what its failure messages must say (the operation, and its first error).
MESSAGES = {
    "TestHeartbeatRaises": "worker_heartbeat failed",
    "TestReapRaises": "jobs_reap_expired failed",
    "TestAcquireEveryOtherCallRaises": "claim_loop failed",
}

Outcomes = dict[tuple[str, str], set[str]]


class _Recorder:
    """A pytest plugin object collecting every phase report of the inner run."""

    def __init__(self) -> None:
        self.outcomes: Outcomes = {}
        self.messages: dict[str, list[str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _, cls, name = report.nodeid.split("::")
        self.outcomes.setdefault((cls, name), set()).add(report.outcome)
        if report.failed and report.when == "teardown":
            self.messages.setdefault(cls, []).append(report.longreprtext)


# One worker runs the inner session once (a module fixture runs again on every worker).
pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("catches_liveness_bugs")]


@pytest.fixture(scope="module")
def inner_run(tmp_path_factory: pytest.TempPathFactory) -> _Recorder:
    """Run the selected integration cases once, in-process, against every variant."""
    root = tmp_path_factory.mktemp("liveness_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_liveness_variants.py").write_text(VARIANTS)
    recorder = _Recorder()
    args = [
        "-q",
        "--tb=no",  # only outcomes matter; the liveness failures carry no traceback anyway
        "-p",
        "no:cacheprovider",
        "-p",
        "no:unraisableexception",
        "--import-mode=importlib",
        f"--rootdir={root}",
        "-c",
        str(root / "pytest.ini"),
    ]
    exit_code = pytest.main([*args, str(root)], plugins=[recorder])
    assert exit_code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), (
        f"inner run ended with {exit_code!r}"
    )
    return recorder


def _failed(outcomes: Outcomes, cls: str, name: str) -> bool:
    assert (cls, name) in outcomes, f"{cls}::{name} did not run; was the case renamed?"
    return "failed" in outcomes[(cls, name)]


@pytest.mark.parametrize(
    ("variant", "case"), [(variant, case) for variant, cases in MUST_FAIL.items() for case in cases]
)
def test_broken_variant_fails_the_named_case(inner_run: _Recorder, variant: str, case: str) -> None:
    assert _failed(inner_run.outcomes, variant, case), f"the suite let {variant} pass {case}"
    assert not _failed(inner_run.outcomes, CONTROL, case), f"{case} fails on the correct adapter too"


@pytest.mark.parametrize(("variant", "share"), list(MOST_CASES.items()))
def test_a_loop_that_keeps_failing_fails_most_cases(inner_run: _Recorder, variant: str, share: float) -> None:
    cases = [case for cls, case in inner_run.outcomes if cls == variant]
    failed = [case for case in cases if _failed(inner_run.outcomes, variant, case)]
    assert len(failed) >= share * len(cases), (
        f"{variant} failed only {len(failed)} of {len(cases)} cases; passed: "
        f"{sorted(set(cases) - set(failed))}"
    )


@pytest.mark.parametrize(("variant", "text"), list(MESSAGES.items()))
def test_the_failure_names_the_operation_and_its_first_error(
    inner_run: _Recorder, variant: str, text: str
) -> None:
    messages = inner_run.messages.get(variant, [])
    assert messages, f"no case of {variant} failed at teardown"
    named = [m for m in messages if text in m and "first error: BrokenError('broken variant:" in m]
    assert named, f"no teardown failure of {variant} says {text!r} with its first error: {messages[0]}"


def test_the_correct_control_passes_every_case_it_runs(inner_run: _Recorder) -> None:
    cases = [case for cls, case in inner_run.outcomes if cls == CONTROL]
    assert len(cases) >= 25, f"too few cases ran: {len(cases)}"
    assert sorted(case for case in cases if _failed(inner_run.outcomes, CONTROL, case)) == []
