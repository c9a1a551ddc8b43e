"""The read side of :class:`~jobchain.sync.SyncClient`: get, list and await, driven."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from jobchain.client import Client
from jobchain.client_queries import TypeRef, positive_seconds
from jobchain.contracts.notify import Unsubscribe
from jobchain.contracts.state import DEFAULT_PAGE_SIZE, Order
from jobchain.entities import Chain, Job, JobStatus, Page, validate_id
from jobchain.errors import (
    AdapterClosedError,
    ChainCancelledError,
    ChainFailedError,
    ChainNotFoundError,
    TransactionRequiredError,
    WaitChainTimeoutError,
)
from jobchain.polling import SYNC_POLL_FIRST, Backoff
from jobchain.sync._loop import FLUSH_TIMEOUT, NotifyLoop
from jobchain.sync.drive import drive, refuse_in_event_loop
from jobchain.sync.transaction import SyncTransaction
from jobchain.transactions import Transaction

logger = logging.getLogger("jobchain.sync")


class SyncReads:
    """Read methods of :class:`~jobchain.sync.SyncClient` (see that class)."""

    def __init__(self, client: Client, loop: NotifyLoop | None = None) -> None:
        self._client = client
        self._loop = loop
        self._closed = False
        self._wait_for_wake: Callable[[threading.Event, float], bool] = threading.Event.wait
        """Between two polls of await_chain: waits until woken or the seconds pass (tests swap it)."""

    def _enter(self, name: str) -> None:
        refuse_in_event_loop(f"SyncClient.{name}()")
        if self._closed:
            raise AdapterClosedError("this client is closed; connect a new one")

    def _unwrap(self, tx: object) -> Transaction:
        if not isinstance(tx, SyncTransaction):
            raise TransactionRequiredError(
                "this call writes: pass the transaction of `with client.transaction() as tx` "
                f"opened on this client and still open, got {tx!r}"
            )
        return tx.transaction

    # ------------------------------------------------------------ reads

    def _read_tx(self, tx: SyncTransaction | None) -> Transaction | None:
        return None if tx is None else self._unwrap(tx)

    def get_chain(
        self, chain_id: str, *, job_type: TypeRef | None = None, tx: SyncTransaction | None = None
    ) -> Chain | None:
        """The chain, or None. JobTypeMismatchError if ``job_type`` is not the chain's type."""
        self._enter("get_chain")
        return drive(self._client.get_chain(chain_id, job_type=job_type, tx=self._read_tx(tx)))

    def get_job(
        self, job_id: str, *, job_type: TypeRef | None = None, tx: SyncTransaction | None = None
    ) -> Job | None:
        """The job, or None. JobTypeMismatchError if ``job_type`` is not the job's type."""
        self._enter("get_job")
        return drive(self._client.get_job(job_id, job_type=job_type, tx=self._read_tx(tx)))

    def list_chains(
        self,
        *,
        type_names: Sequence[TypeRef] = (),
        chain_ids: Sequence[str] = (),
        job_ids: Sequence[str] = (),
        statuses: Sequence[JobStatus | str] = (),
        root_only: bool = False,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        order: Order = "desc",
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        tx: SyncTransaction | None = None,
    ) -> Page[Chain]:
        """Chains by root creation time (see :meth:`jobchain.Client.list_chains`)."""
        self._enter("list_chains")
        return drive(
            self._client.list_chains(
                type_names=type_names,
                chain_ids=chain_ids,
                job_ids=job_ids,
                statuses=statuses,
                root_only=root_only,
                created_from=created_from,
                created_to=created_to,
                order=order,
                cursor=cursor,
                limit=limit,
                tx=self._read_tx(tx),
            )
        )

    def list_jobs(
        self,
        *,
        type_names: Sequence[TypeRef] = (),
        chain_type_names: Sequence[TypeRef] = (),
        chain_ids: Sequence[str] = (),
        job_ids: Sequence[str] = (),
        statuses: Sequence[JobStatus | str] = (),
        error_types: Sequence[str] = (),
        leased_by: Sequence[str] = (),
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        order: Order = "desc",
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        tx: SyncTransaction | None = None,
    ) -> Page[Job]:
        """Jobs by creation time (see :meth:`jobchain.Client.list_jobs`)."""
        self._enter("list_jobs")
        return drive(
            self._client.list_jobs(
                type_names=type_names,
                chain_type_names=chain_type_names,
                chain_ids=chain_ids,
                job_ids=job_ids,
                statuses=statuses,
                error_types=error_types,
                leased_by=leased_by,
                created_from=created_from,
                created_to=created_to,
                order=order,
                cursor=cursor,
                limit=limit,
                tx=self._read_tx(tx),
            )
        )

    def list_chain_jobs(
        self,
        chain_id: str,
        *,
        job_type: TypeRef | None = None,
        order: Order = "asc",
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        tx: SyncTransaction | None = None,
    ) -> Page[Job]:
        """The jobs of one chain in chain order (root first by default)."""
        self._enter("list_chain_jobs")
        return drive(
            self._client.list_chain_jobs(
                chain_id, job_type=job_type, order=order, cursor=cursor, limit=limit, tx=self._read_tx(tx)
            )
        )

    def get_job_blockers(self, job_id: str, *, tx: SyncTransaction | None = None) -> list[Chain]:
        """The chains blocking (or that blocked) a job, in declaration order."""
        self._enter("get_job_blockers")
        return drive(self._client.get_job_blockers(job_id, tx=self._read_tx(tx)))

    def list_blocked_jobs(
        self,
        chain_id: str,
        *,
        order: Order = "desc",
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        tx: SyncTransaction | None = None,
    ) -> Page[Job]:
        """Jobs that declared ``chain_id`` as a blocker (newest first by default)."""
        self._enter("list_blocked_jobs")
        return drive(
            self._client.list_blocked_jobs(
                chain_id, order=order, cursor=cursor, limit=limit, tx=self._read_tx(tx)
            )
        )

    # ------------------------------------------------------------ await

    def await_chain(
        self,
        chain_id: str,
        *,
        job_type: TypeRef | None = None,
        timeout: float,
        poll_interval: float = 1.0,
    ) -> Chain:
        """Block until the chain is completed and return it.

        Re-reads the chain with a backoff from 10 ms doubling up to ``poll_interval`` seconds
        (1 s by default), with or without a notify backend, and at once when notify reports
        the chain finished. Raises ChainFailedError, ChainCancelledError, ChainNotFoundError
        and, after ``timeout`` seconds, WaitChainTimeoutError, like
        :meth:`jobchain.Client.await_chain`.
        """
        self._enter("await_chain")
        chain_id = validate_id(chain_id)
        timeout = positive_seconds("timeout", timeout)
        poll_interval = positive_seconds("poll_interval", poll_interval)
        deadline = time.monotonic() + timeout
        woken = threading.Event()
        unsubscribe = self._listen_completed(chain_id, woken)
        backoff = Backoff(SYNC_POLL_FIRST, poll_interval)
        try:
            while True:
                woken.clear()
                chain = self.get_chain(chain_id, job_type=job_type)
                if chain is None:
                    raise ChainNotFoundError(chain_id)
                status = chain.status
                if status is JobStatus.COMPLETED:
                    return chain
                if status is JobStatus.FAILED:
                    raise ChainFailedError(chain_id, chain.last, chain.last.last_attempt_error)
                if status is JobStatus.CANCELLED:
                    raise ChainCancelledError(chain_id, chain.last, chain.last.cancel_reason)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitChainTimeoutError(chain_id, timeout)
                self._wait_for_wake(woken, min(backoff.next(), remaining))
        finally:
            if unsubscribe is not None:
                self._unlisten(unsubscribe)

    def _listen_completed(self, chain_id: str, woken: threading.Event) -> Unsubscribe | None:
        notify, loop = self._client.notify, self._loop
        if notify is None or loop is None:
            return None
        try:
            return loop.run(notify.listen_chain_completed(chain_id, lambda _id: woken.set()), FLUSH_TIMEOUT)
        except Exception:
            # Notifications are hints: without them the wait still ends through polling.
            logger.warning("await_chain: cannot listen for chain completion; polling instead", exc_info=True)
            return None

    def _unlisten(self, unsubscribe: Unsubscribe) -> None:
        assert self._loop is not None

        async def stop() -> None:
            await unsubscribe()

        try:
            self._loop.run(stop(), FLUSH_TIMEOUT)
        except Exception:
            logger.warning("await_chain: unsubscribe failed", exc_info=True)


__all__ = ["SyncReads"]
