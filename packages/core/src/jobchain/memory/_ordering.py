"""Ordering keys of the in-process state backend: which chain a key's next chain runs after.

``Store.ordering`` maps each key to the chain created last with it, whatever its status (the
``ordering_key`` table of the SQL backends). A creation locks its key until its transaction
ends, so creations of one key are serialized and ordered by the key's lock, and never wait
for other keys. Deleting a key's last chain deletes the entry; retention with ``locks_before``
deletes entries whose last chain is gone (left by a prune without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobchain.entities import Job

if TYPE_CHECKING:
    from jobchain.memory._writes import Ctx


def take_key(ctx: Ctx, key: str, chain_id: str) -> str | None:
    """Make ``chain_id`` the key's last chain; return the previous one (None if none exists).

    Waits for a transaction holding the key (an uncommitted creation of the same key).
    """
    store = ctx.store
    store.lock_table(ctx.tx, store.ordering, key)
    previous = store.ordering.rows.get(key)  # locked by us: the live value is what we see
    store.ordering.put(ctx.tx, key, chain_id)
    if previous is None or ctx.view.last_job(previous) is None:  # a chain deleted since: no order
        return None
    return previous


def forget_chains(ctx: Ctx, roots: list[Job]) -> None:
    """Delete the entry of each key whose last chain is among the deleted ``roots``."""
    store = ctx.store
    for root in roots:
        key = root.ordering_key
        if key is None:
            continue
        store.lock_table(ctx.tx, store.ordering, key)
        if store.ordering.rows.get(key) == root.id:
            store.ordering.put(ctx.tx, key, None)


def prune_keys(ctx: Ctx, limit: int) -> int:
    """Delete up to ``limit`` entries whose last chain is gone, by key; return how many."""
    store = ctx.store
    stale = sorted(
        key for key, chain_id in store.ordering.visible(ctx.tx).items() if ctx.view.last_job(chain_id) is None
    )[:limit]
    deleted = 0
    for key in stale:
        store.lock_table(ctx.tx, store.ordering, key)
        chain_id = store.ordering.rows.get(key)
        if chain_id is not None and ctx.view.last_job(chain_id) is None:
            store.ordering.put(ctx.tx, key, None)
            deleted += 1
    return deleted
