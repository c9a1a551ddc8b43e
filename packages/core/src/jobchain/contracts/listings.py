"""Cursor-paginated listings: ``chains_list``, ``jobs_list``, ``chain_jobs_list``,
``blocked_jobs_list``, and their page sizes.

Part of the state contract (:class:`jobchain.contracts.StateTx`); every name is also importable
from ``jobchain.contracts`` and ``jobchain.contracts.state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from jobchain.errors import InvalidArgumentError, InvalidPageSizeError

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500

Order = Literal["asc", "desc"]


def _check_page(limit: int, order: str) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidPageSizeError(f"page limit must be an integer from 1 to {MAX_PAGE_SIZE}, got {limit!r}")
    if order not in ("asc", "desc"):
        raise InvalidArgumentError(f"order must be 'asc' or 'desc', got {order!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsList:
    """List chains by root ``created_at`` (then id). ``statuses`` match the last job;
    ``root_only`` excludes chains used as a blocker; bounds are inclusive."""

    type_names: Sequence[str] = ()
    chain_ids: Sequence[str] = ()
    job_ids: Sequence[str] = ()
    statuses: Sequence[str] = ()
    root_only: bool = False
    created_from: datetime | None = None
    created_to: datetime | None = None
    order: Order = "desc"
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE

    def __post_init__(self) -> None:
        _check_page(self.limit, self.order)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsList:
    """List jobs by ``created_at`` (then id); bounds are inclusive.

    ``error_types`` matches the type of the last entry of a job's error history (dead letters
    by error: ``statuses=["failed"], error_types=["TimeoutError"]``). ``leased_by`` matches
    running jobs leased by those worker ids (what a worker holds).
    """

    type_names: Sequence[str] = ()
    chain_type_names: Sequence[str] = ()
    chain_ids: Sequence[str] = ()
    job_ids: Sequence[str] = ()
    statuses: Sequence[str] = ()
    error_types: Sequence[str] = ()
    leased_by: Sequence[str] = ()
    created_from: datetime | None = None
    created_to: datetime | None = None
    order: Order = "desc"
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE

    def __post_init__(self) -> None:
        _check_page(self.limit, self.order)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainJobsList:
    """List the jobs of one chain by ``chain_index``."""

    chain_id: str
    order: Order = "asc"
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE

    def __post_init__(self) -> None:
        _check_page(self.limit, self.order)


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockedJobsList:
    """List jobs that declared ``blocker_chain_id`` as a blocker, by ``created_at`` (then id)."""

    blocker_chain_id: str
    order: Order = "desc"
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE

    def __post_init__(self) -> None:
        _check_page(self.limit, self.order)
