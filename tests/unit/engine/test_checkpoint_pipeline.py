"""Background checkpoint writes: order, one write in flight, errors surface, flush means committed."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_dj.engine.storage.checkpoint_pipeline import CheckpointPipeline


def test_writes_commit_in_order_with_at_most_one_in_flight():
    log: list[str] = []
    in_flight = {"now": 0, "max": 0}
    lock = threading.Lock()

    def write(name: str, seconds: float):
        def run():
            with lock:
                in_flight["now"] += 1
                in_flight["max"] = max(in_flight["max"], in_flight["now"])
            time.sleep(seconds)
            log.append(name)
            with lock:
                in_flight["now"] -= 1

        return run

    pipe = CheckpointPipeline(enabled=True)
    pipe.submit(write("op0", 0.2))
    assert log == []  # submit returned while the write still runs: that is the overlap
    pipe.submit(write("op1", 0.0))  # waits for op0 first
    assert log[:1] == ["op0"]
    pipe.flush()
    assert log == ["op0", "op1"] and in_flight["max"] == 1


def test_a_failed_write_fails_the_next_boundary_with_its_own_error():
    pipe = CheckpointPipeline(enabled=True)

    def disk_full():
        raise OSError(28, "No space left on device")

    pipe.submit(disk_full)
    with pytest.raises(OSError, match="No space left"):
        pipe.submit(lambda: None)
    pipe.submit(disk_full)
    with pytest.raises(OSError, match="No space left"):
        pipe.flush()
    pipe.flush()  # nothing pending any more


def test_flush_quietly_logs_instead_of_replacing_the_first_error(caplog):
    pipe = CheckpointPipeline(enabled=True)
    pipe.submit(lambda: (_ for _ in ()).throw(OSError("torn write")))
    pipe.flush_quietly()
    assert "a background checkpoint write also failed: OSError: torn write" in caplog.text


def test_disabled_pipeline_writes_synchronously(monkeypatch):
    monkeypatch.setenv("DJ_CHECKPOINT_PIPELINE", "0")
    pipe = CheckpointPipeline()
    seen: list[str] = []
    pipe.submit(lambda: seen.append(threading.current_thread().name))
    assert seen == [threading.current_thread().name]


def test_a_bad_parallel_export_threshold_names_the_variable(monkeypatch):
    from airflow_provider_dj.engine.output.parts import parallel_export_min_rows

    monkeypatch.setenv("DJ_PARALLEL_EXPORT_MIN_ROWS", "lots")
    with pytest.raises(ValueError, match=r"DJ_PARALLEL_EXPORT_MIN_ROWS='lots' is not a whole number of rows"):
        parallel_export_min_rows()
