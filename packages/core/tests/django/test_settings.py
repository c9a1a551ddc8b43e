"""Bad JOBCHAIN settings fail at start-up with ImproperlyConfigured naming the key to change."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from djsupport import worker_env

from jobchain.contrib.django.conf import check_settings, load_settings
from jobchain.contrib.django.databases import _search_path_schema, state_url_for
from jobchain.contrib.django.worker import run_worker
from jobchain.url import BackendURL

GOOD: dict[str, Any] = {"JOB_TYPES": "djshop.jobs:registry", "PROCESSORS": "djshop.jobs:processors"}


def _refused(match: str, **jobchain: Any) -> None:
    with override_settings(JOBCHAIN={**GOOD, **jobchain}), pytest.raises(ImproperlyConfigured, match=match):
        check_settings()


def test_the_good_settings_pass() -> None:
    with override_settings(JOBCHAIN=GOOD):
        config = check_settings()
    assert config.database == "default"
    assert config.registry().names()


def test_a_missing_jobchain_setting_is_named() -> None:
    with override_settings():
        del settings.JOBCHAIN
        with pytest.raises(ImproperlyConfigured, match=r"the JOBCHAIN setting is missing"):
            load_settings()


def test_a_jobchain_setting_that_is_not_a_dict_is_refused() -> None:
    with (
        override_settings(JOBCHAIN="sqlite:///x.db"),
        pytest.raises(ImproperlyConfigured, match="must be a dict"),
    ):
        load_settings()


def test_an_unknown_key_is_named_with_the_close_match() -> None:
    _refused(
        r"JOBCHAIN\['PROCESSOR'\] is not a jobchain setting \(did you mean 'PROCESSORS'\?\)", PROCESSOR="x:y"
    )


def test_a_missing_registry_is_named() -> None:
    with override_settings(JOBCHAIN={"PROCESSORS": "djshop.jobs:processors"}):
        with pytest.raises(ImproperlyConfigured, match=r"JOBCHAIN\['JOB_TYPES'\] is missing"):
            load_settings()


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("djshop.jobs.registry", r"JOBCHAIN\['JOB_TYPES'\] must be a 'module.path:attribute' string"),
        (42, r"JOBCHAIN\['JOB_TYPES'\] must be a 'module.path:attribute' string"),
        ("djshop.nowhere:registry", r"JOBCHAIN\['JOB_TYPES'\] = 'djshop.nowhere:registry': cannot import"),
        (
            "djshop.jobs:nothing",
            r"JOBCHAIN\['JOB_TYPES'\] = 'djshop.jobs:nothing': module 'djshop.jobs' has no",
        ),
        ("djshop.jobs:processors", r"JOBCHAIN\['JOB_TYPES'\] = 'djshop.jobs:processors' is a Processors"),
    ],
)
def test_a_bad_registry_path_is_named(value: object, match: str) -> None:
    _refused(match, JOB_TYPES=value)


def test_an_unknown_database_alias_is_named() -> None:
    _refused(r"JOBCHAIN\['DATABASE'\] = 'nope' is not an alias of settings.DATABASES", DATABASE="nope")


@pytest.mark.parametrize("key", ["STATE_URL", "NOTIFY_URL"])
def test_a_malformed_url_is_named(key: str) -> None:
    _refused(rf"JOBCHAIN\['{key}'\]: .*has no scheme", **{key: "localhost:5432"})


def test_a_malformed_top_level_state_url_is_named() -> None:
    with override_settings(JOBCHAIN=GOOD, JOBCHAIN_STATE_URL="nowhere"):
        with pytest.raises(ImproperlyConfigured, match=r"^JOBCHAIN_STATE_URL: "):
            load_settings()


def test_state_url_set_twice_is_refused() -> None:
    with override_settings(
        JOBCHAIN={**GOOD, "STATE_URL": "sqlite:///a.db"}, JOBCHAIN_STATE_URL="sqlite:///b.db"
    ):
        with pytest.raises(
            ImproperlyConfigured, match=r"JOBCHAIN\['STATE_URL'\] or JOBCHAIN_STATE_URL, not both"
        ):
            load_settings()


@pytest.mark.parametrize("value", ["table_prefix=x", {"table_prefix": ["x"]}])
def test_bad_state_options_are_named(value: object) -> None:
    _refused(r"JOBCHAIN\['STATE_OPTIONS'\]", STATE_OPTIONS=value)


def test_state_options_beside_a_state_url_are_refused() -> None:
    _refused(
        r"JOBCHAIN\['STATE_OPTIONS'\] applies to URLs derived",
        STATE_URL="sqlite:///a.db",
        STATE_OPTIONS={"x": "1"},
    )


def test_an_unknown_worker_option_is_named() -> None:
    _refused(
        r"JOBCHAIN\['WORKER'\]\['concurency'\] is not a Worker option \(did you mean 'concurrency'",
        WORKER={"concurency": 3},
    )


def test_a_worker_option_the_worker_refuses_is_named(sqlite_database: str) -> None:
    with override_settings(JOBCHAIN={**GOOD, "WORKER": {"concurrency": 0}}):
        config = load_settings()
        with pytest.raises(
            ImproperlyConfigured, match=r"JOBCHAIN\['WORKER'\]: concurrency must be an integer >= 1"
        ):
            asyncio.run(run_worker(config))


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (None, r"JOBCHAIN\['PROCESSORS'\] is missing"),
        ("djshop.jobs:registry", r"JOBCHAIN\['PROCESSORS'\] = 'djshop.jobs:registry' is a JobTypes"),
    ],
)
def test_the_worker_needs_processors(value: object, match: str) -> None:
    with override_settings(JOBCHAIN={**GOOD, "PROCESSORS": value}):
        config = load_settings()
        with pytest.raises(ImproperlyConfigured, match=match):
            config.processor_slices()


def test_an_in_memory_sqlite_database_is_refused() -> None:
    _refused(r"DATABASES\['memory'\] is an in-memory SQLite database", DATABASE="memory")


def test_a_database_jobchain_cannot_use_is_named() -> None:
    _refused(
        r"DATABASES\['other'\] uses 'django.db.backends.dummy' \(vendor 'unknown'\); jobchain",
        DATABASE="other",
    )


def test_the_state_url_of_a_postgresql_alias_carries_its_settings() -> None:
    with override_settings(JOBCHAIN={**GOOD, "STATE_OPTIONS": {"table_prefix": "jc_"}}):
        url = state_url_for("pg", load_settings())
    pg = settings.DATABASES["pg"]
    assert url.startswith(f"postgresql://{pg['USER']}@" if pg["USER"] else "postgresql://")
    assert f"/{pg['NAME']}?" in url
    assert "application_name=jobchain-django-tests" in url
    assert "table_prefix=jc_" in url


def test_a_postgresql_alias_with_a_search_path_keeps_jobchains_tables_in_that_schema() -> None:
    schema = os.environ["JOBCHAIN_DJANGO_PG_SCHEMA"]
    with override_settings(JOBCHAIN=GOOD):
        query = BackendURL.parse(state_url_for("pg", load_settings())).query
    assert query["schema"] == schema
    assert query["options"] == f"-c search_path={schema}"  # jobchain's sessions see the same path
    with override_settings(JOBCHAIN={**GOOD, "STATE_OPTIONS": {"schema": "elsewhere"}}):
        query = BackendURL.parse(state_url_for("pg", load_settings())).query
    assert query["schema"] == "elsewhere"  # an explicit STATE_OPTIONS schema wins


@pytest.mark.parametrize(
    ("options", "schema"),
    [
        ("-c search_path=jobs", "jobs"),
        ("-c search_path=Jobs,public", "jobs"),  # unquoted names fold to lower case
        ('-c search_path="Jobs",public', "Jobs"),
        ("-csearch_path=jobs -c statement_timeout=5s", "jobs"),
        ("--search_path=jobs", "jobs"),
        ("-c statement_timeout=5s", None),
        ("-c search_path=$user,public", None),  # per user: no one schema to name
        ("", None),
    ],
)
def test_the_schema_is_the_first_of_the_search_path(options: str, schema: str | None) -> None:
    assert _search_path_schema(options) == schema


def test_bad_settings_fail_at_startup_naming_the_key() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "django", "check"],
        env=worker_env("default", JOBCHAIN_DJANGO_BROKEN="1"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "JOBCHAIN['PROCESSOR'] is not a jobchain setting (did you mean 'PROCESSORS'?)" in result.stderr


def test_a_clock_that_is_not_callable_is_refused() -> None:
    _refused(r"JOBCHAIN\['CLOCK'\] must be a callable returning an aware datetime", CLOCK=42)


def test_a_clock_path_that_does_not_import_is_named() -> None:
    _refused(r"JOBCHAIN\['CLOCK'\] = 'djshop.jobs:no_clock'.*no attribute", CLOCK="djshop.jobs:no_clock")
    _refused(r"JOBCHAIN\['CLOCK'\] must be a 'module.path:attribute' string", CLOCK="djshop.jobs")


def test_a_clock_path_names_the_clock_and_what_it_names_must_be_callable() -> None:
    _refused(r"JOBCHAIN\['CLOCK'\] must be a callable", CLOCK="djshop.jobs:OrderRef.__doc__")
    with override_settings(JOBCHAIN={**GOOD, "CLOCK": "jobchain.testing:FrozenClock.__call__"}):
        clock = check_settings().clock()
    assert clock is not None
    assert callable(clock)
