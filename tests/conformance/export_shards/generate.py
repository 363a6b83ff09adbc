"""Produce the sharded-export fixtures by running Data-Juicer 1.6.1's default executor.

Run with the Data-Juicer venv's python (``regenerate.sh`` beside this file does
that); our package never imports ``data_juicer``.  ``input.jsonl`` is written
here from a seeded generator (20 rows, some with non-ASCII text, a nested
``meta`` field).  For each variant of ``VARIANTS`` (an ``export_shard_size``),
DJ runs ``whitespace_normalization_mapper`` and exports with that shard size;
every file it writes beside ``export_path`` is copied unchanged into
``expected/<variant>/``.  ``variants.json`` records the process, each
variant's shard size, and what DJ measured: ``dataset_nbytes`` (the size its
shard-count rule reads), the shard files in order and each one's row count.

The process is a mapper only, on purpose: after a mapper DJ's dataset has no
indices mapping, so ``dataset_nbytes`` is the exact Arrow size of the exported
rows, the quantity our engine computes (engine/output/shards.py).
tests/unit/engine/test_export_shards.py compares our shards with these.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROCESS = [{"whitespace_normalization_mapper": {}}]
#: Shard sizes in bytes: one shard (larger than the data), three shards of 7/7/6 rows (20 rows do not
#: divide evenly), and 1 byte (the count is capped at the row count: 20 shards, three-digit numbers).
VARIANTS = {"one_shard": 1 << 20, "three_shards": 1500, "capped_at_rows": 1}
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def write_input(path: str) -> None:
    rng = random.Random(22)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(20):
            text = "  ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40)))
            if i % 7 == 3:
                text += "  中文 文本"
            f.write(json.dumps({"id": i, "text": text, "meta": {"src": f"s{i % 3}"}}, ensure_ascii=False) + "\n")


def _measure_nbytes(measured: list) -> None:
    """Record the dataset size DJ's exporter divides by the shard size (read, not changed)."""
    from datasets import Dataset

    original = Dataset.shard

    def shard(self, num_shards, index, *args, **kwargs):
        if index == 0:
            n = self.data.nbytes
            if self._indices is not None:
                n = n * len(self._indices) / len(self.data)
            measured.append(n)
        return original(self, num_shards, index, *args, **kwargs)

    Dataset.shard = shard


def main() -> None:
    import yaml
    from data_juicer.config import init_configs
    from data_juicer.core import DefaultExecutor

    write_input(os.path.join(HERE, "input.jsonl"))
    measured: list = []
    _measure_nbytes(measured)
    spec = {"process": PROCESS, "variants": {}}
    for name, shard_size in VARIANTS.items():
        tmp = tempfile.mkdtemp()
        try:
            out_dir = os.path.join(tmp, "out")
            recipe = {
                "project_name": f"export_shards_{name}",
                "dataset_path": os.path.join(HERE, "input.jsonl"),
                "export_path": os.path.join(out_dir, "result.jsonl"),
                "export_shard_size": shard_size,
                "work_dir": tmp,
                "np": 1,
                "process": PROCESS,
            }
            path = os.path.join(tmp, "recipe.yaml")
            with open(path, "w", encoding="utf-8") as f:
                yaml.safe_dump(recipe, f)
            measured.clear()
            DefaultExecutor(init_configs(["--config", path])).run()
            dest = os.path.join(HERE, "expected", name)
            shutil.rmtree(dest, ignore_errors=True)
            os.makedirs(dest)
            files = sorted(n for n in os.listdir(out_dir) if n.startswith("result-"))
            rows = []
            for n in files:
                shutil.copy(os.path.join(out_dir, n), os.path.join(dest, n))
                rows.append(sum(1 for _ in open(os.path.join(out_dir, n), encoding="utf-8")))
            spec["variants"][name] = {
                "export_shard_size": shard_size,
                "dataset_nbytes": measured[0] if measured else None,
                "files": files,
                "rows": rows,
            }
            print(name, files, rows, measured, file=sys.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(HERE, "variants.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
