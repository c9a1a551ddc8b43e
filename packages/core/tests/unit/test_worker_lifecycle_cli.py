"""`jobchain worker` lifecycle options: --max-attempts, --timeout, --retain-*."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobchain import UNSET, InvalidArgumentError, Retention
from jobchain.cli import main
from jobchain.cli.worker import parse_duration, parse_max_attempts, retention_from_options


def test_durations_take_a_unit_or_seconds() -> None:
    assert parse_duration("45", "--x") == timedelta(seconds=45)
    assert parse_duration("45s", "--x") == timedelta(seconds=45)
    assert parse_duration("30m", "--x") == timedelta(minutes=30)
    assert parse_duration("12h", "--x") == timedelta(hours=12)
    assert parse_duration("7D", "--x") == timedelta(days=7)
    for bad in ("", "d", "soon", "-1d", "0", "nan", "inf"):
        with pytest.raises(InvalidArgumentError, match="--x"):
            parse_duration(bad, "--x")


def test_max_attempts_option() -> None:
    assert parse_max_attempts(None) is UNSET
    assert parse_max_attempts("3") == 3
    assert parse_max_attempts("unlimited") is None
    for bad in ("0", "-2", "1.5", "many"):
        with pytest.raises(InvalidArgumentError, match="--max-attempts"):
            parse_max_attempts(bad)


def test_retention_options() -> None:
    assert retention_from_options(None, None, None) is None
    assert retention_from_options("7d", None, "30d") == Retention(
        completed=timedelta(days=7), cancelled=timedelta(days=30)
    )


@pytest.fixture
def app(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "lifecycle_cli_app.py").write_text(
        textwrap.dedent(
            """
            from jobchain import JobTypes
            from jobchain.worker import Processors

            types = JobTypes()
            ping = types.define("cli.lifecycle", input=int, output=int, entry=True)
            processors = Processors()

            @processors.handler(ping)
            async def handle(attempt):
                return await attempt.complete(attempt.input)
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield "lifecycle_cli_app:processors"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("lifecycle_cli_app", None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--max-attempts", "0"], "--max-attempts"),
        (["--retain-completed", "soon"], "--retain-completed"),
        (["--retain-failed", "-3d"], "--retain-failed"),
    ],
)
def test_bad_lifecycle_options_stop_before_the_worker_starts(
    app: str, options: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["worker", app, "--state", "memory://", *options])
    assert result.exit_code != 0
    assert message in result.output


def test_help_lists_the_lifecycle_options() -> None:
    result = CliRunner().invoke(main, ["worker", "--help"])
    assert result.exit_code == 0
    for option in (
        "--max-attempts",
        "--timeout",
        "--retain-completed",
        "--retain-failed",
        "--retain-cancelled",
    ):
        assert option in result.output


def test_lifecycle_options_reach_the_worker(app: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import jobchain.cli.worker as cli_worker

    seen: dict[str, object] = {}

    async def fake_run_worker(*args: object, **options: object) -> None:
        seen.update(options)

    monkeypatch.setattr(cli_worker, "run_worker", fake_run_worker)
    result = CliRunner().invoke(
        main,
        [
            "worker",
            app,
            "--state",
            "memory://",
            "--loop",
            "asyncio",
            "--max-attempts",
            "unlimited",
            "--timeout",
            "2.5",
            "--retain-completed",
            "7d",
        ],
    )
    assert result.exit_code == 0, result.output
    assert seen["max_attempts"] is None
    assert seen["handler_timeout"] == 2.5
    assert seen["retention"] == Retention(completed=timedelta(days=7))
