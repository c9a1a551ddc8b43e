"""Unknown URL options: a typed error naming the key, a close match and the valid keys."""

from __future__ import annotations

import pytest

import jobchain
from jobchain.errors import InvalidURLError
from jobchain.url import BackendURL, check_query_keys


def _error(url: str, known: tuple[str, ...], **kwargs: object) -> str:
    with pytest.raises(InvalidURLError) as info:
        check_query_keys(BackendURL.parse(url), known, backend="demo", **kwargs)  # type: ignore[arg-type]
    return str(info.value)


def test_names_the_key_a_close_match_and_the_valid_keys() -> None:
    message = _error("x://h/d?shema=jobs", ("schema", "table_prefix"))
    assert "unknown option 'shema'" in message
    assert "did you mean 'schema'?" in message
    assert "demo options are schema, table_prefix" in message
    assert "\n" not in message


def test_no_suggestion_when_nothing_is_close() -> None:
    message = _error("x://h/d?colour=red", ("schema",))
    assert "'colour'" in message
    assert "did you mean" not in message


def test_every_unknown_key_is_named_and_driver_keys_pass() -> None:
    url = BackendURL.parse("x://h/d?sslmode=disable&a=1&schema=s&b=2")
    with pytest.raises(InvalidURLError, match=r"'a' \(and 'b'\).*driver keys too"):
        check_query_keys(url, ("schema",), backend="demo", also=("sslmode",), also_note="driver keys too")
    check_query_keys(
        BackendURL.parse("x://h/d?sslmode=disable&schema=s"), ("schema",), backend="demo", also=("sslmode",)
    )


def test_suggestion_comes_from_driver_keys_too() -> None:
    message = _error("x://h/d?sslmod=disable", ("schema",), also=("sslmode",))
    assert "did you mean 'sslmode'?" in message


def test_password_like_values_stay_masked() -> None:
    message = _error("x://u:s3cr3t@h/d?colour=red&token=s3cr3t", ("schema",))
    assert "s3cr3t" not in message
    assert "u:***@h" in message


@pytest.mark.parametrize("role", ["state", "notify"])
async def test_memory_url_takes_no_options(role: str) -> None:
    urls = ("memory://?name=x", "memory://") if role == "state" else ("memory://", "memory://?name=x")
    with pytest.raises(InvalidURLError, match=r"unknown option 'name'.*memory:// URLs take no options"):
        await jobchain.connect(urls[0], notify=urls[1], job_types=jobchain.JobTypes())
