"""Without the extras: jobchain imports, and jobchain.telemetry says which extra to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCK = """
import sys

class Block:
    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Block(BLOCKED))
"""


def _run(blocked: set[str], code: str) -> subprocess.CompletedProcess[str]:
    script = BLOCK.replace("BLOCKED", repr(sorted(blocked))) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)


def test_jobchain_imports_without_either_extra() -> None:
    done = _run({"opentelemetry", "prometheus_client"}, "import jobchain, jobchain.worker; print('ok')")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_telemetry_without_either_extra_names_both_in_one_line() -> None:
    done = _run(
        {"opentelemetry", "prometheus_client"},
        """
        try:
            import jobchain.telemetry
        except ImportError as error:
            print(error)
        """,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    assert "pip install 'jobchain[otel]'" in lines[0]
    assert "jobchain[prometheus]" in lines[0]


def test_prometheus_alone_works_and_tracing_names_the_otel_extra() -> None:
    done = _run(
        {"opentelemetry"},
        """
        from jobchain.telemetry.prometheus import PrometheusMetrics
        PrometheusMetrics()
        try:
            from jobchain.telemetry import Tracing
        except ImportError as error:
            print(error)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.strip()
        == "jobchain.telemetry.tracing needs opentelemetry-api: pip install 'jobchain[otel]'"
    )


def test_the_prometheus_module_names_its_extra() -> None:
    done = _run(
        {"prometheus_client"},
        """
        try:
            import jobchain.telemetry.prometheus
        except ImportError as error:
            print(error)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "jobchain.telemetry.prometheus needs prometheus_client: pip install 'jobchain[prometheus]'"
    )
