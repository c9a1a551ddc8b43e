"""Crash injection for tests of the exactly-once and crash-recovery guarantees.

A :class:`Faults` value names points in a pipeline where it should fail: in Spark tasks
(bulk start; first attempt only, so Spark's retry succeeds) or on the driver (archive
stages). ``exit=True`` kills the Python worker process outright, as a lost executor would.
It is passed explicitly (``faults=``) and is inert unless a test builds one.

A test may also give a ``hook``, called at every point of every attempt before the rules are
checked, to hold a task there (say, with its transaction open) while another one runs. Hooks
live in one process: they are not carried by ``to_json`` and do not pickle to Spark workers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


class InjectedFaultError(RuntimeError):
    """A failure injected by a test at a named point."""


Rule = tuple[str, frozenset[int] | None]
Hook = Callable[[str, int | None, int], None]
"""Called with (point, partition, attempt)."""


@dataclass(frozen=True, slots=True)
class Faults:
    """Where to fail: rules of (point, partitions or None for all)."""

    rules: tuple[Rule, ...] = ()
    exit: bool = False
    after_batches: int = 0
    """For ``delete_batch``: fail once this many deletion batches have committed."""
    hook: Hook | None = field(default=None, compare=False, repr=False)
    """A test's callback at every point (any attempt), before the rules; in-process only."""

    @classmethod
    def at(
        cls,
        *points: str,
        partitions: Iterable[int] | None = None,
        exit: bool = False,
        after_batches: int = 0,
        hook: Hook | None = None,
    ) -> Faults:
        parts = None if partitions is None else frozenset(partitions)
        return cls(rules=tuple((p, parts) for p in points), exit=exit, after_batches=after_batches, hook=hook)

    def plus(self, point: str, *, partitions: Iterable[int] | None = None) -> Faults:
        """These faults and one more rule."""
        parts = None if partitions is None else frozenset(partitions)
        rules = (*self.rules, (point, parts))
        return Faults(rules=rules, exit=self.exit, after_batches=self.after_batches, hook=self.hook)

    def hit(self, point: str, *, partition: int | None = None, attempt: int = 0) -> None:
        """Run the hook, then fail here if a rule names this point (and partition), on a first attempt."""
        if self.hook is not None:
            self.hook(point, partition, attempt)
        if attempt > 0:
            return
        for name, parts in self.rules:
            if name == point and (parts is None or partition is None or partition in parts):
                if self.exit:
                    os._exit(17)  # a worker that dies without cleanup, as a lost executor does
                raise InjectedFaultError(f"injected fault at {point} (partition {partition})")

    def to_json(self) -> str:
        rules = [[name, None if parts is None else sorted(parts)] for name, parts in self.rules]
        return json.dumps({"rules": rules, "exit": self.exit, "after_batches": self.after_batches})

    @classmethod
    def from_json(cls, text: str) -> Faults:
        data = json.loads(text)
        rules = tuple((str(n), None if p is None else frozenset(int(x) for x in p)) for n, p in data["rules"])
        return cls(rules=rules, exit=bool(data["exit"]), after_batches=int(data["after_batches"]))


__all__ = ["Faults", "InjectedFaultError"]
