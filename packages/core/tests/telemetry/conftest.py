"""Fixtures: OpenTelemetry SDK providers with in-memory exporters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from .support import Traces, new_traces


@pytest.fixture
def traces() -> Iterator[Traces]:
    found = new_traces()
    yield found
    found.provider.shutdown()


@pytest.fixture
def metric_reader() -> Iterator[tuple[MeterProvider, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield provider, reader
    provider.shutdown()
