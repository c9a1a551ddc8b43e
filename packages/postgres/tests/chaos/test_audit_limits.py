"""The chaos audit's reading of the workers' liveness lapses (no server needed)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from .audit import Execution
from .audit_limits import Lapse, ran_again_after_a_lapse, read_lapses

T0 = datetime(2026, 12, 7, 14, 35, 0).timestamp()


def _line(at: float, worker_id: str) -> str:
    # The CLI's format: "%(asctime)s %(levelname)s %(name)s: %(message)s", local time.
    stamp = datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S,%f")[:23]
    return (
        f"{stamp} WARNING jobchain.worker.liveness: worker {worker_id} has had no heartbeat confirmed "
        "for 6.0 s: other workers may presume it dead and hand its jobs on, so it aborts its attempts "
        "and starts nothing until a heartbeat gets through"
    )


def _detail(
    first_start: float, rescued_at: float, holder: str = "w-0", reason: str = "lease_expired"
) -> dict[str, object]:
    return {
        "rescue_reason": reason,
        "rescued_from": holder,
        "rescued_at": rescued_at,
        "executions": [
            Execution("j", 1, 1, "chaos.work", first_start),
            Execution("j", 1, 2, "chaos.work", rescued_at + 0.05),
        ],
    }


def test_lapses_are_read_from_the_worker_logs_with_their_time(tmp_path: Path) -> None:
    log = tmp_path / "worker-0.log"
    log.write_text(
        "\n".join(
            [
                "2026-12-07 14:34:59,000 INFO jobchain.worker: worker w-0 processing chaos.work",
                _line(T0 + 2.5, "w-0"),
                "garbage line has had no heartbeat confirmed",
            ]
        )
    )
    [lapse] = read_lapses([log, tmp_path / "missing.log"])
    assert lapse.worker_id == "w-0"
    assert abs(lapse.at - (T0 + 2.5)) < 0.001


def test_a_job_the_lapsing_worker_held_is_explained() -> None:
    assert ran_again_after_a_lapse(_detail(T0, T0 + 3.0), [Lapse("w-0", T0 + 1.0)])


def test_a_lapse_elsewhere_or_at_another_time_explains_nothing() -> None:
    detail = _detail(T0, T0 + 3.0)
    assert not ran_again_after_a_lapse(detail, [Lapse("w-1", T0 + 1.0)])  # another worker
    assert not ran_again_after_a_lapse(detail, [Lapse("w-0", T0 - 0.5)])  # before the job began
    assert not ran_again_after_a_lapse(detail, [Lapse("w-0", T0 + 3.5)])  # after the rescue
    assert not ran_again_after_a_lapse(detail, [])


def test_only_an_expired_lease_is_explained_by_a_lapse() -> None:
    detail = _detail(T0, T0 + 3.0, reason="worker_dead")
    assert not ran_again_after_a_lapse(detail, [Lapse("w-0", T0 + 1.0)])
    assert not ran_again_after_a_lapse({"rescue_reason": "lease_expired"}, [Lapse("w-0", T0)])
