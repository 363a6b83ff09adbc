"""Media paths in the rows a job reads, rewritten as Data-Juicer's loaders rewrite them.

Data-Juicer turns a relative path under ``image_key``/``audio_key``/``video_key`` into an absolute
one when it loads a dataset (``data_juicer/format/formatter.py`` ``rel2abs``,
``data_juicer/core/data/ray_dataset.py`` ``convert_to_absolute_paths``), so its ops open the right
file whatever the worker's directory and its export holds absolute paths.  Here the same happens
when a partition's rows are read (``partitioning.read_partition``): each relative path becomes the
file that planning resolved, digested and confined (``media.resolve_media_path``, made absolute),
so the file an op opens is the file the job's identity covers.

The rewrite follows the row hash: partition hashes are computed on the rows as stored, before
it, so planned hashes, strict resume and nightly reuse are unchanged.  It applies to jobs planned
with it (partitioning_info's ``media_paths``): a job planned before keeps reading its rows as
written, so a resumed job never mixes the two forms in one export.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.input.media import MediaKeys, resolve_media_path

#: partitioning_info's ``media_paths`` value for jobs whose rows get their media paths rewritten.
RESOLVED = "resolved-v1"


def absolute_media_path(path: str, input_file: str) -> str:
    """``path`` as the ops open it: ``resolve_media_path``, and a local result made absolute (a relative
    ``dataset_path`` would otherwise leave it relative to the planner's working directory)."""
    resolved = resolve_media_path(path, input_file)
    return resolved if storage.is_url(resolved) else os.path.abspath(resolved)


def _is_path_list(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
        pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)
    )


def resolve_media_columns(table: pa.Table, input_file: str, keys: MediaKeys) -> pa.Table:
    """``table`` (rows of ``input_file``) with every path under the media keys made absolute.

    Only list-of-string columns hold paths (planning refused any other non-empty value); nulls, empty
    lists and absolute paths or URLs stay as they are.  Each distinct path is resolved once.
    """
    for _kind, key in keys.media():
        if key not in table.column_names or not _is_path_list(table.schema.field(key).type):
            continue
        col = table.column(key)
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        flat = col.values.slice(col.offsets[0].as_py(), col.offsets[-1].as_py() - col.offsets[0].as_py())
        if len(flat) == 0:
            continue
        distinct = pc.unique(flat)
        resolved = pa.array(
            [None if p is None else absolute_media_path(p, input_file) for p in distinct.to_pylist()], flat.type
        )
        if resolved.equals(distinct):
            continue
        new_flat = pc.take(resolved, pc.index_in(flat, value_set=distinct))
        offsets = pc.subtract(col.offsets, col.offsets[0]).cast(col.offsets.type)
        new = type(col).from_arrays(offsets, new_flat, type=col.type, mask=col.is_null())
        table = table.set_column(table.column_names.index(key), table.schema.field(key), new)
    return table
