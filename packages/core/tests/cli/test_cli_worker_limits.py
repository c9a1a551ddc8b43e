"""`jobchain worker` refuses durations and intervals no timer can hold, with a usage error or a
typed error naming the option — never an OverflowError traceback (issue 34, finding 6)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from jobchain.cli import main
from jobchain.cli.worker import retention_from_options
from jobchain.errors import InvalidArgumentError


@pytest.mark.parametrize("text", ["99999999999d", "999999d", "1e300", "inf", "nan", "-1d", "0"])
def test_retention_durations_out_of_range_are_typed_errors(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="--retain-completed"):
        retention_from_options(text, None, None)


def test_the_longest_retention_is_accepted() -> None:
    retention = retention_from_options("36500d", None, None)
    assert retention is not None
    assert retention.completed is not None
    assert retention.completed.days == 36500


@pytest.mark.parametrize("option", ["--poll-interval", "--heartbeat-interval", "--timeout"])
@pytest.mark.parametrize("value", ["inf", "1e300", "nan"])
def test_intervals_no_timer_can_hold_are_usage_errors(option: str, value: str) -> None:
    result = CliRunner().invoke(main, ["worker", "nowhere:processors", option, value])
    assert result.exit_code == 2, result.output
    assert option in result.output
    assert "Traceback" not in result.output
