"""The jobchain_testing pytest plugin, used the way a project using jobchain would (pytester)."""

from __future__ import annotations

import pytest

JOBS = """
from dataclasses import dataclass

from jobchain import JobTypes
from jobchain.worker import Attempt, Completed, Processors


@dataclass
class Signup:
    email: str


job_types = JobTypes()
send_welcome = job_types.define("send_welcome", input=Signup, output=str)
register = job_types.define("register", input=Signup, output=None, entry=True, continues_with=[send_welcome])
processors = Processors()


@processors.handler(register)
async def on_register(attempt: Attempt[Signup, None]) -> Completed:
    return await attempt.continue_with(send_welcome, attempt.input)


@processors.handler(send_welcome)
async def on_welcome(attempt: Attempt[Signup, str]) -> Completed:
    if attempt.job.attempt == 1:
        raise ConnectionError("mail server down")
    return await attempt.complete(f"sent to {attempt.input.email}")
"""

CONFTEST = """
import pytest


@pytest.fixture
def jobchain_job_types():
    from myjobs import job_types
    return job_types


@pytest.fixture
def jobchain_processors():
    from myjobs import processors
    return processors
"""

TESTS = """
from datetime import timedelta

from jobchain import JobStatus
from jobchain.testing import RunOutcome

from myjobs import Signup, register, send_welcome

seen = []


async def test_signup_sends_the_welcome_mail(jobchain_client, jobchain_clock, jobchain_run):
    seen.append(jobchain_client)
    async with jobchain_client.transaction() as tx:
        started = await jobchain_client.start_chain(tx, register, Signup("ada@example.com"))
    ran = await jobchain_run()
    assert [(r.type_name, r.outcome) for r in ran] == [
        ("register", RunOutcome.CONTINUED), ("send_welcome", RunOutcome.RETRIED)
    ]
    jobchain_clock.advance(seconds=10)
    assert [r.outcome for r in await jobchain_run()] == [RunOutcome.COMPLETED]
    chain = await jobchain_client.get_chain(started.id)
    assert chain.status is JobStatus.COMPLETED
    assert send_welcome.decode_output(chain.output) == "sent to ada@example.com"
    assert chain.created_at == jobchain_clock() - timedelta(seconds=10)


async def test_the_client_was_closed_after_the_test(jobchain_client):
    from jobchain.errors import AdapterClosedError
    import pytest

    assert seen and seen[0] is not jobchain_client
    with pytest.raises(AdapterClosedError):
        async with seen[0].transaction():
            pass
"""

INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    pytester.makepyfile(myjobs=JOBS)
    pytester.syspathinsert()
    return pytester


def test_a_project_tests_its_jobs_with_the_fixtures(project: pytest.Pytester) -> None:
    project.makeconftest(CONFTEST)
    project.makepyfile(test_signup=TESTS)
    result = project.runpytest()
    result.assert_outcomes(passed=2)


def test_a_registry_not_given_says_how_to_give_it(project: pytest.Pytester) -> None:
    project.makepyfile(test_forgot="async def test_it(jobchain_client):\n    pass\n")
    result = project.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*jobchain_job_types is not set: define it in your conftest.py*"])


def test_processors_not_given_say_how_to_give_them(project: pytest.Pytester) -> None:
    project.makeconftest(CONFTEST.split("@pytest.fixture\ndef jobchain_processors")[0])
    project.makepyfile(test_forgot="async def test_it(jobchain_run):\n    pass\n")
    result = project.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*jobchain_processors is not set*"])


def test_both_jobchain_plugins_load_side_by_side(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_plugins="""
def test_both(request):
    manager = request.config.pluginmanager
    assert manager.has_plugin("jobchain_testing")
    assert manager.has_plugin("jobchain")  # jobchain-conformance's, when installed
"""
    )
    project.runpytest().assert_outcomes(passed=1)


def test_loading_the_plugin_imports_no_jobchain(project: pytest.Pytester) -> None:
    # In a fresh interpreter, without jobchain-conformance's plugin (which imports jobchain):
    # a project that uses none of the fixtures pays nothing for ours.
    project.makepyfile(
        test_unrelated="""
import sys

def test_nothing_of_jobchain_is_loaded(request):
    assert request.config.pluginmanager.has_plugin("jobchain_testing")
    assert not [name for name in sys.modules if name == "jobchain" or name.startswith("jobchain.")]
"""
    )
    result = project.runpytest_subprocess("-p", "no:jobchain")
    result.assert_outcomes(passed=1)


DATABASE_TESTS = """
import jobchain
from jobchain.testing import RunOutcome

from myjobs import Signup, register

urls = []


async def test_each_test_gets_its_own_database(
    jobchain_database_url, jobchain_job_types, jobchain_processors, jobchain_clock
):
    urls.append(jobchain_database_url)
    async with await jobchain.connect(
        jobchain_database_url, notify="none", job_types=jobchain_job_types, clock=jobchain_clock, migrate=True
    ) as client:
        async with client.transaction() as tx:
            await client.start_chain(tx, register, Signup("ada@example.com"))
        from jobchain.testing import run_until_idle

        ran = await run_until_idle(client, jobchain_processors)
        assert [r.outcome for r in ran] == [RunOutcome.CONTINUED, RunOutcome.RETRIED]


async def test_the_next_test_starts_empty(jobchain_database_url, jobchain_job_types):
    assert urls and urls[0] != jobchain_database_url
    async with await jobchain.connect(
        jobchain_database_url, notify="none", job_types=jobchain_job_types, migrate=True
    ) as client:
        assert (await client.list_chains()).items == []


def test_the_scheme(jobchain_database_url):
    print("SCHEME", jobchain_database_url.split(":")[0])
"""


@pytest.mark.parametrize(("env", "scheme"), [(None, "sqlite"), ("memory://", "memory")])
def test_jobchain_database_url_is_a_new_database_per_test(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: str | None, scheme: str
) -> None:
    if env is None:
        monkeypatch.delenv("JOBCHAIN_TEST_DATABASE_URL", raising=False)
    else:
        monkeypatch.setenv("JOBCHAIN_TEST_DATABASE_URL", env)
    project.makeconftest(CONFTEST)
    project.makepyfile(test_database=DATABASE_TESTS)
    result = project.runpytest("-s")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([f"*SCHEME {scheme}*"])
