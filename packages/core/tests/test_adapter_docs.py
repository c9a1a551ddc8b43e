"""The adapter docs name every part of the contract a backend author implements (issue 44).

``docs/adapters/writing-a-backend.md`` and ``docs/adapters/state-semantics.md`` are meant to
be enough to write a backend without reading jobchain's source. These checks fail when the
contract grows and the docs do not:

* every public name of ``jobchain.contracts`` (its ``__all__``) appears in code in the docs;
* every method and attribute of ``StateTx``, ``StateAdapter``, ``NotifyAdapter`` and the
  optional protocols has a table row naming its parameter and result types, and every state
  operation's row links to a ``state-semantics.md`` section whose heading names it;
* every ``Job`` field has a row (meaning and writers) and appears in the field matrices;
* every ``jobchain.errors`` class, every ``Capability`` and every suite fixture is listed,
  the required fixtures marked required, and the integration knobs carry their values;
* the exact texts the suite compares are the reference's.

Each check is a function from the docs' text to what is missing, and
:func:`test_each_check_reports_a_name_deleted_from_the_docs` deletes a name from the text
and requires the check to report it, so no check can pass on docs that lack what it guards.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import jobchain.contracts
import jobchain.errors
from jobchain.contracts import (
    AnnouncesWithinState,
    Capability,
    ChecksDelivery,
    CompletesJobsInBatches,
    NotifyAdapter,
    ObservesCallerCommits,
    PublishesChainsInBulk,
    ReservesConnections,
    RevokesSessions,
    RunsOperationsAlone,
    StateAdapter,
    StateTx,
)
from jobchain.entities import (
    ATTEMPT_ERRORS_KEPT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    Job,
    JobStatus,
    RescueReason,
    WorkerState,
)
from jobchain.memory._history import ATTEMPT_ABANDONED, BLOCKER_CANCELLED, BLOCKER_FAILED, blocker_message
from jobchain.memory._workers import rescue_error
from jobchain.stats import ERROR_TYPES_KEPT
from jobchain.worker import LeaseConfig
from jobchain_conformance import ClaimStateSuite, IntegrationSuite, NotifyAdapterSuite, StateAdapterSuite
from jobchain_conformance.suites._integration_base import IntegrationSuiteBase
from jobchain_conformance.suites.sync_facade import SyncFacadeSuite, SyncJoinedSuite

ADAPTERS = Path(__file__).resolve().parents[3] / "docs" / "adapters"
WRITING = ADAPTERS / "writing-a-backend.md"
SEMANTICS = ADAPTERS / "state-semantics.md"

PROTOCOLS: tuple[type, ...] = (
    StateTx,
    StateAdapter,
    NotifyAdapter,
    CompletesJobsInBatches,
    RunsOperationsAlone,
    ReservesConnections,
    ObservesCallerCommits,
    PublishesChainsInBulk,
    AnnouncesWithinState,
    ChecksDelivery,
    RevokesSessions,
)
SPECIFIED: tuple[type, ...] = (StateTx, StateAdapter, CompletesJobsInBatches, RevokesSessions)
"""Protocols whose every method links to its section of state-semantics.md."""
SUITES: tuple[type, ...] = (
    StateAdapterSuite,
    ClaimStateSuite,
    NotifyAdapterSuite,
    IntegrationSuite,
    SyncFacadeSuite,
    SyncJoinedSuite,
)

# ---------------------------------------------------------------- reading the docs


def _writing() -> str:
    return WRITING.read_text(encoding="utf-8")


def _semantics() -> str:
    return SEMANTICS.read_text(encoding="utf-8")


def _both() -> str:
    return _writing() + "\n" + _semantics()


def code_names(text: str) -> set[str]:
    """Every identifier inside an inline code span (`` `…` ``) of ``text``."""
    return {name for span in re.findall(r"`([^`\n]+)`", text) for name in re.findall(r"[A-Za-z_]\w*", span)}


def table_rows(text: str) -> Iterator[list[str]]:
    """The cells of every Markdown table row of ``text`` (an escaped ``\\|`` stays in its cell)."""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= {"|", "-", " ", ":"}:
            continue
        yield [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]


def unescaped(cell: str) -> str:
    return cell.replace("\\|", "|")


def rows_for(text: str, name: str) -> list[list[str]]:
    """The rows with a cell that starts with the code span `` `name` ``."""
    return [row for row in table_rows(text) if any(re.match(rf"`{re.escape(name)}`", c) for c in row)]


def headings(text: str) -> dict[str, str]:
    """Anchor -> heading text, as GitHub makes anchors (a repeated one gets ``-1``, ``-2``…)."""
    found: dict[str, str] = {}
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = re.match(r"^#{1,6} (.*)$", line)
        if fenced or match is None:
            continue
        title = match.group(1).strip()
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found[slug if count == 0 else f"{slug}-{count}"] = title
    return found


def _word(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None


# ---------------------------------------------------------------- what the contract holds


def members(protocol: type) -> dict[str, list[str]]:
    """Each public method or attribute of ``protocol`` -> the type annotations it names."""
    found: dict[str, list[str]] = {}
    for name, annotation in vars(protocol).get("__annotations__", {}).items():
        found[name] = [str(annotation)]
    for name, value in vars(protocol).items():
        if name.startswith("_") or not callable(value):
            continue
        signature = inspect.signature(value)
        types = [str(p.annotation) for p in signature.parameters.values() if p.name != "self"]
        found[name] = [*types, str(signature.return_annotation)]
    return found


def fixtures(suite: type) -> dict[str, Callable[..., Any]]:
    """Every public pytest fixture a suite class defines or inherits -> its function."""
    found: dict[str, Callable[..., Any]] = {}
    for cls in reversed(suite.__mro__):
        for name, value in vars(cls).items():
            marker = getattr(value, "_fixture_function_marker", None) or getattr(
                value, "_pytestfixturefunction", None
            )
            if marker is None or name.startswith("_"):
                continue
            unwrap = getattr(value, "_get_wrapped_function", None)
            found[getattr(marker, "name", None) or name] = unwrap() if unwrap else value.__wrapped__
    return found


def required(function: Callable[..., Any]) -> bool:
    """A fixture the adopter must override: its default raises NotImplementedError."""
    return "raise NotImplementedError" in inspect.getsource(function)


# ---------------------------------------------------------------- the checks (text -> missing)


def missing_contract_names(text: str) -> list[str]:
    named = code_names(text)
    return [name for name in jobchain.contracts.__all__ if name not in named]


def missing_member_rows(writing: str) -> list[str]:
    """``Protocol.member`` for each member without a row naming it and all its types."""
    missing: list[str] = []
    for protocol in PROTOCOLS:
        for name, types in members(protocol).items():
            rows = [unescaped(" | ".join(row)) for row in rows_for(writing, name)]
            if not any(all(t in row for t in types) for row in rows):
                missing.append(f"{protocol.__name__}.{name} ({', '.join(types)})")
    return missing


def missing_semantics_links(writing: str, semantics: str) -> list[str]:
    """State operations whose row links to no state-semantics.md heading that names them."""
    anchors = headings(semantics)
    missing: list[str] = []
    for protocol in SPECIFIED:
        for name in members(protocol):
            if name in ("capabilities", "time_precision"):
                continue
            links = {
                a
                for row in rows_for(writing, name)
                for a in re.findall(r"state-semantics\.md#([^)\s]+)\)", " | ".join(row))
            }
            if not any(_word(name, anchors.get(anchor, "")) for anchor in links):
                missing.append(f"{protocol.__name__}.{name}")
    return missing


def missing_job_fields(writing: str, semantics: str) -> list[str]:
    """Job fields without a row of four cells in the field table, or absent from the matrices."""
    matrices = code_names(semantics)
    missing: list[str] = []
    for field in dataclasses.fields(Job):
        rows = [row for row in table_rows(writing) if row and row[0] == f"`{field.name}`"]
        if not any(len(row) == 4 and all(row) for row in rows) or field.name not in matrices:
            missing.append(field.name)
    return missing


def missing_errors(writing: str) -> list[str]:
    named = {row[0] for row in table_rows(writing) if row}
    listed = code_names(writing)
    return [
        name
        for name in jobchain.errors.__all__
        if name not in listed or not any(_word(name, cell) for cell in named)
    ]


def missing_capabilities(writing: str) -> list[str]:
    return [
        capability.name
        for capability in Capability
        if not any(len(row) == 4 and all(row) for row in rows_for(writing, capability.name))
    ]


def missing_fixtures(writing: str) -> list[str]:
    """``Suite.fixture`` for each fixture not named in the docs, or required but not marked so."""
    named = code_names(writing)
    missing: list[str] = []
    for suite in SUITES:
        for name, function in fixtures(suite).items():
            if name not in named:
                missing.append(f"{suite.__name__}.{name}")
            elif required(function) and not any(
                len(row) > 2 and row[2].startswith("required") for row in rows_for(writing, name)
            ):
                missing.append(f"{suite.__name__}.{name} (required)")
    return missing


def _duration(value: timedelta) -> str:
    seconds = value.total_seconds()
    return f"{seconds:g} s" if seconds >= 1 else f"{seconds * 1000:g} ms"


def missing_knobs(writing: str) -> list[str]:
    """IntegrationSuite class attributes whose row does not carry the attribute's value."""
    missing: list[str] = []
    for name in IntegrationSuiteBase.__annotations__:
        value = getattr(IntegrationSuite, name)
        if isinstance(value, LeaseConfig):
            shown = f"{_duration(value.duration)}, renewed every {_duration(value.renew_every)}"
        else:
            shown = f"`{value!r}` s"
        if not any(len(row) > 1 and row[1] == shown for row in rows_for(writing, name)):
            missing.append(f"{name} = {shown}")
    return missing


def _job(status: JobStatus) -> Job:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return Job(
        id="{chain_id}",
        chain_id="{chain_id}",
        type_name="t",
        chain_type_name="{chain_type_name}",
        chain_index=0,
        status=status,
        input=None,
        created_at=at,
        scheduled_at=at,
    )


def exact_texts() -> list[str]:
    """What the reference writes (the suite compares the same texts), as the docs show it."""
    return [
        f"`{rescue_error(RescueReason.LEASE_EXPIRED, '{worker_id}')}`",
        f"`{rescue_error(RescueReason.WORKER_DEAD, '{worker_id}')}`",
        f"`{blocker_message(_job(JobStatus.FAILED))}`",
        f"`{blocker_message(_job(JobStatus.CANCELLED))}`",
        *(f'"{value}"' for value in (ATTEMPT_ABANDONED, BLOCKER_FAILED, BLOCKER_CANCELLED)),
        *(f'`"{reason.value}"`' for reason in RescueReason),
        *(f'`"{status.value}"`' for status in JobStatus),
        *(f'`"{state.value}"`' for state in WorkerState),
        f"`ATTEMPT_ERRORS_KEPT` ({ATTEMPT_ERRORS_KEPT})",
        f"`ERROR_TYPES_KEPT` ({ERROR_TYPES_KEPT})",
        f"`DEFAULT_PAGE_SIZE` ({jobchain.contracts.DEFAULT_PAGE_SIZE})",
        f"`MAX_PAGE_SIZE` ({jobchain.contracts.MAX_PAGE_SIZE})",
        f"`PRIORITY_MIN` ({PRIORITY_MIN})",
        f"`PRIORITY_MAX` ({PRIORITY_MAX})",
    ]


def missing_texts(semantics: str) -> list[str]:
    return [text for text in exact_texts() if text not in semantics]


# ---------------------------------------------------------------- the tests


def test_every_public_name_of_the_contracts_is_in_the_adapter_docs() -> None:
    assert missing_contract_names(_both()) == []


def test_every_protocol_member_has_a_row_with_its_types() -> None:
    assert missing_member_rows(_writing()) == []


def test_every_state_operation_links_to_its_section_of_the_semantics() -> None:
    assert missing_semantics_links(_writing(), _semantics()) == []


def test_every_state_operation_has_a_section_of_its_own() -> None:
    titles = headings(_semantics()).values()
    missing = [name for name in members(StateTx) if not any(_word(name, title) for title in titles)]
    assert missing == []


def test_every_job_field_is_documented_with_its_writers() -> None:
    assert missing_job_fields(_writing(), _semantics()) == []


def test_every_error_class_is_in_the_error_table() -> None:
    assert missing_errors(_writing()) == []


def test_every_capability_says_what_skipping_it_costs() -> None:
    assert missing_capabilities(_writing()) == []


def test_every_suite_fixture_is_listed_and_the_required_ones_marked() -> None:
    assert missing_fixtures(_writing()) == []


def test_the_integration_knobs_carry_their_values() -> None:
    assert missing_knobs(_writing()) == []


def test_the_exact_texts_are_the_references() -> None:
    assert missing_texts(_semantics()) == []


def test_the_fixture_reader_finds_the_abstract_fixtures() -> None:
    # Guards the checks above: a fixture reader that found nothing would pass them all.
    found = {name: required(function) for name, function in fixtures(NotifyAdapterSuite).items()}
    assert {
        "notify_adapter": True,
        "notify_adapter_factory": True,
        "interrupt_connection": False,
    }.items() <= (found.items())
    assert len(members(StateTx)) >= 29


def _without(name: str, text: str) -> str:
    """``text`` with every occurrence of the identifier ``name`` replaced."""
    return re.sub(rf"(?<![\w]){re.escape(name)}(?![\w])", "REMOVED", text)


def _without_row(name: str, text: str) -> str:
    """``text`` without the table rows that start with the code span `` `name` ``."""
    return "\n".join(line for line in text.splitlines() if not line.startswith(f"| `{name}`"))


DELETIONS: list[tuple[str, Callable[[str, str], list[str]], Callable[[str, str], str], str]] = [
    ("contract name", lambda w, s: missing_contract_names(w + s), _without, "JobsAcquire"),
    ("contract name", lambda w, s: missing_contract_names(w + s), _without, "ScheduleRegistration"),
    ("operation row", lambda w, s: missing_member_rows(w), _without_row, "queue_stats"),
    ("operation row", lambda w, s: missing_member_rows(w), _without_row, "consume_wake_hint"),
    ("operation row", lambda w, s: missing_member_rows(w), _without, "WorkerHeartbeatResult"),
    ("semantics link", lambda w, s: missing_semantics_links(w, s), _without, "types_pause"),
    ("job field", lambda w, s: missing_job_fields(w, s), _without, "rescued_from"),
    ("job field", lambda w, s: missing_job_fields(w, s), _without_row, "attempt_base"),
    ("error", lambda w, s: missing_errors(w), _without, "JobFinishedError"),
    ("error", lambda w, s: missing_errors(w), _without, "JobCancelledError"),
    ("capability", lambda w, s: missing_capabilities(w), _without_row, "WAKE_HINTS"),
    ("fixture", lambda w, s: missing_fixtures(w), _without, "notify_adapter_factory"),
    ("fixture", lambda w, s: missing_fixtures(w), _without, "scheduling_model_settings"),
    ("knob", lambda w, s: missing_knobs(w), lambda n, t: t.replace("`0.05` s", "`0.5` s"), "poll_interval"),
    (
        "text",
        lambda w, s: missing_texts(s),
        lambda n, t: t.replace(n, "was presumed gone"),
        "was presumed dead",
    ),
]


@pytest.mark.parametrize(
    ("what", "check", "delete", "name"), DELETIONS, ids=[f"{what}:{name}" for what, _, _, name in DELETIONS]
)
def test_each_check_reports_a_name_deleted_from_the_docs(
    what: str,
    check: Callable[[str, str], list[str]],
    delete: Callable[[str, str], str],
    name: str,
) -> None:
    writing, semantics = _writing(), _semantics()
    assert check(writing, semantics) == [], f"the {what} check fails on the docs as they are"
    reported = check(delete(name, writing), delete(name, semantics))
    assert any(name in item or item in name for item in reported) or (what == "text" and reported), (
        f"deleting {name!r} from the docs went unnoticed by the {what} check"
    )
