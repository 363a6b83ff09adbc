"""Which modality a corpus is, from a sample of its rows, and the partition size that follows (auto mode).

Data-Juicer's partitioned executor (1.6.1, ``data_juicer/core/executor/partition_size_optimizer.py``) samples the
dataset and sizes partitions by modality.  The rules kept here are its own:

* a row is ``text`` when its text field (``text_keys[0]``) is non-empty, ``image``/``audio``/``video``
  when its ``image_key``/``audio_key``/``video_key`` value is non-empty, ``multimodal`` when more than
  one of these holds (an image with a caption is multimodal), and ``text`` when none does;
* the corpus's modality is the one most sample rows have (a tie goes to the earlier in
  text, image, audio, video, multimodal);
* the sample is the first rows of the input: all of them under 1,000 rows, 1% (at most 1,000) under
  100,000, 0.1% (at most 10,000) above;
* the sizes in rows (default, maximum) and the memory multiplier per modality are the table below.

What differs, and why: Data-Juicer measures a row by its in-memory Python size, which for a row naming
a 5 MB image is a few hundred bytes; here a media row is measured by the bytes of the files it names
(their sizes on disk, the 90th percentile of the sample, as Data-Juicer takes the 90th percentile).
The partition is sized so that those bytes times the modality's memory multiplier fill
``target_size_mb``.  Data-Juicer also shrinks partitions by the memory and cores it finds at run time;
that would make the partitions (and their hashes) depend on the machine that planned them, so it is
left out.  A text corpus is sized exactly as before (JSON bytes per row, at most 50,000 rows).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.input.media import (
    MediaKeys,
    RowRef,
    media_file_size,
    resolve_media_path,
    row_media_paths,
)
from airflow_provider_dj.engine.input.sources import InputFile, iter_stream

MODALITIES = ("text", "image", "audio", "video", "multimodal")


@dataclass(frozen=True)
class ModalitySizes:
    """Rows per partition when nothing is measured, the most rows a partition takes, and how much memory a
    byte of this modality's input needs compared with a byte of text."""

    default_rows: int
    max_rows: int
    memory_multiplier: float


#: Data-Juicer 1.6.1's MODALITY_CONFIGS (rows) with the memory multipliers of its partitioning guide.
MODALITY_SIZES = {
    "text": ModalitySizes(10_000, 50_000, 1.0),
    "image": ModalitySizes(2_000, 10_000, 5.0),
    "audio": ModalitySizes(1_000, 4_000, 8.0),
    "video": ModalitySizes(400, 2_000, 20.0),
    "multimodal": ModalitySizes(1_600, 6_000, 10.0),
}
#: Data-Juicer's floor for a media partition (its optimizer never goes below 10 samples).
MEDIA_MIN_ROWS = 10


def sample_size(total_rows: int) -> int:
    """Data-Juicer's adaptive sample size for ``total_rows`` rows."""
    if total_rows < 1000:
        return total_rows
    if total_rows < 100_000:
        return min(1000, total_rows // 100)
    return min(10_000, total_rows // 1000)


def row_modality(row: dict, keys: MediaKeys) -> str:
    """Data-Juicer's ``detect_modality`` for one row."""
    found = []
    if _nested(row, keys.text):
        found.append("text")
    for kind, key in keys.media():
        if row.get(key):
            found.append(kind)
    if len(found) > 1:
        return "multimodal"
    return found[0] if found else "text"


def _nested(row: dict, path: str) -> Any:
    value: Any = row
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


@dataclass
class ModalityReport:
    """What the sample showed: the modality, the rows per modality, media bytes per row, and the rows
    per partition that follow (with the sentence saying so)."""

    modality: str
    sample_rows: int
    counts: dict[str, int]
    keys: MediaKeys
    media_bytes_p90: int = 0
    media_files: int = 0
    rows_per_partition: int | None = None
    how: str = ""
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "modality": self.modality,
            "sample_rows": self.sample_rows,
            "rows_by_modality": {k: v for k, v in self.counts.items() if v},
            "keys": self.keys.to_dict(),
            **({"media_bytes_per_row_p90": self.media_bytes_p90} if self.modality != "text" else {}),
            **({"rows_per_partition": self.rows_per_partition} if self.rows_per_partition else {}),
        }


def sample_rows(files: list[InputFile], n: int) -> list[tuple[RowRef, dict]]:
    """The first ``n`` rows of the input, in order, with where each is."""
    out: list[tuple[RowRef, dict]] = []
    for f in files:
        if len(out) >= n:
            break
        if f.format == "parquet":
            with storage.open_read(f.path) as fh:
                pf = pq.ParquetFile(fh)
                for batch in pf.iter_batches(batch_size=min(1024, max(1, n - len(out)))):
                    for row in batch.to_pylist():
                        out.append((RowRef(f.path, row=len(out) + 1), row))
                        if len(out) >= n:
                            break
                    if len(out) >= n:
                        break
            continue
        line = 0
        tail = b""
        for block in iter_stream(f):
            lines = (tail + block).split(b"\n")
            tail = lines.pop()
            for raw in lines:
                line += 1
                if _take(out, raw, f.path, line) and len(out) >= n:
                    break
            if len(out) >= n:
                break
        else:
            _take(out, tail, f.path, line + 1)
    return out[:n]


def _take(out: list, raw: bytes, path: str, line: int) -> bool:
    if not raw.strip():
        return False
    try:
        row = json.loads(raw)
    except ValueError:
        return False  # the row index and the hashes name a line that is not JSON
    if isinstance(row, dict):
        out.append((RowRef(path, line=line), row))
        return True
    return False


def detect(rows: list[tuple[RowRef, dict]], keys: MediaKeys) -> ModalityReport:
    """The modality of the sampled rows, and the 90th percentile of the media bytes a row names (each
    file named is stat'ed: a missing one is refused here already, naming the row and the path)."""
    counts = {m: 0 for m in MODALITIES}
    sizes: list[int] = []
    files = 0
    for where, row in rows:
        counts[row_modality(row, keys)] += 1
        total = 0
        for kind, written in row_media_paths(row, keys, where):
            key = dict(keys.media())[kind]
            total += media_file_size(resolve_media_path(written, where.file), written, key, where)
            files += 1
        sizes.append(total)
    modality = max(counts.items(), key=lambda kv: kv[1])[0] if rows else "text"
    p90 = sorted(sizes)[int(len(sizes) * 0.9)] if sizes else 0
    return ModalityReport(modality, len(rows), counts, keys, p90, files)


def media_rows_per_partition(report: ModalityReport, partition_cfg: Any) -> tuple[int, str]:
    """Rows per partition for a media modality: media bytes times the memory multiplier fill the target."""
    sizes = MODALITY_SIZES[report.modality]
    target_mb = partition_cfg.target_size_mb or 256
    if partition_cfg.max_size_mb:
        target_mb = min(target_mb, partition_cfg.max_size_mb)
    seen = ", ".join(f"{m} {c}" for m, c in report.counts.items() if c)
    keys = ", ".join(f"{kind}_key={k}" for kind, k in report.keys.media())
    source = (
        f"{report.modality} detected in a sample of {report.sample_rows} rows ({seen}; text key "
        f"{report.keys.text}, {keys})"
    )
    if report.media_bytes_p90 > 0:
        per_row = report.media_bytes_p90 * sizes.memory_multiplier
        rows = int(target_mb * 1024 * 1024 // per_row)
        rows = max(MEDIA_MIN_ROWS, min(rows, sizes.max_rows))
        how = (
            f"auto: {source}; {report.media_bytes_p90} bytes of media/row (p90 of the files' sizes) "
            f"x {sizes.memory_multiplier:g} memory multiplier, target {target_mb} MB, "
            f"{MEDIA_MIN_ROWS}-{sizes.max_rows} rows: {rows} rows/partition"
        )
    else:
        rows = int(partition_cfg.size or sizes.default_rows)
        how = f"auto: {source}; no media bytes measured: {rows} rows/partition ({report.modality} default)"
    report.rows_per_partition = rows
    report.how = how
    return rows, how


#: Rows ``dj-airflow validate`` samples: it does not count the input's rows, so it takes Data-Juicer's
#: sample for an input of 100,000 rows (the plan takes the sample its row count calls for).
PREVIEW_SAMPLE_ROWS = 1000


def preview(recipe: Any) -> str:
    """One line for ``dj-airflow validate --check-input``: the modality of the first rows, from which keys,
    and the partition size that follows (the plan records the same for the sample its row count calls for).
    Raises InputError (InputOutsideRootsError among them) for a sample row naming a file that cannot be used."""
    from airflow_provider_dj.engine.input.media import MediaKeys
    from airflow_provider_dj.engine.input.sources import list_input_files

    keys = MediaKeys.of_recipe(recipe)
    report = detect(sample_rows(list_input_files(recipe.dataset_path), PREVIEW_SAMPLE_ROWS), keys)
    seen = ", ".join(f"{m} {c}" for m, c in report.counts.items() if c) or "no rows"
    head = (
        f"modality: {report.modality} (first {report.sample_rows} rows: {seen}; text key {keys.text!r}, "
        f"media keys {', '.join(repr(k) for _kind, k in keys.media())})"
    )
    if recipe.partition.mode == "manual":
        return f"{head}; partitions: manual"
    if report.modality == "text":
        return f"{head}; partitions: auto, sized by JSON bytes per row (at most {MODALITY_SIZES['text'].max_rows} rows)"
    rows, _how = media_rows_per_partition(report, recipe.partition)
    sizes = MODALITY_SIZES[report.modality]
    return (
        f"{head}; partitions: auto, {rows} rows each ({report.media_bytes_p90} bytes of media/row at p90 "
        f"x {sizes.memory_multiplier:g}, target {recipe.partition.target_size_mb} MB, at most {sizes.max_rows})"
    )


__all__ = [
    "PREVIEW_SAMPLE_ROWS",
    "MEDIA_MIN_ROWS",
    "MODALITIES",
    "MODALITY_SIZES",
    "ModalityReport",
    "ModalitySizes",
    "detect",
    "media_rows_per_partition",
    "preview",
    "row_modality",
    "sample_rows",
    "sample_size",
]
