"""docs/index.md's list of what is missing names nothing the public API already exports.

The section went stale once: it said periodic schedules, priorities, ordered keys, limits,
pause and resume, dynamic blockers and synchronous enqueue did not exist, long after all of
them shipped (issue 37). Each feature below is tied to the public names that implement it,
resolved on the real objects (``getattr``, ``inspect.signature``), so the table fails when the
API moves, and the page fails when an item of its missing-features section mentions a feature
whose names exist. Backticked names in that section that the public API exports fail too.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import jobchain
import jobchain.worker
from jobchain.worker import Attempt, Processors

INDEX = Path(__file__).resolve().parents[3] / "docs" / "index.md"
MISSING_HEADING = re.compile(
    r"^## +(.*(?:not there yet|missing|not yet|planned|roadmap|limitations).*)$", re.IGNORECASE | re.MULTILINE
)
BULLET = re.compile(r"^[-*] +")
BACKTICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_.]*)(?:\(\))?`")


def _any(*alternatives: str) -> re.Pattern[str]:
    """A case-insensitive pattern matching any of ``alternatives`` (regular expressions)."""
    return re.compile("|".join(alternatives), re.IGNORECASE)


def _parameters(function: Callable[..., object]) -> set[str]:
    return set(inspect.signature(function).parameters)


def _attribute(owner: object, name: str) -> str:
    """``owner.name`` as ``Owner.name`` when it exists; AttributeError (a moved API) otherwise."""
    getattr(owner, name)
    return f"{getattr(owner, '__name__', owner)}.{name}"


def _parameter(function: Callable[..., object], name: str) -> str:
    if name not in _parameters(function):
        raise AttributeError(f"{function.__qualname__} has no parameter {name!r}")
    return f"{function.__qualname__}({name}=...)"


def _periodic() -> list[str]:
    return [_attribute(Processors, "periodic"), _parameter(Processors.periodic, "cron")]


def _priority() -> list[str]:
    return [
        _parameter(jobchain.Client.start_chain, "priority"),
        _parameter(jobchain.JobTypes.define, "priority"),
        _attribute(jobchain, "PRIORITY_AGING"),
    ]


def _ordering_key() -> list[str]:
    return [_parameter(jobchain.Client.start_chain, "ordering_key")]


def _limits() -> list[str]:
    return [
        _parameter(jobchain.JobTypes.define, "max_running"),
        _parameter(jobchain.JobTypes.define, "rate_limit"),
        _attribute(jobchain, "RateLimit"),
    ]


def _pause_resume() -> list[str]:
    return [_attribute(jobchain.Client, "pause"), _attribute(jobchain.Client, "resume")]


def _dynamic_blockers() -> list[str]:
    return [
        _attribute(Attempt, "wait_for"),
        _attribute(Attempt, "start_chain"),
        _parameter(jobchain.Client.start_chain, "blockers"),
    ]


def _sync() -> list[str]:
    sync = importlib.import_module("jobchain.sync")
    return [
        _attribute(sync, "connect"),
        _attribute(sync.SyncClient, "start_chain"),
        _attribute(sync.SyncClient, "transaction"),
    ]


def _batches() -> list[str]:
    return [_attribute(Processors, "batch_handler"), _attribute(jobchain.worker, "Batch")]


def _deadlines() -> list[str]:
    return [_parameter(jobchain.JobTypes.define, "timeout")]


@dataclass(frozen=True)
class Feature:
    name: str
    mention: re.Pattern[str]
    names: Callable[[], list[str]]
    """The public names that implement it; raises AttributeError when one is gone."""
    unless: re.Pattern[str] | None = None
    """An item matching this is about a different feature (per-key limits are not fleet-wide ones)."""


FEATURES = (
    Feature("periodic schedules", _any(r"\bperiodic\b|\bcron\b"), _periodic),
    Feature("priorities", _any(r"\bpriorit(?:y|ies)\b"), _priority),
    Feature("ordered keys", _any(r"\border(?:ed|ing)[ _-]keys?\b"), _ordering_key),
    Feature(
        "concurrency and rate limits",
        _any(
            r"\bmax_running\b",
            r"\brate[ _-]limits?\b",
            r"\bconcurrency limits?\b",
            r"\b(?:global|fleet-wide) concurrency\b",
        ),
        _limits,
        unless=_any(r"\bper[ -](?:key|tenant)\b"),
    ),
    Feature("pause and resume", _any(r"\bpaus(?:e|es|ed|ing)\b", r"\bresum(?:e|es|ed|ing)\b"), _pause_resume),
    Feature(
        "dynamic blockers",
        _any(
            r"\bdynamic blockers?\b",
            r"\bwait_for\b",
            r"\bwait(?:s|ing)? for (?:the )?chains? (?:it|they) start",
        ),
        _dynamic_blockers,
    ),
    Feature(
        "synchronous enqueue",
        _any(r"\bsynchronous (?:enqueue|client|starts?)\b|\bjobchain\.sync\b|\bsync client\b"),
        _sync,
    ),
    Feature("batched processors", _any(r"\bbatch(?:ed)? (?:processors?|handlers?)\b"), _batches),
    Feature("handler deadlines", _any(r"\b(?:handler )?deadlines?\b"), _deadlines),
)


def _missing_section(text: str) -> tuple[str, str]:
    """The heading and body of the page's missing-features section (up to the next ``## ``)."""
    found = MISSING_HEADING.search(text)
    assert found, f"{INDEX.name} has no section saying what is missing (a '## Not there yet' heading)"
    end = text.find("\n## ", found.end())
    return found.group(1), text[found.end() : end if end != -1 else len(text)]


def _items(body: str) -> list[str]:
    """Each bullet of ``body`` (continuation lines joined), and each sentence of its prose."""
    items: list[str] = []
    prose: list[str] = []
    bullet: list[str] | None = None
    for line in [*body.splitlines(), ""]:
        if BULLET.match(line):
            if bullet:
                items.append(" ".join(bullet))
            bullet = [BULLET.sub("", line).strip()]
        elif bullet is not None and line.startswith((" ", "\t")) and line.strip():
            bullet.append(line.strip())
        else:
            if bullet:
                items.append(" ".join(bullet))
            bullet = None
            prose.append(line.strip())
    sentences = re.split(r"(?<=[.;:])\s+(?=[A-Z(])", " ".join(part for part in prose if part))
    return [*items, *(sentence for sentence in sentences if sentence)]


def _quoted(item: str) -> str:
    return repr(item if len(item) <= 90 else item[:87] + "...")


def _exported_names() -> set[str]:
    """Names a reader would type: the package's and the worker's exports, Client and Attempt methods."""
    names = set(jobchain.__all__)
    names |= {name for name in dir(jobchain.worker) if not name.startswith("_") and name[0].isupper()}
    for owner in (jobchain.Client, Attempt, Processors):
        public = {name for name in dir(owner) if not name.startswith("_")}
        names |= public | {f"{owner.__name__}.{name}" for name in public}
    return names


@pytest.mark.parametrize("feature", FEATURES, ids=[feature.name for feature in FEATURES])
def test_each_feature_still_has_its_public_names(feature: Feature) -> None:
    # A failure here means the API moved: update the feature's names, not the page.
    assert feature.names()


def test_the_missing_section_names_nothing_that_exists() -> None:
    heading, body = _missing_section(INDEX.read_text(encoding="utf-8"))
    items = _items(body)
    assert items, f"'## {heading}' in {INDEX.name} lists nothing"
    exported = _exported_names()
    stale: list[str] = []
    for item in items:
        for feature in FEATURES:
            if feature.mention.search(item) and not (feature.unless and feature.unless.search(item)):
                stale.append(f"{feature.name} exists ({', '.join(feature.names())}): {_quoted(item)}")
        for name in BACKTICKED.findall(item):
            if name in exported:
                stale.append(f"`{name}` is public API: {_quoted(item)}")
    assert not stale, f"'## {heading}' in {INDEX.name} lists as missing what exists:\n" + "\n".join(stale)
