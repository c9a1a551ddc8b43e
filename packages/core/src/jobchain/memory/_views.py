"""Read views over the live tables: what one transaction is allowed to see.

A write transaction sees committed data plus its own changes; a read-only transaction sees
committed data only. Rows changed by *other* open transactions are hidden and answered by
their preimage (their committed version, or absence for an uncommitted insert).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from jobchain.entities import Chain, Job, JobStatus
from jobchain.memory._store import CreatedKey, Row, Store, TxState, created_key


class View:
    """Read access to one transaction's state for the query and write functions."""

    def job(self, job_id: str) -> Job | None:
        raise NotImplementedError

    def blockers(self, job_id: str) -> tuple[str, ...]:
        raise NotImplementedError

    def chain_jobs(self, chain_id: str) -> list[Job]:
        """The chain's jobs by ascending ``chain_index`` ([] when the chain does not exist)."""
        raise NotImplementedError

    def any_end(self, job_id: str) -> frozenset[str]:
        """The job's blocker chains that any terminal status resolves (``resolves_on_any_end``).

        A view that keeps no such flags (a test double) has none.
        """
        return frozenset()

    def dependents(self, chain_id: str) -> list[Job]:
        """Jobs that declared ``chain_id`` as a blocker (unordered)."""
        raise NotImplementedError

    def running_count(self, type_name: str) -> int:
        """Running jobs of the type, expired leases included (what ``max_running`` counts)."""
        raise NotImplementedError

    def dedup_roots(self, key: str, chain_type_name: str) -> list[Job]:
        """Root jobs stored with this deduplication key and chain type."""
        raise NotImplementedError

    def walk(self, *, roots: bool, descending: bool, after: CreatedKey | None) -> Iterator[Job]:
        """Jobs (or root jobs only) in ``(created_at, id)`` order, strictly beyond ``after``."""
        raise NotImplementedError

    def next_scheduled(self, type_names: Iterable[str]) -> datetime | None:
        """The earliest ``scheduled_at`` among pending jobs of these types."""
        raise NotImplementedError

    def earliest_lease(self, type_names: Iterable[str], not_leased_by: str) -> datetime | None:
        """The earliest ``leased_until`` among running jobs of these types leased by others."""
        raise NotImplementedError

    def chain(self, chain_id: str) -> Chain | None:
        jobs = self.chain_jobs(chain_id)
        return Chain(jobs[0], jobs[-1]) if jobs else None

    def last_job(self, chain_id: str) -> Job | None:
        jobs = self.chain_jobs(chain_id)
        return jobs[-1] if jobs else None

    def chain_member(self, chain_id: str, chain_index: int) -> Job | None:
        return next((job for job in self.chain_jobs(chain_id) if job.chain_index == chain_index), None)

    def is_blocker(self, chain_id: str) -> bool:
        return bool(self.dependents(chain_id))


class LiveView(View):
    """The live tables as they are: valid when no other transaction has changed a row."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def job(self, job_id: str) -> Job | None:
        return self._store.jobs.get(job_id)

    def blockers(self, job_id: str) -> tuple[str, ...]:
        return self._store.blockers.get(job_id, ())

    def any_end(self, job_id: str) -> frozenset[str]:
        return self._store.any_end.get(job_id, frozenset())

    def running_count(self, type_name: str) -> int:
        return len(self._store.running.get(type_name, ()))

    def chain_jobs(self, chain_id: str) -> list[Job]:
        jobs = self._store.jobs
        return [jobs[job_id] for _, job_id in self._store.chains.get(chain_id, ())]

    def chain(self, chain_id: str) -> Chain | None:
        members = self._store.chains.get(chain_id)
        first, last = (None, None) if members is None else (members.first(), members.last())
        if first is None or last is None:
            return None
        return Chain(self._store.jobs[first[1]], self._store.jobs[last[1]])

    def last_job(self, chain_id: str) -> Job | None:
        members = self._store.chains.get(chain_id)
        last = None if members is None else members.last()
        return None if last is None else self._store.jobs[last[1]]

    def chain_member(self, chain_id: str, chain_index: int) -> Job | None:
        job_id = self._store.chain_member_id(chain_id, chain_index)
        return None if job_id is None else self._store.jobs[job_id]

    def dependents(self, chain_id: str) -> list[Job]:
        jobs = self._store.jobs
        return [jobs[job_id] for job_id in self._store.dependents.get(chain_id, ())]

    def dedup_roots(self, key: str, chain_type_name: str) -> list[Job]:
        jobs = self._store.jobs
        return [jobs[job_id] for job_id in self._store.dedup.get((key, chain_type_name), ())]

    def is_blocker(self, chain_id: str) -> bool:
        return chain_id in self._store.dependents

    def walk(self, *, roots: bool, descending: bool, after: CreatedKey | None) -> Iterator[Job]:
        keys = self._store.roots if roots else self._store.created
        jobs = self._store.jobs
        return (jobs[job_id] for _, job_id in keys.after(after, descending=descending))

    def next_scheduled(self, type_names: Iterable[str]) -> datetime | None:
        firsts = [keys.first() for name in set(type_names) if (keys := self._store.pending.get(name))]
        return min((key[0] for key in firsts if key is not None), default=None)

    def earliest_lease(self, type_names: Iterable[str], not_leased_by: str) -> datetime | None:
        return _earliest_lease(self._store, type_names, not_leased_by, lambda _: False)


class CommittedView(View):
    """Live rows, except rows changed by other open transactions, which read as their preimages.

    ``viewer`` is the write transaction looking (its own changes stay visible), or None for
    a read-only transaction. Build one per operation: it caches the other transactions'
    preimages, which cannot change while a (synchronous) operation runs.
    """

    def __init__(self, store: Store, viewer: TxState | None) -> None:
        self._store = store
        self._viewer = viewer
        self._extra: list[Row] | None = None

    def _hidden(self, job_id: str) -> bool:
        return job_id in self._store.preimages and self._store.locks.get(job_id) is not self._viewer

    def _rows(self) -> list[Row]:
        """The committed rows that other open transactions changed or deleted (for full walks)."""
        if self._extra is None:
            self._extra = [
                row
                for job_id, row in self._store.preimages.items()
                if row is not None and self._store.locks.get(job_id) is not self._viewer
            ]
        return self._extra

    def job(self, job_id: str) -> Job | None:
        if self._hidden(job_id):
            row = self._store.preimages[job_id]
            return None if row is None else row[0]
        return self._store.jobs.get(job_id)

    def blockers(self, job_id: str) -> tuple[str, ...]:
        if self._hidden(job_id):
            row = self._store.preimages[job_id]
            return () if row is None else row[1]
        return self._store.blockers.get(job_id, ())

    def any_end(self, job_id: str) -> frozenset[str]:
        if self._hidden(job_id):
            row = self._store.preimages[job_id]
            return frozenset() if row is None else row[2]
        return self._store.any_end.get(job_id, frozenset())

    def running_count(self, type_name: str) -> int:
        live = sum(1 for _, job_id in self._store.running.get(type_name, ()) if not self._hidden(job_id))
        moved = sum(  # hidden rows read as their preimages
            1 for job, *_ in self._rows() if job.status is JobStatus.RUNNING and job.type_name == type_name
        )
        return live + moved

    def _visible(self, live_ids: Iterable[str], moved_ids: Iterable[str]) -> Iterator[Job]:
        """The visible versions of candidate rows: live index hits plus preimage index hits."""
        for job_id in {*live_ids, *moved_ids}:
            job = self.job(job_id)
            if job is not None:
                yield job

    def chain_jobs(self, chain_id: str) -> list[Job]:
        store = self._store
        live_ids = (job_id for _, job_id in store.chains.get(chain_id, ()))
        jobs = [
            job
            for job in self._visible(live_ids, store.preimages_by_chain.get(chain_id, ()))
            if job.chain_id == chain_id  # an id deleted and re-created elsewhere may have moved
        ]
        jobs.sort(key=lambda job: job.chain_index)
        return jobs

    def dependents(self, chain_id: str) -> list[Job]:
        store = self._store
        candidates = self._visible(
            store.dependents.get(chain_id, ()), store.preimages_by_blocker.get(chain_id, ())
        )
        return [job for job in candidates if chain_id in self.blockers(job.id)]

    def dedup_roots(self, key: str, chain_type_name: str) -> list[Job]:
        store = self._store
        index_key = (key, chain_type_name)
        candidates = self._visible(
            store.dedup.get(index_key, ()), store.preimages_by_dedup.get(index_key, ())
        )
        return [
            job
            for job in candidates
            if job.is_root and job.deduplication_key == key and job.chain_type_name == chain_type_name
        ]

    def walk(self, *, roots: bool, descending: bool, after: CreatedKey | None) -> Iterator[Job]:
        keys = self._store.roots if roots else self._store.created
        live = (
            self._store.jobs[job_id]
            for _, job_id in keys.after(after, descending=descending)
            if not self._hidden(job_id)
        )
        extra = sorted(
            (
                job
                for job, *_ in self._rows()
                if (job.is_root or not roots) and beyond(created_key(job), after, descending)
            ),
            key=created_key,
            reverse=descending,
        )
        return heapq.merge(live, extra, key=created_key, reverse=descending)

    def next_scheduled(self, type_names: Iterable[str]) -> datetime | None:
        names = set(type_names)
        candidates: list[datetime] = []
        for name in names:
            for scheduled_at, _, job_id in self._store.pending.get(name, ()):
                if not self._hidden(job_id):  # hidden rows are answered by their preimage below
                    candidates.append(scheduled_at)
                    break
        candidates.extend(
            job.scheduled_at
            for job, *_ in self._rows()
            if job.status is JobStatus.PENDING and job.type_name in names
        )
        return min(candidates, default=None)

    def earliest_lease(self, type_names: Iterable[str], not_leased_by: str) -> datetime | None:
        names = set(type_names)
        live = _earliest_lease(self._store, names, not_leased_by, self._hidden)
        moved = (  # hidden rows read as their preimages
            job.leased_until
            for job, *_ in self._rows()
            if job.status is JobStatus.RUNNING
            and job.type_name in names
            and job.leased_by != not_leased_by
            and job.leased_until is not None
        )
        return min((at for at in (live, *moved) if at is not None), default=None)


def _earliest_lease(
    store: Store, type_names: Iterable[str], not_leased_by: str, hidden: Callable[[str], bool]
) -> datetime | None:
    """The first live lease of each type, skipping ``not_leased_by``'s jobs and hidden rows."""
    earliest: datetime | None = None
    for name in set(type_names):
        for leased_until, job_id in store.running.get(name, ()):
            if hidden(job_id) or store.jobs[job_id].leased_by == not_leased_by:
                continue
            if earliest is None or leased_until < earliest:
                earliest = leased_until
            break
    return earliest


def beyond(key: CreatedKey, after: CreatedKey | None, descending: bool) -> bool:
    """Whether ``key`` comes strictly after ``after`` in the walking direction."""
    if after is None:
        return True
    return key < after if descending else key > after


def view_for(store: Store, viewer: TxState | None) -> View:
    """What ``viewer`` (None: a read-only transaction) may see right now."""
    owned = 0 if viewer is None else len(viewer.touched)
    if len(store.preimages) == owned:  # no other transaction has changed anything
        return LiveView(store)
    return CommittedView(store, viewer)
