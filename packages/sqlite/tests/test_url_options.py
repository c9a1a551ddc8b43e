"""URL options of the SQLite backend: a typo is a one-line typed error naming a close match."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import jobchain
from jobchain.cli import main
from jobchain.errors import InvalidURLError
from jobchain_sqlite import SqliteOptions


def test_migrate_with_a_typo_exits_with_one_line(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    result = CliRunner().invoke(main, ["migrate", "--state", f"sqlite:///{db}?busy_timout=3"])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    assert "'busy_timout'" in lines[0]
    assert "did you mean 'busy_timeout'?" in lines[0]
    assert not db.exists()  # rejected before the file was opened


async def test_connect_rejects_unknown_keys(tmp_path: Path) -> None:
    with pytest.raises(InvalidURLError) as info:
        await jobchain.connect(
            f"sqlite:///{tmp_path / 'x.db'}?tabel_prefix=jc_", job_types=jobchain.JobTypes()
        )
    message = str(info.value)
    assert "did you mean 'table_prefix'?" in message
    assert "jobchain-sqlite options are busy_timeout, max_readers, synchronous, table_prefix" in message


def test_migrate_into_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["migrate", "--state", f"sqlite:///{tmp_path}/missing/dir/x.db"])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    assert "cannot be opened" in lines[0]


def test_a_nul_in_the_path_is_a_one_line_error_and_nothing_is_created(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["migrate", "--state", f"sqlite:///{tmp_path}/a%00b.db"])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, (ValueError, OverflowError)), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "NUL" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_options_refuse_a_nul_in_the_path() -> None:
    with pytest.raises(InvalidURLError, match="NUL"):
        SqliteOptions(path="jobs\x00.db")
