"""jobchain-redis: the Redis notify backend (pub/sub wake-ups, Lua wake-hint budgets).

Select it with a URL, ``jobchain.connect(state_url, notify="redis://localhost:6379/0")``,
or build it directly with :meth:`RedisNotifyAdapter.connect`.

Exports are loaded lazily, so that importing ``jobchain_redis.plugin`` (entry-point
discovery) never imports the driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobchain_redis.notify import RedisNotifyAdapter, open_notify_adapter
    from jobchain_redis.options import MAX_PAYLOAD_BYTES, RedisNotifyOptions

_EXPORTS = {
    "RedisNotifyAdapter": "jobchain_redis.notify",
    "open_notify_adapter": "jobchain_redis.notify",
    "MAX_PAYLOAD_BYTES": "jobchain_redis.options",
    "RedisNotifyOptions": "jobchain_redis.options",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jobchain_redis' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["MAX_PAYLOAD_BYTES", "RedisNotifyAdapter", "RedisNotifyOptions", "open_notify_adapter"]
