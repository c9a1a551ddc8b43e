"""start_chain / start_chains / transaction on Django's own connection, SQLite and PostgreSQL.

Every test runs on both aliases of the test project (``alias`` fixture): a chain started in
``transaction.atomic()`` commits or rolls back with the ORM writes of the same block.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction
from djshop.jobs import OrderRef, count_receipts, make_receipt
from djshop.models import Order

import jobchain.contrib.django as jd
from jobchain import ChainStart, Deduplication, JobStatus
from jobchain.errors import JobTypeValidationError


class RolledBackError(Exception):
    pass


def _start_then_fail(alias: str, ids: list[str]) -> None:
    """Start a chain in a (nested) atomic block, then raise out of it."""
    with transaction.atomic(using=alias):
        ids.append(jd.start_chain(make_receipt, OrderRef(order_id=-2, alias=alias), using=alias).id)
        raise RolledBackError


def _name() -> str:
    return f"order-{uuid.uuid4().hex}"


def test_a_chain_and_an_orm_write_in_one_atomic_block_commit_together(alias: str) -> None:
    name = _name()
    with transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(name=name)
        started = jd.start_chain(make_receipt, OrderRef(order_id=order.pk, alias=alias), using=alias)
        order.chain_id = started.id
        order.save(using=alias)
    assert started.deduplicated is False
    assert started.chain.root.input == {"order_id": order.pk, "alias": alias}
    stored = Order.objects.using(alias).get(name=name)
    assert stored.chain_id == started.id
    chain = jd.client(alias).get_chain(started.id)
    assert chain is not None
    assert chain.root.status is JobStatus.PENDING
    assert chain.root.input == {"order_id": order.pk, "alias": alias}


def test_an_exception_inside_atomic_leaves_neither_the_row_nor_the_chain(alias: str) -> None:
    name = _name()
    ids: list[str] = []

    def order_then_fail() -> None:
        with transaction.atomic(using=alias):
            order = Order.objects.using(alias).create(name=name)
            ids.append(jd.start_chain(make_receipt, OrderRef(order_id=order.pk, alias=alias), using=alias).id)
            raise RolledBackError

    with pytest.raises(RolledBackError):
        order_then_fail()
    assert not Order.objects.using(alias).filter(name=name).exists()
    assert jd.client(alias).get_chain(ids[0]) is None


def test_outside_atomic_start_chain_commits_in_its_own_block(alias: str) -> None:
    started = jd.start_chain(make_receipt, OrderRef(order_id=-100, alias=alias), using=alias)
    assert transaction.get_autocommit(using=alias)
    assert jd.client(alias).get_chain(started.id) is not None


def test_a_rolled_back_savepoint_drops_only_the_chain_started_inside_it(alias: str) -> None:
    with transaction.atomic(using=alias):
        kept = jd.start_chain(make_receipt, OrderRef(order_id=-1, alias=alias), using=alias)
        dropped: list[str] = []
        with pytest.raises(RolledBackError):
            _start_then_fail(alias, dropped)
    assert jd.client(alias).get_chain(kept.id) is not None
    assert jd.client(alias).get_chain(dropped[0]) is None


def test_the_transaction_helper_joins_the_callers_block_and_hides_the_chain_until_commit(alias: str) -> None:
    chains = jd.client(alias)
    name = _name()
    with transaction.atomic(using=alias):
        Order.objects.using(alias).create(name=name)
        with jd.transaction(using=alias) as tx:
            started = chains.start_chain(tx, make_receipt, OrderRef(order_id=-3, alias=alias))
            assert chains.get_chain(started.id, tx=tx) is not None  # on Django's connection
        # Still inside the caller's block: nothing committed yet, so other connections see nothing.
        assert transaction.get_connection(alias).in_atomic_block
        assert chains.get_chain(started.id) is None
    assert chains.get_chain(started.id) is not None
    assert Order.objects.using(alias).filter(name=name).exists()


def test_start_chains_starts_several_in_one_block_and_keeps_their_order(alias: str) -> None:
    key = uuid.uuid4().hex
    starts = [
        ChainStart(job_type=make_receipt, input=OrderRef(order_id=-10, alias=alias)),
        ChainStart(job_type=count_receipts, input=OrderRef(order_id=-11, alias=alias)),
        ChainStart(
            job_type=make_receipt,
            input=OrderRef(order_id=-10, alias=alias),
            deduplication=Deduplication(key=key),
        ),
    ]
    with transaction.atomic(using=alias):
        started = jd.start_chains(starts, using=alias)
        again = jd.start_chain(
            make_receipt,
            OrderRef(order_id=-10, alias=alias),
            using=alias,
            deduplication=Deduplication(key=key),
        )
    assert [s.chain.type_name for s in started] == [
        "djshop.make_receipt",
        "djshop.count_receipts",
        "djshop.make_receipt",
    ]
    assert again.deduplicated is True
    assert again.id == started[2].id
    for one in started:
        assert jd.client(alias).get_chain(one.id) is not None


def test_a_refused_start_writes_nothing_and_leaves_the_callers_block_usable(alias: str) -> None:
    name = _name()
    with transaction.atomic(using=alias):
        Order.objects.using(alias).create(name=name)
        with pytest.raises(JobTypeValidationError):
            jd.start_chain(make_receipt, {"order": "not an OrderRef"}, using=alias)  # type: ignore[arg-type]
        Order.objects.using(alias).filter(name=name).update(chain_id="none")
    assert Order.objects.using(alias).get(name=name).chain_id == "none"


def test_the_clock_setting_is_the_time_of_the_chains_started(alias: str) -> None:
    from datetime import UTC, datetime

    from django.conf import settings
    from django.test import override_settings

    from jobchain.testing import FrozenClock

    # Later than the real time: nothing a backend stamps with its own clock is in the future.
    clock = FrozenClock(datetime(2031, 5, 6, 12, 0, tzinfo=UTC))
    with override_settings(JOBCHAIN={**settings.JOBCHAIN, "CLOCK": clock}):
        started = jd.start_chain(make_receipt, OrderRef(order_id=-7, alias=alias), using=alias)
        chain = jd.client(alias).get_chain(started.id)
    assert chain is not None
    assert chain.created_at == clock()
    assert chain.root.created_at == clock()
