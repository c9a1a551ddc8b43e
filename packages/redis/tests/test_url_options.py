"""URL options of the Redis backend: a typo is a typed error naming a close match, before connecting."""

from __future__ import annotations

import pytest

import jobchain
from jobchain.errors import InvalidURLError


async def test_connect_rejects_unknown_keys_before_connecting() -> None:
    # Port 1: had jobchain tried to connect, the error would name an unreachable server.
    with pytest.raises(InvalidURLError) as info:
        await jobchain.connect(
            "memory://", notify="redis://127.0.0.1:1/0?hint_tll=30", job_types=jobchain.JobTypes()
        )
    message = str(info.value)
    assert "unknown option 'hint_tll'" in message
    assert "did you mean 'hint_ttl'?" in message
    assert "jobchain-redis options are" in message
    assert "redis-py connection options" in message


async def test_a_typo_of_a_redis_py_option_is_suggested() -> None:
    with pytest.raises(InvalidURLError, match="did you mean 'socket_keepalive'"):
        await jobchain.connect(
            "memory://", notify="redis://127.0.0.1:1/0?socket_keepalve=1", job_types=jobchain.JobTypes()
        )
