"""The review gate before export (engine/job/review.py): the ``review:`` section, the crossing decision
against the previous successful job, and ``run_job``'s gate, on real job directories."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe
from airflow_provider_dj.engine.config.schema import recipe_from_dict
from airflow_provider_dj.engine.jobdir.events import read_events
from tests.unit.engine.recipe_helpers import small_recipe

PROCESS = "  - whitespace_normalization_mapper:\n  - words_num_filter: {min_num: 20, max_num: 2000}\n"


def _recipe(tmp_path, review: str = "") -> str:
    path = small_recipe(tmp_path, "gated", PROCESS, rows=120, seed=7)
    if review:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(review)
    return path


@pytest.mark.parametrize(
    ("review", "key", "words"),
    [
        ("review:\n  timeout_s: 60\n", "review", "at least one bound"),
        ("review:\n  max_removed_fraction: 1.5\n", "review.max_removed_fraction", "from 0 to 1"),
        ("review:\n  max_removed_change: 0.1\n  on_timeout: maybe\n", "review.on_timeout", "reject, approve"),
        ("review:\n  max_removed_fraction: 0.1\n  timeout_s: 0\n", "review.timeout_s", "seconds > 0"),
        ("review:\n  max_removed_fractoin: 0.1\n", "review.max_removed_fractoin", "unknown key"),
    ],
)
def test_a_bad_review_section_is_refused_naming_the_key(tmp_path, review, key, words):
    with pytest.raises(RecipeError) as err:
        load_recipe(_recipe(tmp_path, review))
    assert err.value.key == key
    assert words in str(err.value)


def test_the_review_section_round_trips_and_is_absent_without_it(tmp_path):
    plain = load_recipe(_recipe(tmp_path))
    assert plain.review is None and "review" not in plain.to_dict()
    gated = load_recipe(_recipe(tmp_path, "review:\n  max_removed_fraction: 0.25\n  timeout_s: 600\n"))
    assert gated.review.to_dict() == {
        "max_removed_fraction": 0.25,
        "max_removed_change": None,
        "timeout_s": 600.0,
        "on_timeout": "reject",
        "sample_rows": 5,
    }
    assert recipe_from_dict(json.loads(json.dumps(gated.to_dict()))) == gated


def _review_events(job_dir: str) -> list[tuple[str, str]]:
    return [(e["event_type"], e["status"]) for e in read_events(job_dir) if e["event_type"].startswith("review_")]


def test_no_bound_crossed_exports_at_once_and_records_the_pass(tmp_path):
    from airflow_provider_dj.engine import run_job

    recipe = _recipe(tmp_path, "review:\n  max_removed_fraction: 0.99\n")
    result = run_job(recipe, job_id="night1", workers=1)
    assert result.rows > 0 and os.path.exists(result.export_path)
    assert _review_events(result.job_dir) == [("review_decided", "pass")]


def test_a_crossed_bound_without_an_answer_fails_before_export_and_a_resume_exports(tmp_path):
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.job.review import ReviewRejectedError

    recipe = _recipe(tmp_path, "review:\n  max_removed_fraction: 0.01\n  sample_rows: 2\n")
    job_dir = str(tmp_path / "work" / "night1")
    with pytest.raises(ReviewRejectedError) as err:
        run_job(recipe, job_id="night1", workers=1)
    assert "op 1 words_num_filter removed" in str(err.value)
    assert "review.max_removed_fraction 1.0%" in str(err.value)
    assert "--resume night1" in str(err.value)
    assert not (tmp_path / "out.jsonl").exists()
    assert os.listdir(os.path.join(job_dir, "checkpoints"))  # kept for the resume
    assert _review_events(job_dir) == [("review_decided", "review"), ("review_answered", "rejected")]
    decided = next(e for e in read_events(job_dir) if e["event_type"] == "review_decided")
    assert [(c["op_name"], c["bound"]) for c in decided["crossed"]] == [("words_num_filter", "max_removed_fraction")]

    seen = []
    result = run_job(recipe, resume="night1", workers=1, review=lambda r: seen.append(r) or True)
    assert result.rows > 0 and (tmp_path / "out.jsonl").exists()
    review = seen[0]
    assert len(review.samples) == 2
    assert all(s["fate"] == "filtered" and s["op_name"] == "words_num_filter" for s in review.samples)
    assert all("words" in s["reason"] for s in review.samples)
    assert _review_events(job_dir)[-1] == ("review_answered", "approved")


def test_the_change_bound_compares_with_the_previous_successful_job_of_the_recipe(tmp_path):
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.job.review import decide_review

    recipe = _recipe(tmp_path, "review:\n  max_removed_change: 0.05\n")
    first = run_job(recipe, job_id="night1", workers=1)
    assert _review_events(first.job_dir) == [("review_decided", "pass")]  # no previous job: nothing to compare
    # The next night removes far more: the same recipe with a stricter filter.
    text = open(recipe, encoding="utf-8").read().replace("min_num: 20", "min_num: 60")
    with open(recipe, "w", encoding="utf-8") as fh:
        fh.write(text)
    second = run_job(recipe, job_id="night2", workers=1, review=lambda r: True)
    review = decide_review(second.job_dir)
    assert review.previous_job_id == "night1"
    (crossed,) = review.crossed
    assert (crossed["op_name"], crossed["bound"], crossed["previous_job_id"]) == (
        "words_num_filter",
        "max_removed_change",
        "night1",
    )
    assert crossed["value"] - crossed["previous"] > 0.05
    prev = {p["op_name"]: p for p in review.previous_funnel}
    assert prev["words_num_filter"]["removed_fraction"] == pytest.approx(crossed["previous"])


def test_a_rejected_job_resumed_with_a_raised_bound_is_checked_against_the_new_bound(tmp_path):
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.job.review import ReviewRejectedError

    recipe = _recipe(tmp_path, "review:\n  max_removed_fraction: 0.01\n")
    job_dir = str(tmp_path / "work" / "night1")
    with pytest.raises(ReviewRejectedError):
        run_job(recipe, job_id="night1", workers=1)
    assert json.load(open(os.path.join(job_dir, "metadata", "review_bounds.json")))["review"][
        "max_removed_fraction"
    ] == pytest.approx(0.01)
    text = open(recipe, encoding="utf-8").read().replace("max_removed_fraction: 0.01", "max_removed_fraction: 0.9")
    with open(recipe, "w", encoding="utf-8") as fh:
        fh.write(text)

    result = run_job(recipe, resume="night1", workers=1)  # no one to ask: only a pass exports

    assert result.rows > 0 and (tmp_path / "out.jsonl").exists()
    assert _review_events(job_dir) == [
        ("review_decided", "review"),
        ("review_answered", "rejected"),
        ("review_decided", "pass"),
    ]
    bounds = json.load(open(os.path.join(job_dir, "metadata", "review_bounds.json")))["review"]
    assert bounds["max_removed_fraction"] == pytest.approx(0.9)
    # The job's first recipe stays recorded as it was: the bounds file is what the gate reads.
    first = json.load(open(os.path.join(job_dir, "metadata", "effective_config.json")))["review"]
    assert first["max_removed_fraction"] == pytest.approx(0.01)


def test_a_resume_that_drops_the_review_section_exports_without_a_gate(tmp_path):
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.job.review import ReviewRejectedError

    recipe = _recipe(tmp_path, "review:\n  max_removed_fraction: 0.01\n")
    with pytest.raises(ReviewRejectedError):
        run_job(recipe, job_id="night1", workers=1)
    text = open(recipe, encoding="utf-8").read()
    with open(recipe, "w", encoding="utf-8") as fh:
        fh.write(text[: text.index("review:")])

    result = run_job(recipe, resume="night1", workers=1)

    assert result.rows > 0 and (tmp_path / "out.jsonl").exists()
    assert _review_events(result.job_dir) == [("review_decided", "review"), ("review_answered", "rejected")]


def test_the_terminal_prompt_lays_the_review_out_without_markdown_markup():
    import re

    from airflow_provider_dj.engine.job.review import Review, render_for_terminal

    funnel = [
        {"op_index": 0, "op_name": "whitespace_normalization_mapper", "rows_in": 100, "rows_out": 100},
        {"op_index": 1, "op_name": "words_num_filter", "rows_in": 100, "rows_out": 80},
    ]
    for op in funnel:
        op["removed"] = op["rows_in"] - op["rows_out"]
        op["removed_fraction"] = op["removed"] / op["rows_in"]
    review = Review(
        job_id="j1",
        crossed=[
            {"op_index": 1, "op_name": "words_num_filter", "bound": "max_removed_fraction", "limit": 0.01, "value": 0.2}
        ],
        funnel=funnel,
        resume_command="dj-airflow run r.yaml --resume j1",
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", render_for_terminal(review, 100))
    assert "**" not in text and "|---" not in text and "`" not in text
    assert "Bounds crossed" in text
    assert "op 1 words_num_filter removed 20.0% of its input (review.max_removed_fraction 1.0%)" in text
    row = next(line for line in text.splitlines() if "1 words_num_filter" in line and "(20.0%)" in line)
    assert row.split()[2:5] == ["100", "80", "20"]
    assert "dj-airflow run r.yaml --resume j1" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_the_previous_job_comes_from_the_project_pointer_and_a_scan_when_it_is_gone(tmp_path, monkeypatch):
    import shutil

    from airflow_provider_dj.core import fs
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.job import review as review_mod
    from airflow_provider_dj.engine.jobdir.layout import latest_completed_file

    recipe = _recipe(tmp_path, "review:\n  max_removed_change: 0.5\n")
    work = str(tmp_path / "work")
    run_job(recipe, job_id="night1", workers=1)
    run_job(recipe, job_id="night2", workers=1)
    pointer = json.load(open(latest_completed_file(work, "gated")))
    assert (pointer["project_name"], pointer["job_id"]) == ("gated", "night2")
    os.makedirs(os.path.join(work, "night3"))

    real_listdir = fs.listdir
    monkeypatch.setattr(fs, "listdir", lambda path: pytest.fail(f"scanned {path}"))
    assert review_mod.previous_successful_job(os.path.join(work, "night3"), "gated")["job_id"] == "night2"
    monkeypatch.setattr(fs, "listdir", real_listdir)

    shutil.rmtree(os.path.join(work, "night2"))  # as dj-airflow gc would: the pointer names a job that is gone
    assert review_mod.previous_successful_job(os.path.join(work, "night3"), "gated")["job_id"] == "night1"
    assert review_mod.previous_successful_job(os.path.join(work, "night3"), "another_project") is None
