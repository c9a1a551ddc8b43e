"""Stacks of every thread and of every asyncio task of every running event loop, as text.

Written for a watchdog thread: it reads other threads' frames while they run (or hang), so
nothing here may block, and everything tolerates state changing under it. Event loops are
found on the threads' stacks (a frame of ``run_forever`` whose ``self`` is a loop), because a
loop's running state is thread-local and invisible from the watchdog's own thread.

Frames are formatted here, not by :mod:`traceback`: on Python 3.11 its caret anchors call
``ast.parse``, whose recursion counter is interpreter-wide, and a parse in this thread while
the main thread parses (pytest does, formatting a failure) ends the run with "SystemError: AST
constructor recursion depth mismatch".
"""

from __future__ import annotations

import asyncio
import linecache
import sys
import threading
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Any

MAX_TASKS = 200
"""Tasks printed per loop; a worker may run thousands, the first ones tell the story."""

MAX_FRAMES = 40
"""Frames printed per thread or task (the innermost ones)."""


def thread_names() -> dict[int, str]:
    """Thread ident → ``name (daemon)`` for every live thread."""
    return {
        thread.ident: f"{thread.name}{' (daemon)' if thread.daemon else ''}"
        for thread in threading.enumerate()
        if thread.ident is not None
    }


def _frames_outward(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def running_loops() -> list[tuple[int, asyncio.AbstractEventLoop]]:
    """Every event loop some thread is running now, with that thread's ident."""
    found: list[tuple[int, asyncio.AbstractEventLoop]] = []
    for ident, frame in sys._current_frames().items():
        for outer in _frames_outward(frame):
            if outer.f_code.co_name != "run_forever":
                continue
            loop = outer.f_locals.get("self")
            if isinstance(loop, asyncio.AbstractEventLoop) and all(loop is not seen for _, seen in found):
                found.append((ident, loop))
    return found


def loop_future(ident: int) -> tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]] | None:
    """The future the thread ``ident`` runs its loop until (innermost ``run_until_complete``)."""
    frame = sys._current_frames().get(ident)
    for outer in _frames_outward(frame):
        if outer.f_code.co_name != "run_until_complete":
            continue
        local = outer.f_locals
        loop, future = local.get("self"), local.get("future")
        if isinstance(loop, asyncio.AbstractEventLoop) and isinstance(future, asyncio.Future):
            return loop, future
    return None


_PLUMBING = ("/_pytest/", "/pluggy/", "<frozen runpy>")
"""Frames of pytest's and pluggy's own machinery: folded into one line each run of them."""


def format_frames(frames: Iterable[FrameType]) -> str:
    """``frames`` (outermost first) as a traceback, with runs of pytest/pluggy frames folded."""
    lines: list[str] = []
    folded = 0
    for frame in list(frames)[-MAX_FRAMES:]:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno or 0
        if any(part in filename for part in _PLUMBING):
            folded += 1
            continue
        if folded:
            lines.append(f"  ... {folded} frames of pytest and pluggy ...\n")
            folded = 0
        lines.append(f'  File "{filename}", line {lineno}, in {frame.f_code.co_name}\n')
        source = linecache.getline(filename, lineno).strip()
        if source:
            lines.append(f"    {source}\n")
    if folded:
        lines.append(f"  ... {folded} frames of pytest and pluggy ...\n")
    return "".join(lines)


def format_threads(skip: int | None = None) -> str:
    """Every thread's stack, innermost call last, headed by the thread's name."""
    names = thread_names()
    parts: list[str] = []
    for ident, frame in sorted(sys._current_frames().items()):
        if ident == skip:
            continue
        stack = format_frames(reversed(list(_frames_outward(frame))))
        parts.append(f"--- thread {names.get(ident, '<unknown>')} (ident {ident})\n{stack}")
    return "\n".join(parts)


def _await_chain(task: asyncio.Task[Any]) -> tuple[list[FrameType], object | None]:
    """The frames of the coroutines ``task`` is suspended in, outermost first, and what the
    innermost one waits for (a future, a task, a sleep; None when it runs or never started)."""
    frames: list[FrameType] = []
    current: Any = task.get_coro()
    awaited: object | None = None
    for _ in range(200):  # an await chain is finite; a broken one must not spin the watchdog
        frame = getattr(current, "cr_frame", None) or getattr(current, "gi_frame", None)
        frame = frame or getattr(current, "ag_frame", None)
        if frame is None and not hasattr(current, "cr_await") and not hasattr(current, "gi_yieldfrom"):
            awaited = current
            break
        if frame is not None:
            frames.append(frame)
        nxt = getattr(current, "cr_await", None) or getattr(current, "gi_yieldfrom", None)
        nxt = nxt or getattr(current, "ag_await", None)
        if nxt is None:
            break
        current = nxt
    return frames, awaited


def format_task(task: asyncio.Task[Any]) -> str:
    """One task: its name, state, the coroutine stack it is suspended in and what it awaits."""
    coro = task.get_coro()
    qualname = getattr(coro, "__qualname__", type(coro).__name__)
    state = "done" if task.done() else ("cancelling" if task.cancelling() else "pending")
    frames, awaited = _await_chain(task)
    # The await chain ends in an opaque future iterator; the task knows the future itself
    # (a private attribute of both asyncio implementations, read only for this message).
    awaited = getattr(task, "_fut_waiter", None) or awaited
    text = f"--- task {task.get_name()!r} {qualname} [{state}]\n{format_frames(frames)}"
    if awaited is not None:
        text += f"    awaiting {_short_repr(awaited)}\n"
    return text


def _short_repr(value: object) -> str:
    try:
        text = repr(value)
    except Exception as error:  # a repr that fails must not end the dump
        text = f"<{type(value).__name__}: repr failed: {error!r}>"
    return text if len(text) <= 300 else text[:297] + "..."


def format_loop_tasks(loop: asyncio.AbstractEventLoop) -> str:
    """Every task of ``loop`` with its stack; safe to call from another thread (a read)."""
    try:
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError as error:  # the loop's task set changed size too often while read
        return f"(tasks of {loop!r} unreadable: {error})\n"
    tasks.sort(key=lambda task: task.get_name())
    shown = [format_task(task) for task in tasks[:MAX_TASKS]]
    more = f"... and {len(tasks) - MAX_TASKS} more tasks\n" if len(tasks) > MAX_TASKS else ""
    return "".join(shown) + more


def format_everything(skip_thread: int | None = None) -> str:
    """Every thread's stack, then every task of every running event loop."""
    names = thread_names()
    parts = ["=== threads ===", format_threads(skip_thread)]
    loops = running_loops()
    if not loops:
        parts.append("=== asyncio: no event loop is running ===")
    for ident, loop in loops:
        parts.append(f"=== asyncio tasks of the loop run by thread {names.get(ident, ident)} ===")
        parts.append(format_loop_tasks(loop))
    return "\n".join(parts) + "\n"
