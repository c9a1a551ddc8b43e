"""Building blocks shared by broker-backed notify adapters: listener fan-out and outage logging."""

from jobchain.notifying.fanout import Fanout
from jobchain.notifying.outage import Outage

__all__ = ["Fanout", "Outage"]
