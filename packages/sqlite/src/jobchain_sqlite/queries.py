"""The named SQL statements of the adapter, loaded once from ``sql/*.sql`` and ``migrations/``.

Statement files hold one statement each and use ``{p}`` for the table prefix. Listing files
also use ``{dir}``/``{cmp}`` and are rendered twice, ascending and descending. :func:`render`
is the one place where text is substituted into SQL, and it only ever inserts a validated
identifier prefix or one of the fixed keyword pairs below.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, fields
from functools import cache
from importlib.resources import files
from typing import Literal

from jobchain.errors import InvalidArgumentError

_PREFIX_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
_ORDERS: dict[str, dict[str, str]] = {"asc": {"dir": "ASC", "cmp": ">"}, "desc": {"dir": "DESC", "cmp": "<"}}
_LISTINGS = ("chains_list", "jobs_list", "jobs_list_leased", "chain_jobs_list", "blocked_jobs_list")


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a safe SQL identifier prefix, else raise InvalidArgumentError."""
    if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
        raise InvalidArgumentError(
            f"table prefix {prefix!r} must be letters, digits and '_' (not starting with a digit), "
            "at most 48 characters, e.g. 'jobchain_'"
        )
    return prefix


@cache
def _raw(folder: str, name: str) -> str:
    return (files("jobchain_sqlite") / folder / f"{name}.sql").read_text(encoding="utf-8")


def _render(text: str, prefix: str, order: str | None = None) -> str:
    text = text.replace("{p}", validate_prefix(prefix))
    if order is not None:
        for key, value in _ORDERS[order].items():
            text = text.replace("{" + key + "}", value)
    return text


@dataclass(frozen=True, slots=True)
class Queries:
    """Every statement of the adapter, rendered for one table prefix."""

    migration_table_create: str
    migration_list: str
    migration_record: str
    jobs_create_lookup: str
    jobs_create: str
    job_blockers_add: str
    chain_get: str
    job_get: str
    job_blockers_get: str
    job_next_available: str
    jobs_acquire: str
    jobs_acquire_candidates: str
    jobs_acquire_ids: str
    type_rate_count: str
    job_renew_lease: str
    job_reschedule: str
    job_complete: str
    job_unblock: str
    jobs_complete: str
    jobs_complete_known: str
    jobs_unblock: str
    jobs_get: str
    job_fail: str
    jobs_propagate: str
    chains_cancel_lookup: str
    chains_cancel_cascade: str
    chains_cancel: str
    jobs_retry_lookup: str
    jobs_retry: str
    chains_prune: str
    chains_prune_blockers: str
    chains_prune_delete: str
    jobs_delete_blockers: str
    jobs_create_extras: str
    jobs_reap_candidates: str
    jobs_reap_expired: str
    workers_mark_dead: str
    worker_jobs_release: str
    worker_heartbeat_lookup: str
    worker_heartbeat: str
    workers_prune: str
    workers_list: str
    queue_stats: str
    queue_stats_throughput: str
    jobs_trigger: str
    jobs_trigger_lookup: str
    chains_delete_lookup: str
    chains_delete: str
    chains_delete_blockers: str
    chains_list_asc: str
    chains_list_desc: str
    jobs_list_asc: str
    jobs_list_desc: str
    jobs_list_leased_asc: str
    jobs_list_leased_desc: str
    chain_jobs_list_asc: str
    chain_jobs_list_desc: str
    ordering_keys_upsert: str
    ordering_keys_forget: str
    ordering_keys_prune: str
    job_wait_lookup: str
    job_wait: str
    types_pause: str
    types_resume: str
    paused_types_list: str
    schedules_register: str
    schedules_forget: str
    schedules_list: str
    end_hooks_register: str
    blocked_jobs_list_asc: str
    blocked_jobs_list_desc: str
    sessions_revoke: str
    sessions_prune: str
    session_revoked: str

    def listing(self, name: str, order: Literal["asc", "desc"]) -> str:
        """The ``order`` variant of listing ``name`` (e.g. ``jobs_list``)."""
        if name not in _LISTINGS:
            raise KeyError(name)
        text: str = getattr(self, f"{name}_{order}")
        return text


@cache
def queries(prefix: str) -> Queries:
    """All statements rendered for ``prefix`` (cached per prefix)."""
    values: dict[str, str] = {}
    for f in fields(Queries):
        name, _, order = f.name.rpartition("_")
        if name in _LISTINGS:
            values[f.name] = _render(_raw("sql", name), prefix, order)
        else:
            values[f.name] = _render(_raw("sql", f.name), prefix)
    return Queries(**values)


MIGRATIONS: tuple[str, ...] = (
    "0001_initial",
    "0002_attempt_start",
    "0003_drop_listing_status_idx",
    "0004_worker_registry",
    "0005_job_lifecycle",
    "0006_queue_stats",
    "0007_scheduling",
    "0008_session_revocations",
    "0009_worker_incarnation",
    "0010_worker_load",
    "0011_end_hooks",
)
"""Migration names in the order they apply; each is ``migrations/<name>.sql``."""


def migration_statements(name: str, prefix: str) -> list[str]:
    """The statements of migration ``name`` for ``prefix``, split on complete statements."""
    statements: list[str] = []
    buffer = ""
    for line in _render(_raw("migrations", name), prefix).splitlines(keepends=True):
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        raise ValueError(f"migration {name} ends with an incomplete statement")
    return statements


__all__ = ["MIGRATIONS", "Queries", "migration_statements", "queries", "validate_prefix"]
