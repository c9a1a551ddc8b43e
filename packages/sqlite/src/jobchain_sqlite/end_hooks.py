"""Failure and cancel hooks on SQLite (``contracts.end_hooks``).

``end_hooks_register`` is one upsert into ``{prefix}type_hook``. The rule itself runs in the
database: migration ``0011_end_hooks`` adds a trigger on ``{prefix}job`` that starts the hook
jobs inside the statement that sets a job's ``failed_at`` or ``cancelled_at``, so every
operation that fails or cancels a job (and a rollback of it) is covered without code here.
"""

from __future__ import annotations

import json

from jobchain.contracts.end_hooks import EndHooksRegister
from jobchain.entities import utcnow
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.rows import fmt_time


async def end_hooks_register(ctx: TxContext, params: EndHooksRegister) -> None:
    """Upsert each type's hooks and priority (a name given twice ends as its last)."""
    ctx.require_write("end_hooks_register")
    if not params.types:
        return
    items = [
        [t.type_name, t.priority, t.on_failed, t.on_cancelled, t.on_chain_failed, t.on_chain_cancelled]
        for t in params.types
    ]
    await ctx.fetch(
        ctx.q.end_hooks_register,
        {"items": json.dumps(items, separators=(",", ":")), "now": fmt_time(params.now or utcnow())},
    )


__all__ = ["end_hooks_register"]
