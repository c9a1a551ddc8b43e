"""The ``jobchain`` command line: the group and ``jobchain backends``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from click.testing import CliRunner

from jobchain.cli import main
from jobchain.plugins import BackendSpec, get_plugin_manager, hookimpl, register, reset


@pytest.fixture(autouse=True)
def fresh_plugins() -> Iterator[None]:
    reset()
    yield
    reset()


def _rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines()]


def test_backends_lists_memory_for_both_roles() -> None:
    result = CliRunner().invoke(main, ["backends"])
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout)
    assert rows[0] == ["SCHEME", "ROLE", "DISTRIBUTION", "VERSION", "FACTORY"]
    memory = [row for row in rows if row[0] == "memory://"]
    assert [row[1] for row in memory] == ["state", "notify"]
    for row in memory:
        assert row[2] == "jobchain"
        assert row[3] != "-"  # core is installed, so its version is shown
    assert memory[0][4] == "jobchain.memory.factories:open_state_adapter"
    assert memory[1][4] == "jobchain.memory.factories:open_notify_adapter"


def test_backends_shows_registered_specs_without_a_version() -> None:
    register(
        BackendSpec(scheme="fakeq", role="notify", distribution="jobchain-not-installed", factory="x.y:z")
    )
    result = CliRunner().invoke(main, ["backends"])
    assert result.exit_code == 0, result.output
    assert ["fakeq://", "notify", "jobchain-not-installed", "-", "x.y:z"] in _rows(result.stdout)


def test_help_lists_the_backends_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "backends" in result.output


def test_version_option() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("jobchain, version ")


def test_backends_reports_a_conflict_naming_both_distributions() -> None:
    class Rival:
        @hookimpl
        def jobchain_backends(self) -> Sequence[BackendSpec]:
            return [
                BackendSpec(scheme="memory", role="state", distribution="jobchain-rival", factory="r.s:t")
            ]

    get_plugin_manager().register(Rival(), name="rival")
    result = CliRunner().invoke(main, ["backends"])
    assert result.exit_code == 1
    assert "jobchain-rival" in result.output
    assert "jobchain (plugin 'memory'" in result.output
