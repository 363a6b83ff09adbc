"""Run one shipped recipe through the engine's local executor and compare with Data-Juicer's own export.

Each run is ``engine.run_job`` in this process: the recipe file as shipped,
with only paths, partitioning (3 partitions) and checkpoints (every_op)
given as overrides; the same steps the generated DAG's tasks call
(validate/plan, each segment on each partition, each global step, export).
The partitions run inline, so Data-Juicer's own environment variables for
the model files (DATA_JUICER_MODELS_CACHE, DATA_JUICER_ASSETS_CACHE), set
around the run, reach every op.  The DAG and ``dj-airflow run`` calling
those steps are tested on real Airflow elsewhere (tests/integration).

Nothing is mocked.  The only stand-ins are the model files (made offline by
models.py, since the real ones are downloaded at first use) -- and
Data-Juicer's export was produced once by generate.py with the very same
files and committed under expected/.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import traceback
from dataclasses import dataclass

import yaml

from tests.dj_recipes.cases import CASES, HERE, input_path, recipe_path
from tests.dj_recipes.models import ASSETS, install_models

EXPECTED = os.path.join(HERE, "expected")
#: a recipe run's limit in the nightly module's ``dj-airflow run`` subprocesses
RUN_TIMEOUT_S = 900

#: Recipes Data-Juicer itself cannot run offline, and what our validation must name instead:
#: the one missing thing and where to put it.
REFUSALS: dict[str, tuple[str, ...]] = {
    # alphanumeric_filter with tokenization: true loads this Hugging Face tokenizer from the hub.
    "redpajama-code-refine": ("alphanumeric_filter", "EleutherAI/pythia-6.9b-deduped"),
    "stack-code-refine": ("alphanumeric_filter", "EleutherAI/pythia-6.9b-deduped"),
    "redpajama-code": ("alphanumeric_filter", "EleutherAI/pythia-6.9b-deduped"),
}

#: Known gaps beyond ops that are not registered yet (those are found at collection, see missing_ops).
KNOWN_GAPS: dict[str, str] = {}

#: Known differences of the tracer output alone (the export matches): recipe -> why.
_DEDUP_TRACE = (
    "tracer: Data-Juicer's document_deduplicator traces the trace_num hashes with the most copies "
    "(first two rows of each), ours the first removed duplicates in input order"
)
_SIMHASH_PICK = (
    "tracer: with more than trace_num near duplicates, Data-Juicer's document_simhash_deduplicator "
    "traces the first trace_num clusters of different simhash values in set-pop order, ours the "
    "first trace_num removed rows in input order (DJ's pair of rows 211/221 is past our tenth)"
)
TRACE_GAPS: dict[str, str] = {
    "alpaca-cot-en-refine": _DEDUP_TRACE,
    # simhash is these recipes' first op, on the raw corpus with its many planted copies
    **{
        f"redpajama-cc-{crawl}-refine": _SIMHASH_PICK
        for crawl in ("2019-30", "2020-05", "2021-04", "2022-05", "2023-06")
    },
}


def load_summary() -> dict:
    with open(os.path.join(EXPECTED, "summary.json"), encoding="utf-8") as fh:
        return json.load(fh)


def recipe_ops(name: str) -> list[str]:
    with open(recipe_path(name), encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    return [next(iter(entry)) if isinstance(entry, dict) else entry for entry in data["process"]]


def missing_ops(name: str) -> list[str]:
    from airflow_provider_dj.ops.registry import op_names

    native = set(op_names())
    return sorted({op for op in recipe_ops(name) if op not in native})


def xfail_reason(name: str) -> str | None:
    """Why a recipe cannot match yet (None: it must): ops not native today, or a known gap."""
    reasons = []
    missing = missing_ops(name)
    if missing:
        reasons.append("op(s) not implemented natively yet: " + ", ".join(missing))
    if name in KNOWN_GAPS:
        reasons.append(KNOWN_GAPS[name])
    return "; ".join(reasons) or None


@dataclass
class RecipeEnv:
    """The environment a recipe run sees: Data-Juicer's model/asset caches and an own Airflow home."""

    models: str
    airflow_home: str
    runs: str  #: where each recipe's run (and its filled-in recipe copy) goes

    def variables(self) -> dict[str, str]:
        return {
            "DATA_JUICER_MODELS_CACHE": self.models,
            "DATA_JUICER_ASSETS_CACHE": ASSETS,
            "DATA_JUICER_EXTERNAL_MODELS_HOME": "",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
        }

    @classmethod
    def create(cls, root: str) -> RecipeEnv:
        return cls(
            models=install_models(os.path.join(root, "models")),
            airflow_home=os.path.join(root, "airflow"),
            runs=os.path.join(root, "runs"),
        )


def overrides(name: str, out_dir: str) -> dict[str, object]:
    """What the test fills in besides the paths; the recipe's process list and other keys stay as shipped."""
    return {
        "export_path": os.path.join(out_dir, "export.jsonl"),
        "work_dir": os.path.join(out_dir, "work"),
        "partition.mode": "manual",
        "partition.num_of_partitions": 3,
        "checkpoint.enabled": True,
        "checkpoint.strategy": "every_op",
    }


def run_copy(name: str, out_dir: str) -> str:
    """The recipe file with its placeholder ``dataset_path``/``export_path`` lines filled in, nothing else changed.

    A copy rather than overrides alone because the file itself is loaded before the overrides apply
    (``dj-airflow run`` builds the DAG from it), and a shipped placeholder such as redpajama-arxiv's
    ``export_path: '/path/to/your/exported/dataset/file'`` (no suffix) is refused there."""
    with open(recipe_path(name), encoding="utf-8") as fh:
        text = fh.read()
    values = {"dataset_path": input_path(CASES[name].kind), "export_path": os.path.join(out_dir, "export.jsonl")}
    for key, value in values.items():
        text, count = re.subn(rf"^{key}:.*$", f"{key}: {json.dumps(value)}", text, count=1, flags=re.M)
        assert count == 1, f"{name}: no top-level {key} line to fill in"
    folder = os.path.join(os.path.dirname(out_dir), "recipe")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def validate(name: str, env: RecipeEnv, out_dir: str, monkeypatch) -> None:
    """Load and validate in this process with the run's environment; raises RecipeError when refused."""
    from airflow_provider_dj.engine.config.recipe import load_recipe

    for key, value in env.variables().items():
        monkeypatch.setenv(key, value)
    nested: dict = {}
    for key, value in overrides(name, out_dir).items():
        node = nested
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return load_recipe(run_copy(name, out_dir), nested, override_source="test overrides")


@dataclass
class RecipeRun:
    """One recipe's run: its output folder and, when it raised, the error with its traceback."""

    out_dir: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@contextlib.contextmanager
def environment(variables: dict[str, str]):
    """``variables`` set in this process for the block, then restored (other tests of the worker never see them)."""
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_local(name: str, env: RecipeEnv, out_dir: str, job_id: str = "job1") -> RecipeRun:
    """The recipe through ``engine.run_job``, partitions inline; an exception is kept, not raised."""
    from airflow_provider_dj.engine import run_job

    with environment(env.variables()):
        try:
            run_job(run_copy(name, out_dir), overrides=overrides(name, out_dir), job_id=job_id, workers=1)
        except Exception:  # noqa: BLE001 - the test reports it with the recipe's name
            return RecipeRun(out_dir, traceback.format_exc())
    return RecipeRun(out_dir)


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def first_difference(ours: list[dict], theirs: list[dict]) -> str:
    """A readable account of the first row where two exports differ."""
    if len(ours) != len(theirs):
        ours_text = {r.get("row_id") for r in ours}
        theirs_text = {r.get("row_id") for r in theirs}
        return (
            f"{len(ours)} rows here, {len(theirs)} in Data-Juicer's export; row_ids only here: "
            f"{sorted(ours_text - theirs_text)[:20]}, only in Data-Juicer's: {sorted(theirs_text - ours_text)[:20]}"
        )
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            detail = {k: (repr(a.get(k))[:300], repr(b.get(k))[:300]) for k in keys}
            return f"row {i} (row_id {b.get('row_id')}) differs in {keys}: (ours, Data-Juicer's) {detail}"
    return "identical"


_RUNS: dict[str, RecipeRun] = {}


def run_once(name: str, env: RecipeEnv, root: str) -> RecipeRun:
    """One run per recipe and test process: the export test and the trace test share it."""
    if name not in _RUNS:
        out_dir = os.path.join(root, name, "run")
        os.makedirs(out_dir, exist_ok=True)
        _RUNS[name] = run_local(name, env, out_dir)
    return _RUNS[name]


def check_refusal(name: str, env: RecipeEnv, out_dir: str, monkeypatch) -> None:
    """A recipe that cannot run offline is refused at validation, naming the missing thing; nothing is written."""
    from airflow_provider_dj.engine.config.recipe import RecipeError

    expected = load_summary()[name]
    # Data-Juicer itself cannot run it here: it would download the missing file, and offline it
    # logs the op's error, drops every row (skip_op_error) and exports an empty file.
    assert "dj_error" in expected or (expected.get("dj_op_errors") and expected["rows_out"] == 0), (
        f"{name}: Data-Juicer ran it after all; compare instead of refusing"
    )
    os.makedirs(out_dir, exist_ok=True)
    try:
        validate(name, env, out_dir, monkeypatch)
    except RecipeError as exc:
        message = str(exc)
    else:
        raise AssertionError(f"{name}: validation accepted a recipe whose {REFUSALS[name][1]} is missing")
    for needle in REFUSALS[name]:
        assert needle in message, f"{name}: the refusal does not name {needle!r}: {message}"
    assert not os.listdir(out_dir), "a refused recipe must not write anything"


def check_export(name: str, env: RecipeEnv, root: str, monkeypatch) -> None:
    """Validated, run through the DAG (3 partitions, every_op), and exported exactly Data-Juicer's rows."""
    if name in REFUSALS:
        check_refusal(name, env, os.path.join(root, name, "refused"), monkeypatch)
        return
    expected = load_summary()[name]
    assert "dj_error" not in expected and not expected.get("dj_op_errors"), (
        f"{name}: Data-Juicer failed when the fixture was made: {expected.get('dj_error') or expected['dj_op_errors']}"
    )
    validate(name, env, os.path.join(root, name, "run"), monkeypatch)  # RecipeError (a failure) when refused
    run = run_once(name, env, root)
    assert run.ok, f"{name}: the run failed:\n{run.error[-6000:]}"
    out_dir = run.out_dir
    ours = read_jsonl(os.path.join(out_dir, "export.jsonl"))
    theirs = read_jsonl(os.path.join(EXPECTED, f"{name}.jsonl"))
    assert len(theirs) == expected["rows_out"]
    assert ours == theirs, f"{name}: {first_difference(ours, theirs)}"
    with open(os.path.join(out_dir, "work", "job1", "job_summary.json"), encoding="utf-8") as fh:
        summary = json.load(fh)
    assert summary["input"]["partitions"] == 3
    assert summary["input"]["total_rows"] == expected["rows_in"]
    assert summary["export"]["rows"] == len(theirs)


def check_trace_matches(name: str, env: RecipeEnv, root: str) -> None:
    """The same run's tracer files equal Data-Juicer's (see check_trace)."""
    run = run_once(name, env, root)
    assert run.ok, f"{name}: the run failed:\n{run.error[-3000:]}"
    check_trace(name, os.path.join(run.out_dir, "work", "job1"))


def _visible(entry: object) -> object:
    """A trace entry without engine-internal columns (``__dj__hash``, ``__dj__input_row__``...)."""
    if isinstance(entry, dict):
        return {k: _visible(v) for k, v in entry.items() if not k.startswith("__dj__")}
    return entry


#: Data-Juicer traces only the near-duplicate clusters of its simhash deduplicator (see check_trace).
SIMHASH_TRACE = "duplicate-document_simhash_deduplicator.jsonl"


def check_trace(name: str, job_dir: str) -> None:
    """Our tracer wrote the files Data-Juicer wrote for this recipe, with the same samples in them.

    Compared without internal columns: Data-Juicer's carry its hash column,
    ours the input row number.  Changed/removed samples in order; duplicate
    pairs as a set.  One known divergence is allowed: Data-Juicer's
    document_simhash_deduplicator traces pairs only for clusters of rows with
    *different* simhash values (a row whose simhash equals an earlier row's is
    removed but never traced), so there every pair of Data-Juicer's must be
    among ours, and ours may hold more (or exist where Data-Juicer wrote none)."""
    theirs_dir = os.path.join(EXPECTED, f"{name}.trace")
    theirs = sorted(os.listdir(theirs_dir)) if os.path.isdir(theirs_dir) else []
    ours_dir = os.path.join(job_dir, "trace")
    ours = sorted(
        f
        for f in (os.listdir(ours_dir) if os.path.isdir(ours_dir) else [])
        if f.endswith(".jsonl") and os.path.getsize(os.path.join(ours_dir, f)) > 0
    )
    strict_ours = [f for f in ours if f != SIMHASH_TRACE]
    strict_theirs = [f for f in theirs if f != SIMHASH_TRACE]
    assert strict_ours == strict_theirs, f"{name}: trace files here {ours}, Data-Juicer's {theirs}"
    # Mapper and filter samples first: a known duplicate-pair difference (an xfail) then still
    # requires them to match before it is reached.
    for fname in sorted(theirs, key=lambda f: (f.startswith("duplicate-"), f)):
        a = [_visible(e) for e in read_jsonl(os.path.join(ours_dir, fname))] if fname in ours else []
        b = [_visible(e) for e in read_jsonl(os.path.join(theirs_dir, fname))]
        if fname == SIMHASH_TRACE:
            have = {json.dumps(e, sort_keys=True) for e in a}
            lacking = [e for e in b if json.dumps(e, sort_keys=True) not in have]
            assert not lacking, f"{name}: trace/{fname}: Data-Juicer's pairs missing here: {str(lacking)[:600]}"
            continue
        if fname.startswith("duplicate-"):
            # Data-Juicer writes its pairs in the iteration order of a set of hash values (string
            # hashes are salted per process), so only the set of pairs is reproducible.
            a = sorted(a, key=lambda e: json.dumps(e, sort_keys=True))
            b = sorted(b, key=lambda e: json.dumps(e, sort_keys=True))
        assert a == b, f"{name}: trace/{fname}: {first_difference(a, b)}"


def _traced(name: str) -> bool:
    with open(recipe_path(name), encoding="utf-8") as fh:
        return bool(yaml.safe_load(fh).get("open_tracer"))


def params(group: str, *, trace: bool = False) -> list:
    """pytest params for a test module's recipes, xfail(strict) where an op is missing or a gap is known.

    ``trace``: the recipes whose tracer output is compared (those that open the tracer and run)."""
    import pytest

    from tests.dj_recipes.cases import names_in_group

    out = []
    for name in names_in_group(group):
        if trace and (name in REFUSALS or not _traced(name)):
            continue
        reason = None if name in REFUSALS else xfail_reason(name)
        if trace and name in TRACE_GAPS:
            reason = "; ".join(r for r in (reason, TRACE_GAPS[name]) if r)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out
