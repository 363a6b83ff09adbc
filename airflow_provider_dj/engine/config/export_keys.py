"""How Data-Juicer's export keys of a recipe are honoured or refused, at validation.

Each key as in Data-Juicer, or refused with the reason:

* ``export_type`` (jsonl/json/parquet): accepted when it names the format of
  the ``export_path`` suffix; a contradiction is refused (this engine picks
  the format from the suffix, and the file name must not lie about it).
* ``export_shard_size``: 0 or less (Data-Juicer's default) is one file at
  ``export_path``; a positive number of bytes writes the ``<stem>-NN-of-MM``
  shard files Data-Juicer writes for that size, committed as a set with a
  manifest written last (engine/output/shards.py).  A fractional or
  non-numeric size is refused.
* ``export_layout`` (this engine's own key): ``file`` (the default) is the export as above;
  ``partition_shards`` writes one JSONL shard per non-empty partition, in partition order, committed
  as a set with the same manifest, so that a nightly job hard-links the shards of partitions it
  reused instead of writing them again (engine/job/export_shards.py).  Refused with
  ``export_shard_size`` > 0 (two rules for where a shard ends) and for a Parquet export.
* ``export_in_parallel``: accepted.  It changes how, not what, is written (in
  Data-Juicer too: the same file with more writer processes); ``false`` makes
  this engine serialize the JSONL export in its own task instead of on Ray
  workers (engine/output/parts.py), the bytes are identical.
* ``keep_hashes_in_res_ds``: accepted.  Hash fields already in the input are
  kept as Data-Juicer keeps them; with a deduplicator in ``process`` it is
  refused, because Data-Juicer would also export the hash that op computed
  per row and this engine keeps those hashes out of the rows.
* ``encrypt_before_export`` / ``decrypt_after_reading`` ``true``: refused.
  Data-Juicer would encrypt (decrypt) the files with a Fernet key; silently
  writing plaintext where encryption was asked for would leak the data.

The recipe loader calls ``check_export_keys``, which is why these checks sit with the recipe
model and not with the export.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

EXPORT_TYPES = ("jsonl", "json", "parquet")
#: ``export_layout``'s values: one file (or Data-Juicer's shard files), or one shard per partition.
EXPORT_LAYOUTS = ("file", "partition_shards")


@dataclass(frozen=True)
class ExportOptions:
    keep_hashes_in_res_ds: bool = False
    export_in_parallel: bool = True
    #: Bytes per shard (Data-Juicer's ``export_shard_size``); 0: one export file.
    export_shard_size: int = 0
    #: ``file`` or ``partition_shards`` (EXPORT_LAYOUTS).
    export_layout: str = "file"


#: Builds the exception for a refused key: (key, message) -> exception.  The recipe
#: loader passes its own, which names the file and says whether an override set it.
ErrorFactory = Callable[[str, str], Exception]


def _plain_error(key: str, message: str) -> Exception:
    return ValueError(f"{key}: {message}")


def _bool(data: dict, key: str, default: bool, err: ErrorFactory) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise err(key, f"must be true or false, got {value!r}")
    return value


def _suffix_type(export_path: str) -> str:
    name = export_path.rsplit("/", 1)[-1].lower()
    return name.rsplit(".", 1)[-1] if "." in name else ""


def check_export_keys(
    data: dict, export_path: str, deduplicators: Iterable[str] = (), err: ErrorFactory = _plain_error
) -> ExportOptions:
    """Validate Data-Juicer's export keys of a recipe mapping (see the module docstring).

    ``deduplicators``: the names of the recipe's deduplicator ops (for
    keep_hashes_in_res_ds).  Raises ``err(key, message)`` for a refused key.
    """
    export_type = data.get("export_type")
    if export_type is not None:
        if not isinstance(export_type, str) or export_type.lower() not in EXPORT_TYPES:
            raise err(
                "export_type",
                f"must be one of {', '.join(EXPORT_TYPES)} (the formats Data-Juicer "
                f"1.6.1 exports), got {export_type!r}",
            )
        suffix = _suffix_type(export_path)
        if export_type.lower() != suffix:
            raise err(
                "export_type",
                f"export_type {export_type!r} contradicts export_path {export_path!r} "
                f"(a .{suffix} file); this engine writes the format the suffix names: "
                f"name the file *.{export_type.lower()} or remove export_type",
            )
    shard_size = _shard_size(data.get("export_shard_size"), err)
    layout = _layout(data.get("export_layout"), export_path, shard_size, err)
    for key, what in (
        ("encrypt_before_export", "encrypt the exported files"),
        ("decrypt_after_reading", "decrypt the input files"),
    ):
        if _bool(data, key, False, err):
            raise err(
                key,
                f"Data-Juicer would {what} with a Fernet key; this engine does not, and "
                f"reading or writing plaintext instead would be wrong or leak the data. "
                f"Remove {key} (encrypt at rest with your storage, e.g. server-side "
                f"encryption) or run this recipe with Data-Juicer itself",
            )
    keep_hashes = _bool(data, "keep_hashes_in_res_ds", False, err)
    dedups = sorted(set(deduplicators))
    if keep_hashes and dedups:
        raise err(
            "keep_hashes_in_res_ds",
            f"with {', '.join(dedups)} in process, Data-Juicer would "
            f"export the hash field each of them computed per row "
            f"(__dj__hash, __dj__minhash, __dj__simhash...); this engine "
            f"keeps those hashes out of the rows, so it cannot. Remove "
            f"keep_hashes_in_res_ds (without it Data-Juicer drops them too)",
        )
    return ExportOptions(
        keep_hashes_in_res_ds=keep_hashes,
        export_in_parallel=_bool(data, "export_in_parallel", True, err),
        export_shard_size=shard_size,
        export_layout=layout,
    )


def _shard_size(shard, err: ErrorFactory) -> int:
    """``export_shard_size`` as whole bytes; 0 (one file) for none, zero or a negative size, as in Data-Juicer."""
    if shard is None:
        return 0
    if isinstance(shard, bool) or not isinstance(shard, (int, float)) or shard != int(shard):
        raise err(
            "export_shard_size",
            f"must be a whole number of bytes per shard (0: one export file), got {shard!r}",
        )
    return max(int(shard), 0)


def _layout(value, export_path: str, shard_size: int, err: ErrorFactory) -> str:
    """``export_layout``: ``file`` when absent; ``partition_shards`` only for a JSONL export without
    ``export_shard_size``."""
    if value is None:
        return "file"
    if not isinstance(value, str) or value not in EXPORT_LAYOUTS:
        raise err(
            "export_layout",
            f"must be one of {', '.join(EXPORT_LAYOUTS)} (file: one export file; partition_shards: one "
            f"JSONL shard per partition and a manifest), got {value!r}",
        )
    if value == "partition_shards" and shard_size > 0:
        raise err(
            "export_layout",
            f"partition_shards ends a shard where a partition ends, export_shard_size {shard_size} where "
            f"Data-Juicer's size rule does; set one of them, not both",
        )
    if value == "partition_shards" and _suffix_type(export_path) == "parquet":
        raise err(
            "export_layout",
            f"partition_shards writes JSON Lines shards, and export_path {export_path!r} is a Parquet file; "
            f"name the export *.jsonl or remove export_layout",
        )
    return value


__all__ = ["EXPORT_LAYOUTS", "EXPORT_TYPES", "ErrorFactory", "ExportOptions", "check_export_keys"]
