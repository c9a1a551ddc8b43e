"""Ordering keys of the in-process state backend: which chain a key's next chain runs after.

``Store.ordering`` maps each key to the chain created last with it, whatever its status (the
``ordering_key`` table of the SQL backends). A creation locks its key until its transaction
ends, so creations of one key are serialized and ordered by the key's lock, and never wait
for other keys. Deleting a key's last chain deletes the entry unless a creation holds the key
(``SKIP LOCKED``: that creation takes the key over, or leaves a stale entry if it rolls
back); retention with ``locks_before`` deletes entries whose last chain is gone. A stale
entry reads as no previous chain.
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
    """Delete the entry of each key whose last chain is among the deleted ``roots``; a key
    another transaction holds is skipped (its creation is taking it over)."""
    table = ctx.store.ordering
    for root in roots:
        key = root.ordering_key
        if key is None or table.try_lock(ctx.tx, key) is not None:
            continue
        if table.rows.get(key) == root.id:
            table.put(ctx.tx, key, None)


def prune_keys(ctx: Ctx, limit: int) -> int:
    """Delete up to ``limit`` entries whose last chain is gone, by key; return how many.

    Keys another transaction holds are skipped (``SKIP LOCKED``): a creation is using them.
    """
    table = ctx.store.ordering
    deleted = 0
    for key, chain_id in sorted(table.visible(ctx.tx).items()):
        if deleted == limit:
            break
        if ctx.view.last_job(chain_id) is not None or table.try_lock(ctx.tx, key) is not None:
            continue
        table.put(ctx.tx, key, None)
        deleted += 1
    return deleted
