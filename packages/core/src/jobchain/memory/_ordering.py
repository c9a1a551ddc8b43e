"""Ordering keys of the in-process state backend: which chain a key's next chain runs after.

``Store.ordering`` maps each key to the chain created last with it, whatever its status, and
when (the ``ordering_key`` table of the SQL backends). A creation locks its key until its
transaction ends, so creations of one key are serialized and ordered by the key's lock, and
never wait for other keys. Deleting a key's last chain deletes the entry unless a creation
holds the key (``SKIP LOCKED``: that creation takes the key over, or leaves a stale entry if
it rolls back); retention with ``locks_before`` deletes entries last used before it whose
last chain is gone. A stale entry reads as no previous chain.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from jobchain.entities import Job
from jobchain.memory._tables import OrderingEntry

if TYPE_CHECKING:
    from jobchain.memory._writes import Ctx


def take_key(ctx: Ctx, key: str, chain_id: str, now: datetime) -> str | None:
    """Make ``chain_id`` the key's last chain; return the previous one (None if none exists).

    Waits for a transaction holding the key (an uncommitted creation of the same key).
    """
    store = ctx.store
    store.lock_table(ctx.tx, store.ordering, key)
    entry = store.ordering.rows.get(key)  # locked by us: the live value is what we see
    store.ordering.put(ctx.tx, key, OrderingEntry(last_chain_id=chain_id, updated_at=now))
    if entry is None or ctx.view.last_job(entry.last_chain_id) is None:  # deleted since: no order
        return None
    return entry.last_chain_id


def forget_chains(ctx: Ctx, roots: list[Job]) -> None:
    """Delete the entry of each key whose last chain is among the deleted ``roots``; a key
    another transaction holds is skipped (its creation is taking it over)."""
    table = ctx.store.ordering
    for root in roots:
        key = root.ordering_key
        if key is None or table.try_lock(ctx.tx, key) is not None:
            continue
        entry = table.rows.get(key)
        if entry is not None and entry.last_chain_id == root.id:
            table.put(ctx.tx, key, None)


def stale_entry(ctx: Ctx, entry: OrderingEntry | None, before: datetime) -> bool:
    """An entry last used before ``before`` whose last chain is gone."""
    return entry is not None and entry.updated_at < before and ctx.view.last_job(entry.last_chain_id) is None


def prune_keys(ctx: Ctx, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` stale entries (:func:`stale_entry`), by key; return how many.

    Keys another transaction holds are skipped (``SKIP LOCKED``): a creation is using them.
    """
    table = ctx.store.ordering
    deleted = 0
    for key, entry in sorted(table.visible(ctx.tx).items()):
        if deleted == limit:
            break
        if not stale_entry(ctx, entry, before) or table.try_lock(ctx.tx, key) is not None:
            continue
        table.put(ctx.tx, key, None)
        deleted += 1
    return deleted
