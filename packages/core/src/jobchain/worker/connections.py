"""How many state connections a worker uses at once, and making sure its adapter has them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from jobchain.contracts import ReservesConnections

if TYPE_CHECKING:
    from jobchain.client import Client

log = logging.getLogger("jobchain.worker")

CONNECTIONS_BESIDE_SLOTS = 4
"""Besides one per attempt slot: the claim, the heartbeat, the reaper and a group-commit writer."""


def connections_needed(concurrency: int) -> int:
    """Connections a worker with ``concurrency`` slots may hold at once."""
    return concurrency + CONNECTIONS_BESIDE_SLOTS


async def reserve_connections(client: Client, concurrency: int, worker_id: str) -> int | None:
    """Grow the adapter's own pool to what the worker needs; warn once if a caller's pool is smaller.

    A pool smaller than the worker's slots does not fail: attempts wait for a connection
    instead of running, and a claim or heartbeat may wait behind them.
    """
    state = client.state
    if not isinstance(state, ReservesConnections):
        return None
    needed = connections_needed(concurrency)
    available = await state.reserve_connections(needed)
    if available is not None and available < needed:
        log.warning(
            "worker %s runs %d attempts at once and needs %d state connections, but its pool has %d: "
            "attempts will wait for connections; give the pool max_size >= %d "
            "(the URL's ?pool_max_size=, or your own pool's setting)",
            worker_id,
            concurrency,
            needed,
            available,
            needed,
        )
    return available
