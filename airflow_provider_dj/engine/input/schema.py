"""Check the input against the recipe before any work starts: every field the recipe reads must exist.

Why: an input whose rows lack the recipe's text key (``text_keys: text`` on a
file whose rows only hold ``body``) would otherwise "succeed": every row fails
in every op, the export is empty and the job exits 0.  A job that looks as if
it ran but produced garbage is the worst outcome a corpus pipeline has, so
the ``validate`` task (and ``dj-airflow run``/``validate --check-input``,
before Airflow starts) refuses it, naming the file, the missing field, the
fields the rows do have and the recipe key to change.

What each op reads comes from the op itself (``Op.input_fields``: the text
key by default, ``field_key`` for specified_field_filter, ...); a field an
earlier op adds (``Op.output_fields``) counts as present.

Cheap by design: Parquet's schema comes from each file's footer; a JSONL
file's from its first rows (about 1 MiB).  Only when a field is absent from
a JSONL file's first rows is the rest of that file searched, as bytes, for
the field's name used as a key, so a field that appears only in later rows
is never refused.  A field missing from every row of every file is refused;
one missing in some files or rows only is a per-row failure at run time
(``failed/``, with the reason), and the files that lack it are listed as
warnings here.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.input.sources import (
    InputError,
    InputFile,
    iter_stream,
    jsonl_error,
    list_input_files,
)
from airflow_provider_dj.ops.base import STATS_COLUMN

#: Bytes of a JSONL file read to learn its fields (then up to the next newline).
SAMPLE_BYTES = 1 << 20
#: Fields listed in a message before "...".
MAX_FIELDS_SHOWN = 20


class InputMismatchError(InputError):
    """The input lacks, in every row, a field the recipe reads; nothing was planned or written."""


@dataclass
class RequiredField:
    """A field the recipe reads, the recipe key that names it, and the ops that read it."""

    path: str  # dotted path into nested objects
    key: str  # recipe key to change: "text_keys" or "process[i].<op>.<arg>"
    ops: list[str] = field(default_factory=list)  # "process[i] <op name>"


@dataclass(frozen=True)
class FileSchema:
    """What one file's rows hold, as far as was read."""

    path: str
    schema: pa.Schema | None  # None: no rows
    complete: bool  # the schema covers every row (a Parquet footer, or a JSONL file read to its end)
    rows_read: int = 0

    @property
    def empty(self) -> bool:
        return self.schema is None

    def has(self, path: str) -> bool:
        return self.schema is not None and _has_path(self.schema, path)


@dataclass
class InputCheck:
    """The outcome of a passed check: what was checked, and what the user should know."""

    fields: list[str]
    files: int
    empty_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# -- what the recipe reads ---------------------------------------------------


def required_fields(recipe) -> list[RequiredField]:
    """The input fields ``recipe``'s ops read (those an earlier op adds are not input fields)."""
    from airflow_provider_dj.ops.registry import get_op_class

    produced: set[str] = set()
    found: dict[tuple[str, str], RequiredField] = {}
    for spec in recipe.process:
        cls = get_op_class(spec.name)
        for path, arg in cls.input_fields(spec.args, recipe.text_key).items():
            top = path.split(".", 1)[0]
            if top in produced or top == STATS_COLUMN:
                continue
            key = (
                "text_keys"
                if arg == "text_key" and "text_key" not in spec.args
                else f"process[{spec.index}].{spec.name}.{arg}"
            )
            req = found.setdefault((path, key), RequiredField(path, key))
            req.ops.append(f"process[{spec.index}] {spec.name}")
        produced.update(f.split(".", 1)[0] for f in cls.output_fields(spec.args))
    return list(found.values())


# -- what the input holds ----------------------------------------------------


def _has_path(schema: pa.Schema, path: str) -> bool:
    parts = path.split(".")
    idx = schema.get_field_index(parts[0])
    if idx < 0:
        return False
    typ = schema.field(idx).type
    for part in parts[1:]:
        if not pa.types.is_struct(typ) or typ.get_field_index(part) < 0:
            return False
        typ = typ.field(typ.get_field_index(part)).type
    return True


#: ``sample_schema``'s answers in this process, by a local file's identity: ``dj-airflow run`` checks the
#: input before Ray or Airflow start, then planning checks it again in the same process.
_SAMPLED: dict[tuple, FileSchema] = {}


#: A file modified this recently is not remembered: a file system's clock for modification times is
#: coarse (milliseconds), so a rewrite of the same size just after could keep the same time.
_SETTLED_NS = 2_000_000_000


def _file_identity(f: InputFile) -> tuple | None:
    """(path, device, inode, size, mtime) of a settled local file; None for a URL or a file modified in
    the last two seconds.  A later rewrite gives the file a new modification time, so a new key."""
    if storage.is_url(f.path):
        return None
    try:
        st = os.stat(f.path)
    except OSError:
        return None
    if time.time_ns() - st.st_mtime_ns < _SETTLED_NS:
        return None
    return (f.path, f.format, f.compression, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def sample_schema(f: InputFile) -> FileSchema:
    """The fields of one file: its Parquet footer, or its first JSONL rows (a bad row there is refused).
    A local file unchanged since this process last sampled it is not read again."""
    key = _file_identity(f)
    if key is not None and key in _SAMPLED:
        return _SAMPLED[key]
    found = _read_sample_schema(f)
    if key is not None:
        if len(_SAMPLED) >= 4096:
            _SAMPLED.clear()
        _SAMPLED[key] = found
    return found


def _read_sample_schema(f: InputFile) -> FileSchema:
    if f.format == "parquet":
        with storage.open_read(f.path) as fh:
            pf = pq.ParquetFile(fh)
            schema, rows = pf.schema_arrow, pf.metadata.num_rows
        return FileSchema(f.path, schema if rows else None, True, rows)
    data = bytearray()
    complete = True
    for block in iter_stream(f, chunk=SAMPLE_BYTES):
        data += block
        if len(data) >= SAMPLE_BYTES:  # whole lines only: read on to the end of the line the sample cuts
            nl = data.rfind(b"\n")
            if nl >= 0:
                complete = False
                del data[nl + 1 :]
                break
    raw = bytes(data)
    if not raw.strip():
        return FileSchema(f.path, None, complete)
    try:
        table = pajson.read_json(
            pa.BufferReader(raw), read_options=pajson.ReadOptions(block_size=max(1 << 20, len(raw) + 1))
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise jsonl_error(f, raw, 0, exc) from exc
    return FileSchema(f.path, table.schema if table.num_rows else None, complete, table.num_rows)


def file_mentions_key(f: InputFile, name: str) -> bool:
    """Whether ``"name":`` occurs as an object key anywhere in a JSONL file (a byte search, no parsing).

    A match not preceded by a backslash and followed by optional whitespace
    and a colon is a key: inside a JSON string value a quote is escaped, and
    a string value is never followed by a colon.  False is therefore proof
    the key is absent (short of a key spelled with \\u escapes)."""
    needle = json.dumps(name, ensure_ascii=False).encode("utf-8")
    tail = b""
    for block in iter_stream(f):
        buf = tail + block
        at = buf.find(needle)
        while at >= 0:
            after = buf[at + len(needle) : at + len(needle) + 64].lstrip(b" \t\r\n")
            if (at == 0 or buf[at - 1 : at] != b"\\") and after.startswith(b":"):
                return True  # (a match cut at a block's end is found again in the next, with the tail)
            at = buf.find(needle, at + 1)
        tail = buf[-(len(needle) + 64) :]
    return False


def _field_list(schemas: list[FileSchema]) -> str:
    names: dict[str, str] = {}
    for s in schemas:
        for fld in s.schema or ():
            names.setdefault(fld.name, _type_word(fld.type))
    shown = [f"{n} ({t})" for n, t in list(names.items())[:MAX_FIELDS_SHOWN]]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f", ... ({more} more)" if more > 0 else "") if shown else "(none)"


def _type_word(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_struct(t):
        return (
            "object: "
            + ", ".join(t.field(i).name for i in range(min(t.num_fields, 8)))
            + (", ..." if t.num_fields > 8 else "")
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list"
    if pa.types.is_null(t):
        return "always null"
    return str(t)


def _fix_for(req: RequiredField, schemas: list[FileSchema]) -> str:
    if req.key == "text_keys":
        strings = [
            fld.name
            for s in schemas
            for fld in s.schema or ()
            if (pa.types.is_string(fld.type) or pa.types.is_large_string(fld.type))
            and not fld.name.startswith("__dj__")
        ]
        example = f" (e.g. text_keys: {strings[0]})" if strings else ""
        return f"set text_keys to the field that holds the text{example}"
    if req.path.split(".", 1)[0] == "__dj__suffix__":
        return (
            f"Data-Juicer adds __dj__suffix__ when it loads data with add_suffix; this reader does not: "
            f"remove {req.key} (or the op), or add a __dj__suffix__ field to the input"
        )
    return f"change {req.key} to a field the rows have, or add {req.path!r} to the input"


def check_input_fields(recipe, files: list[InputFile] | None = None) -> InputCheck:
    """Refuse (``InputMismatchError``) an input in which a field the recipe reads exists in no row.

    Returns what was checked plus warnings: files without rows, and files
    lacking a field that other files have (their rows will fail per row).
    An input with no rows at all passes: there is nothing to process."""
    files = list_input_files(recipe.dataset_path) if files is None else files
    schemas = [sample_schema(f) for f in files]
    by_path = {f.path: f for f in files}
    rows = [s for s in schemas if not s.empty]
    check = InputCheck(fields=[], files=len(files), empty_files=[s.path for s in schemas if s.empty])
    for path in check.empty_files:
        check.warnings.append(f"{path} has no rows; it contributes nothing")
    if not rows:
        return check
    for req in required_fields(recipe):
        check.fields.append(req.path)
        present, absent = [], []
        for s in rows:
            if s.has(req.path):
                present.append(s.path)
            elif s.complete or not file_mentions_key(by_path[s.path], req.path.rsplit(".", 1)[-1]):
                absent.append(s.path)
            else:
                present.append(s.path)  # named as a key in a later row: it may be there
        readers = ", ".join(req.ops)
        if not present:
            where = (
                f"{rows[0].path}: no row has the field {req.path!r} (the rows' fields: {_field_list(rows)})"
                if len(rows) == 1
                else f"{recipe.dataset_path}: none of its {len(rows)} input files has the field {req.path!r} in "
                f"any row (their fields: {_field_list(rows)})"
            )
            raise InputMismatchError(
                f"{where}; {req.key} names it and {readers} read(s) it. "
                f"{_fix_for(req, rows)[0].upper()}{_fix_for(req, rows)[1:]}. "
                f"Nothing was planned or written."
            )
        for path in absent:
            check.warnings.append(
                f"{path} has no field {req.path!r} ({req.key}; its fields: "
                f"{_field_list([s for s in rows if s.path == path])}): its rows will fail in "
                f"{readers} and go to failed/"
            )
    return check
