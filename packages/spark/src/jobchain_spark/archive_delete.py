"""Deleting archived chains from the hot tables through the client, in bounded batches.

Each batch is one ``Client.delete_chains`` transaction (no cascade), so blocker references
are respected exactly as for any caller. A batch refused because one of its chains still
blocks a job outside it is retried without that chain, and the chain is tried again after
the other batches (its dependants may be in a later batch). Chains still referenced when a
pass makes no progress are kept and reported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from jobchain import JobTypes
from jobchain.client import Client, connect
from jobchain.errors import BlockerReferenceError
from jobchain_spark.faults import Faults

Progress = Callable[[str, int, int], None]


def delete_chains_in_batches(
    url: str, ids: Sequence[str], batch_size: int, progress: Progress | None, faults: Faults | None
) -> tuple[int, list[str]]:
    """Delete ``ids``; return (chains deleted, chains kept because they are still referenced)."""
    if not ids:
        return 0, []
    return asyncio.run(_delete(url, list(ids), batch_size, progress, faults))


async def _delete(
    url: str, ids: list[str], batch_size: int, progress: Progress | None, faults: Faults | None
) -> tuple[int, list[str]]:
    client = await connect(url, notify="none", job_types=JobTypes())
    deleted = batches = 0
    try:
        pending = ids
        while pending:
            deferred: list[str] = []
            for start in range(0, len(pending), batch_size):
                batch = pending[start : start + batch_size]
                done, refused = await _delete_batch(client, batch)
                deleted += done
                deferred.extend(refused)
                batches += 1
                if progress is not None:
                    progress("delete", deleted, len(ids))
                if faults is not None and faults.after_batches and batches >= faults.after_batches:
                    faults.hit("delete_batch")
            if len(deferred) == len(pending):
                return deleted, deferred  # no progress: these still block live jobs
            pending = deferred
    finally:
        await client.close()
    return deleted, []


async def _delete_batch(client: Client, batch: list[str]) -> tuple[int, list[str]]:
    """Delete what can be deleted of ``batch`` in one transaction; return (deleted, refused ids)."""
    refused: list[str] = []
    remaining = list(batch)
    while remaining:
        try:
            async with client.transaction() as tx:
                chains = await client.delete_chains(tx, remaining)
            return len(chains), refused
        except BlockerReferenceError as exc:
            blocking = {r.chain_id for r in exc.references}
            refused.extend(c for c in remaining if c in blocking)
            remaining = [c for c in remaining if c not in blocking]
    return 0, refused


__all__ = ["delete_chains_in_batches"]
