"""The documentation's examples run: every ```python block marked runnable exits 0.

Conventions inside docs/**/*.md, packages/core/README.md and conformance/README.md:

* a block whose first line is ``# runnable`` runs as a script;
* a block whose first line is ``# runnable: pytest`` runs as a pytest file (with the
  ``asyncio_mode = auto`` setting the conformance page tells adopters to use);
* a block whose first line is ``# file: NAME.py`` is written as ``NAME.py`` next to every
  runnable block of the same page (a module that several examples import), never run.

Each runnable block runs in a subprocess, in a fresh temporary directory, with a timeout
and without ``JOBCHAIN_*_URL`` variables, so examples use ``memory://`` or a local SQLite
file and need no server. Blocks without a marker (PostgreSQL, Redis, NATS) are shown only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs"
EXTRA_SOURCES = (REPO / "packages" / "core" / "README.md", REPO / "conformance" / "README.md")
TIMEOUT = 90.0
"""Seconds a script block may take."""
PYTEST_TIMEOUT = 600.0
"""Seconds a pytest block may take: the adapter page's runs the three suites whole (about 700
cases, 45 s on a busy 2-core machine), and a starved one must not fail it on time alone."""

FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
FILE_MARKER = re.compile(r"#\s*file:\s*([A-Za-z0-9_./-]+\.py)\s*$")
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")
ANCHOR_LINK = re.compile(r"\]\(([^)#\s]*\.md)?#([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.*)$")

REQUIRED_PAGES = (
    "index.md",
    "getting-started.md",
    "concepts.md",
    "guides/processing-modes.md",
    "guides/errors-and-reliability.md",
    "guides/workers-and-scaling.md",
    "guides/middleware.md",
    "guides/scheduling.md",
    "reference/client.md",
    "reference/errors.md",
    "reference/urls-and-cli.md",
    "reference/job-types.md",
    "adapters/writing-a-backend.md",
)

PYTEST_INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"


@dataclass(frozen=True)
class Block:
    source: Path
    line: int
    kind: str  # "script" or "pytest"
    code: str

    @property
    def label(self) -> str:
        return f"{self.source.relative_to(REPO)}:{self.line}"


def sources() -> list[Path]:
    found = sorted(DOCS.rglob("*.md")) if DOCS.is_dir() else []
    return found + [p for p in EXTRA_SOURCES if p.is_file()]


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line of the opening fence, code) for every ```python block of ``path``."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


def first_line(code: str) -> str:
    return code.split("\n", 1)[0].strip()


def runnable_blocks() -> list[Block]:
    blocks: list[Block] = []
    for path in sources():
        for line, code in python_blocks(path):
            head = first_line(code)
            if head == "# runnable":
                blocks.append(Block(path, line, "script", code))
            elif head == "# runnable: pytest":
                blocks.append(Block(path, line, "pytest", code))
    return blocks


def page_files(path: Path) -> dict[str, str]:
    """The ``# file: NAME.py`` blocks of a page, by file name."""
    files: dict[str, str] = {}
    for _, code in python_blocks(path):
        match = FILE_MARKER.fullmatch(first_line(code))
        if match is not None:
            files[match.group(1)] = code
    return files


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCHAIN_")}
    # Modules written by `# file:` blocks are importable, as from the reader's project dir.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""


BLOCKS = runnable_blocks()


def run_block(block: Block, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``block`` in ``tmp_path`` next to its page's ``# file:`` modules."""
    for name, code in page_files(block.source).items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code, encoding="utf-8")
    if block.kind == "pytest":
        script = tmp_path / "test_example.py"
        (tmp_path / "pytest.ini").write_text(PYTEST_INI, encoding="utf-8")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)]
    else:
        script = tmp_path / "example.py"
        command = [sys.executable, str(script)]
    script.write_text(block.code, encoding="utf-8")
    return subprocess.run(
        command,
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=PYTEST_TIMEOUT if block.kind == "pytest" else TIMEOUT,
        check=False,
    )


@pytest.mark.timeout(PYTEST_TIMEOUT + 60)
@pytest.mark.parametrize("block", BLOCKS, ids=[b.label for b in BLOCKS])
def test_runnable_example_exits_zero(block: Block, tmp_path: Path) -> None:
    try:
        result = run_block(block, tmp_path)
    except subprocess.TimeoutExpired as exc:
        output = "\n".join(_text(part) for part in (exc.stdout, exc.stderr))
        pytest.fail(f"{block.label} did not finish within {exc.timeout:g} s; output:\n{output}")
    assert result.returncode == 0, (
        f"{block.label} exited {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )


def test_a_failing_block_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\n# file: helper.py\nVALUE = 3\n```\n\n"
        "```python\n# runnable\nfrom helper import VALUE\nraise SystemExit(VALUE)\n```\n",
        encoding="utf-8",
    )
    [(line, code)] = [b for b in python_blocks(page) if first_line(b[1]) == "# runnable"]
    work = tmp_path / "work"
    work.mkdir()
    assert run_block(Block(page, line, "script", code), work).returncode == 3


def test_no_python_block_is_indented() -> None:
    # The extractor reads fences at the start of a line; an indented one would be skipped unseen.
    indented = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sources()
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if text.lstrip().startswith("```python") and not text.startswith("```python")
    ]
    assert indented == []


def test_every_required_page_exists() -> None:
    missing = [page for page in REQUIRED_PAGES if not (DOCS / page).is_file()]
    assert missing == []


def test_most_python_examples_are_runnable() -> None:
    total = sum(len(python_blocks(p)) for p in sources())
    files = sum(len(page_files(p)) for p in sources())
    assert len(BLOCKS) >= 20
    # Server-bound examples are shown without running; they must stay the minority.
    assert len(BLOCKS) + files >= total * 0.6, f"{len(BLOCKS)} runnable of {total} python blocks"


def test_relative_links_between_pages_resolve() -> None:
    broken = [
        f"{path.relative_to(REPO)} -> {target}"
        for path in sources()
        for target in LINK.findall(path.read_text(encoding="utf-8"))
        if "://" not in target and not (path.parent / target).resolve().is_file()
    ]
    assert broken == []


def heading_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``path`` (a repeated one gets ``-1``, ``-2``…)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_links_to_a_section_name_a_heading_that_exists() -> None:
    broken = []
    for path in sources():
        for target, anchor in ANCHOR_LINK.findall(path.read_text(encoding="utf-8")):
            page = (path.parent / target).resolve() if target else path
            if page.is_file() and anchor not in heading_anchors(page):
                broken.append(f"{path.relative_to(REPO)} -> {target}#{anchor}")
    assert broken == []


def test_a_heading_anchor_is_what_github_makes_of_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# The hot path (migration `0009_hot_path`)\n```\n# not a heading\n```\n## Run\n## Run\n")
    assert heading_anchors(page) == {"the-hot-path-migration-0009_hot_path", "run", "run-1"}
