"""`dj-airflow why` on a job that `dj-airflow run` finished: by input row, by export row, by field value."""

from __future__ import annotations

import json

import pytest

from airflow_provider_dj.cli.main import main

pytestmark = pytest.mark.integration

ROWS = [
    {"id": "s0", "text": "write to ann@example.org for the full schedule"},  # changed by op 0
    {"id": "s1", "text": "short"},  # filtered by op 1 (1 word)
    {"id": "s2", "text": "a plain sentence that stays the same"},  # kept
    {"id": "s3", "text": "a plain sentence that stays the same"},  # duplicate of row 2 (op 2)
    {"id": "s4", "text": "one more plain sentence to keep"},  # kept
]
RECIPE = """\
dataset_path: {data}
export_path: {export}
work_dir: {work}
partition: {{mode: manual, num_of_partitions: 2}}
checkpoint: {{strategy: every_op}}
process:
  - clean_email_mapper:
  - words_num_filter: {{min_num: 3}}
  - document_deduplicator:
"""


def test_why_by_row_export_row_and_field(tmp_path, airflow_home, ray_cluster, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    recipe = tmp_path / "why.yaml"
    export = tmp_path / "out.jsonl"
    recipe.write_text(RECIPE.format(data=data, export=export, work=tmp_path / "work"))
    assert main(["run", str(recipe), "--job-id", "why_job"]) == 0
    assert [json.loads(x)["id"] for x in export.read_text().splitlines()] == ["s0", "s2", "s4"]
    capsys.readouterr()
    wd = ["--work-dir", str(tmp_path / "work")]

    assert main(["why", "why_job", "--row", "1", *wd]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "input row 1 (p0 rows 0-2): filtered"
    assert "  op 1 words_num_filter [filter]: filtered: words_num_filter removed it: num_words 1 outside" in out
    assert "  op 2 document_deduplicator [deduplicator]: not run" in out

    assert main(["why", "why_job", "--export-row", "2", *wd]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "input row 4 (p1 rows 3-4): kept, export row 2"

    assert main(["why", "why_job", "--where", "id=s3", *wd]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "input row 3 (p1 rows 3-4): duplicate"
    assert "document_deduplicator removed it as a duplicate of input row 2" in out

    assert main(["why", "why_job", "--row", "0", "--json", *wd]) == 0
    [path] = json.loads(capsys.readouterr().out)
    assert (path["fate"], path["export_row"]) == ("kept", 0)
    assert path["steps"][0]["fate"] == "changed" and path["steps"][0]["before"] == ROWS[0]["text"]
    assert path["steps"][0]["after"] == "write to  for the full schedule"  # op 0's checkpoint (every_op)

    assert main(["why", "why_job", "--export-row", "3", *wd]) == 2
    assert "export row 3 is past the export's end (3 rows)" in capsys.readouterr().err
