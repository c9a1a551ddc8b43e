"""The two wake-hint Lua scripts, loaded once from ``scripts/*.lua`` (package data)."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def load_script(name: str) -> str:
    """The source of ``scripts/<name>.lua``."""
    return files("jobchain_redis").joinpath("scripts", f"{name}.lua").read_text(encoding="utf-8")


WAKE_HINT_PROVIDE = "wake_hint_provide"
"""KEYS[1] hint key, ARGV[1] count, ARGV[2] TTL seconds → the new budget."""

WAKE_HINT_CONSUME = "wake_hint_consume"
"""KEYS[1] hint key → 1 (wake: slot claimed or no budget tracked) or 0 (exhausted)."""

__all__ = ["WAKE_HINT_CONSUME", "WAKE_HINT_PROVIDE", "load_script"]
