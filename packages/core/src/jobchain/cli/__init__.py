"""The ``jobchain`` command line (click). Entry point: ``jobchain = "jobchain.cli:main"``.

Every command lives in its own module of this package and is listed in :data:`COMMANDS`
(name → ``"module:attr"`` and its help line). The group imports a command's module only
when that command runs, so ``jobchain --help`` stays fast and needs no optional extra.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import click

from jobchain.cli.common import NOTIFY_URL_HELP, STATE_URL_HELP
from jobchain.cli.lazy import LazyCommand, LazyGroup

COMMANDS: dict[str, LazyCommand] = {
    "backends": LazyCommand(
        target="jobchain.cli.backends:backends_command",
        help="List the installed backends: scheme, role, distribution, version and factory.",
    ),
    "cancel": LazyCommand(
        target="jobchain.cli.cancel:cancel_command",
        help="Cancel chains by id or by filter (asks first; --yes skips).",
    ),
    "chains": LazyCommand(
        target="jobchain.cli.chains:chains_group",
        help="List chains; show one as a tree of its jobs and blockers.",
    ),
    "dashboard": LazyCommand(
        target="jobchain.cli.dashboard:dashboard_command",
        help="Serve the web dashboard (pip install 'jobchain[dashboard]').",
        extra="dashboard",
    ),
    "delete": LazyCommand(
        target="jobchain.cli.delete:delete_command",
        help="Delete chains with their jobs, by id or by filter (asks first).",
    ),
    "health": LazyCommand(
        target="jobchain.cli.health:health_command",
        help="Exit non-zero when queue health thresholds are crossed (a probe).",
    ),
    "jobs": LazyCommand(
        target="jobchain.cli.jobs:jobs_group",
        help="List jobs with filters; show one in full.",
    ),
    "migrate": LazyCommand(
        target="jobchain.cli.migrate:migrate_command",
        help="Create or upgrade the job tables of the state backend.",
    ),
    "pause": LazyCommand(
        target="jobchain.cli.pause:pause_command",
        help="Pause job types: no worker claims them until resumed (asks first).",
    ),
    "resume": LazyCommand(
        target="jobchain.cli.pause:resume_command",
        help="Resume paused job types (asks first; --yes skips).",
    ),
    "retry": LazyCommand(
        target="jobchain.cli.retry:retry_command",
        help="Redrive failed or cancelled jobs by id, chain or filter.",
    ),
    "schedules": LazyCommand(
        target="jobchain.cli.schedules:schedules_command",
        help="List the periodic schedules workers registered, with their next run.",
    ),
    "stats": LazyCommand(
        target="jobchain.cli.stats:stats_command",
        help="Queue health per job type: counts, due, oldest, failures, durations.",
    ),
    "trigger": LazyCommand(
        target="jobchain.cli.trigger:trigger_command",
        help="Run scheduled (pending) jobs now.",
    ),
    "worker": LazyCommand(
        target="jobchain.cli.worker:worker_command",
        help="Run a worker for the processors at TARGET (MODULE:ATTRIBUTE).",
    ),
    "workers": LazyCommand(
        target="jobchain.cli.workers:workers_command",
        help="List registered workers and the jobs each holds.",
    ),
}
"""The command table: adding a command is one entry here and one module beside this one."""


def _version() -> str:
    try:
        return version("jobchain")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


@click.group(
    name="jobchain",
    cls=LazyGroup,
    table=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(_version(), "-V", "--version", prog_name="jobchain")
def main() -> None:
    """Durable, typed job chains that commit with your database transaction."""


__all__ = ["COMMANDS", "NOTIFY_URL_HELP", "STATE_URL_HELP", "main"]
