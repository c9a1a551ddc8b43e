"""The archive's files: Parquet tables and run manifests, through Hadoop's FileSystem API.

Going through the JVM's FileSystem (not Python's ``os``) makes the same code work on a local
path, HDFS or an object store configured in Spark. Layout under the archive root::

    chains/completed_date=2024-03-01/chain_type=send_email/run_id=<run>/part-*.parquet
    jobs/…        blockers/…        (same partitioning: the chain's completion date and type)
    _runs/<run>.json                  one manifest per run: writing → verified → deleted

Only runs whose manifest says ``verified`` or ``deleted`` belong to the archive; files of a
run still ``writing`` are leftovers of a crash and are removed by the next run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from jobchain_spark.errors import ArchivePathError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TABLES: Final = ("chains", "jobs", "blockers")
RUNS_DIR: Final = "_runs"
RunState = Literal["writing", "verified", "deleted"]


@dataclass(frozen=True, slots=True)
class Manifest:
    """What one archive run wrote and how far it got."""

    run_id: str
    state: RunState
    cutoff: str
    chains: int = 0
    jobs: int = 0
    blockers: int = 0
    retained: int = 0


class ArchiveStore:
    """Files of one archive root (see module doc)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        jvm: Any = spark.sparkContext._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        try:
            self._fs = self._Path(self.root).getFileSystem(conf)
        except Exception as exc:
            raise ArchivePathError(
                "to", f"cannot use {root!r} as an archive location: {_reason(exc)}"
            ) from None

    def table_path(self, table: str) -> str:
        return f"{self.root}/{table}"

    def check_writable(self) -> None:
        """Create the root and probe it with a file; ArchivePathError if that fails."""
        probe = self._Path(f"{self.root}/{RUNS_DIR}/.probe")
        try:
            self._fs.mkdirs(self._Path(f"{self.root}/{RUNS_DIR}"))
            stream = self._fs.create(probe, True)
            stream.close()
            self._fs.delete(probe, False)
        except Exception as exc:
            raise ArchivePathError("to", f"{self.root!r} is not writable: {_reason(exc)}") from None

    # ------------------------------------------------------------ manifests

    def _manifest_path(self, run_id: str, tmp: bool = False) -> Any:
        name = f".{run_id}.json.tmp" if tmp else f"{run_id}.json"
        return self._Path(f"{self.root}/{RUNS_DIR}/{name}")

    def save(self, manifest: Manifest) -> None:
        """Replace the run's manifest: write a temporary file, then rename it into place."""
        tmp, final = self._manifest_path(manifest.run_id, True), self._manifest_path(manifest.run_id)
        stream = self._fs.create(tmp, True)
        try:
            stream.write(bytearray(json.dumps(asdict(manifest)).encode()))
        finally:
            stream.close()
        self._fs.delete(final, False)
        if not self._fs.rename(tmp, final):
            raise OSError(f"could not rename {tmp} to {final}")

    def manifests(self) -> list[Manifest]:
        """Every run's manifest, oldest first (a manifest caught mid-replace is recovered)."""
        runs_dir = self._Path(f"{self.root}/{RUNS_DIR}")
        if not self._fs.exists(runs_dir):
            return []
        found: dict[str, Manifest] = {}
        for status in self._fs.listStatus(runs_dir):
            name = status.getPath().getName()
            if not name.endswith(".json") and not name.endswith(".json.tmp"):
                continue
            manifest = self._load(status.getPath())
            if manifest is None:
                continue
            # A temporary file is the newer state when the final one is missing (crash mid-replace).
            if name.endswith(".json") or manifest.run_id not in found:
                found[manifest.run_id] = manifest
        return [found[k] for k in sorted(found)]

    def _load(self, path: Any) -> Manifest | None:
        stream = self._fs.open(path)
        try:
            reader = self.spark.sparkContext._jvm.java.io.BufferedReader(  # type: ignore[union-attr]  # py4j gateway
                self.spark.sparkContext._jvm.java.io.InputStreamReader(stream, "UTF-8")  # type: ignore[union-attr]  # py4j gateway
            )
            text = "".join(iter(reader.readLine, None))
        finally:
            stream.close()
        try:
            return Manifest(**json.loads(text))
        except (ValueError, TypeError):
            return None  # a half-written temporary file: its run is redone

    def delete_manifest(self, run_id: str) -> None:
        self._fs.delete(self._manifest_path(run_id), False)
        self._fs.delete(self._manifest_path(run_id, True), False)

    # ------------------------------------------------------------ data files

    def delete_run_files(self, run_id: str) -> None:
        """Remove every file a run wrote (its ``run_id=`` directories in each table)."""
        for table in TABLES:
            pattern = self._Path(f"{self.table_path(table)}/*/*/run_id={run_id}")
            for status in self._fs.globStatus(pattern) or []:
                self._fs.delete(status.getPath(), True)

    def has_table(self, table: str) -> bool:
        return bool(self._fs.exists(self._Path(self.table_path(table))))


def _reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return next((line for line in text if "Exception" in line or "denied" in line), text[0] if text else "")


__all__ = ["RUNS_DIR", "TABLES", "ArchiveStore", "Manifest", "RunState"]
