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


async def test_a_silent_server_is_noticed_within_a_stated_bound(nats_url: str) -> None:
    """nats-py pings every 120 s and gives up after 2 unanswered pings (4 minutes of a dead
    server unnoticed); jobchain pings every 10 s and gives up after 3 (issue 35, deliver 4)."""
    from jobchain_nats import NatsNotifyAdapter

    adapter = await NatsNotifyAdapter.connect(nats_url)
    try:
        options = adapter._nc.options
        assert options["ping_interval"] == 10
        assert options["max_outstanding_pings"] == 3
    finally:
        await adapter.close()
    adapter = await NatsNotifyAdapter.connect(f"{nats_url}?ping_interval=30&max_outstanding_pings=5")
    try:
        assert adapter._nc.options["ping_interval"] == 30
        assert adapter._nc.options["max_outstanding_pings"] == 5
    finally:
        await adapter.close()


@pytest.mark.parametrize("query", ["ping_interval=0", "ping_interval=inf", "max_outstanding_pings=0"])
def test_ping_options_out_of_range_are_refused(query: str) -> None:
    from jobchain_nats.options import parse_url

    with pytest.raises(InvalidURLError):
        parse_url(f"nats://127.0.0.1:4222?{query}")
