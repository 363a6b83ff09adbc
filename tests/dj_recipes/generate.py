"""Run Data-Juicer 1.6.1 itself on each shipped recipe and store its export as the expected output.

Run with Data-Juicer's own venv through regenerate.sh (our package and the
tests never import data_juicer).  For each recipe under recipes/, on the
committed input of its kind (inputs/, see cases.py), with the committed model
files and word lists (fixtures_models/, plus fastText's lid.176.bin copied in
by regenerate.sh):

* ``expected/<recipe>.jsonl``: Data-Juicer's export (default executor, np=1),
* ``expected/<recipe>.trace/``: its tracer output, when the recipe opens it,
* ``expected/summary.json``: rows in/out per recipe, for the docs table, and the op errors
  Data-Juicer logged and skipped (``dj_op_errors``: with no network its alphanumeric_filter
  cannot load its Hugging Face tokenizer, so it drops every row and still exports).

One recipe per process (regenerate.sh loops): Data-Juicer sets its log files up once per
process, and the op errors are read from them.  Only paths and ``np`` are overridden on Data-Juicer's command line; the
recipe's process list and every other key are read from the file as shipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from tests.dj_recipes.cases import CASES, input_path  # noqa: E402

EXPECTED = os.path.join(HERE, "expected")


def _error_line(log_line: str) -> str:
    """The message of one of Data-Juicer's ERROR log lines: first line only, addresses left out."""
    message = log_line.split(" - ", 1)[-1].replace("\\n", "\n").split("\n")[0].strip()
    return re.sub(r"https?://\S+", "<url>", message)[:300]


def run_one(name: str, scratch: str) -> dict:
    from data_juicer.config import init_configs
    from data_juicer.core import DefaultExecutor

    case = CASES[name]
    work = os.path.join(scratch, name)
    export = os.path.join(work, "export.jsonl")
    os.makedirs(work, exist_ok=True)
    cfg = init_configs(
        [
            "--config",
            os.path.join(HERE, "recipes", f"{name}.yaml"),
            "--dataset_path",
            input_path(case.kind),
            "--export_path",
            export,
            "--work_dir",
            work,
            "--np",
            "1",
        ]
    )
    DefaultExecutor(cfg).run()
    # Data-Juicer's skip_op_error (on by default) logs a failing op and drops the batch's rows instead
    # of stopping; collect those errors from its log files so that a run that "succeeded" by dropping
    # everything shows in the summary.
    errors = set()
    for root, _dirs, files in os.walk(cfg.work_dir):
        for fname in files:
            if fname.endswith((".txt", ".log")):
                with open(os.path.join(root, fname), encoding="utf-8", errors="replace") as fh:
                    errors.update(_error_line(line) for line in fh if "| ERROR" in line)
    shutil.copyfile(export, os.path.join(EXPECTED, f"{name}.jsonl"))
    trace_src = os.path.join(cfg.work_dir, "trace")  # DJ appends a job id to work_dir
    trace_dst = os.path.join(EXPECTED, f"{name}.trace")
    if os.path.isdir(trace_dst):
        shutil.rmtree(trace_dst)
    if os.path.isdir(trace_src) and os.listdir(trace_src):
        shutil.copytree(trace_src, trace_dst)
    with open(input_path(case.kind), encoding="utf-8") as fh:
        rows_in = sum(1 for line in fh if line.strip())
    with open(export, encoding="utf-8") as fh:
        rows_out = sum(1 for line in fh if line.strip())
    result = {
        "rows_in": rows_in,
        "rows_out": rows_out,
        "kind": case.kind,
        "trace_files": sorted(os.listdir(trace_dst)) if os.path.isdir(trace_dst) else [],
    }
    if errors:
        result["dj_op_errors"] = sorted(set(errors))
    return result


def main(names: list[str]) -> None:
    os.makedirs(EXPECTED, exist_ok=True)
    summary_path = os.path.join(EXPECTED, "summary.json")
    summary = json.load(open(summary_path)) if os.path.exists(summary_path) else {}
    with tempfile.TemporaryDirectory(prefix="dj-recipes-") as scratch:
        for name in names or sorted(CASES):
            print(f"[generate] {name}", flush=True)
            try:
                summary[name] = run_one(name, scratch)
            except Exception as exc:  # noqa: BLE001 - recorded: the recipe cannot run offline in DJ either
                summary[name] = {"kind": CASES[name].kind, "dj_error": f"{type(exc).__name__}: {exc}"[:500]}
                for stale in (f"{name}.jsonl",):
                    if os.path.exists(os.path.join(EXPECTED, stale)):
                        os.remove(os.path.join(EXPECTED, stale))
                print(f"[generate] {name}: Data-Juicer failed: {summary[name]['dj_error']}", flush=True)
                continue
            print(f"[generate] {name}: {summary[name]['rows_in']} -> {summary[name]['rows_out']}", flush=True)
    with open(summary_path, "w", encoding="utf-8") as fh:
        json.dump(dict(sorted(summary.items())), fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
