"""Negative typing tests: each file in ``cases/`` must fail ``mypy --strict`` where it says so.

A case file marks an expected error with two comment lines right above the offending line::

    # E: <a substring of the expected mypy error message>
    # fix: <the corrected line>

The test copies the cases to a temporary directory twice, as written and with every marked
line replaced by its fix, and runs mypy once over both (through ``mypy.api.run``, with a
fresh cache directory). It then asserts, per file, that each marked line has the
expected error, that no other line has one, and that the fixed copy has none at all.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

# One xdist worker runs every case: the module fixture's mypy runs then never share their
# cache directory with a concurrent run (a race there once hid an expected error).
pytestmark = pytest.mark.xdist_group("typing-cases")

CASES = Path(__file__).parent / "cases"
_ERROR = re.compile(r"^(?P<path>[^:]+\.py):(?P<line>\d+): error: (?P<message>.*)$")


@dataclass
class Expectation:
    line: int
    message: str


@dataclass
class Case:
    name: str
    expected: list[Expectation] = field(default_factory=list)
    fixed_text: str = ""


def _parse(path: Path) -> Case:
    """Read the ``# E:`` / ``# fix:`` markers; the fixed text replaces each marked line."""
    lines = path.read_text().splitlines()
    case = Case(path.name)
    fixed = list(lines)
    index = 0
    while index < len(lines):
        stripped = lines[index].strip()
        if stripped.startswith("# E: "):
            fix = lines[index + 1].strip()
            assert fix.startswith("# fix: "), (
                f"{path.name}:{index + 2}: '# E:' needs a '# fix:' line after it"
            )
            target = index + 2
            indent = lines[target][: len(lines[target]) - len(lines[target].lstrip())]
            case.expected.append(Expectation(target + 1, stripped.removeprefix("# E: ")))
            fixed[target] = indent + fix.removeprefix("# fix: ")
            index = target
        index += 1
    case.fixed_text = "\n".join(fixed) + "\n"
    return case


def _errors(output: str, directory: Path) -> dict[str, dict[int, list[str]]]:
    """mypy's errors by file name and line, for the files of ``directory``."""
    found: dict[str, dict[int, list[str]]] = {}
    for raw in output.splitlines():
        match = _ERROR.match(raw)
        if match is None:
            continue
        path = Path(match["path"])
        if path.parent.resolve() != directory.resolve():
            continue
        found.setdefault(path.name, {}).setdefault(int(match["line"]), []).append(match["message"])
    return found


@pytest.fixture(scope="module")
def mypy_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[list[Case], dict[str, dict[int, list[str]]], dict[str, dict[int, list[str]]]]:
    cases = [_parse(path) for path in sorted(CASES.glob("*.py"))]
    root = tmp_path_factory.mktemp("typing-cases")
    written, fixed = root / "written", root / "fixed"
    shutil.copytree(CASES, written)
    fixed.mkdir()
    for case in cases:
        (fixed / case.name).write_text(case.fixed_text)
    # A fresh cache per run: with a cache kept between runs, mypy took the case modules it had
    # seen before as unchanged and reported none of their errors (CI failed with "mypy said
    # nothing"). Each copy gets its own, as both define top-level modules of the same names.
    cache = root / "mypy-cache"
    results: dict[str, dict[str, dict[int, list[str]]]] = {}
    for directory in (written, fixed):
        stdout, stderr, _status = mypy_api.run(
            [
                "--strict",
                "--config-file=",
                "--no-error-summary",
                "--show-error-codes",
                # A cache per copy: both define top-level modules of the same names.
                f"--cache-dir={cache / directory.name}",
                str(directory),
            ]
        )
        assert not stderr.strip(), stderr
        results[directory.name] = _errors(stdout, directory)
    return cases, results["written"], results["fixed"]


def _case_names() -> list[str]:
    return [path.name for path in sorted(CASES.glob("*.py"))]


@pytest.mark.parametrize("name", _case_names())
def test_case_fails_where_marked(
    name: str, mypy_run: tuple[list[Case], dict[str, dict[int, list[str]]], dict[str, dict[int, list[str]]]]
) -> None:
    cases, written, _fixed = mypy_run
    [case] = [c for c in cases if c.name == name]
    errors = written.get(name, {})
    for expectation in case.expected:
        messages = errors.get(expectation.line, [])
        assert any(expectation.message in message for message in messages), (
            f"{name}:{expectation.line}: expected an error containing {expectation.message!r}, "
            f"mypy said {messages or 'nothing'}"
        )
    marked = {expectation.line for expectation in case.expected}
    unexpected = {line: messages for line, messages in errors.items() if line not in marked}
    assert not unexpected, f"{name}: errors on unmarked lines: {unexpected}"


@pytest.mark.parametrize("name", _case_names())
def test_case_passes_when_corrected(
    name: str, mypy_run: tuple[list[Case], dict[str, dict[int, list[str]]], dict[str, dict[int, list[str]]]]
) -> None:
    _cases, _written, fixed = mypy_run
    assert fixed.get(name, {}) == {}, f"{name} with its fixes applied: {fixed[name]}"


def test_every_negative_case_has_expectations() -> None:
    """A case file without markers (other than the shared and the compatibility ones) tests nothing."""
    without = [c.name for c in map(_parse, sorted(CASES.glob("*.py"))) if not c.expected]
    assert sorted(without) == ["compat.py", "limits.py", "shop.py"]
