"""Named SQL statements, loaded once from ``sql/*.sql`` and rendered per schema and prefix.

One file per operation, named after it (``job_complete`` → ``sql/job_complete.sql``); each
holds exactly one statement and starts with a purpose line. Listings are rendered twice, once
per order. Rendering goes through :mod:`jobchain_postgres._identifiers` only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

from jobchain_postgres._identifiers import Order, render

LISTINGS = ("chains_list", "jobs_list", "chain_jobs_list", "blocked_jobs_list")
"""Statements with ``{order}``/``{after}`` fragments, rendered for both orders."""


def _read(*path: str) -> str:
    return resources.files("jobchain_postgres").joinpath(*path).read_text(encoding="utf-8")


@functools.cache
def template(name: str) -> str:
    """The raw template of ``sql/<name>.sql``."""
    return _read("sql", f"{name}.sql")


def statement_names() -> list[str]:
    """Every statement shipped in ``sql/``, sorted."""
    folder = resources.files("jobchain_postgres").joinpath("sql")
    return sorted(entry.name[:-4] for entry in folder.iterdir() if entry.name.endswith(".sql"))


@dataclass(frozen=True, slots=True)
class Queries:
    """Every statement rendered for one schema and prefix, as query bytes for psycopg."""

    schema: str
    prefix: str

    def __getattr__(self, name: str) -> bytes:
        # Only reached for names that are not slots: the statement of that name.
        if name.startswith("_"):
            raise AttributeError(name)
        return _rendered(self.schema, self.prefix, name, None)

    def listing(self, name: str, order: Order) -> bytes:
        """A listing statement rendered for ``order``."""
        if name not in LISTINGS:
            raise KeyError(name)
        return _rendered(self.schema, self.prefix, name, order)


@functools.cache
def _rendered(schema: str, prefix: str, name: str, order: Order | None) -> bytes:
    try:
        text = template(name)
    except FileNotFoundError:
        raise AttributeError(f"no SQL statement named {name!r}") from None
    return render(text, schema, prefix, order)


@functools.cache
def plain(name: str) -> bytes:
    """A statement that names no schema object (``sql/<name>.sql`` without placeholders)."""
    text = template(name)
    if "{" in text:
        raise ValueError(f"sql/{name}.sql has placeholders; use Queries")
    return text.encode()


def migration_names() -> list[str]:
    """The versioned migrations shipped in ``migrations/``, in the order they apply."""
    folder = resources.files("jobchain_postgres").joinpath("migrations")
    return sorted(entry.name[:-4] for entry in folder.iterdir() if entry.name.endswith(".sql"))


def migration(name: str, schema: str, prefix: str) -> bytes:
    """One migration rendered for ``schema``/``prefix`` (several statements, no parameters)."""
    return render(_read("migrations", f"{name}.sql"), schema, prefix)


def schema_sql(schema: str, prefix: str) -> bytes:
    """The documented schema (``schema.sql``): what all migrations applied in order produce."""
    return render(_read("schema.sql"), schema, prefix)


__all__ = [
    "LISTINGS",
    "Queries",
    "migration",
    "migration_names",
    "plain",
    "schema_sql",
    "statement_names",
    "template",
]
