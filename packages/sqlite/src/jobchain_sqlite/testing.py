"""``scratch`` behind ``sqlite://``: a new database file per test (``scratch_database``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from jobchain.url import BackendURL


@contextmanager
def scratch(url: BackendURL) -> Iterator[str]:
    """A new file in a new temporary folder (``url``'s path is ignored, its options kept).

    The folder goes at exit, with the write-ahead log and anything else SQLite left there.
    """
    folder = Path(tempfile.mkdtemp(prefix="jobchain-scratch-"))
    try:
        yield replace(url, database=str(folder / "jobchain.db")).render(hide_password=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
