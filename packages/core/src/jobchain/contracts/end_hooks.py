"""Failure and cancel hooks in the state contract: ``end_hooks_register`` and the rule it feeds.

Suite: ``jobchain_conformance`` (``EndHooksTests``).

* **Registration.** :class:`EndHooksRegister` upserts one row per job type (its hooks, possibly
  none, and its default priority), in one round trip. A row with no hook stays (it is how a
  removed hook is forgotten); types not given are untouched.
* **The rule.** Whenever a job moves from ``blocked``, ``pending`` or ``running`` to ``failed``
  or ``cancelled`` — by ``job_fail``, ``chains_cancel`` (cascaded chains included),
  propagation to the jobs its chain blocked, or any other operation — the *same statement*
  (so the same transaction, rolled back with it) creates one new pending root job per hook that
  applies: the ``on_failed`` / ``on_cancelled`` hook registered for the job's ``type_name``
  (scope ``"job"``) and the ``on_chain_failed`` / ``on_chain_cancelled`` hook registered for its
  ``chain_type_name`` (scope ``"chain"``). A hook job is the root of its own chain
  (``chain_type_name`` = the hook type), created and scheduled at the moment of the change
  (the job's ``failed_at`` / ``cancelled_at``), with the priority registered for the hook type
  (0 if it has no row), no deduplication key, no blockers, and as input the JSON of
  :class:`jobchain.JobEnded`: ``event``, ``scope``, ``job_id``, ``type_name``, ``chain_id``,
  ``chain_type_name``, ``at`` (ISO 8601), ``error`` (the failed job's ``last_attempt_error``),
  ``error_type`` (its last error history entry's type), ``reason`` (``cancel_reason``) and
  ``failed_by_chain_id``. A job retried and failing again starts its hook again; completing,
  retrying, deleting or pruning a job starts none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from jobchain.entities import validate_priority
from jobchain.errors import InvalidArgumentError

_HOOKS = ("on_failed", "on_cancelled", "on_chain_failed", "on_chain_cancelled")


@dataclass(frozen=True, slots=True, kw_only=True)
class TypeEndHooks:
    """One job type's hooks (type names; None: none) and its default claim priority."""

    type_name: str
    priority: int = 0
    on_failed: str | None = None
    on_cancelled: str | None = None
    on_chain_failed: str | None = None
    on_chain_cancelled: str | None = None

    def __post_init__(self) -> None:
        # Refused when built, so every backend refuses the same rows before any statement.
        if not isinstance(self.type_name, str) or not self.type_name:
            raise InvalidArgumentError(
                f"a hook row's type_name must be a non-empty string, got {self.type_name!r}"
            )
        validate_priority(self.priority, f"{self.type_name}: priority")
        for field in _HOOKS:
            hook = getattr(self, field)
            if hook is not None and (not isinstance(hook, str) or not hook):
                raise InvalidArgumentError(
                    f"{self.type_name}: {field} must be a job type name or None, got {hook!r}"
                )


@dataclass(frozen=True, slots=True, kw_only=True)
class EndHooksRegister:
    """Upsert the hook rows of ``types`` by type name (a name given twice ends as its last)."""

    types: Sequence[TypeEndHooks]
    now: datetime | None = None


__all__ = ["EndHooksRegister", "TypeEndHooks"]
