"""The pytest plugin: markers, capability skips, abstract fixtures, and inertness."""

from __future__ import annotations

import pytest

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

MEMORY_SUITES = """
from collections.abc import AsyncIterator

import pytest

from jobchain.contracts import Capability
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain_conformance import NotifyAdapterSuite, StateAdapterSuite


class NoSavepoints(MemoryStateAdapter):
    capabilities = frozenset(MemoryStateAdapter.capabilities - {Capability.SAVEPOINTS})


class TestState(StateAdapterSuite):
    @pytest.fixture
    async def state_adapter(self) -> AsyncIterator[MemoryStateAdapter]:
        adapter = NoSavepoints()
        yield adapter
        await adapter.close()


class TestNotify(NotifyAdapterSuite):
    @pytest.fixture
    async def notify_adapter(self) -> AsyncIterator[MemoryNotifyAdapter]:
        adapter = MemoryNotifyAdapter()
        yield adapter
        await adapter.close()
"""

UNRELATED = """
import pytest


@pytest.fixture
def now():
    return "the app's own fixture"


def test_passes(now):
    assert now == "the app's own fixture"


def test_fails():
    assert 1 == 2


@pytest.mark.skip(reason="the app's own skip")
def test_skipped():
    pass


@pytest.mark.parametrize("n", [1, 2, 3])
def test_parametrized(n):
    assert n < 3


def test_uses_a_suite_fixture_name(state_adapter):
    pass
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    return pytester


def test_markers_are_registered(project: pytest.Pytester) -> None:
    result = project.runpytest("--markers")
    result.stdout.fnmatch_lines(
        ["@pytest.mark.conformance:*", "@pytest.mark.integration:*", "@pytest.mark.requires(*capabilities)*"]
    )
    assert result.ret == 0


def test_undeclared_capability_skips_with_the_reason(project: pytest.Pytester) -> None:
    project.makepyfile(test_adopter=MEMORY_SUITES)
    result = project.runpytest("-k", "TestState and savepoint", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) >= 6
    assert "passed" not in outcomes
    assert "failed" not in outcomes
    result.stdout.fnmatch_lines(["*adapter does not declare SAVEPOINTS*"])


def test_declared_capabilities_do_not_skip(project: pytest.Pytester) -> None:
    project.makepyfile(test_adopter=MEMORY_SUITES)
    result = project.runpytest("-k", "TestNotify and budget", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 3
    assert "skipped" not in outcomes


def test_every_case_carries_the_conformance_marker(project: pytest.Pytester) -> None:
    project.makepyfile(test_adopter=MEMORY_SUITES)
    everything = project.runpytest("--collect-only", "-q").parseoutcomes()
    marked = project.runpytest("--collect-only", "-q", "-m", "conformance").parseoutcomes()
    unmarked = project.runpytest("--collect-only", "-q", "-m", "not conformance")
    assert marked["tests"] == everything["tests"] >= 170
    assert "no tests collected" in unmarked.stdout.str() or "deselected" in unmarked.stdout.str()
    assert "tests" not in unmarked.parseoutcomes()


def test_suite_classes_are_not_collected_until_subclassed(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_imports_only="from jobchain_conformance import NotifyAdapterSuite, StateAdapterSuite\n"
    )
    result = project.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.mark.parametrize(
    ("suite", "fixture"), [("StateAdapterSuite", "state_adapter"), ("NotifyAdapterSuite", "notify_adapter")]
)
def test_abstract_fixture_says_what_to_override(project: pytest.Pytester, suite: str, fixture: str) -> None:
    project.makepyfile(
        test_forgot=f"from jobchain_conformance import {suite}\n\nclass TestForgot({suite}):\n    pass\n"
    )
    result = project.runpytest("-k", "close_is_idempotent")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*NotImplementedError: override {fixture} in your Test* class*"])


def test_installing_the_plugin_does_not_change_an_unrelated_run(project: pytest.Pytester) -> None:
    project.makepyfile(test_app=UNRELATED)
    with_plugin = project.runpytest("-rA")
    without_plugin = project.runpytest("-rA", "-p", "no:jobchain")
    assert with_plugin.parseoutcomes() == without_plugin.parseoutcomes()
    assert with_plugin.parseoutcomes() == {"passed": 3, "failed": 2, "skipped": 1, "errors": 1}
    assert _summary(with_plugin) == _summary(without_plugin)
    # The comparison means something only if the plugin was active in the first run.
    assert "conformance:" in project.runpytest("--markers").stdout.str()
    assert "conformance:" not in project.runpytest("--markers", "-p", "no:jobchain").stdout.str()


def _summary(result: pytest.RunResult) -> list[str]:
    """The short test summary lines (outcome and node id), without timings."""
    return sorted(
        line.split(" - ")[0]
        for line in result.stdout.lines
        if line.startswith(("PASSED", "FAILED", "SKIPPED", "ERROR"))
    )


def test_no_two_mixins_of_a_suite_share_a_case_name() -> None:
    # Suites are composed by multiple inheritance: a second mixin's case with the same name
    # would silently shadow the first one instead of running next to it.
    import jobchain_conformance

    suites = [
        getattr(jobchain_conformance, name) for name in jobchain_conformance.__all__ if name.endswith("Suite")
    ]
    assert suites
    shadowed = []
    for suite in suites:
        owners: dict[str, list[str]] = {}
        for cls in suite.__mro__:
            for name in vars(cls):
                if name.startswith("test_"):
                    owners.setdefault(name, []).append(cls.__name__)
        shadowed += [f"{suite.__name__}.{name}: {where}" for name, where in owners.items() if len(where) > 1]
    assert shadowed == []
