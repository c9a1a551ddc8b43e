"""``publish_chains_completed``: a group commit's chain completions in one call, each delivered."""

from __future__ import annotations

import asyncio

from jobchain.contracts import PublishesChainsInBulk
from jobchain_postgres import PostgresNotifyAdapter


async def test_every_chain_reaches_its_own_listeners(pg_notify: PostgresNotifyAdapter) -> None:
    assert isinstance(pg_notify, PublishesChainsInBulk)
    # More than one coalesced send carries (500), with single publishes in between.
    chain_ids = [f"chain-{n}" for n in range(1_200)]
    received: dict[str, list[str]] = {}
    watched = chain_ids[::100]
    for chain_id in [*watched, "single"]:
        await pg_notify.listen_chain_completed(chain_id, received.setdefault(chain_id, []).append)
    await asyncio.gather(
        pg_notify.publish_chains_completed(chain_ids),
        pg_notify.publish_chain_completed("single"),
    )
    async with asyncio.timeout(10):
        while sum(len(got) for got in received.values()) < len(watched) + 1:  # noqa: ASYNC110 -- filled by the listen connection
            await asyncio.sleep(0.02)
    assert received == {chain_id: [chain_id] for chain_id in [*watched, "single"]}
