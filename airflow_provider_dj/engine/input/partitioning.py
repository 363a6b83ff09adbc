"""Exact row partitions of the ordered input (invariant 3) and their hashes.

``plan_partitions`` scans the input once, chooses the partition count,
computes each partition's row range, the byte/row-group segments a task
needs to read exactly that range, and its full-content hash.  The result is
``checkpoints/partitioning_info.json``: the contract every later task — and
every resume — checks itself against.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.config.path_confinement import allowed_roots
from airflow_provider_dj.engine.input import hashing, media, media_paths
from airflow_provider_dj.engine.input.index_cache import segment_key
from airflow_provider_dj.engine.input.indexing import index_inputs
from airflow_provider_dj.engine.input.modality import detect, media_rows_per_partition, sample_rows, sample_size
from airflow_provider_dj.engine.input.sources import (
    InputError,
    InputFile,
    iter_stream,
    list_input_files,
    read_jsonl_range,
    read_parquet_range,
)
from airflow_provider_dj.engine.input.task_map import RunTasks, run_on_threads
from airflow_provider_dj.engine.jobdir.integrity import seal_json

# 2: the document carries checksum_xxh3_128 (engine/jobdir/integrity.py), checked on every resume; 1 (no checksum)
# is still read, unverified, so jobs planned before checksums can resume.
PARTITIONING_INFO_VERSION = 2
READABLE_PARTITIONING_INFO_VERSIONS = (1, 2)
# Data-Juicer's text-modality defaults for auto mode (rows per partition).
TEXT_DEFAULT_ROWS = 10_000
TEXT_MAX_ROWS = 50_000
DEFAULT_MANUAL_PARTITIONS = 4


class PartitioningError(DJError, ValueError):
    """The requested partitioning cannot be made; raised before any partition task starts."""


def row_boundaries(total_rows: int, num_partitions: int) -> list[tuple[int, int]]:
    """Split [0, total_rows) into ``num_partitions`` contiguous ranges differing by at most one row."""
    if total_rows == 0:
        return []  # an empty input has no partitions (and exports an empty file)
    if num_partitions < 1:
        raise PartitioningError(f"num_of_partitions must be at least 1, got {num_partitions}")
    if num_partitions > total_rows:
        raise PartitioningError(
            f"num_of_partitions={num_partitions} but the input has only {total_rows} rows; "
            f"set partition.num_of_partitions to at most {total_rows}"
        )
    base, extra = divmod(total_rows, num_partitions)
    bounds = []
    start = 0
    for i in range(num_partitions):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def file_aligned_boundaries(
    file_rows: list[int], num_partitions: int | None = None, rows_per_partition: int | None = None
) -> list[tuple[int, int]]:
    """Boundaries that never span two input files (``partition.align: file``), for reuse across jobs.

    Why: a nightly job whose input grows by new files keeps the partitions of the old files, with
    their boundaries and content hashes, so their checkpoints can be reused (docs/nightly.md).
    Within a file, sizes differ by at most one row.  With ``rows_per_partition`` (auto mode, or
    ``partition.size``) each file gets ``ceil(rows / size)`` partitions: a new file leaves the others'
    counts alone.  With ``num_partitions`` the count is allotted in proportion to the files' rows
    (largest remainder, every non-empty file at least one, never more than its rows): the total is
    the requested count unless there are more non-empty files than that.
    """
    total = sum(file_rows)
    if total == 0:
        return []
    if rows_per_partition is None:
        if num_partitions is None or num_partitions < 1:
            raise PartitioningError(f"num_of_partitions must be at least 1, got {num_partitions}")
        if num_partitions > total:
            raise PartitioningError(
                f"num_of_partitions={num_partitions} but the input has only {total} rows; "
                f"set partition.num_of_partitions to at most {total}"
            )
        counts = _allot(file_rows, num_partitions)
    else:
        counts = [math.ceil(n / max(1, int(rows_per_partition))) for n in file_rows]
    bounds: list[tuple[int, int]] = []
    offset = 0
    for n, k in zip(file_rows, counts):
        bounds.extend((offset + s, offset + e) for s, e in row_boundaries(n, k) if n)
        offset += n
    return bounds


def _allot(file_rows: list[int], count: int) -> list[int]:
    """``count`` partitions over files in proportion to rows: each non-empty file >= 1 and <= its rows."""
    total = sum(file_rows)
    nonempty = [i for i, n in enumerate(file_rows) if n]
    counts = [0] * len(file_rows)
    if count <= len(nonempty):
        for i in nonempty:
            counts[i] = 1
        return counts
    exact = {i: count * file_rows[i] / total for i in nonempty}
    for i in nonempty:
        counts[i] = min(file_rows[i], max(1, int(exact[i])))
    # Largest remainder first (ties: the earlier file), never past a file's row count.
    order = sorted(nonempty, key=lambda i: (-(exact[i] - int(exact[i])), i))
    while sum(counts) < count:
        grew = False
        for i in order:
            if sum(counts) >= count:
                break
            if counts[i] < file_rows[i]:
                counts[i] += 1
                grew = True
        if not grew:
            break
    while sum(counts) > count:  # a file raised to one partition took more than its share
        i = max((j for j in nonempty if counts[j] > 1), key=lambda j: (counts[j] - exact[j], j))
        counts[i] -= 1
    return counts


def rows_per_partition_of(
    partition_cfg: Any, total_rows: int, total_bytes: int, auto: tuple[int, str] | None = None
) -> tuple[int | None, str]:
    """The partition size in rows when the recipe sets one (auto mode, ``partition.size``), else None.

    File-aligned partitioning divides each file by this size, so old files keep their partitions.
    ``auto``: the (rows, how) auto mode chose for a media modality (engine/input/modality.py)."""
    if partition_cfg.mode == "manual":
        if partition_cfg.num_of_partitions:
            return None, "manual: num_of_partitions"
        if partition_cfg.size:
            return int(partition_cfg.size), f"manual: size={partition_cfg.size} rows"
        return None, "manual: default count"
    if total_rows == 0:
        return None, "empty input"
    return auto or _auto_rows(partition_cfg, total_rows, total_bytes)


def alignment_of(partition_cfg: Any) -> str:
    """``partition.align``: ``rows`` (one even split of all rows, the default) or ``file``."""
    return (getattr(partition_cfg, "extra", None) or {}).get("align") or "rows"


def choose_partition_count(
    partition_cfg: Any, total_rows: int, total_bytes: int, auto: tuple[int, str] | None = None
) -> tuple[int, str]:
    """(count, how it was chosen).  ``partition_cfg`` is the recipe's PartitionConfig; ``auto`` as in
    :func:`rows_per_partition_of`."""
    if total_rows == 0:
        return 0, "empty input"
    if partition_cfg.mode == "manual":
        if partition_cfg.num_of_partitions:
            return int(partition_cfg.num_of_partitions), "manual: num_of_partitions"
        if partition_cfg.size:
            return math.ceil(total_rows / int(partition_cfg.size)), f"manual: size={partition_cfg.size} rows"
        return min(DEFAULT_MANUAL_PARTITIONS, total_rows), "manual: default count"
    rows, how = auto or _auto_rows(partition_cfg, total_rows, total_bytes)
    return max(1, math.ceil(total_rows / rows)), how


def _auto_rows(partition_cfg: Any, total_rows: int, total_bytes: int) -> tuple[int, str]:
    """Auto mode: rows per partition from the measured bytes per row and the target size."""
    bytes_per_row = total_bytes / total_rows if total_rows else 0
    if bytes_per_row > 0:
        target = (partition_cfg.target_size_mb or 256) * 1024 * 1024
        if partition_cfg.max_size_mb:
            target = min(target, partition_cfg.max_size_mb * 1024 * 1024)
        rows = int(target // bytes_per_row)
        rows = max(1, min(rows, TEXT_MAX_ROWS))
        how = f"auto: {bytes_per_row:.0f} bytes/row, target {partition_cfg.target_size_mb} MB, capped at {TEXT_MAX_ROWS} rows"
    else:
        rows = int(partition_cfg.size or TEXT_DEFAULT_ROWS)
        how = f"auto: fallback size={rows} rows"
    return rows, how


@dataclass
class PartitionSpec:
    partition_id: int
    start_row: int
    end_row: int
    content_hash: str
    segments: list[dict]
    nbytes: int

    @property
    def num_rows(self) -> int:
        return self.end_row - self.start_row

    def to_dict(self) -> dict:
        return {
            "partition_id": self.partition_id,
            "start_row": self.start_row,
            "end_row": self.end_row,
            "num_rows": self.num_rows,
            "content_hash": self.content_hash,
            "nbytes": self.nbytes,
            "segments": self.segments,
        }


def _segments_for(files: list[InputFile], file_row_offsets: np.ndarray, start: int, end: int) -> list[dict]:
    segs = []
    for idx, f in enumerate(files):
        f_start, f_end = int(file_row_offsets[idx]), int(file_row_offsets[idx + 1])
        lo, hi = max(start, f_start), min(end, f_end)
        if lo >= hi:
            continue
        local_lo, local_hi = lo - f_start, hi - f_start
        seg = {"file": idx, "row_start": local_lo, "row_end": local_hi}
        if f.format == "jsonl":
            assert f.row_starts is not None
            seg["byte_start"] = int(f.row_starts[local_lo])
            # Up to the next row's start so blank lines between rows belong
            # to exactly one partition; the last row runs to the stream end.
            seg["byte_end"] = int(f.row_starts[local_hi]) if local_hi < f.num_rows else int(f.stream_len)
        segs.append(seg)
    return segs


def hash_recorded_partition(
    algorithm: str, input_files: list[dict] | dict[int, dict], segments: list[dict]
) -> tuple[str, int]:
    """(content hash, bytes hashed) of a partition as it is on disk now.

    Used both when planning and when a resume re-verifies a job: JSONL is
    hashed from its bytes without parsing, Parquet from its Arrow columns.
    ``input_files[i]`` describes the file a segment's ``file`` names (a list of every file, or a dict of
    those the segments name).
    """
    digest, nbytes, _ = _hash_rows(algorithm, input_files, segments)
    return digest, nbytes


def _hash_rows(
    algorithm: str, input_files: list[dict] | dict[int, dict], segments: list[dict], needles: list[bytes] = ()
) -> tuple[str, int, bool]:
    """:func:`hash_recorded_partition`, and whether the bytes may name media: for JSONL, whether one of
    ``needles`` (the quoted media keys) occurs in them, found on the same pass; Parquet: always maybe."""
    if algorithm == hashing.JSONL_ALGORITHM:
        h = hashing.ByteStreamHasher()
        found = False
        search = media.KeySearch(list(needles))
        overlap = search.overlap
        for seg in segments:
            f = input_files[seg["file"]]
            src = InputFile(path=f["path"], format="jsonl", compression=f.get("compression"), size=f.get("size", 0))
            tail = b""
            for block in iter_stream(src, seg["byte_start"], seg["byte_end"]):
                h.update(block)
                if search and not found:
                    edge = tail + bytes(block[:overlap])  # a key cut by the block boundary
                    found = search.found_in(block) or search.found_in(edge)
                    tail = bytes(block[-overlap:]) if overlap else b""
        return h.hexdigest(), h.nbytes, found
    ah = hashing.ArrowTableHasher()
    nbytes = 0
    for seg in segments:
        f = input_files[seg["file"]]
        t = read_parquet_range(f, seg["row_start"], seg["row_end"], f["row_group_rows"])
        ah.update(t)
        nbytes += t.nbytes
    return ah.hexdigest(), nbytes, bool(needles)


def hash_partition(
    algorithm: str, input_files: list[dict] | dict[int, dict], segments: list[dict], media_keys: dict | None = None
) -> tuple[str, int, dict | None]:
    """(content hash, bytes hashed, media record) of a partition as it is on disk now: a task of planning
    and of resume's verification.

    With ``media_keys`` (engine/input/media.py) every media file the partition's rows name is read too: a
    partition that names some gets the content hash of its rows and its files, and a record of the row
    hash (``rows_hash``, what reading the partition checks) and each file's digest; one that names none
    keeps its row hash and gets no record, so a text corpus hashes as it always did."""
    keys = media.MediaKeys.from_dict(media_keys) if media_keys is not None else None
    digest, nbytes, maybe = _hash_rows(algorithm, input_files, segments, media.key_needles(keys) if keys else [])
    if not maybe:  # (JSONL) no media key in the partition's bytes: read once, as a text partition always was
        return digest, nbytes, None
    roots = (media_keys or {}).get("allowed_roots")
    found = media.scan_partition_media(algorithm == hashing.JSONL_ALGORITHM, input_files, segments, keys, roots)
    if found is None:
        return digest, nbytes, None
    return media.combine(digest, found.digest), nbytes, {"rows_hash": digest, "media": found.to_dict()}


def algorithm_for(files: list[InputFile]) -> str:
    return hashing.JSONL_ALGORITHM if files[0].format == "jsonl" else hashing.ARROW_ALGORITHM


def _from_cache(f: InputFile, entry: dict) -> None:
    """What an unchanged file's earlier index says: only the boundary rows' offsets (``row_starts`` is
    then a dict, and a boundary it lacks means indexing the file after all)."""
    f.num_rows = int(entry["num_rows"])
    f.stream_len = int(entry["stream_len"])
    f.row_group_rows = entry.get("row_group_rows")
    if f.format == "jsonl":
        f.row_starts = {int(k): int(v) for k, v in entry["offsets"].items()}


def _boundary_rows(files: list[InputFile], offsets: np.ndarray, bounds: list[tuple[int, int]]) -> dict[int, set]:
    """Per file, the local rows whose byte offset the partitions' segments need (_segments_for)."""
    need: dict[int, set] = {}
    for s, e in bounds:
        for idx, f in enumerate(files):
            lo, hi = max(s, int(offsets[idx])), min(e, int(offsets[idx + 1]))
            if lo < hi:
                rows = need.setdefault(idx, set())
                rows.add(lo - int(offsets[idx]))
                if hi - int(offsets[idx]) < f.num_rows:
                    rows.add(hi - int(offsets[idx]))
    return need


def plan_partitions(
    dataset_path: str,
    partition_cfg: Any,
    index_cache: Any = None,
    run_tasks: RunTasks = run_on_threads,
    media_keys: media.MediaKeys | None = None,
) -> dict:
    """Scan the input, choose boundaries, hash each partition; return partitioning_info.

    ``media_keys`` (default: Data-Juicer's ``images``/``audios``/``videos`` and ``text``): the fields whose
    files are part of the job's identity (engine/input/media.py) and from which auto mode detects the
    modality (engine/input/modality.py).

    ``index_cache`` (engine/input/index_cache.py, reuse across jobs): an unchanged file's row count,
    boundary offsets and partition hashes come from an earlier job instead of reading the file again.
    ``run_tasks`` runs the indexing tasks (a chunk of a file each) and the hashing tasks (a partition
    each): on this machine's cores by default, as Ray tasks where the caller passes Ray's
    (engine/input/task_map.py); the result is the same whichever runs them."""
    t0 = time.perf_counter()
    files = list_input_files(dataset_path)
    cached, index_tasks = _index_files(files, index_cache, run_tasks)
    total_rows = sum(f.num_rows for f in files)
    total_bytes = sum(f.stream_len if f.format == "jsonl" else f.size for f in files)
    keys = media_keys or media.MediaKeys()
    detected = _detect_modality(partition_cfg, files, total_rows, keys)
    auto = None
    if detected is not None and detected.modality != "text":
        auto = media_rows_per_partition(detected, partition_cfg)
    bounds, how, align = _choose_boundaries(partition_cfg, files, total_rows, total_bytes, auto)
    if detected is not None and auto is None:
        how = f"{how}; text detected in a sample of {detected.sample_rows} rows"
    offsets = np.concatenate(([0], np.cumsum([f.num_rows for f in files]))).astype(np.int64)
    stale = [  # other boundaries than the cached ones (another partition size): indexed after all
        idx
        for idx, rows in _boundary_rows(files, offsets, bounds).items()
        if idx in cached and files[idx].format == "jsonl" and not rows <= files[idx].row_starts.keys()
    ]
    index_tasks += index_inputs([files[idx] for idx in stale], run_tasks)
    for idx in stale:
        del cached[idx]
    t_index = time.perf_counter() - t0
    file_descr = _describe_files(files)
    algorithm = algorithm_for(files)
    t1 = time.perf_counter()
    # The tasks confine media paths by this process's allowed_roots: a Ray worker may lack the setting.
    roots = allowed_roots()
    task_keys = {**keys.to_dict(), **({"allowed_roots": ",".join(roots.text)} if roots else {})}
    parts, hashed_bytes, learnt, hashes_from_cache = _hash_partitions(
        files, offsets, bounds, cached, algorithm, file_descr, run_tasks, task_keys
    )
    t_hash = time.perf_counter() - t1
    cache_timing = {}
    if index_cache is not None:
        stored = sum(index_cache.record(files[idx], offs, hs) for idx, (offs, hs) in learnt.items())
        cache_timing = {
            "index_cache": {
                "files_from_cache": len(cached),
                "hashes_from_cache": hashes_from_cache,
                "files_cached": stored,
            }
        }
    # Sealed last (engine/jobdir/integrity.py): a key added to this document after the seal makes every resume refuse it.
    return seal_json(
        {
            "version": PARTITIONING_INFO_VERSION,
            "algorithm": algorithm,
            "dataset_path": dataset_path,
            "input_files": file_descr,
            "total_rows": total_rows,
            "total_bytes": total_bytes,
            "num_partitions": len(parts),
            "how_chosen": how,
            **({"align": align} if align != "rows" else {}),
            "media_keys": keys.to_dict(),
            # Read-time rewrite of relative media paths (engine/input/media_paths.py), as Data-Juicer loads them.
            "media_paths": media_paths.RESOLVED,
            **({"modality": detected.to_dict()} if detected is not None else {}),
            **_media_totals(parts),
            "partitions": parts,
            "timing": {
                "index_s": round(t_index, 4),
                "hash_s": round(t_hash, 4),
                "hashed_bytes": hashed_bytes,
                "tasks": {"index": index_tasks, "hash": len(parts) - hashes_from_cache},
                **cache_timing,
            },
        }
    )


def _detect_modality(partition_cfg: Any, files: list, total_rows: int, keys: media.MediaKeys):
    """Auto mode: the modality of a sample of the first rows (engine/input/modality.py); None otherwise."""
    if partition_cfg.mode == "manual" or total_rows == 0:
        return None
    return detect(sample_rows(files, sample_size(total_rows)), keys)


def _media_totals(parts: list[dict]) -> dict:
    """How many partitions name media, and how many files and bytes (absent for a corpus without media)."""
    with_media = [p["media"] for p in parts if "media" in p]
    if not with_media:
        return {}
    return {
        "media": {
            "partitions": len(with_media),
            "files": sum(m["files"] for m in with_media),
            "bytes": sum(m["bytes"] for m in with_media),
            "hash_scheme": media.MEDIA_HASH_SCHEME,
        }
    }


def _index_files(files: list, index_cache: Any, run_tasks: RunTasks) -> tuple[dict[int, dict], int]:
    """Index every input file, from ``index_cache`` where it knows the file unchanged, the others by
    tasks over ``run_tasks``; return the cache entries used, by file index, and the tasks run."""
    cached: dict[int, dict] = {}
    for idx, f in enumerate(files):
        entry = index_cache.observe(f) if index_cache is not None else None
        if entry is not None:
            _from_cache(f, entry)
            cached[idx] = entry
    tasks = index_inputs([f for idx, f in enumerate(files) if idx not in cached], run_tasks)
    return cached, tasks


def _choose_boundaries(
    partition_cfg: Any, files: list, total_rows: int, total_bytes: int, auto: tuple[int, str] | None = None
) -> tuple[list[tuple[int, int]], str, str]:
    """The partitions' (start, end) rows, how their count was chosen and the alignment
    (``file``: boundaries fall on input files; else even row ranges).  ``auto``: a media modality's size."""
    count, how = choose_partition_count(partition_cfg, total_rows, total_bytes, auto)
    align = alignment_of(partition_cfg)
    if align == "file":
        rows_per, how = rows_per_partition_of(partition_cfg, total_rows, total_bytes, auto)
        bounds = file_aligned_boundaries([f.num_rows for f in files], count, rows_per)
        how = f"{how}; aligned to input files"
    else:
        bounds = row_boundaries(total_rows, count)
    return bounds, how, align


def _describe_files(files: list) -> list[dict]:
    """Each input file as partitioning_info records it (with its row groups or its stream length)."""
    file_descr = []
    for f in files:
        d = f.describe()
        if f.format == "parquet":
            d["row_group_rows"] = f.row_group_rows
        else:
            d["stream_len"] = f.stream_len
        file_descr.append(d)
    return file_descr


def _hash_partitions(
    files: list,
    offsets,
    bounds: list,
    cached: dict[int, dict],
    algorithm: str,
    file_descr: list[dict],
    run_tasks: RunTasks,
    media_keys: dict | None = None,
) -> tuple[list[dict], int, dict[int, tuple[dict, dict]], int]:
    """Each partition's spec with its content hash; return (the specs, bytes hashed, what was learnt
    per file for the index cache as (boundary offsets, single-file partition hashes), how many
    hashes came from the cache).  A single-file partition's hash comes from the cache when known; the
    others are hashed by a task each over ``run_tasks`` (media files included, engine/input/media.py: the
    cache holds only hashes of partitions that name none, so a cached hash never stands in for a file's)."""
    segments = [_segments_for(files, offsets, s, e) for s, e in bounds]
    known: dict[int, tuple[str, int]] = {}
    for pid, segs in enumerate(segments):
        one_file = segs[0]["file"] if len(segs) == 1 else None
        hit = cached[one_file]["hashes"].get(segment_key(segs[0])) if one_file in cached else None
        if hit is not None:
            known[pid] = (str(hit[0]), int(hit[1]))
    todo = [pid for pid in range(len(bounds)) if pid not in known]
    # A task gets the descriptions of the files its segments name only, not every file's.
    tasks = [
        (algorithm, {g["file"]: file_descr[g["file"]] for g in segments[pid]}, segments[pid], media_keys)
        for pid in todo
    ]
    hashed = dict(zip(todo, run_tasks(hash_partition, tasks)))
    parts = []
    learnt: dict[int, tuple[dict, dict]] = {}  # file -> (boundary offsets, single-file partition hashes)
    for pid, ((s, e), segs) in enumerate(zip(bounds, segments)):
        digest, nbytes, named = (*known[pid], None) if pid in known else hashed[pid]
        for seg in segs:
            offs, hs = learnt.setdefault(seg["file"], ({}, {}))
            if "byte_start" in seg:
                offs[seg["row_start"]] = seg["byte_start"]
                if seg["row_end"] < files[seg["file"]].num_rows:
                    offs[seg["row_end"]] = seg["byte_end"]
        if len(segs) == 1 and named is None:
            learnt[segs[0]["file"]][1][segment_key(segs[0])] = [digest, nbytes]
        parts.append({**PartitionSpec(pid, s, e, digest, segs, nbytes).to_dict(), **(named or {})})
    return parts, sum(hashed[pid][1] for pid in todo), learnt, len(known)


class InputChangedError(DJError, RuntimeError):
    """The rows in front of a task are not the rows the job was planned on."""


def read_partition(info: dict, partition_id: int, verify_hash: bool = True) -> pa.Table:
    """Read exactly one partition's rows; verify its content hash first.

    Relative media paths come back absolute, as Data-Juicer loads them (engine/input/media_paths.py),
    in jobs planned with that rewrite; the hash is of the rows as stored."""
    part = info["partitions"][partition_id]
    files = info["input_files"]
    tables: list[pa.Table] = []
    sources: list[str] = []  # the input file of each table, for a type conflict's message
    if info["algorithm"] == hashing.JSONL_ALGORITHM:
        h = hashing.ByteStreamHasher()
        for seg in part["segments"]:
            t, raw = read_jsonl_range(files[seg["file"]], seg["byte_start"], seg["byte_end"])
            h.update(raw)
            if t.num_rows:
                tables.append(t)
                sources.append(files[seg["file"]]["path"])
        digest = h.hexdigest()
    else:
        ah = hashing.ArrowTableHasher()
        for seg in part["segments"]:
            f = files[seg["file"]]
            t = read_parquet_range(f, seg["row_start"], seg["row_end"], f["row_group_rows"])
            ah.update(t)
            tables.append(t)
            sources.append(f["path"])
        digest = ah.hexdigest()
    if info.get("media_paths") == media_paths.RESOLVED and info.get("media_keys"):
        keys = media.MediaKeys.from_dict(info["media_keys"])
        tables = [media_paths.resolve_media_columns(t, src, keys) for t, src in zip(tables, sources)]
    # A partition whose rows name media records its row hash apart (the files are checked by resume).
    if verify_hash and digest != part.get("rows_hash", part["content_hash"]):
        raise InputChangedError(
            f"partition {partition_id} (rows {part['start_row']}-{part['end_row']}) no longer matches "
            f"the input the job was planned on (hash {digest} != recorded {part['content_hash']}); "
            f"the input changed since the job started: start a new job instead of resuming"
        )
    table = _concat_files(partition_id, tables, sources) if len(tables) > 1 else tables[0]
    if table.num_rows != part["num_rows"]:
        raise InputChangedError(f"partition {partition_id}: read {table.num_rows} rows, expected {part['num_rows']}")
    return table


class InputTypeConflictError(InputError):
    """A partition spans input files whose rows give one field types that cannot be merged (int and string)."""


def _concat_files(partition_id: int, tables: list[pa.Table], sources: list[str]) -> pa.Table:
    """One partition's rows from several files; a field typed differently per file is named, with its files."""
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:
        types: dict[str, dict[str, str]] = {}
        for t, src in zip(tables, sources):
            for fld in t.schema:
                if not pa.types.is_null(fld.type):
                    types.setdefault(fld.name, {}).setdefault(str(fld.type), src)
        conflicts = "; ".join(
            f"{name!r} is {', '.join(f'{typ} in {src}' for typ, src in seen.items())}"
            for name, seen in types.items()
            if len(seen) > 1
        )
        raise InputTypeConflictError(
            f"partition {partition_id} spans input files whose rows give a field different types "
            f"({conflicts or exc}): give the field one type in every file, or set partition.align: file "
            f"so that no partition spans two files"
        ) from exc
