"""airflow_provider_dj/settings.py: one declaration per knob, read once, exposed as Airflow's [dj] section."""

from __future__ import annotations

import ast
import os
import re

import pytest

from airflow_provider_dj import settings
from airflow_provider_dj.provider_info import get_provider_info

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Environment names that are not knobs: none (the CLI hands its decisions to the operators as
# arguments, operators/local_run.py).
INTERNAL: set[str] = set()


def test_defaults_and_types_when_nothing_is_set(monkeypatch):
    for s in settings.SETTINGS:
        monkeypatch.delenv(s.env_name, raising=False)
        monkeypatch.delenv(s.airflow_env_name, raising=False)
    values = settings.current()
    assert values["task_retries"] == 2
    assert values["task_retry_delay_s"] == 10.0
    assert values["delta_checkpoints"] is True
    assert values["probe_force_cpu"] is False
    assert values["work_dir"] is None
    assert settings.source("task_retries") is None


def test_legacy_name_is_read_and_airflow_name_wins(monkeypatch):
    monkeypatch.setenv("DJ_TASK_RETRIES", "5")
    assert settings.get("task_retries") == 5
    assert settings.source("task_retries") == "DJ_TASK_RETRIES"
    monkeypatch.setenv("AIRFLOW__DJ__TASK_RETRIES", "7")
    assert settings.get("task_retries") == 7
    assert settings.source("task_retries") == "AIRFLOW__DJ__TASK_RETRIES"


def test_values_are_read_once_until_reset():
    os.environ["DJ_LOCK_STALE_S"] = "123"
    try:
        settings.reset()
        assert settings.get("lock_stale_s") == 123.0
        os.environ["DJ_LOCK_STALE_S"] = "456"  # not through monkeypatch: no reset
        assert settings.get("lock_stale_s") == 123.0
        settings.reset()
        assert settings.get("lock_stale_s") == 456.0
    finally:
        del os.environ["DJ_LOCK_STALE_S"]
        settings.reset()


def test_live_fault_seam_is_read_at_each_use():
    os.environ["DJ_STORAGE_ENOSPC"] = "a@2"
    try:
        assert settings.raw("storage_enospc") == "a@2"
        del os.environ["DJ_STORAGE_ENOSPC"]
        assert settings.raw("storage_enospc") is None
    finally:
        os.environ.pop("DJ_STORAGE_ENOSPC", None)


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("DJ_DELTA_CHECKPOINTS", "0", False),
        ("DJ_DELTA_CHECKPOINTS", "false", True),  # as before: only 0 turns a default-on knob off
        ("AIRFLOW__DJ__DELTA_CHECKPOINTS", "false", False),  # Airflow's booleans under Airflow's name
        ("DJ_PROBE_FORCE_CPU", "YES", True),
        ("DJ_PROBE_FORCE_CPU", "on", False),
        ("AIRFLOW__DJ__PROBE_FORCE_CPU", "t", True),
    ],
)
def test_booleans_keep_each_names_meaning(monkeypatch, name, raw, expected):
    monkeypatch.setenv(name, raw)
    key = name.split("DJ_", 1)[1].lower().lstrip("_")
    assert settings.get(key) is expected


def test_bad_values_name_the_variable(monkeypatch):
    monkeypatch.setenv("DJ_TASK_RETRIES", "two")
    with pytest.raises(settings.SettingError, match="DJ_TASK_RETRIES='two' is not a whole number"):
        settings.get("task_retries")
    monkeypatch.setenv("AIRFLOW__DJ__CLI_FAST_EXIT", "maybe")
    with pytest.raises(settings.SettingError, match="AIRFLOW__DJ__CLI_FAST_EXIT='maybe' is not a boolean"):
        settings.get("cli_fast_exit")


def test_on_disk_settings_are_the_delta_checkpoints(monkeypatch):
    monkeypatch.setenv("DJ_DELTA_CHECKPOINTS", "0")
    assert settings.on_disk() == {"delta_checkpoints": False}


def test_provider_config_section_lists_every_setting_with_its_default():
    section = get_provider_info()["config"][settings.SECTION]
    assert list(section["options"]) == [s.key for s in settings.SETTINGS]
    assert section["options"]["task_retries"]["default"] == "2"
    assert section["options"]["delta_checkpoints"] == {
        "description": settings.BY_KEY["delta_checkpoints"].doc + " Also DJ_DELTA_CHECKPOINTS.",
        "version_added": settings.VERSION_ADDED,
        "type": "boolean",
        "example": "0",
        "default": "True",
    }
    assert section["options"]["work_dir"]["default"] is None


def _dj_names_read_in(path: str) -> set[str]:
    """DJ_* names passed to os.environ.get / os.environ[...] / os.getenv in one source file."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = set()
    for node in ast.walk(tree):
        arg = None
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv"):
            arg = node.args[0] if node.args else None
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            arg = node.slice
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("DJ_"):
            names.add(arg.value)
    return names


def test_no_module_reads_a_declared_knob_from_the_environment_itself():
    declared = {s.env_name for s in settings.SETTINGS}
    found = {}
    for base in ("airflow_provider_dj", "dags"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, base)):
            for f in files:
                if f.endswith(".py") and f != "settings.py":
                    path = os.path.join(dirpath, f)
                    for name in _dj_names_read_in(path):
                        found.setdefault(name, []).append(os.path.relpath(path, ROOT))
    stray = {n: p for n, p in found.items() if n in declared}
    assert stray == {}, f"read settings.get() instead: {stray}"
    undeclared = {n: p for n, p in found.items() if n not in INTERNAL}
    assert undeclared == {}, f"declare these in airflow_provider_dj/settings.py: {undeclared}"


def test_generated_reference_has_a_row_per_setting():
    text = open(os.path.join(ROOT, "docs", "recipe_keys.md"), encoding="utf-8").read()
    section = text.split("\n## Settings\n", 1)[1]
    rows = re.findall(r"^\| `(AIRFLOW__DJ__\w+)`, `(DJ_\w+)` \| `(\w+)` \| (\w+) \| ([^|]+) \|", section, re.M)
    assert [(a, d, k, t) for a, d, k, t, _ in rows] == [
        (s.airflow_env_name, s.env_name, s.key, s.type) for s in settings.SETTINGS
    ]
    assert dict((k, v.strip()) for _, _, k, _, v in rows)["task_retries"] == "`2`"
