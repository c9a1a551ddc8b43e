"""Worker names go into ids, log lines and the registry: control characters are refused."""

from __future__ import annotations

import re

import pytest

from jobchain import InvalidArgumentError
from jobchain.worker.ids import make_worker_id


@pytest.mark.parametrize("name", ["web-1", "a", "x" * 100, "billing.eu_west-2"])
def test_a_plain_name_gets_a_random_suffix(name: str) -> None:
    assert re.fullmatch(re.escape(name) + r"-[0-9a-f]{12}", make_worker_id(name))


@pytest.mark.parametrize("name", ["web-1\n", "web\n-1", "web\r", "w\x00", "", "x" * 101, "web 1", "wéb"])
def test_a_name_with_control_characters_or_others_is_refused(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="must be 1-100 characters") as info:
        make_worker_id(name)
    assert "\n" not in str(info.value)
    assert "\x00" not in str(info.value)
