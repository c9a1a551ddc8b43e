"""``settings.JOBCHAIN``: read once, validated, every error naming the key to change.

```python
JOBCHAIN = {
    "JOB_TYPES": "myapp.jobs:registry",        # required: your JobTypes registry
    "PROCESSORS": "myapp.jobs:processors",     # what `manage.py jobchain_worker` runs
    "DATABASE": "default",                     # the alias holding jobchain's tables
    "STATE_URL": None,                         # else derived from DATABASES[DATABASE]
    "STATE_OPTIONS": {"table_prefix": "jobchain_"},  # URL query options of derived URLs
    "NOTIFY_URL": "redis://localhost:6379/0",  # wake-ups; None: JOBCHAIN_NOTIFY_URL or polling
    "WORKER": {"concurrency": 10},             # jobchain.worker.Worker keyword arguments
    "CLOCK": None,                             # tests: a FrozenClock, or "myapp.tests:clock"
}
```
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobchain.contrib.django._django import ImproperlyConfigured, connections, settings
from jobchain.job_types import JobTypes
from jobchain.url import BackendURL

KEYS = ("JOB_TYPES", "PROCESSORS", "DATABASE", "STATE_URL", "STATE_OPTIONS", "NOTIFY_URL", "WORKER", "CLOCK")
EXAMPLE = "JOBCHAIN = {'JOB_TYPES': 'myapp.jobs:registry', 'PROCESSORS': 'myapp.jobs:processors'}"
WORKER_OWN = frozenset({"self", "client", "processors", "sync_handler_wrapper"})
"""Worker arguments the integration supplies itself (never from ``JOBCHAIN['WORKER']``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobchainSettings:
    """``settings.JOBCHAIN``, validated (see the module docstring for the keys)."""

    job_types: str
    processors: str | None = None
    database: str = "default"
    state_url: str | None = None
    state_options: Mapping[str, str] = field(default_factory=dict)
    notify_url: str | None = None
    worker: Mapping[str, Any] = field(default_factory=dict)
    clock_setting: object = None
    """``CLOCK`` as given: None, a callable, or the dotted path of one."""

    def clock(self) -> Callable[[], datetime] | None:
        """The clock named by ``CLOCK`` (what jobchain's client and worker read as "now"), or None."""
        found = self.clock_setting
        if isinstance(found, str):
            found = load_dotted(found, "CLOCK")
        if found is not None and not callable(found):
            raise ImproperlyConfigured(
                f"JOBCHAIN['CLOCK'] must be a callable returning an aware datetime (a "
                f"jobchain.testing.FrozenClock, say) or the dotted path of one, got {found!r}"
            )
        return found

    def registry(self) -> JobTypes:
        """The JobTypes registry named by ``JOB_TYPES``."""
        found = load_dotted(self.job_types, "JOB_TYPES")
        if not isinstance(found, JobTypes):
            raise ImproperlyConfigured(
                f"JOBCHAIN['JOB_TYPES'] = {self.job_types!r} is a {type(found).__name__}, "
                "not a jobchain JobTypes registry"
            )
        return found

    def processor_slices(self) -> list[Any]:
        """The Processors slice(s) named by ``PROCESSORS`` (one object or a list of them)."""
        from jobchain.worker import Processors

        if self.processors is None:
            raise ImproperlyConfigured(
                "JOBCHAIN['PROCESSORS'] is missing: set it to the dotted path of your "
                "Processors object (or list of them), e.g. 'myapp.jobs:processors'"
            )
        found = load_dotted(self.processors, "PROCESSORS")
        if isinstance(found, Processors):
            return [found]
        if isinstance(found, (list, tuple)) and found and all(isinstance(p, Processors) for p in found):
            return list(found)
        raise ImproperlyConfigured(
            f"JOBCHAIN['PROCESSORS'] = {self.processors!r} is a {type(found).__name__}, "
            "not a jobchain Processors object or a list of them"
        )


def load_settings() -> JobchainSettings:
    """Read and validate ``settings.JOBCHAIN`` (and ``settings.JOBCHAIN_STATE_URL``)."""
    raw = getattr(settings, "JOBCHAIN", None)
    if raw is None:
        raise ImproperlyConfigured(f"the JOBCHAIN setting is missing; add e.g. {EXAMPLE}")
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"the JOBCHAIN setting must be a dict, got {type(raw).__name__}")
    for key in raw:
        if key not in KEYS:
            raise ImproperlyConfigured(f"JOBCHAIN[{key!r}] is not a jobchain setting{_close(key, KEYS)}")
    job_types = raw.get("JOB_TYPES")
    if job_types is None:
        raise ImproperlyConfigured(
            "JOBCHAIN['JOB_TYPES'] is missing: set it to the dotted path of your JobTypes "
            "registry, e.g. 'myapp.jobs:registry'"
        )
    database = raw.get("DATABASE", "default")
    if not isinstance(database, str) or database not in settings.DATABASES:
        raise ImproperlyConfigured(
            f"JOBCHAIN['DATABASE'] = {database!r} is not an alias of settings.DATABASES "
            f"({', '.join(map(repr, settings.DATABASES))})"
        )
    return JobchainSettings(
        job_types=_dotted(job_types, "JOB_TYPES"),
        processors=None if raw.get("PROCESSORS") is None else _dotted(raw["PROCESSORS"], "PROCESSORS"),
        database=database,
        state_url=_state_url(raw),
        state_options=_options(raw.get("STATE_OPTIONS")),
        notify_url=_url(raw.get("NOTIFY_URL"), "JOBCHAIN['NOTIFY_URL']"),
        worker=_worker(raw.get("WORKER")),
        clock_setting=_clock(raw.get("CLOCK")),
    )


def check_settings() -> JobchainSettings:
    """Validate at start-up (``AppConfig.ready``): settings, the registry, the database."""
    config = load_settings()
    config.registry()
    config.clock()
    from jobchain.contrib.django.databases import state_url_for

    state_url_for(config.database, config)  # an unsupported or in-memory database fails now
    return config


def load_dotted(path: str, key: str) -> Any:
    """Import ``module:attribute`` named by ``JOBCHAIN[key]``."""
    module_name, _, attribute = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"JOBCHAIN[{key!r}] = {path!r}: cannot import {module_name!r}: {exc}"
        ) from exc
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImproperlyConfigured(
                f"JOBCHAIN[{key!r}] = {path!r}: module {module_name!r} has no attribute {attribute!r}"
            ) from None
    return obj


def _dotted(value: object, key: str) -> str:
    if isinstance(value, str):
        module_name, sep, attribute = value.partition(":")
        if sep and module_name and attribute:
            return value
    raise ImproperlyConfigured(
        f"JOBCHAIN[{key!r}] must be a 'module.path:attribute' string, got {value!r} "
        "(e.g. 'myapp.jobs:registry')"
    )


def _url(value: object, key: str) -> str | None:
    if value is None:
        return None
    from jobchain.errors import InvalidURLError

    try:
        return BackendURL.parse(value).render(hide_password=False)
    except InvalidURLError as exc:
        raise ImproperlyConfigured(f"{key}: {exc}") from None


def _state_url(raw: Mapping[str, Any]) -> str | None:
    inside = _url(raw.get("STATE_URL"), "JOBCHAIN['STATE_URL']")
    outside = _url(getattr(settings, "JOBCHAIN_STATE_URL", None), "JOBCHAIN_STATE_URL")
    if inside is not None and outside is not None:
        raise ImproperlyConfigured("set JOBCHAIN['STATE_URL'] or JOBCHAIN_STATE_URL, not both")
    if (inside or outside) is not None and raw.get("STATE_OPTIONS"):
        raise ImproperlyConfigured(
            "JOBCHAIN['STATE_OPTIONS'] applies to URLs derived from DATABASES; with a STATE_URL, "
            "put the options in its query string"
        )
    return inside or outside


def _options(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ImproperlyConfigured(
            f"JOBCHAIN['STATE_OPTIONS'] must be a dict of URL options such as "
            f"{{'table_prefix': 'jobchain_'}}, got {value!r}"
        )
    options: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ImproperlyConfigured(
                f"JOBCHAIN['STATE_OPTIONS'][{key!r}] must be a string or a number, got {item!r}"
            )
        options[key] = str(item)
    return options


def _clock(value: object) -> object:
    if isinstance(value, str):
        return _dotted(value, "CLOCK")
    if value is not None and not callable(value):
        raise ImproperlyConfigured(
            f"JOBCHAIN['CLOCK'] must be a callable returning an aware datetime (a "
            f"jobchain.testing.FrozenClock, say) or the dotted path of one, got {value!r}"
        )
    return value


def _worker(value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured(f"JOBCHAIN['WORKER'] must be a dict of Worker options, got {value!r}")
    from jobchain.worker import Worker

    allowed = [name for name in inspect.signature(Worker).parameters if name not in WORKER_OWN]
    for key in value:
        if key not in allowed:
            raise ImproperlyConfigured(
                f"JOBCHAIN['WORKER'][{key!r}] is not a Worker option{_close(str(key), allowed)}; "
                f"the options are {', '.join(allowed)}"
            )
    return dict(value)


def _close(key: str, known: Any) -> str:
    match = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def database_wrapper(alias: str) -> Any:
    """``django.db.connections[alias]``, or ImproperlyConfigured naming the alias."""
    if alias not in settings.DATABASES:
        raise ImproperlyConfigured(
            f"database alias {alias!r} is not in settings.DATABASES "
            f"({', '.join(map(repr, settings.DATABASES))})"
        )
    return connections[alias]


__all__ = ["JobchainSettings", "check_settings", "database_wrapper", "load_dotted", "load_settings"]
