"""``manage.py jobchain_worker``: run the JOBCHAIN worker until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from jobchain.contrib.django._django import BaseCommand, CommandError
from jobchain.errors import JobchainError, SchemaNotMigratedError


class Command(BaseCommand):
    help = (
        "Run a jobchain worker for JOBCHAIN['PROCESSORS'] with JOBCHAIN['WORKER'] options "
        "until SIGINT/SIGTERM (in-flight attempts finish first)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--concurrency", type=int, default=None, help="Slots (overrides JOBCHAIN['WORKER'])."
        )
        parser.add_argument("--name", default=None, help="Readable worker name (a suffix is added).")
        parser.add_argument(
            "--migrate",
            action="store_true",
            help="Apply jobchain's migrations first (what jobchain_migrate does).",
        )
        parser.add_argument(
            "--loop",
            default="auto",
            choices=("auto", "asyncio", "uvloop"),
            help="Event loop: auto takes uvloop when installed.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from jobchain.cli.worker import run_on_loop
        from jobchain.contrib.django.chains import settings
        from jobchain.contrib.django.worker import run_worker

        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        config = settings()
        overrides = {key: options[key] for key in ("concurrency", "name") if options.get(key) is not None}
        try:
            run_on_loop(
                lambda: run_worker(config, overrides=overrides, migrate=options["migrate"]), options["loop"]
            )
        except SchemaNotMigratedError as exc:
            raise CommandError(
                f"{' '.join(str(exc).split())}; run `manage.py jobchain_migrate` first, or pass --migrate"
            ) from exc
        except JobchainError as exc:
            raise CommandError(" ".join(str(exc).split())) from exc
