"""jobchain-nats: the NATS notify backend (core subjects, JetStream KV wake-hint budgets).

Select it with a URL, ``jobchain.connect(state_url, notify="nats://localhost:4222?kv_bucket=hints")``,
or build it directly with :meth:`NatsNotifyAdapter.connect`.

Exports are loaded lazily, so that importing ``jobchain_nats.plugin`` (entry-point
discovery) never imports the driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobchain_nats.notify import NatsNotifyAdapter, open_notify_adapter
    from jobchain_nats.options import MAX_PAYLOAD_BYTES, NatsNotifyOptions

_EXPORTS = {
    "NatsNotifyAdapter": "jobchain_nats.notify",
    "open_notify_adapter": "jobchain_nats.notify",
    "MAX_PAYLOAD_BYTES": "jobchain_nats.options",
    "NatsNotifyOptions": "jobchain_nats.options",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jobchain_nats' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["MAX_PAYLOAD_BYTES", "NatsNotifyAdapter", "NatsNotifyOptions", "open_notify_adapter"]
