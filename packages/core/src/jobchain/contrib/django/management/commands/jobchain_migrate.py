"""``manage.py jobchain_migrate``: create or upgrade jobchain's tables in the configured database.

These are jobchain's own SQL migrations (what ``jobchain migrate`` applies), not Django
migrations: the schema belongs to the backend package, is shared with workers and tools that
never load Django, and uses backend SQL (partial indexes, functions) that models cannot state.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from jobchain.contrib.django._django import BaseCommand, CommandError
from jobchain.errors import JobchainError


async def _migrate(url: str) -> str:
    from jobchain.connect_backends import open_state

    adapter = await open_state(url)
    try:
        await adapter.migrate()
    finally:
        await adapter.close()
    return type(adapter).__name__


class Command(BaseCommand):
    help = "Create or upgrade jobchain's tables (its own migrations, not Django's) in JOBCHAIN['DATABASE']."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--database", default=None, help="Database alias (default: JOBCHAIN['DATABASE'], else 'default')."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from jobchain.contrib.django.chains import settings
        from jobchain.contrib.django.databases import state_url_for

        config = settings()
        alias = options["database"] or config.database
        try:
            name = asyncio.run(_migrate(state_url_for(alias, config)))
        except JobchainError as exc:
            raise CommandError(" ".join(str(exc).split())) from exc
        if options.get("verbosity", 1) >= 1:
            self.stdout.write(f"migrated jobchain's tables in database {alias!r} ({name})")
