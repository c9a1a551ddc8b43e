"""The Django test project, configured once per test process (each xdist worker has its own).

Django's settings can be configured once per process, so this conftest does it at import,
before the test modules import models: alias ``default`` is SQLite in a per-run temp file,
alias ``pg`` a per-run schema (``jc_django_<run id>``) in the shared PostgreSQL test
database, created by the ``pg_database`` fixture and dropped with ``DROP SCHEMA … CASCADE`` at
the end (a schema, not a database: creating and force-dropping a whole database per run was
slow on a loaded shared server, and a teardown once timed out). The environment variables
that carry these names are inherited by the ``manage.py jobchain_worker`` subprocesses, so
they use the same tables. PostgreSQL missing: its tests skip, and fail under ``CI=true``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RUN = uuid.uuid4().hex[:12]
TMP = Path(tempfile.mkdtemp(prefix=f"jobchain-django-{RUN}-"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)

if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # djproject and djshop import as top-level packages
os.environ["JOBCHAIN_DJANGO_SQLITE"] = str(TMP / "default.sqlite3")
os.environ["JOBCHAIN_DJANGO_PG_SCHEMA"] = f"jc_django_{RUN}"
os.environ["DJANGO_SETTINGS_MODULE"] = "djproject.settings"

try:
    import django
except ImportError:  # pragma: no cover -- requirements-dev.txt installs it
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("Django is not installed (pip install django)", allow_module_level=True)

# Django points the process's TZ at settings.TIME_ZONE (time.tzset()). Every xdist worker
# imports this conftest while collecting, so that would move the local time zone of every
# other test in the run (PySpark's collect() returns local naive datetimes, for one): give
# the process its own zone back. Django itself (USE_TZ = True) keeps TIME_ZONE as settings.
_saved_tz = os.environ.get("TZ")
django.setup()
if _saved_tz is None:
    os.environ.pop("TZ", None)
else:
    os.environ["TZ"] = _saved_tz
time.tzset()

os.environ["JOBCHAIN_DJANGO_TMP"] = str(TMP)
os.environ["JOBCHAIN_DJANGO_PYTHONPATH"] = os.pathsep.join(
    [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _migrate(alias: str) -> None:
    from django.core.management import call_command

    call_command("migrate", database=alias, run_syncdb=True, verbosity=0)
    call_command("jobchain_migrate", database=alias, verbosity=0)


@pytest.fixture(scope="session")
def sqlite_database() -> Iterator[str]:
    """Alias ``default``: the per-run SQLite file with the app's and jobchain's tables."""
    _migrate("default")
    yield "default"
    from django.db import connections

    connections.close_all()
    shutil.rmtree(TMP, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_database(postgres_server: str) -> Iterator[str]:
    """Alias ``pg``: a per-run schema of the shared test database with the app's and jobchain's tables."""
    import psycopg
    from django.conf import settings
    from psycopg import sql

    from jobchain.url import BackendURL
    from jobchain_postgres.options import target

    admin = target(BackendURL.parse(postgres_server), 5).conninfo
    schema = sql.Identifier(os.environ["JOBCHAIN_DJANGO_PG_SCHEMA"])
    ours = settings.DATABASES["pg"]["OPTIONS"]["application_name"]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
    try:
        _migrate("pg")
        yield "pg"
    finally:
        from django.db import connections

        from jobchain.contrib.django import close_clients

        close_clients()
        connections.close_all()
        with psycopg.connect(admin, autocommit=True) as conn:
            # A session of this run still open (a worker subprocess a failed test left behind)
            # could hold a lock the drop waits for: end them first, by their per-run name.
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s AND pid <> pg_backend_pid()",
                [ours],
            )
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(schema))


@pytest.fixture(params=["default", "pg"])
def alias(request: pytest.FixtureRequest) -> str:
    """Each test that takes ``alias`` runs on SQLite and on PostgreSQL."""
    fixture = "sqlite_database" if request.param == "default" else "pg_database"
    return str(request.getfixturevalue(fixture))


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A Redis notify URL with a per-run prefix (Redis missing: skip, or fail under CI=true)."""
    url = os.environ.get("JOBCHAIN_TEST_REDIS_URL", "").strip() or "redis://127.0.0.1:6379/0"
    from jobchain.url import BackendURL

    parsed = BackendURL.parse(url)
    try:
        with socket.create_connection((parsed.host or "127.0.0.1", parsed.port or 6379), timeout=3):
            pass
        import jobchain_redis  # noqa: F401 -- the notify adapter must be installed
    except (OSError, ImportError) as exc:
        reason = f"Redis not usable at {parsed.host}:{parsed.port}: {exc}"
        if in_ci():
            pytest.fail(f"{reason} (CI=true: a missing server is a failure)", pytrace=False)
        pytest.skip(reason)
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}prefix=jcdj{RUN}"
