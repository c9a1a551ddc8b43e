"""Settings of the test project; everything per run comes from the environment.

``conftest.py`` sets these variables before Django starts, and the worker subprocesses
inherit them, so a test and the worker it spawns see the same databases:

* ``JOBCHAIN_DJANGO_SQLITE`` — the SQLite file of alias ``default`` (a per-run temp file);
* ``JOBCHAIN_DJANGO_PG_SCHEMA`` — the per-run schema of alias ``pg`` in the shared test
  database: Django's tables go there through ``search_path``, and jobchain's too (the state
  URL derived from the alias takes its schema from that ``search_path``);
* ``JOBCHAIN_DJANGO_DATABASE`` — the alias the worker and ``jobchain_migrate`` use;
* ``JOBCHAIN_DJANGO_BROKEN`` — set: a JOBCHAIN setting with a bad key (start-up test).
"""

from __future__ import annotations

import os

from jobchain.url import BackendURL

SECRET_KEY = "jobchain-tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "Europe/Paris"  # not UTC: jobchain's timestamps must not depend on Django's zone
INSTALLED_APPS = ["jobchain.contrib.django", "djshop"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_pg = BackendURL.parse(
    os.environ.get("JOBCHAIN_TEST_POSTGRES_URL", "").strip() or "postgresql://postgres@127.0.0.1:5432/test"
)
_pg_schema = os.environ.get("JOBCHAIN_DJANGO_PG_SCHEMA", "jc_django")

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("JOBCHAIN_DJANGO_SQLITE", "jobchain-django-tests.sqlite3"),
        # IMMEDIATE: atomic() takes the write lock at BEGIN, so it waits (timeout) for the
        # worker process instead of failing at its first write with "database is locked".
        "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
    },
    "pg": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _pg.database or "test",
        "USER": _pg.username or "",
        "PASSWORD": _pg.password or "",
        "HOST": _pg.host or "",
        "PORT": str(_pg.port or ""),
        "OPTIONS": {
            # Per run: the teardown ends this run's leftover sessions by this name.
            "application_name": f"jobchain-django-tests-{_pg_schema}",
            "options": f"-c search_path={_pg_schema}",
        },
    },
    # Aliases jobchain must refuse (tests of ImproperlyConfigured; never connected to).
    "memory": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
    "other": {"ENGINE": "django.db.backends.dummy"},
}

JOBCHAIN = {
    "JOB_TYPES": "djshop.jobs:registry",
    "PROCESSORS": "djshop.jobs:processors",
    "DATABASE": os.environ.get("JOBCHAIN_DJANGO_DATABASE", "default"),
    "NOTIFY_URL": os.environ.get("JOBCHAIN_DJANGO_NOTIFY_URL") or None,
    "WORKER": {"concurrency": 2, "poll_interval": 0.2, "name": "django-tests"},
}
if os.environ.get("JOBCHAIN_DJANGO_BROKEN"):
    JOBCHAIN["PROCESSOR"] = "djshop.jobs:processors"
