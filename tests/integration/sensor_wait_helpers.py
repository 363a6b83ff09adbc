"""Helpers for test_checkpoint_sensor_modes: a CheckpointSensor that records its pokes.

Not a mock: it is the real sensor, with poke() results recorded so a test
can start producing checkpoints only after the sensor has looked once and
found nothing (so the test proves it waited), without any timing.
"""

from __future__ import annotations

import threading

from airflow_provider_dj.sensors.checkpoint import CheckpointSensor

POKES: list = []
FIRST_POKE = threading.Event()


def reset() -> None:
    POKES.clear()
    FIRST_POKE.clear()


class RecordingCheckpointSensor(CheckpointSensor):
    def poke(self, context):
        try:
            result = super().poke(context)
        except Exception as exc:
            POKES.append(type(exc).__name__)
            FIRST_POKE.set()
            raise
        POKES.append(result)
        FIRST_POKE.set()
        return result


DAG_STUB = '''"""airflow dag stub for the CheckpointSensor mode tests (removed after each test)."""
import json

import pendulum
from airflow.sdk import DAG

from tests.integration.sensor_wait_helpers import RecordingCheckpointSensor

cfg = json.load(open({cfg_path!r}))
with DAG(dag_id=cfg["dag_id"], schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False) as dag:
    RecordingCheckpointSensor(task_id="wait", job_dir=cfg["job_dir"], mode=cfg["mode"], deferrable=cfg["deferrable"],
                              poke_interval=cfg["poke_interval"], timeout=300, retries=2, **cfg["target"])
'''
