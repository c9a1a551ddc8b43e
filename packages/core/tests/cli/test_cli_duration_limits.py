"""Duration options refuse what no timestamp can hold (issue 34, finding 6).

``--newer-than 99999999999d`` ended in an ``OverflowError`` traceback (``timedelta`` holds at
most 999,999,999 days), and ``--newer-than 999999d`` in another one later (``now - 999999
days`` is before year 1). Every duration option of the admin commands is a usage error (exit
2) above the largest accepted duration, which the message names.
"""

from __future__ import annotations

import pytest

from jobchain.cli.common import DURATION_MAX

from .helpers import cli

# (command words, duration option) for every admin command with a duration option.
OPTIONS = [
    (("jobs", "list"), "--newer-than"),
    (("jobs", "list"), "--older-than"),
    (("chains", "list"), "--newer-than"),
    (("chains", "list"), "--older-than"),
    (("cancel",), "--newer-than"),
    (("delete",), "--older-than"),
    (("retry",), "--newer-than"),
    (("health",), "--max-oldest-due-age"),
]
TOO_LONG = ["99999999999d", "999999d", f"{DURATION_MAX.days + 1}d", "1" * 400, "99999999999999w"]


def _id(option: tuple[tuple[str, ...], str]) -> str:
    return " ".join((*option[0], option[1]))


@pytest.mark.parametrize("value", TOO_LONG)
@pytest.mark.parametrize("option", OPTIONS, ids=_id)
def test_a_duration_longer_than_the_largest_is_a_usage_error(
    option: tuple[tuple[str, ...], str], value: str
) -> None:
    words, name = option
    result = cli("memory://", *words, name, value)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert name in result.stderr
    assert f"at most {DURATION_MAX.days} days" in result.stderr


@pytest.mark.parametrize("value", ["-1d", "0", "0s", "0.0000001s", "nan", "inf", "1e9"])
def test_a_negative_zero_or_malformed_duration_is_a_usage_error(value: str) -> None:
    result = cli("memory://", "jobs", "list", "--newer-than", value)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "positive duration" in result.stderr


@pytest.mark.parametrize("option", ["--newer-than", "--older-than"])
def test_the_largest_duration_is_accepted(option: str) -> None:
    result = cli("memory://", "jobs", "list", option, f"{DURATION_MAX.days}d", "--json")
    assert result.exit_code == 0, result.output
    assert '"items": []' in result.stdout
