"""Where a jobchain worker's CPU goes: the jc.py worker under cProfile with a CPU-time clock.

    python bench/profile_worker.py CONFIG_JSON

Prints one JSON line: the worker's own result plus ``layers`` (share of self CPU time per
layer: psycopg, asyncio, jobchain core, the adapter, …) and ``top`` (the costliest functions).
cProfile slows the worker several times over, so only the shares mean anything; it sees the
main thread only, and CPU spent by other threads shows up under the epoll wait.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import pstats
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = (
    ("jobchain_postgres", "jobchain-postgres adapter"),
    ("jobchain_sqlite", "jobchain-sqlite adapter"),
    ("aiosqlite", "aiosqlite"),
    ("/jobchain/", "jobchain core (client, worker, hooks)"),
    ("psycopg_pool", "psycopg_pool"),
    ("psycopg", "psycopg"),
    ("asyncio", "asyncio event loop"),
    ("selectors", "asyncio event loop"),
    ("contextlib", "contextlib (async context managers)"),
    ("sqlite3", "sqlite3"),
    ("threading", "threads (aiosqlite hand-off)"),
    ("queue.py", "threads (aiosqlite hand-off)"),
)


def layer(filename: str, name: str) -> str:
    for key, label in LAYERS:
        if key in filename:
            return label
    if filename == "~":
        if "select.epoll" in name:
            # The CPU clock is the process's: while the loop waits here, other threads'
            # work (aiosqlite's sqlite3 thread) and the kernel's poll are charged to it.
            return "waiting in epoll (+ other threads' CPU)"
        return "builtins"
    return "other"


def main() -> None:
    import jc

    cfg = json.loads(sys.argv[1])
    profile = cProfile.Profile(time.process_time)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        profile.enable()
        try:
            from common import run_loop

            result = run_loop(jc.work(cfg))
        finally:
            profile.disable()
    stats = pstats.Stats(profile)
    shares: Counter[str] = Counter()
    total = 0.0
    for (filename, _line, name), (_cc, _nc, self_time, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        shares[layer(filename, name)] += self_time
        total += self_time
    top = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:12]  # type: ignore[attr-defined]
    result["layers"] = {k: v / total for k, v in shares.most_common()}
    result["top"] = [
        {"function": f"{name} ({Path(filename).name}:{line})", "share": t / total, "calls": nc}
        for (filename, line, name), (_cc, nc, t, _cum, _callers) in top
    ]
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
