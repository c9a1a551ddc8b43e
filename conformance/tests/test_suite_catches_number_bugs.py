"""The integration suite catches a backend that changes a number's JSON type (issue 34, finding 14).

The variants are the memory adapter behind the suite's own :class:`StateProxy`, storing every
integral float as an int, as PostgreSQL's ``jsonb`` did with ``1e16``: one does it to the
inputs ``jobs_create`` writes, the other to the outputs ``job_complete`` writes. Python's
``1e16 == 10**16`` hides the change from an equality check; ``NumberTypeTests`` must see it.
"""

from __future__ import annotations

import pytest

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

VARIANTS = '''
import dataclasses
from collections.abc import AsyncIterator

import pytest

from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain_conformance.suites._integration_base import IntegrationSuiteBase
from jobchain_conformance.suites._integration_wrappers import StateProxy, as_state
from jobchain_conformance.suites.integration_number_types import NumberTypeTests


def intify(value):
    """Every integral float as an int, the way a decimal store without a scale returns it."""
    if isinstance(value, dict):
        return {key: intify(item) for key, item in value.items()}
    if isinstance(value, list):
        return [intify(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def correct():
    return {}


def inputs_lose_float_type():
    """Bug (a): jobs_create stores integral floats of an input as ints."""

    async def create(tx, params):
        jobs = [dataclasses.replace(new, input=intify(new.input)) for new in params.jobs]
        return await tx.jobs_create(dataclasses.replace(params, jobs=jobs))

    return {"jobs_create": create}


def outputs_lose_float_type():
    """Bug (b): job_complete stores integral floats of an output as ints."""

    async def complete(tx, params):
        return await tx.job_complete(dataclasses.replace(params, output=intify(params.output)))

    return {"job_complete": complete}


def number_suite(overrides):
    class Suite(NumberTypeTests, IntegrationSuiteBase):
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

    Suite.wait_timeout = 10.0
    return Suite


TestCorrect = number_suite(correct)
TestInputsLoseFloatType = number_suite(inputs_lose_float_type)
TestOutputsLoseFloatType = number_suite(outputs_lose_float_type)
'''

INPUT_CASE = "test_input_numbers_keep_their_type_and_value"
OUTPUT_CASE = "test_a_handler_sees_input_numbers_and_its_output_keeps_their_type_and_value"

# variant class → cases that must fail against it (and pass against the correct control).
MUST_FAIL = {
    "TestInputsLoseFloatType": [INPUT_CASE, OUTPUT_CASE],
    "TestOutputsLoseFloatType": [OUTPUT_CASE],
}
CONTROL = "TestCorrect"

Outcomes = dict[tuple[str, str], set[str]]


class _Recorder:
    """A pytest plugin object collecting every phase report of the inner run."""

    def __init__(self) -> None:
        self.outcomes: Outcomes = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _, cls, name = report.nodeid.split("::")
        self.outcomes.setdefault((cls, name), set()).add(report.outcome)


# One worker runs the inner session once (a module fixture runs again on every worker).
pytestmark = pytest.mark.xdist_group("catches_number_bugs")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """Run the number cases once, in-process, against every variant; (class, case) → outcomes."""
    root = tmp_path_factory.mktemp("number_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_number_variants.py").write_text(VARIANTS)
    recorder = _Recorder()
    args = [
        "-q",
        "--tb=no",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--import-mode=importlib",
        f"--rootdir={root}",
        "-c",
        str(root / "pytest.ini"),
    ]
    exit_code = pytest.main([*args, str(root)], plugins=[recorder])
    assert exit_code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), (
        f"inner run ended with {exit_code!r}"
    )
    return recorder.outcomes


def _failed(outcomes: Outcomes, cls: str, name: str) -> bool:
    assert (cls, name) in outcomes, f"{cls}::{name} did not run; was the case renamed?"
    return "failed" in outcomes[(cls, name)]


@pytest.mark.parametrize(
    ("variant", "case"), [(variant, case) for variant, cases in MUST_FAIL.items() for case in cases]
)
def test_broken_variant_fails_the_named_case(outcomes: Outcomes, variant: str, case: str) -> None:
    assert _failed(outcomes, variant, case), f"the suite let {variant} pass {case}"
    assert not _failed(outcomes, CONTROL, case), f"{case} fails on the correct adapter too"


def test_the_correct_control_passes_every_case_it_runs(outcomes: Outcomes) -> None:
    cases = sorted(case for cls, case in outcomes if cls == CONTROL)
    assert cases == sorted([INPUT_CASE, OUTPUT_CASE])
    assert [case for case in cases if _failed(outcomes, CONTROL, case)] == []
