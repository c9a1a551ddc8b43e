"""Helpers of the telemetry tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobchain import Client, JobTypes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter

T = TypeVar("T")
BOUND = 10.0
"""Upper bound of every wait; a passing run needs a small fraction of it."""


@dataclass
class Traces:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s.name for s in self.spans()]}"
        return found[0]


def memory_client(types: JobTypes, *observers: object) -> Client:
    return Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types, observers=observers)  # type: ignore[arg-type]


async def wait_until(probe: Callable[[], Awaitable[T | None]], what: str, bound: float = BOUND) -> T:
    try:
        async with asyncio.timeout(bound):
            while True:
                value = await probe()
                if value:
                    return value
                await asyncio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


def metric_points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, object], object]]:
    """(attributes, point) of every data point of the metric ``name``."""
    data = reader.get_metrics_data()
    found: list[tuple[dict[str, object], object]] = []
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += [(dict(p.attributes or {}), p) for p in metric.data.data_points]
    return found


def new_traces() -> Traces:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Traces(provider, exporter)


def parent_of(span: ReadableSpan) -> int | None:
    """The span id of ``span``'s parent (None for a root span)."""
    return span.parent.span_id if span.parent is not None else None
