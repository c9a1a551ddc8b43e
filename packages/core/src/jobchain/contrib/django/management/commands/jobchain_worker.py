"""``manage.py jobchain_worker``: run the JOBCHAIN worker until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
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
        parser.add_argument(
            "--otel",
            action="store_true",
            help=(
                "Traces and metrics through the OpenTelemetry SDK, configured from the OTEL_* "
                "variables (also JOBCHAIN_OTEL=1; pip install 'jobchain[otel]' opentelemetry-sdk)."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from jobchain.cli.worker import OTEL_ENV, run_on_loop
        from jobchain.contrib.django.chains import settings
        from jobchain.contrib.django.worker import run_worker

        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        config = settings()
        overrides = {key: options[key] for key in ("concurrency", "name") if options.get(key) is not None}
        otel = options["otel"] or os.environ.get(OTEL_ENV, "").strip().lower() in ("1", "true", "yes", "on")
        providers = _start_otel() if otel else None
        observers = () if providers is None else providers.observers
        try:
            migrate = options["migrate"]
            run_on_loop(
                lambda: run_worker(config, overrides=overrides, migrate=migrate, observers=observers),
                options["loop"],
            )
        except SchemaNotMigratedError as exc:
            raise CommandError(
                f"{' '.join(str(exc).split())}; run `manage.py jobchain_migrate` first, or pass --migrate"
            ) from exc
        except JobchainError as exc:
            raise CommandError(" ".join(str(exc).split())) from exc
        finally:
            if providers is not None:
                providers.shutdown()


def _start_otel() -> Any:
    """``--otel``: what ``jobchain worker --otel`` starts; its usage error is a CommandError here."""
    import click

    from jobchain.cli.worker import start_otel

    try:
        return start_otel(logging.getLogger("jobchain.worker"))
    except click.UsageError as exc:
        raise CommandError(exc.message) from None
