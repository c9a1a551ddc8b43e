"""``jobchain worker MODULE:ATTRIBUTE``: run a worker until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import importlib
import logging
import math
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from jobchain.cli.common import DURATION_MAX, NOTIFY_URL_HELP, STATE_URL_HELP, Seconds
from jobchain.errors import InvalidArgumentError, JobchainError, SchemaNotMigratedError
from jobchain.job_types import UNSET, JobTypes, MaxAttempts
from jobchain.worker.processors import Processors
from jobchain.worker.retention import Retention

if TYPE_CHECKING:
    from jobchain.contracts.observe import Observer
    from jobchain.telemetry.prometheus import MetricsServer, PrometheusMetrics
    from jobchain.telemetry.recorder import MetricsObserver
    from jobchain.telemetry.sampler import QueueStatsSampler, Reporter
    from jobchain.telemetry.sdk_setup import OtelProviders
    from jobchain.worker.loop import Worker

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DAY_SECONDS = 86400.0
"""The longest --poll-interval: a worker that polls less often than daily is waiting for nothing."""
HOUR_SECONDS = 3600.0
"""The longest --heartbeat-interval: rescue takes a few of them."""
QUEUE_GAUGES = ("cluster", "name", "off")
"""--queue-gauges: the sampler's reporter (jobchain.telemetry.sampler), or no sampler."""
OTEL_ENV = "JOBCHAIN_OTEL"
"""``JOBCHAIN_OTEL=1`` turns ``--otel`` on where the command cannot change."""
OTEL_INSTALL = (
    "pip install 'jobchain[otel]' opentelemetry-sdk "
    '(from a clone: pip install "./packages/core[otel]" opentelemetry-sdk)'
)


def parse_duration(text: str, option: str) -> timedelta:
    """``30`` (seconds), ``45s``, ``30m``, ``12h`` or ``7d`` as a positive timedelta."""
    value = text.strip().lower()
    scale = DURATION_UNITS.get(value[-1:])
    number = value[:-1] if scale is not None else value
    try:
        seconds = float(number) * (scale or 1)
    except ValueError:
        raise InvalidArgumentError(
            f"{option} must be a duration such as 45s, 30m, 12h or 7d, got {text!r}"
        ) from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgumentError(f"{option} must be a positive duration, got {text!r}")
    if seconds > DURATION_MAX.total_seconds():
        raise InvalidArgumentError(f"{option} is at most {DURATION_MAX.days} days, got {text!r}")
    return timedelta(seconds=seconds)


def parse_max_attempts(text: str | None) -> MaxAttempts:
    """``--max-attempts``: a positive integer, or ``unlimited``; absent: the library default."""
    if text is None:
        return UNSET
    if text.strip().lower() in ("unlimited", "none"):
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidArgumentError(f"--max-attempts must be a positive integer or 'unlimited', got {text!r}")
    return value


def retention_from_options(
    completed: str | None, failed: str | None, cancelled: str | None
) -> Retention | None:
    """The worker's retention from ``--retain-*`` options (None when none is given)."""
    if completed is None and failed is None and cancelled is None:
        return None
    return Retention(
        completed=parse_duration(completed, "--retain-completed") if completed else None,
        failed=parse_duration(failed, "--retain-failed") if failed else None,
        cancelled=parse_duration(cancelled, "--retain-cancelled") if cancelled else None,
    )


def load_object(target: str) -> tuple[Any, Any]:
    """Import ``module:attribute`` and return (attribute, module)."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidArgumentError(f"expected MODULE:ATTRIBUTE, got {target!r} (e.g. myapp.jobs:processors)")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: the working directory's modules are importable
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise InvalidArgumentError(f"cannot import module {module_name!r}: {exc}") from exc
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidArgumentError(f"module {module_name!r} has no attribute {attribute!r}") from None
    return obj, module


def processor_slices(obj: object, target: str) -> list[Processors]:
    """The processor slices named by the target: one Processors or a sequence of them."""
    if isinstance(obj, Processors):
        return [obj]
    if isinstance(obj, Sequence) and obj and all(isinstance(p, Processors) for p in obj):
        return list(obj)
    raise InvalidArgumentError(f"{target} must be a jobchain Processors object or a list of them")


def find_job_types(module: object, explicit: str | None) -> JobTypes:
    """The registry from ``--job-types`` or the one JobTypes object in the target's module."""
    if explicit is not None:
        obj, _ = load_object(explicit)
        if not isinstance(obj, JobTypes):
            raise InvalidArgumentError(f"{explicit} is not a JobTypes registry")
        return obj
    found = [value for value in vars(module).values() if isinstance(value, JobTypes)]
    if len(found) != 1:
        raise InvalidArgumentError(
            f"found {len(found)} JobTypes registries next to the processors; "
            "pass --job-types MODULE:ATTRIBUTE"
        )
    return found[0]


LOOPS = ("auto", "asyncio", "uvloop")


def run_on_loop(main: Callable[[], Coroutine[Any, Any, None]], loop: str) -> str:
    """Run ``main()`` to completion on the chosen event loop; return the loop's name.

    ``auto`` takes uvloop when it is installed (``pip install 'jobchain[uvloop]'``): its event
    loop costs a worker a fraction of the standard one's CPU per job.
    """
    if loop not in LOOPS:
        raise InvalidArgumentError(f"loop must be one of {', '.join(LOOPS)}, got {loop!r}")
    if loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                raise InvalidArgumentError(
                    "--loop uvloop needs the uvloop package: pip install 'jobchain[uvloop]'"
                ) from None
        else:
            uvloop.run(main())
            return "uvloop"
    asyncio.run(main())
    return "asyncio"


async def run_worker(
    slices: list[Processors],
    job_types: JobTypes,
    *,
    state: str | None,
    notify: str | None,
    concurrency: int,
    prefetch: int = 0,
    name: str,
    poll_interval: float,
    migrate: bool = False,
    heartbeat_interval: float | None = None,
    missed_heartbeats: int | None = None,
    max_attempts: MaxAttempts = UNSET,
    handler_timeout: float | None = None,
    retention: Retention | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    queue_gauges: str = "cluster",
    observers: Sequence[Observer] = (),
) -> None:
    """Run a worker until SIGINT/SIGTERM, or until it stops on its own error (raised here).

    ``migrate`` applies the state backend's migrations first, with the adapter's own
    ``migrate()`` — what ``jobchain migrate`` runs. ``metrics_port`` serves the Prometheus
    metrics of ``jobchain.telemetry.prometheus`` there, on ``metrics_host``: loopback by
    default, as the endpoint has no authentication. ``queue_gauges`` says who exports the
    queue gauges: ``cluster`` (the oldest running worker of the registry), ``name`` (the
    oldest of each worker name) or ``off`` (this worker never does). ``observers`` are added
    to the client's (e.g. ``--otel``'s Tracing and OpenTelemetryMetrics); the metrics
    observers among them, and the Prometheus one, share one queue-gauge sampler.
    """
    from jobchain.client import connect
    from jobchain.worker.loop import Worker

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log = logging.getLogger("jobchain.worker")
    metrics, server = serve_metrics(metrics_port, metrics_host, log)
    try:
        client = await connect(state, notify=notify, job_types=job_types, migrate=migrate or None)
        async with client:
            if migrate:
                log.info("migrated the state backend (%s)", type(client.state).__name__)
            liveness: dict[str, Any] = {}
            if heartbeat_interval is not None:
                liveness["heartbeat_interval"] = heartbeat_interval
            if missed_heartbeats is not None:
                liveness["missed_heartbeats"] = missed_heartbeats
            worker = Worker(
                client,
                slices,
                name=name,
                concurrency=concurrency,
                prefetch=prefetch,
                poll_interval=poll_interval,
                max_attempts=max_attempts,
                timeout=handler_timeout,
                retention=retention,
                **liveness,
            )
            sampler = attach_observers(worker, metrics, observers, queue_gauges)
            await worker.start()
            if sampler is not None:
                sampler.start()
            log.info(
                "worker %s processing %s on %s",
                worker.worker_id,
                ", ".join(worker.type_names),
                type(loop).__module__.partition(".")[0],
            )
            stopped = asyncio.ensure_future(stop.wait())
            ended = asyncio.ensure_future(worker.wait())
            try:
                await asyncio.wait({stopped, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
                if not ended.done():
                    log.info("stopping worker %s", worker.worker_id)
                if sampler is not None:
                    await sampler.stop()
                await worker.stop()
                ended.cancel()
                await asyncio.gather(stopped, ended, return_exceptions=True)
            error = ended.exception() if ended.done() and not ended.cancelled() else None
            if error is not None:
                raise error
    finally:
        if server is not None:
            server.close()


def attach_observers(
    worker: Worker, prometheus: PrometheusMetrics | None, observers: Sequence[Observer], queue_gauges: str
) -> QueueStatsSampler | None:
    """Add the observers to the worker's client; return the queue-gauge sampler (or None).

    One sampler (one queue_stats() query per interval) feeds every metrics observer's gauges:
    the first one's, shared with the others.
    """
    everything: list[Observer] = [*observers] if prometheus is None else [prometheus, *observers]
    if not everything:
        return None
    from jobchain.telemetry.recorder import MetricsObserver, attach

    for observer in everything:
        attach(worker.client, observer)  # counters and histograms even with --queue-gauges off
    measuring: list[MetricsObserver] = [o for o in everything if isinstance(o, MetricsObserver)]
    if not measuring or queue_gauges == "off":
        return None
    reporter: Reporter = "name" if queue_gauges == "name" else "cluster"
    sampler = measuring[0].sample_queue(worker, reporter=reporter)
    for other in measuring[1:]:
        other.samplers.append(sampler)
    return sampler


def start_otel(log: logging.Logger) -> OtelProviders:
    """``--otel``: jobchain's OpenTelemetry observers on the SDK (see jobchain.telemetry.sdk_setup).

    A missing API, SDK or exporter is a usage error (exit 2) naming what to install.
    """
    try:
        from jobchain.telemetry import sdk_setup
        from jobchain.telemetry._extras import MissingExtraError
    except ImportError:  # jobchain.telemetry's MissingExtraError: neither extra is installed
        raise click.UsageError(f"--otel needs the OpenTelemetry API and SDK: {OTEL_INSTALL}") from None
    try:
        providers = sdk_setup.configure()
    except MissingExtraError as exc:
        raise click.UsageError(f"--otel {exc}") from None
    log.info("tracing and metrics through OpenTelemetry: %s", providers.description)
    return providers


def serve_metrics(
    port: int | None, host: str, log: logging.Logger
) -> tuple[PrometheusMetrics | None, MetricsServer | None]:
    """The Prometheus metrics observer and its running endpoint; (None, None) without a port.

    Opened before anything else, so a port in use fails at once (MetricsPortInUseError).
    """
    if port is None:
        return None, None
    from jobchain.telemetry.prometheus import PrometheusMetrics, serve_prometheus

    metrics = PrometheusMetrics()
    server = serve_prometheus(port, host, registry=metrics.registry)
    log.info("serving Prometheus metrics on %s:%d/metrics", host, server.port)
    return metrics, server


def unmigrated_message(error: SchemaNotMigratedError, state: str | None) -> str:
    """One line for a worker whose state backend was never migrated: what to run instead."""
    from jobchain.connect_backends import resolve_state_url

    try:
        shown = str(resolve_state_url(state))  # the password, if any, is masked
    except JobchainError:
        shown = "URL"
    text = " ".join(str(error).split())
    command = f"run `jobchain migrate --state {shown}` first, or start the worker with --migrate"
    if GENERIC_HINT in text:
        return text.replace(GENERIC_HINT, command)
    return f"{text}; {command}"


GENERIC_HINT = "run `jobchain migrate --state URL` (or `await adapter.migrate()`) first"
"""The hint the bundled adapters put in SchemaNotMigratedError; the CLI names the real URL."""


@click.command("worker")
@click.argument("target")
@click.option(
    "--job-types", "job_types_target", default=None, help="MODULE:ATTRIBUTE of the JobTypes registry."
)
@click.option("--state", default=None, help=STATE_URL_HELP)
@click.option("--notify", default=None, help=NOTIFY_URL_HELP)
@click.option("--concurrency", "-c", default=10, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--prefetch",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Claimed jobs kept waiting beyond the free slots (claims then overlap running handlers).",
)
@click.option(
    "--loop",
    "loop_name",
    default="auto",
    show_default=True,
    type=click.Choice(LOOPS),
    help="Event loop: auto takes uvloop when installed (pip install 'jobchain[uvloop]').",
)
@click.option("--name", default="worker", show_default=True, help="Readable worker name (a suffix is added).")
@click.option("--poll-interval", default=60.0, show_default=True, type=Seconds(0.001, DAY_SECONDS))
@click.option(
    "--heartbeat-interval",
    default=None,
    type=Seconds(0.001, HOUR_SECONDS),
    help="Seconds between registry heartbeats [default: 2].",
)
@click.option(
    "--missed-heartbeats",
    default=None,
    type=click.IntRange(min=2),
    help="Heartbeats missed before the worker is presumed dead and its jobs released [default: 3].",
)
@click.option(
    "--max-attempts",
    default=None,
    help="Attempts a job may use before it fails, or 'unlimited', for types that set none [default: 25].",
)
@click.option(
    "--timeout",
    default=None,
    type=Seconds(0.001, DURATION_MAX.total_seconds()),
    help="Handler deadline in seconds for types that set none [default: none].",
)
@click.option(
    "--retain-completed", default=None, help="Delete completed chains this old (e.g. 7d; default: keep)."
)
@click.option(
    "--retain-failed", default=None, help="Delete failed chains this old (e.g. 90d; default: keep)."
)
@click.option(
    "--retain-cancelled", default=None, help="Delete cancelled chains this old (e.g. 30d; default: keep)."
)
@click.option(
    "--metrics-port",
    default=None,
    type=click.IntRange(min=0, max=65535),
    help="Serve Prometheus metrics at http://HOST:PORT/metrics, e.g. 9464 (extra jobchain[prometheus]).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help=(
        "Address the metrics endpoint listens on; 0.0.0.0 opens it to the network. It has no "
        "authentication: open it only where what can reach it may read every metric."
    ),
)
@click.option(
    "--queue-gauges",
    default=None,
    type=click.Choice(QUEUE_GAUGES),
    help=(
        "Who exports the queue gauges: cluster, the oldest running worker of the registry (one "
        "per cluster); name, the oldest of each --name; off, not this worker [default: cluster]."
    ),
)
@click.option(
    "--otel",
    is_flag=True,
    default=False,
    envvar=OTEL_ENV,
    show_envvar=True,
    help=(
        "Trace and meter the worker with the OpenTelemetry SDK, configured from the OTEL_* "
        "variables or the global providers the application set (pip install 'jobchain[otel]' "
        "opentelemetry-sdk)."
    ),
)
@click.option("--log-level", default="INFO", show_default=True)
@click.option(
    "--migrate",
    is_flag=True,
    default=False,
    help="Apply the state backend's migrations first (what `jobchain migrate` does).",
)
def worker_command(
    target: str,
    job_types_target: str | None,
    state: str | None,
    notify: str | None,
    concurrency: int,
    prefetch: int,
    loop_name: str,
    name: str,
    poll_interval: float,
    heartbeat_interval: float | None,
    missed_heartbeats: int | None,
    max_attempts: str | None,
    timeout: float | None,
    retain_completed: str | None,
    retain_failed: str | None,
    retain_cancelled: str | None,
    metrics_port: int | None,
    metrics_host: str,
    queue_gauges: str | None,
    otel: bool,
    log_level: str,
    migrate: bool,
) -> None:
    """Run a worker for the processors at TARGET (MODULE:ATTRIBUTE) until SIGINT/SIGTERM."""
    if queue_gauges is not None and metrics_port is None and not otel:
        raise click.UsageError(
            "--queue-gauges needs --metrics-port or --otel (the gauges are exported there)"
        )
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    providers: OtelProviders | None = None
    try:
        obj, module = load_object(target)
        slices = processor_slices(obj, target)
        job_types = find_job_types(module, job_types_target)
        attempts = parse_max_attempts(max_attempts)
        retention = retention_from_options(retain_completed, retain_failed, retain_cancelled)
        if metrics_port is not None:
            import jobchain.telemetry.prometheus  # noqa: F401 -- a missing extra fails here, in one line
        if otel:  # after the target's import: the providers its module set are the ones to use
            providers = start_otel(logging.getLogger("jobchain.worker"))
        run_on_loop(
            lambda: run_worker(
                slices,
                job_types,
                state=state,
                notify=notify,
                concurrency=concurrency,
                prefetch=prefetch,
                name=name,
                poll_interval=poll_interval,
                migrate=migrate,
                heartbeat_interval=heartbeat_interval,
                missed_heartbeats=missed_heartbeats,
                max_attempts=attempts,
                handler_timeout=timeout,
                retention=retention,
                metrics_port=metrics_port,
                metrics_host=metrics_host,
                queue_gauges=queue_gauges or "cluster",
                observers=() if providers is None else providers.observers,
            ),
            loop_name,
        )
    except SchemaNotMigratedError as exc:
        raise click.ClickException(unmigrated_message(exc, state)) from exc
    except JobchainError as exc:
        raise click.ClickException(str(exc)) from exc
    except ImportError as exc:
        # jobchain.telemetry's MissingExtraError (matched by name: importing the class would
        # itself fail without the extras) says in one line what to install.
        if type(exc).__name__ != "MissingExtraError":
            raise
        raise click.ClickException(str(exc)) from exc
    finally:
        if providers is not None:
            providers.shutdown()  # what the exporters still buffer is exported before exit
