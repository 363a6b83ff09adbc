"""Settings that have no effect are said before any work: the count auto mode ignores, and the
Data-Juicer keys accepted for compatibility; by ``dj-airflow validate`` and by a run's first step."""

from __future__ import annotations

import logging

from airflow_provider_dj.engine.config.notices import unused_setting_notices
from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.testing.sample_corpus import write_corpus

AUTO_WITH_COUNT = "partition: {{num_of_partitions: 8}}\nprocess:\n  - words_num_filter: {{min_num: 3}}\n"


def _recipe(tmp_path, body: str) -> str:
    data = write_corpus(str(tmp_path / "in.jsonl"), 30, seed=2)
    path = tmp_path / "r.yaml"
    path.write_text(f"dataset_path: {data}\nexport_path: {tmp_path / 'out.jsonl'}\nwork_dir: {tmp_path / 'w'}\n" + body)
    return str(path)


def test_a_count_in_auto_mode_is_named_with_the_key_to_set(tmp_path):
    (notice,) = unused_setting_notices(load_recipe(_recipe(tmp_path, AUTO_WITH_COUNT.format())))
    assert notice.startswith("partition.num_of_partitions (8) is ignored: partition.mode is auto")
    assert "set partition.mode: manual" in notice


def test_no_notice_when_every_setting_counts(tmp_path):
    manual = "partition: {mode: manual, num_of_partitions: 8}\nprocess:\n  - words_num_filter: {min_num: 3}\n"
    assert unused_setting_notices(load_recipe(_recipe(tmp_path, manual))) == []
    assert unused_setting_notices(load_recipe(_recipe(tmp_path, "process:\n  - words_num_filter:\n"))) == []


def test_an_accepted_data_juicer_key_is_named(tmp_path):
    recipe = load_recipe(_recipe(tmp_path, "turbo: true\nprocess:\n  - words_num_filter:\n"))
    assert unused_setting_notices(recipe) == ["Recipe keys accepted for Data-Juicer compatibility but not used: turbo"]


def test_validate_prints_the_notice(tmp_path, capsys):
    from airflow_provider_dj.cli.main import main

    assert main(["validate", _recipe(tmp_path, AUTO_WITH_COUNT.format())]) == 0
    assert "  note: partition.num_of_partitions (8) is ignored: partition.mode is auto" in capsys.readouterr().out


def test_a_run_warns_before_it_plans_and_plans_by_size(tmp_path, caplog):
    from airflow_provider_dj.engine import run_job

    with caplog.at_level(logging.WARNING):
        result = run_job(_recipe(tmp_path, AUTO_WITH_COUNT.format()), workers=1)
    warned = [r.getMessage() for r in caplog.records if "num_of_partitions (8) is ignored" in r.getMessage()]
    assert len(warned) == 1
    assert result.summary["input"]["partitions"] == 1  # 30 rows, sized by target_size_mb: one partition
