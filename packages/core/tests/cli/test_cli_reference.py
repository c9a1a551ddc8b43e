"""docs/reference/cli.md runs: its shop script fills a SQLite file, then every ``$ `` line of
its ``console`` blocks runs in order against that file and exits as documented (``# exit N``
marks the lines expected to fail; 0 otherwise). Every admin command has such a line."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobchain.cli import COMMANDS

REPO = Path(__file__).resolve().parents[4]
PAGE = REPO / "docs" / "reference" / "cli.md"
CONSOLE = re.compile(r"^```console\n(.*?)^```", re.MULTILINE | re.DOTALL)
PYTHON = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXPECTED = re.compile(r"#\s*exit\s+(\d+)\s*$")
DOCUMENTED_ELSEWHERE = {"worker", "dashboard"}  # urls-and-cli.md and the dashboard guide


@dataclass(frozen=True)
class Line:
    number: int
    words: list[str]
    exit_code: int


def command_lines(text: str) -> list[Line]:
    lines: list[Line] = []
    for block in CONSOLE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        for offset, raw in enumerate(block.group(1).splitlines()):
            if not raw.startswith("$ "):
                continue  # example output
            expected = EXPECTED.search(raw)
            words = shlex.split(raw[2:], comments=True)
            lines.append(Line(first + offset, words, int(expected.group(1)) if expected else 0))
    return lines


def shop_script(text: str) -> str:
    [script] = [m.group(1) for m in PYTHON.finditer(text) if "sqlite:///shop.db" in m.group(1)]
    return script


TEXT = PAGE.read_text(encoding="utf-8")
LINES = command_lines(TEXT)


def test_every_command_has_an_example() -> None:
    shown = {line.words[1] for line in LINES if line.words[0] == "jobchain"}
    assert set(COMMANDS) - DOCUMENTED_ELSEWHERE <= shown
    assert {"list", "show"} <= {line.words[2] for line in LINES if line.words[:2] == ["jobchain", "jobs"]}
    assert {"list", "show"} <= {line.words[2] for line in LINES if line.words[:2] == ["jobchain", "chains"]}


@pytest.mark.timeout(1200)  # ~40 subprocesses, each a fresh interpreter: 300 s ran out with 8 CPU burners
def test_the_documented_command_lines_run_as_documented(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCHAIN_")}
    env["COLUMNS"] = "120"
    seeded = subprocess.run(
        [sys.executable, "-c", shop_script(TEXT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert seeded.returncode == 0, seeded.stderr
    for line in LINES:
        where = f"docs/reference/cli.md:{line.number}: {shlex.join(line.words)}"
        if line.words[0] == "export":
            name, _, value = line.words[1].partition("=")
            env[name] = value
            continue
        assert line.words[0] == "jobchain", where
        result = subprocess.run(
            [sys.executable, "-m", "jobchain.cli", *line.words[1:]],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == line.exit_code, f"{where}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr, where


@pytest.mark.parametrize("text", ["```console\n$ jobchain stats  # exit 3\nout\n$ export A=b\n```\n"])
def test_the_extractor_reads_exit_codes_and_skips_output(text: str) -> None:
    assert [(line.words, line.exit_code) for line in command_lines(text)] == [
        (["jobchain", "stats"], 3),
        (["export", "A=b"], 0),
    ]
