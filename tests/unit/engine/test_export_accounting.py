"""Row accounting (invariant 6) and export behaviour."""

from __future__ import annotations

import json

import pytest

from airflow_provider_dj.engine.job.export import AccountingError, check_accounting


def _acct(i, rin, out, filtered=0, dup=0, failed=0):
    return {
        "op_index": i,
        "op_name": f"op{i}",
        "rows_in": rin,
        "rows_out": out,
        "filtered": filtered,
        "duplicates": dup,
        "failed": failed,
        "duration_s": 0.1,
    }


def test_consistent_accounting_is_summed_per_op():
    per = {0: [_acct(0, 10, 10), _acct(1, 10, 7, filtered=3)], 1: [_acct(0, 5, 5), _acct(1, 5, 4, failed=1)]}
    totals = check_accounting(per, 2, {0: 10, 1: 5})
    assert totals[1]["rows_in"] == 15 and totals[1]["rows_out"] == 11
    assert totals[1]["filtered"] == 3 and totals[1]["failed"] == 1


@pytest.mark.parametrize(
    "per",
    [
        {0: [_acct(0, 10, 9), _acct(1, 9, 9)]},  # a row vanished in op 0
        {0: [_acct(0, 10, 10), _acct(1, 8, 8)]},  # op 1 saw fewer rows than op 0 produced
        {0: [_acct(0, 11, 11), _acct(1, 11, 11)]},  # more rows than the partition has
        {0: [_acct(0, 10, 10)]},  # op 1 missing
    ],
)
def test_mismatch_fails(per):
    with pytest.raises(AccountingError):
        check_accounting(per, 2, {0: 10})


def test_export_keeps_stats_when_asked(tmp_path):
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.setup import prepare_job
    from airflow_provider_dj.engine.runner.local import run_prepared_job
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    data = write_corpus(str(tmp_path / "in.jsonl"), 60, seed=5)
    for keep, suffix in ((True, "jsonl"), (False, "parquet")):
        out = tmp_path / f"out_{keep}.{suffix}"
        (tmp_path / "r.yaml").write_text(
            f"dataset_path: {data}\nexport_path: {out}\nkeep_stats_in_res_ds: {str(keep).lower()}\n"
            "partition: {mode: manual, num_of_partitions: 3}\nprocess:\n  - text_length_filter: {min_len: 30}\n"
        )
        job = prepare_job(load_recipe(tmp_path / "r.yaml"), job_id=f"k{keep}")
        summary = run_prepared_job(job).summary
        if keep:
            rows = [json.loads(line) for line in open(out)]
            assert all(r["__dj__stats__"]["text_len"] >= 30 for r in rows)
        else:
            import pyarrow.parquet as pq

            t = pq.read_table(out)
            assert "__dj__stats__" not in t.column_names
            assert t.num_rows == summary["export"]["rows"]
