"""Produce the export-field fixtures by running Data-Juicer 1.6.1's default executor.

Run with the Data-Juicer venv's python (``regenerate.sh`` beside this file
does that); our package never imports ``data_juicer``.  ``input.jsonl`` is
hand-written: rows carrying Data-Juicer-internal fields (``__dj__suffix__``,
``__dj__source_file__``, ``__dj__uid``, ``__dj__meta__``, hash fields) beside
ordinary ones.  For each variant of ``VARIANTS`` (the export keys), DJ runs
``suffix_filter`` + ``text_length_filter`` and exports; ``expected/<variant>.jsonl``
is its export, ``expected/<variant>_stats.jsonl`` the stats file it writes
beside it.  tests/unit/engine/test_export_fields.py compares our exports.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROCESS = [{"suffix_filter": {"suffixes": [".txt"]}}, {"text_length_filter": {"min_len": 10}}]
VARIANTS = {
    "default": {},
    "keep_stats": {"keep_stats_in_res_ds": True},
    "keep_hashes": {"keep_hashes_in_res_ds": True},
    "keep_both": {"keep_stats_in_res_ds": True, "keep_hashes_in_res_ds": True},
    "not_in_parallel": {"export_in_parallel": False, "export_shard_size": 0, "export_type": "jsonl"},
}


def main() -> None:
    import yaml
    from data_juicer.config import init_configs
    from data_juicer.core import DefaultExecutor

    with open(os.path.join(HERE, "variants.json"), "w", encoding="utf-8") as f:
        json.dump({"process": PROCESS, "variants": VARIANTS}, f, indent=2, sort_keys=True)
        f.write("\n")
    for name, keys in VARIANTS.items():
        tmp = tempfile.mkdtemp()
        try:
            export = os.path.join(tmp, "out", "result.jsonl")
            recipe = {
                "project_name": f"export_fields_{name}",
                "dataset_path": os.path.join(HERE, "input.jsonl"),
                "export_path": export,
                "work_dir": tmp,
                "np": 1,
                "process": PROCESS,
                **keys,
            }
            path = os.path.join(tmp, "recipe.yaml")
            with open(path, "w", encoding="utf-8") as f:
                yaml.safe_dump(recipe, f)
            DefaultExecutor(init_configs(["--config", path])).run()
            shutil.copy(export, os.path.join(HERE, "expected", f"{name}.jsonl"))
            stats = export.replace(".jsonl", "_stats.jsonl")
            if os.path.exists(stats):
                shutil.copy(stats, os.path.join(HERE, "expected", f"{name}_stats.jsonl"))
            print(name, sum(1 for _ in open(export, encoding="utf-8")), "rows", file=sys.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
