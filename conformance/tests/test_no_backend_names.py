"""The suite never names a backend: capabilities are the only thing it may branch on."""

from __future__ import annotations

import re
from pathlib import Path

import jobchain_conformance

BACKEND_NAMES = re.compile(r"sqlite|postgres|psycopg|redis|\bnats\b|jetstream|mysql", re.IGNORECASE)
SOURCES = Path(jobchain_conformance.__file__).parent


def test_suite_sources_exist() -> None:
    assert len(list(SOURCES.rglob("*.py"))) >= 10


def test_suite_sources_do_not_name_a_backend() -> None:
    hits = [
        f"{path.relative_to(SOURCES)}:{number}: {line.strip()}"
        for path in sorted(SOURCES.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if BACKEND_NAMES.search(line)
    ]
    assert hits == [], "suite code must branch on capabilities, never on backend names:\n" + "\n".join(hits)
