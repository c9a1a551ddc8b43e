"""Wake-ups leave through ``transaction.on_commit``: after the outermost commit, never on rollback.

Notify is Redis (per-run channel prefix); the test listens on the job-scheduled channel with
redis-py. Ordering proves the timing without sleeping: a marker the test publishes inside the
atomic block must arrive before the wake-up, and a rolled-back start's wake-up never arrives
before the wake-up of a start committed after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings
from djshop.jobs import OrderRef, count_receipts, make_receipt

import jobchain.contrib.django as jd

TIMEOUT = 30.0


class RolledBackError(Exception):
    pass


def _count_then_fail(alias: str) -> None:
    with transaction.atomic(using=alias):
        jd.start_chain(count_receipts, OrderRef(order_id=-3, alias=alias), using=alias)
        raise RolledBackError


@pytest.fixture
def scheduled(redis_url: str) -> Iterator[tuple[Any, Any, str]]:
    """(pubsub on the job-scheduled channel, a redis client, the channel), with notify on Redis."""
    import redis
    from django.conf import settings

    from jobchain.url import BackendURL

    parsed = BackendURL.parse(redis_url)
    channel = f"{parsed.query['prefix']}:sched"
    client = redis.Redis(host=parsed.host or "127.0.0.1", port=parsed.port or 6379)
    pubsub = client.pubsub()
    pubsub.subscribe(channel)
    assert pubsub.get_message(timeout=TIMEOUT)["type"] == "subscribe"
    with override_settings(JOBCHAIN={**settings.JOBCHAIN, "NOTIFY_URL": redis_url}):
        yield pubsub, client, channel
    pubsub.close()
    client.close()


def _next(pubsub: Any) -> str:
    message = pubsub.get_message(ignore_subscribe_messages=True, timeout=TIMEOUT)
    assert message is not None, "no message within the timeout"
    return bytes(message["data"]).decode()


def test_the_wake_up_is_sent_after_the_commit_not_at_the_start(
    alias: str, scheduled: tuple[Any, Any, str]
) -> None:
    pubsub, client, channel = scheduled
    with transaction.atomic(using=alias):
        jd.start_chain(make_receipt, OrderRef(order_id=-1, alias=alias), using=alias)
        client.publish(channel, "marker: still inside the block")
    assert _next(pubsub) == "marker: still inside the block"
    assert _next(pubsub) == "djshop.make_receipt"


def test_a_nested_block_wakes_only_after_the_outermost_commit(
    alias: str, scheduled: tuple[Any, Any, str]
) -> None:
    pubsub, client, channel = scheduled
    with transaction.atomic(using=alias):
        with transaction.atomic(using=alias):
            jd.start_chain(make_receipt, OrderRef(order_id=-2, alias=alias), using=alias)
        client.publish(channel, "marker: inner block done")
    assert _next(pubsub) == "marker: inner block done"
    assert _next(pubsub) == "djshop.make_receipt"


def test_a_rolled_back_block_sends_no_wake_up(alias: str, scheduled: tuple[Any, Any, str]) -> None:
    pubsub, _client, _channel = scheduled
    with pytest.raises(RolledBackError):
        _count_then_fail(alias)  # the whole block
    with transaction.atomic(using=alias), pytest.raises(RolledBackError):
        _count_then_fail(alias)  # a savepoint inside a block that commits
    jd.start_chain(make_receipt, OrderRef(order_id=-5, alias=alias), using=alias)
    # Pub/sub keeps order: a wake-up of either rolled-back start would have come first.
    assert _next(pubsub) == "djshop.make_receipt"
