"""Run the image-text demo recipe through Data-Juicer 1.6.1's own executor, as ``dj-process`` runs it; keep its export.

Run by ``regenerate.sh`` with Data-Juicer's venv.  The recipe (``dags/recipes/demo_images.yaml``) runs
as it ships, with only these set on DJ's command line: ``executor_type: default`` (the recipe asks for
this provider's ``ray_partitioned``), ``np: 1``, the dataset path made absolute, and a temporary
export path and work dir.  DJ writes each row's image paths absolute (its loader joins them to the
dataset file's folder); ``expected/export.jsonl`` holds DJ's rows with the checkout's root written
``{REPO}``, so the reference does not depend on where the repository is checked out.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RECIPE = ROOT / "dags" / "recipes" / "demo_images.yaml"
DATASET = ROOT / "dags" / "recipes" / "data" / "demo_images.jsonl"
PLACEHOLDER = "{REPO}"


def portable(line: str) -> str:
    """One exported row with the checkout's root replaced by ``{REPO}`` (keys sorted)."""
    text = json.dumps(json.loads(line), sort_keys=True, ensure_ascii=False)
    return text.replace(json.dumps(str(ROOT))[1:-1], PLACEHOLDER)


def without_cnn_models() -> None:
    """imagededup imports its CNN models (torchvision) on import; the hashing methods never use them,
    and a CPU-only torch may lack torchvision's compiled ops, so an inert module stands in (as in
    ``tests/conformance/image_dedup/generate.py``).  This is why DJ runs in this process, as
    ``dj-process`` runs it (``init_configs`` then ``DefaultExecutor(cfg).run()``), not as a command."""
    stub = types.ModuleType("imagededup.utils.models")
    stub.CustomModel = stub.MobilenetV3 = type("Unavailable", (), {})
    stub.DEFAULT_MODEL_NAME = "default_model"
    sys.modules["imagededup.utils.models"] = stub


def main() -> None:
    import data_juicer
    from data_juicer.config import init_configs
    from data_juicer.core import DefaultExecutor

    without_cnn_models()

    if not data_juicer.__version__.startswith("1.6.1"):
        sys.exit(f"expected data_juicer 1.6.1, found {data_juicer.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        export = os.path.join(tmp, "out", "demo_images.jsonl")
        args = [
            "--config", str(RECIPE),
            "--executor_type", "default",
            "--np", "1",
            "--dataset_path", str(DATASET),
            "--export_path", export,
            "--work_dir", os.path.join(tmp, "work"),
        ]  # fmt: skip
        os.chdir(tmp)
        DefaultExecutor(init_configs(args=args)).run()
        with open(export, encoding="utf-8") as fh:
            rows = [portable(line) for line in fh if line.strip()]
    out = HERE / "expected" / "export.jsonl"
    out.parent.mkdir(exist_ok=True)
    out.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    print(f"{out}: {len(rows)} rows kept by Data-Juicer {data_juicer.__version__}")


if __name__ == "__main__":
    main()
