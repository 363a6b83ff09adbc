"""EventCache returns what read_events returns, parsing only the bytes appended since the last read."""

from __future__ import annotations

import json

from airflow_provider_dj.engine.jobdir.event_cache import EventCache
from airflow_provider_dj.engine.jobdir.events import read_events


def _line(t: float, writer: str, seq: int, **kw) -> str:
    return json.dumps({"event_type": "op_complete", "timestamp": t, "writer": writer, "seq": seq, **kw}) + "\n"


def test_appended_torn_and_replaced_files_read_like_read_events(tmp_path):
    a, b = tmp_path / "events_a.jsonl", tmp_path / "events_b.jsonl"
    a.write_text(_line(1.0, "a", 1) + _line(3.0, "a", 2))
    b.write_text(_line(2.0, "b", 1) + '{"event_type": "op_comp')  # torn: its writer is mid-line
    cache = EventCache()
    assert cache.read(str(tmp_path)) == read_events(str(tmp_path))
    assert [e["timestamp"] for e in cache.read(str(tmp_path))] == [1.0, 2.0, 3.0]
    with open(b, "a") as fh:  # the writer completes its line and adds one
        fh.write('lete", "timestamp": 4.0, "writer": "b", "seq": 2}\n' + _line(5.0, "b", 3, x=float("nan")))
    got = cache.read(str(tmp_path))
    assert [e["timestamp"] for e in got] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [e["timestamp"] for e in got] == [e["timestamp"] for e in read_events(str(tmp_path))]
    a.write_text(_line(0.5, "a", 1))  # replaced by a shorter file
    (tmp_path / "events_c.jsonl").write_text(_line(6.0, "c", 1))
    assert [e["timestamp"] for e in cache.read(str(tmp_path))] == [0.5, 2.0, 4.0, 5.0, 6.0]
    (tmp_path / "events_c.jsonl").unlink()
    assert [e["timestamp"] for e in cache.read(str(tmp_path))] == [0.5, 2.0, 4.0, 5.0]


def test_only_the_newest_jobs_are_kept(tmp_path):
    cache = EventCache(max_jobs=1)
    for name in ("j1", "j2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "events_w.jsonl").write_text(_line(1.0, name, 1))
        assert cache.read(str(tmp_path / name))[0]["writer"] == name
    assert list(cache._jobs) == [str(tmp_path / "j2")]
    assert cache.read(str(tmp_path / "missing")) == []


def test_reading_one_event_type_skips_other_lines_unparsed(tmp_path, monkeypatch):
    from airflow_provider_dj.engine.jobdir import events

    start = json.dumps({"event_type": "job_start", "timestamp": 2.0, "writer": "v", "seq": 1, "airflow_run_id": "r"})
    other = _line(1.0, "a", 1, error_message="job_start")  # names the type elsewhere: parsed, then dropped
    compact = '{"event_type":"job_start","timestamp":3.0,"writer":"w","seq":1}'  # any JSON writer's spacing
    (tmp_path / "events_a.jsonl").write_text(other + _line(4.0, "a", 2) + start + "\n" + compact + "\n")
    parsed = []
    real = events.loads_json
    monkeypatch.setattr(events, "loads_json", lambda line: parsed.append(line) or real(line))
    got = read_events(str(tmp_path), "job_start")
    assert [(e["writer"], e["timestamp"]) for e in got] == [("v", 2.0), ("w", 3.0)]
    assert len(parsed) == 3  # the plain op_complete line was never parsed
    parsed.clear()
    assert len(read_events(str(tmp_path))) == 4 and len(parsed) == 4
