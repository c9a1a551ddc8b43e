"""A small FastAPI shop for the ASGI tests: orders start a chain that the worker beside the app runs.

The job types and endpoints are the user's code; the tests build the app around a
:class:`~jobchain.contrib.asgi.JobchainLifespan` of their choosing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

import jobchain
from jobchain.contracts import Event
from jobchain.contrib.asgi import JobchainLifespan, get_client
from jobchain.worker import Attempt, Completed, Processors

types = jobchain.JobTypes()
ship = types.define("shop.ship", input=str, output=str)
place_order = types.define("shop.order", input=str, output=None, entry=True, continues_with=[ship])

Chains = Annotated[jobchain.Client, Depends(get_client)]


def processors(before_ship: Callable[[], Any] | None = None) -> Processors:
    """The shop's handlers; ``before_ship`` (awaited in a thread) holds the shipping job back."""
    found = Processors()

    async def take(attempt: Attempt[str, None]) -> Completed:
        return await attempt.continue_with(ship, attempt.input.upper())

    async def send(attempt: Attempt[str, str]) -> Completed:
        if before_ship is not None:
            await asyncio.to_thread(before_ship)
        return await attempt.complete(f"shipped {attempt.input}")

    found.register(place_order, take)
    found.register(ship, send)
    return found


def build_app(lifespan: JobchainLifespan) -> FastAPI:
    """The shop's FastAPI app over ``lifespan``."""
    app = FastAPI(lifespan=lifespan)

    @app.post("/orders")
    async def order(item: str, chains: Chains) -> dict[str, str]:
        async with chains.transaction() as tx:
            started = await chains.start_chain(tx, place_order, item)
        return {"chain_id": started.id}

    @app.get("/orders/{chain_id}")
    async def status(chain_id: str, chains: Chains, wait: float = 0) -> dict[str, Any]:
        if wait:
            chain = await chains.await_chain(chain_id, timeout=wait, poll_interval=0.05)
        else:
            found = await chains.get_chain(chain_id)
            assert found is not None
            chain = found
        return {"status": chain.status.value, "output": chain.output}

    @app.get("/where")
    async def where(request: Request, chains: Chains) -> dict[str, bool]:
        return {
            "request_state": request.state.jobchain is chains,
            "app_state": request.app.state.jobchain is chains,
            "lifespan": lifespan.client is chains,
        }

    return app


@dataclass
class EventRecorder:
    """Records observer event names in order (thread-safe: the app runs in TestClient's thread)."""

    names: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: dict[str, threading.Event] = field(default_factory=dict)

    def on_event(self, event: Event) -> None:
        with self.lock:
            self.names.append(event.name)
            self.flag(event.name).set()

    def flag(self, name: str) -> threading.Event:
        """A threading.Event set once an event of that name has been recorded."""
        return self.seen.setdefault(name, threading.Event())  # atomic: no lock needed

    def snapshot(self) -> list[str]:
        with self.lock:
            return list(self.names)
