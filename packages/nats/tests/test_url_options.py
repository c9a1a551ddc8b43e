"""URL options of the NATS backend: a typo is a typed error naming a close match, before connecting."""

from __future__ import annotations

import pytest

import jobchain
from jobchain.errors import InvalidURLError


async def test_connect_rejects_unknown_keys_before_connecting() -> None:
    # Port 1: had jobchain tried to connect, the error would name an unreachable server.
    with pytest.raises(InvalidURLError) as info:
        await jobchain.connect(
            "memory://", notify="nats://127.0.0.1:1?kv_bucket=b&kv_creat=true", job_types=jobchain.JobTypes()
        )
    message = str(info.value)
    assert "unknown option 'kv_creat'" in message
    assert "did you mean 'kv_create'?" in message
    assert "jobchain-nats options are" in message
    assert "kv_bucket" in message
