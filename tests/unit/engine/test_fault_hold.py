"""The ``delay`` fault's ``until``: a hold that ends when a file appears, bounded by ``seconds``."""

from __future__ import annotations

import threading
import time

from airflow_provider_dj.engine.jobdir.faults import maybe_fail
from airflow_provider_dj.engine.jobdir.layout import FAULT_FIRED_DIR

#: The holds below are bounded far above what watching for a file takes, so "it ended early"
#: is told from "it ran to its bound" with no timing margin at stake.
BOUND_S = 600


def _delay(**extra) -> list[dict]:
    return [{"point": "op_start", "partition_id": 0, "op_index": 1, "kind": "delay", "times": 1, **extra}]


def test_a_hold_with_until_ends_when_the_file_appears(tmp_path):
    marker = tmp_path / "control" / "go.json"

    def release() -> None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("{}")

    t0 = time.monotonic()
    threading.Timer(0.2, release).start()
    maybe_fail(str(tmp_path), _delay(seconds=BOUND_S, until="control/go.json"), 0, 1, point="op_start")
    assert marker.exists()
    assert time.monotonic() - t0 < BOUND_S / 2
    assert len(list((tmp_path / FAULT_FIRED_DIR).iterdir())) == 1


def test_a_hold_with_until_ends_at_its_bound_without_the_file(tmp_path):
    maybe_fail(str(tmp_path), _delay(seconds=0.1, until="never"), 0, 1, point="op_start")
    assert not (tmp_path / "never").exists()
    assert len(list((tmp_path / FAULT_FIRED_DIR).iterdir())) == 1


def test_a_fired_hold_does_not_hold_again(tmp_path):
    faults = _delay(seconds=BOUND_S, until="go")
    (tmp_path / "go").write_text("")
    maybe_fail(str(tmp_path), faults, 0, 1, point="op_start")
    (tmp_path / "go").unlink()
    t0 = time.monotonic()
    maybe_fail(str(tmp_path), faults, 0, 1, point="op_start")  # times: 1 already fired
    assert time.monotonic() - t0 < BOUND_S / 2
