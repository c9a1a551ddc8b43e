"""The connection budget of the shared test server (``connection_budget/``): more holders than
slots wait their turn and never exceed it, reservations are whole, and the run's psycopg
counts its connections to the shared server (issue 33)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import psycopg
import pytest

from .conftest import conninfo, reservation
from .connection_budget import DEFAULT_NEED, Budget, BudgetExhaustedError, Slots, need, targets_server

BUDGET_DIR = Path(__file__).resolve().parent / "connection_budget"
HANG_GUARD = 90.0  # seconds before a stuck protocol fails the test instead of hanging it

# A holder process: the budget from the environment, installed into psycopg as in a test run;
# one real connection to the server; "in"/"out" lines in the shared log while it holds it.
HOLDER = textwrap.dedent(
    """
    import importlib.util, os, sys, time
    import psycopg

    where = sys.argv[1]
    spec = importlib.util.spec_from_file_location(
        "jobchain_pg_budget", os.path.join(where, "__init__.py"), submodule_search_locations=[where]
    )
    budget = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = budget
    spec.loader.exec_module(budget)
    budget.install(budget.from_environment())
    log, go, name = sys.argv[2], sys.argv[3], sys.argv[4]

    def note(word):
        with open(log, "a") as out:  # one short O_APPEND write: lines never interleave
            out.write(f"{word} {name}\\n")

    note("waiting")
    connection = psycopg.connect(sys.argv[5], application_name="jc-budget-test")
    note("in")
    while not os.path.exists(go):
        time.sleep(0.01)
    note("out")
    connection.close()
    """
)


def _events(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [(word, name) for word, name in (line.split() for line in log.read_text().splitlines())]


def _holding(events: list[tuple[str, str]]) -> set[str]:
    inside: set[str] = set()
    for word, name in events:
        if word == "in":
            inside.add(name)
        elif word == "out":
            inside.discard(name)
    return inside


def _most_at_once(events: list[tuple[str, str]]) -> int:
    inside, most = 0, 0
    for word, _ in events:
        inside += {"in": 1, "out": -1}.get(word, 0)
        most = max(most, inside)
    return most


def _holds(log: Path, count: int) -> bool:
    return len(_holding(_events(log))) == count


def _released(log: Path, name: str) -> bool:
    return ("out", name) in _events(log)


def _until(condition: Callable[[], bool], what: str, log: Path) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not condition():
        assert time.monotonic() < deadline, f"{what}; log:\n{log.read_text() if log.exists() else ''}"
        time.sleep(0.02)


@pytest.fixture
def slot_dir(tmp_path: Path) -> Path:
    """A budget directory of this test alone (never the run's own)."""
    return tmp_path / "budget"


# Each holder keeps one connection; two of them hold it at a time, all of this test's.
@pytest.mark.pg_connections(1, outside=2)
def test_more_holders_than_slots_wait_their_turn_and_never_exceed_the_budget(
    postgres_url: str, slot_dir: Path, tmp_path: Path
) -> None:
    size, count = 2, 6
    log = tmp_path / "log"
    env = {
        **os.environ,
        "JOBCHAIN_TEST_PG_CONNECTIONS": str(size),
        "JOBCHAIN_TEST_PG_BUDGET_DIR": str(slot_dir),
    }
    names, target = [f"h{n}" for n in range(count)], conninfo(postgres_url)
    processes = {
        name: subprocess.Popen(
            [
                sys.executable,
                "-c",
                HOLDER,
                str(BUDGET_DIR),
                str(log),
                str(tmp_path / f"go-{name}"),
                name,
                target,
            ],
            env=env,
        )
        for name in names
    }
    try:
        _until(lambda: sum(w == "waiting" for w, _ in _events(log)) == count, "holders started", log)
        released: set[str] = set()
        while len(released) < count:
            # As many hold as there are slots (or as are left); the others wait for one.
            expected = min(size, count - len(released))
            _until(partial(_holds, log, expected), f"{expected} holding", log)
            holder = sorted(_holding(_events(log)))[0]
            (tmp_path / f"go-{holder}").touch()
            _until(partial(_released, log, holder), f"{holder} released", log)
            released.add(holder)
        for name, process in processes.items():
            assert process.wait(HANG_GUARD) == 0, name
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    events = _events(log)
    assert _most_at_once(events) == size  # the budget was reached, and never exceeded
    assert sorted(name for word, name in events if word == "in") == names  # every holder got its turn


def test_a_reservation_is_whole_and_holds_its_outside_slots_apart(slot_dir: Path) -> None:
    ours, theirs = Budget(Slots(slot_dir, 5), wait=0.2), Budget(Slots(slot_dir, 5), wait=0.2)
    with ours.reserve(inside=2, outside=1, label="ours") as reservation:
        assert reservation.complete
        # Another process sees the 3 reserved slots taken: it may reserve the other 2, not 3.
        with theirs.reserve(inside=3, label="theirs") as short:
            assert not short.complete
        with theirs.reserve(inside=2, label="theirs") as fits:
            assert fits.complete
        # This process's connections use the spare reserved slots first, then a free one.
        first, second = ours.take(), ours.take()
        assert reservation.overflow == 0
        third = ours.take()
        assert reservation.overflow == 1
        assert len({first, second, third}) == 3
        for slot in (first, second, third):
            ours.give_back(slot)
        assert reservation.peak == 3
    # Given back at the end: the whole budget is free again.
    with theirs.reserve(inside=5, label="theirs") as everything:
        assert everything.complete


def test_a_connection_that_finds_the_budget_spent_waits_then_says_who_holds_it(slot_dir: Path) -> None:
    holder, waiter = Budget(Slots(slot_dir, 1), wait=0.3), Budget(Slots(slot_dir, 1), wait=0.3)
    with holder.reserve(inside=1, label="tests/test_big.py::test_big"):
        with pytest.raises(
            BudgetExhaustedError, match=r"waited \d+ s for one of the 1 PostgreSQL connection slots"
        ) as error:
            waiter.take()
        assert "reserved tests/test_big.py::test_big" in str(error.value)
    slot = waiter.take()  # free again: taken at once
    waiter.give_back(slot)


def test_connections_to_the_shared_server_count_and_others_do_not() -> None:
    shared = ("127.0.0.1", "5432")
    assert targets_server(shared, "host=127.0.0.1 port=5432 dbname=test", {})
    assert targets_server(shared, "postgresql://postgres@localhost/test", {})
    assert targets_server(shared, "dbname=test", {"host": "/var/run/postgresql", "port": 5432})
    assert not targets_server(shared, "host=127.0.0.1 port=54321 dbname=test", {})  # a private cluster
    assert not targets_server(shared, "host=db.example port=5432", {})


@pytest.fixture
def run_budget() -> Iterator[Budget]:
    """The budget this test process counts against (the root conftest.py installs it)."""
    budget = sys.modules.get("jobchain_pg_budget")
    found = budget.installed() if budget is not None else None
    if found is None:
        pytest.skip("the run has no connection budget (JOBCHAIN_TEST_PG_CONNECTIONS=0)")
    yield found


def test_the_runs_connections_to_the_server_hold_slots_until_closed(
    postgres_url: str, run_budget: Budget
) -> None:
    before = run_budget.open_connections
    with psycopg.connect(conninfo(postgres_url)) as connection:
        connection.execute("SELECT 1")
        assert run_budget.open_connections == before + 1
    assert run_budget.open_connections == before


@pytest.mark.pg_connections(3, outside=2)
def test_a_test_reserves_what_its_marker_says(request: pytest.FixtureRequest) -> None:
    assert need(request.node) == (3, 2)


def test_an_unmarked_test_of_this_folder_reserves_the_default(request: pytest.FixtureRequest) -> None:
    assert need(request.node) == (DEFAULT_NEED, 0)  # conftest.py marks every test here


def test_a_suite_test_that_opens_more_reserves_its_measured_need_over_its_modules_marker() -> None:
    # test_integration.py marks its module with 6: the multi-worker cases still reserve 12.
    assert reservation("test_many_workers_process_every_job_exactly_once", marked=True) == 12
    assert reservation("test_parallel_transactions_all_commit", marked=False) == 6
    assert reservation("test_linear_chain_runs_every_step_in_order", marked=True) is None
    assert reservation("test_linear_chain_runs_every_step_in_order", marked=False) == DEFAULT_NEED


@dataclass
class _Callspec:
    params: dict[str, object]


@dataclass
class _Item:
    """What ``need`` reads of a pytest item elsewhere in the run (core, Spark, Django tests)."""

    fixturenames: list[str] = field(default_factory=list)
    callspec: _Callspec | None = None
    markers: dict[str, object] = field(default_factory=dict)

    def get_closest_marker(self, name: str) -> object | None:
        return self.markers.get(name)


def test_elsewhere_a_test_reserves_by_its_postgres_fixtures_and_parameters() -> None:
    spark: dict[str, object] = {"spark": "a spark marker"}  # need() only asks whether it is there
    cases: list[tuple[_Item, tuple[int, int]]] = [
        (_Item(fixturenames=["tmp_path"]), (0, 0)),
        (_Item(fixturenames=["postgres_server", "tmp_path"]), (DEFAULT_NEED, 0)),
        (_Item(fixturenames=["pg_database"]), (DEFAULT_NEED, 0)),
        (_Item(callspec=_Callspec({"empty_url": "postgres"})), (DEFAULT_NEED, 0)),
        (_Item(callspec=_Callspec({"empty_url": "sqlite"})), (0, 0)),
        (_Item(fixturenames=["postgres_base_url"], markers=spark), (DEFAULT_NEED, 4)),  # Python workers
        (_Item(fixturenames=["sqlite_url"], markers=spark), (0, 0)),
    ]
    for item, expected in cases:
        assert need(item) == expected, item  # type: ignore[arg-type]  # duck-typed item
