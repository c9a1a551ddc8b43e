"""The ``jobchain`` group's lazy command table: --help imports no command module, and a command
whose optional extra is missing is listed and fails with the ``pip install`` line."""

from __future__ import annotations

import subprocess
import sys

import click
from click.testing import CliRunner

from jobchain.cli import COMMANDS, main
from jobchain.cli.lazy import LazyCommand, LazyGroup

ADMIN = ("jobs", "chains", "retry", "cancel", "delete", "trigger", "workers", "stats", "health", "dashboard")


def test_help_lists_every_command_of_the_table() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    listed = {line.split()[0] for line in result.output.split("Commands:")[1].splitlines() if line.strip()}
    assert set(COMMANDS) <= listed
    assert set(ADMIN) <= listed


def test_help_imports_no_command_module() -> None:
    code = (
        "import sys\n"
        "from jobchain.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('jobchain.cli.') or m.split('.')[0] in "
        "('starlette', 'uvicorn', 'prometheus_client', 'opentelemetry'))\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(result.stdout.strip().splitlines()[-1].split(","))
    assert loaded == {"jobchain.cli.common", "jobchain.cli.lazy"}


def test_every_table_entry_resolves_to_a_click_command() -> None:
    for name, entry in COMMANDS.items():
        if entry.extra is not None:
            continue  # its module may need an extra (covered below)
        command = main.get_command(click.Context(main), name)
        assert isinstance(command, click.Command), name


def _group_with_missing_extra() -> LazyGroup:
    @click.group(
        cls=LazyGroup,
        table={
            "dashboard": LazyCommand(
                target="jobchain.cli.no_such_module:dashboard_command", help="Serve it.", extra="dashboard"
            )
        },
    )
    def group() -> None:
        pass

    assert isinstance(group, LazyGroup)
    return group


def test_a_missing_extra_is_listed_and_says_what_to_install() -> None:
    group = _group_with_missing_extra()
    listed = CliRunner().invoke(group, ["--help"])
    assert "dashboard  Serve it." in listed.output
    result = CliRunner().invoke(group, ["dashboard", "--state", "sqlite:///x.db", "--port", "9"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "pip install 'jobchain[dashboard]'" in lines[0]
    assert "Traceback" not in result.output


def test_the_dashboard_command_without_its_extra() -> None:
    # sys.modules[name] = None makes `import name` raise ImportError: the extra "not installed".
    code = (
        "import sys\n"
        "for name in ('uvicorn', 'starlette', 'jinja2'):\n"
        "    sys.modules[name] = None\n"
        "from jobchain.cli import main\n"
        "main(['dashboard', '--port', '8001'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: jobchain dashboard needs")
    assert "pip install 'jobchain[dashboard]'" in lines[0]
