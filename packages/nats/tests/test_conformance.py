"""The NATS notify adapter through the conformance suite, exactly as a third party would.

Twice: with a JetStream KV bucket (WAKE_HINTS declared) and without one (hints degrade to
"always wake", so the suite skips the budget cases by capability).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobchain.contracts import NotifyAdapter
from jobchain_conformance import NotifyAdapterSuite
from jobchain_nats import NatsNotifyAdapter, NatsNotifyOptions


class TestNatsNotifyWithKvBucket(NotifyAdapterSuite):
    @pytest.fixture
    async def notify_adapter(
        self, nats_url: str, unique_prefix: str, kv_bucket: str
    ) -> AsyncIterator[NotifyAdapter]:
        options = NatsNotifyOptions(prefix=unique_prefix, kv_bucket=kv_bucket, kv_create=True)
        adapter = await NatsNotifyAdapter.connect(nats_url, options=options)
        yield adapter
        await adapter.close()


class TestNatsNotifyWithoutKvBucket(NotifyAdapterSuite):
    @pytest.fixture
    async def notify_adapter(self, nats_url: str, unique_prefix: str) -> AsyncIterator[NotifyAdapter]:
        adapter = await NatsNotifyAdapter.connect(nats_url, options=NatsNotifyOptions(prefix=unique_prefix))
        yield adapter
        await adapter.close()
