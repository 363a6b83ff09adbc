"""Near-duplicate document deduplication: MinHash-LSH and SimHash, with
Data-Juicer 1.6.1's names, arguments, defaults and keep rules.

Both ops run in the engine's two phases:

* ``compute_hash(table)`` (per partition, per chunk) turns each row into a
  small fixed-size signature -- MinHash: one uint64 digest per LSH band;
  SimHash: the 64-bit fingerprint.  Token hashing is per shingle (hashlib),
  everything after it (permutations, minima, bit votes) is numpy over the
  token hashes of many rows at once.  The result depends on each row alone,
  so any chunking or partitioning gives the same signatures.
* ``resolve_global(tables)`` sees every partition's signatures in input
  order and returns one keep flag per row.  Memory is bounded by the
  signatures (plus a few integer arrays per row), never the text.

Semantics (checked against DJ's own ops by tests/conformance/near_dedup):

MinHash -- DJ shingles the (lowercased, ``ignore_pattern``-stripped) text,
hashes each shingle with the first 4 bytes of SHA-1 (little endian), applies
``num_permutations`` universal hashes ``(a*h + b) mod (2**61-1) & (2**32-1)``
whose ``a, b`` come from ``numpy.random.RandomState(42)`` (uint64 arithmetic
wraps, exactly as in DJ), takes the per-permutation minimum (all ``2**32-1``
for a text without shingles), cuts the result into ``num_bands`` bands of
``num_rows_per_band`` values, and puts two rows in one cluster when any band
is equal (union-find over band buckets, transitively; no Jaccard check of the
candidate pairs -- DJ's default executor does none either).  Each cluster
keeps its lowest row (DJ's union-find always roots a set at its minimum and
keeps ``find(i) == i``).  All of this is reproduced bit for bit, except that a
band is stored as a 64-bit digest of its values instead of their raw bytes
(exact when ``num_rows_per_band <= 2``): two *different* bands collide with
probability about ``rows**2 * bands / 2**65``, negligible (1e-7 at 1M rows).
When ``num_bands``/``num_rows_per_band`` are not both given, DJ picks them by
minimizing the integrated false-positive/false-negative probabilities with
``scipy.integrate.quad``; the integrands are polynomials of degree at most
``num_permutations``, so here a Gauss-Legendre rule of sufficient order
integrates them exactly (numpy only); the chosen pair equals DJ's on the
fixture grid (tests/conformance/near_dedup/expected/optimal_param.json).

SimHash -- shingles as above (a list, so repeated shingles vote repeatedly),
each hashed as the big-endian first 8 bytes of MD5; bit ``j`` of the
fingerprint is set when more shingles have it set than not (ties and empty
texts give 0).  DJ's ``simhash.find_all`` reports every pair of distinct
fingerprints within ``hamming_distance`` bits (its block permutations are an
exact index when ``hamming_distance < num_blocks``, by pigeonhole), DJ then
clusters fingerprints by connectivity and keeps the first row of each
cluster (and the first row of each otherwise unmatched fingerprint).  Here:
the same block index over the unique fingerprints, the same connectivity,
the same first-row rule -- identical keep sets.

Patterns, as in DJ: ``ignore_pattern`` is compiled with the ``regex`` package
(``ops/kernels/patterns.py``), so ``\\p{P}`` -- the ignore pattern of most of DJ's
shipped recipes -- and any other ``regex`` syntax mean what they mean there; a
pattern that does not compile is refused at validation with its position.
``punctuation`` tokenization splits on ``regex``'s own ``\\p{P}``, as DJ does.

Differences from DJ, all rejected or documented rather than silent:

* ``tokenization: sentencepiece`` (needs a downloaded model) is rejected at
  validation, as is any tokenizer_model.
* ``num_bands * num_rows_per_band > num_permutations`` and
  ``hamming_distance >= num_blocks`` (degenerate in DJ: empty bands that
  match every row; an incomplete index) are rejected at validation.
* A null text is treated as '' (DJ fails on it).
* A row whose signature cannot be computed (the kernel raises on it) fails
  the partition, naming the row; with ``skip_op_error`` it is set aside in
  ``failed/`` instead and is never a duplicate, nor anything's original: its
  signature is null (``signature_schema``), and the other rows cluster as if
  it were not there (engine/execution/key_rows.py).  DJ fails the job.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from typing import Any, Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import regex

from airflow_provider_dj.ops.base import OpArgumentError, SignatureDeduplicator
from airflow_provider_dj.ops.kernels.patterns import compile_user_pattern
from airflow_provider_dj.ops.registry import register

MERSENNE_PRIME = np.uint64((1 << 61) - 1)
MAX_HASH = np.uint64((1 << 32) - 1)
_MAX_HASH32 = np.uint32((1 << 32) - 1)
# (shingles x permutations) elements per block of the permutation step; its buffers (20 bytes an
# element) are allocated once per call and reused, so no block pays for fresh pages.
_BLOCK_ELEMENTS = 1 << 19
_SUPPORTED_TOKENIZATIONS = ("space", "punctuation", "character")

# DJ's own splitter for punctuation tokenization (its ``punctuation_pattern``).
PUNCTUATION_SPLIT = regex.compile(r"\p{P}")


# --- shared helpers ---------------------------------------------------------
def _check_common(cls_name: str, args: dict[str, Any], allowed: tuple[str, ...]) -> None:
    tok = args.get("tokenization", "space")
    if tok == "sentencepiece" and "sentencepiece" not in allowed:
        raise OpArgumentError(
            "tokenization",
            f"{cls_name}: tokenization 'sentencepiece' needs a downloaded sentencepiece model and is not "
            f"supported by this engine; use one of {', '.join(_SUPPORTED_TOKENIZATIONS)}",
        )
    if tok not in _SUPPORTED_TOKENIZATIONS:
        raise OpArgumentError(
            "tokenization",
            f"{cls_name}: tokenization must be one of {', '.join(_SUPPORTED_TOKENIZATIONS)}, got {tok!r}",
        )
    for key in ("window_size", "num_permutations", "num_bands", "num_rows_per_band", "num_blocks", "hamming_distance"):
        value = args.get(key)
        if value is not None and value <= 0:
            raise OpArgumentError(key, f"{cls_name}: {key} must be a positive integer, got {value!r}")
    pattern = args.get("ignore_pattern")
    if pattern:  # DJ ignores an empty pattern too
        compile_user_pattern(pattern, op=cls_name, arg="ignore_pattern")


def _texts(table: pa.Table, key: str) -> list[str]:
    col = table.column(key) if key in table.column_names else None
    if col is None:
        raise KeyError(f"text column {key!r} not in table (columns: {table.column_names})")
    return ["" if t is None else t for t in col.to_pylist()]


class _Shingler:
    """DJ's normalization and shingling (space / punctuation / character)."""

    def __init__(
        self, tokenization: str, window_size: int, lowercase: bool, ignore_pattern: Optional[str], op: str = ""
    ) -> None:
        self.tokenization = tokenization
        self.window_size = window_size
        self.lowercase = lowercase
        self.ignore = compile_user_pattern(ignore_pattern, op=op, arg="ignore_pattern") if ignore_pattern else None

    def shingles(self, text: str) -> list[bytes]:
        if self.lowercase:
            text = text.lower()
        if self.ignore is not None:
            text = self.ignore.sub("", text)
        w = self.window_size
        if self.tokenization == "character":
            return [text[i : i + w].encode() for i in range(len(text) - w + 1)]
        if self.tokenization != "punctuation":  # space: split on ' ' only, dropping empty pieces
            # Split the UTF-8 bytes: encoding preserves concatenation and no multi-byte sequence holds
            # b' ', so these are the same shingles, with one encode per text instead of one per shingle.
            btoks = list(filter(None, text.encode().split(b" ")))
            return list(map(b" ".join, zip(*[btoks[j:] for j in range(w)])))
        toks = PUNCTUATION_SPLIT.split(text)
        # w-token windows joined by spaces; map/zip keep the per-shingle work in C
        return list(map(str.encode, map(" ".join, zip(*[toks[j:] for j in range(w)]))))


def _concat_column(tables: list[pa.Table], name: str) -> np.ndarray:
    """One signature column over all tables, in order; an unkeyed row's null reads as 0 (see ``_signed_rows``:
    callers leave those rows out)."""
    parts = [_column_values(t.column(name)) for t in tables if t.num_rows]
    if not parts:
        return np.zeros(0, dtype=np.uint64)
    return np.concatenate(parts).astype(np.uint64, copy=False)


def _column_values(col: pa.ChunkedArray) -> np.ndarray:
    return (pc.fill_null(col, 0) if col.null_count else col).to_numpy()


def _signed_rows(tables: list[pa.Table], name: str) -> np.ndarray | None:
    """Positions, over all tables in order, of the rows that have a signature (None: every row has one).

    A row whose key phase failed under ``skip_op_error`` has null signatures (``signature_schema``;
    engine/execution/key_rows.py): it is matched with nothing, so it is kept, no row is its duplicate,
    and the other rows cluster as if it were not there; the segment applying the mask sets it aside in
    ``failed/``."""
    if not any(t.column(name).null_count for t in tables if t.num_rows):
        return None
    valid = [t.column(name).is_valid().to_numpy(zero_copy_only=False) for t in tables if t.num_rows]
    return np.flatnonzero(np.concatenate(valid))


def _among_all_rows(rep: np.ndarray, signed: np.ndarray | None, n: int) -> np.ndarray:
    """Representatives computed over the signed rows only (positions among them), as positions among all
    ``n`` rows; an unsigned row represents itself.  ``signed`` ascends, so a cluster's lowest row stays its
    lowest."""
    if signed is None:
        return rep
    out = np.arange(n, dtype=np.int64)
    out[signed] = signed[rep]
    return out


def min_label_components(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Connected components of ``n`` nodes and edges ``(u, v)``: each node's
    label is the smallest node of its component (hook roots, then pointer-jump
    to a fixpoint; vectorized, O(n + edges) memory)."""
    lab = np.arange(n, dtype=np.int64)
    if len(u) == 0:
        return lab
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    while True:
        lu, lv = lab[u], lab[v]
        if np.array_equal(lu, lv):
            return lab
        m = np.minimum(lu, lv)
        np.minimum.at(lab, lu, m)
        np.minimum.at(lab, lv, m)
        while True:
            nxt = lab[lab]
            if np.array_equal(nxt, lab):
                break
            lab = nxt


# --- MinHash ----------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def optimal_param(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) minimizing ``fp_weight*FP + fn_weight*FN``, where FP is the
    integral over [0, threshold] of ``1-(1-s**r)**b`` and FN the integral over
    [threshold, 1] of ``(1-s**r)**b`` -- DJ's criterion.  The integrands are
    polynomials of degree ``b*r <= num_perm``; Gauss-Legendre with
    ``num_perm//2 + 1`` nodes integrates them exactly."""
    x, w = np.polynomial.legendre.leggauss(num_perm // 2 + 1)
    lo_s, lo_w = threshold / 2 * (x + 1), w * threshold / 2
    hi_s, hi_w = threshold + (1 - threshold) / 2 * (x + 1), w * (1 - threshold) / 2
    best, opt = float("inf"), (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = float(np.dot(lo_w, 1 - (1 - lo_s ** float(r)) ** float(b)))
            fn = float(np.dot(hi_w, 1 - (1 - (1 - hi_s ** float(r)) ** float(b))))
            err = fp * fp_weight + fn * fn_weight
            if err < best:
                best, opt = err, (b, r)
    return opt


@functools.lru_cache(maxsize=16)
def minhash_permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """DJ's permutation parameters: ``RandomState(42)``, ``a`` then ``b`` per permutation."""
    gen = np.random.RandomState(seed=42)
    pairs = np.empty((num_perm, 2), dtype=np.uint64)
    for i in range(num_perm):
        pairs[i, 0] = gen.randint(1, MERSENNE_PRIME, dtype=np.uint64)
        pairs[i, 1] = gen.randint(0, MERSENNE_PRIME, dtype=np.uint64)
    return pairs[:, 0].copy(), pairs[:, 1].copy()


# The hash type's own method: called directly, where a methodcaller looks "digest" up on every call.
_SHA1_DIGEST = type(hashlib.sha1()).digest
# Shingles made and hashed per group of texts: their bytes and digests are freed while still in the
# CPU's caches (about 1.7x faster than shingling a whole table before hashing it).
_HASH_GROUP_SHINGLES = 8192


def shingle_hashes(shingles: Iterable[bytes]) -> np.ndarray:
    """DJ's shingle hash: the first 4 bytes of each shingle's SHA-1, little-endian, as uint64.  The
    digests are made by ``map`` over C calls and read back with one ``frombuffer``."""
    digests = b"".join(map(_SHA1_DIGEST, map(hashlib.sha1, shingles)))
    first4 = np.frombuffer(digests, dtype=np.uint8).reshape(-1, 20)[:, :4]
    return np.ascontiguousarray(first4).view("<u4").ravel().astype(np.uint64)


def text_shingle_hashes(shingler: _Shingler, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``shingle_hashes`` of every text's shingles, concatenated in order, and each text's count of them;
    texts are taken in groups of about ``_HASH_GROUP_SHINGLES`` shingles."""
    counts = np.empty(len(texts), dtype=np.int64)
    parts = [np.zeros(0, dtype=np.uint64)]
    start, step = 0, 64
    while start < len(texts):
        per_text = list(map(shingler.shingles, texts[start : start + step]))
        sizes = list(map(len, per_text))
        counts[start : start + len(sizes)] = sizes
        parts.append(shingle_hashes(itertools.chain.from_iterable(per_text)))
        start += len(sizes)
        step = max(1, min(4096, _HASH_GROUP_SHINGLES * len(sizes) // max(1, sum(sizes))))
    return np.concatenate(parts), counts


def permuted_hashes(
    block: np.ndarray,
    perm_a: np.ndarray,
    perm_b: np.ndarray,
    out: np.ndarray | None = None,
    scratch: np.ndarray | None = None,
) -> np.ndarray:
    """``((h * a + b) mod (2**61 - 1)) & 0xFFFFFFFF`` for every uint64 hash ``h`` of ``block`` and every
    permutation, as a (hashes, permutations) uint32 array: ``out`` when given, computed through
    ``scratch``, a (2, hashes, permutations) uint64 buffer, when given.

    ``x = h * a + b`` wraps at 64 bits as DJ's numpy code does.  Write ``x = t * 2**61 + y``: as
    ``2**61 = 1`` modulo the prime ``P = 2**61 - 1``, ``x mod P`` is ``y + t``, less ``P`` when
    ``y + t >= P``; and the low 32 bits of ``P`` are ``2**32 - 1``, -1 modulo ``2**32``.  So the result is
    ``low32(x) + t + [y + t >= P]`` modulo ``2**32``: two passes over 64-bit values and one truncating
    copy.  The bracket is 1 only when ``y >= 2**61 - 8``, and that leaves ``low32(x) + t`` at
    ``2**32 - 1`` or 0 to 6; a block holding such a value has those elements recomputed exactly."""
    shape = (len(block), len(perm_a))
    x, t = np.empty((2, *shape), dtype=np.uint64) if scratch is None else scratch
    out = np.empty(shape, dtype=np.uint32) if out is None else out
    np.multiply(block[:, None], perm_a, out=x)
    x += perm_b
    np.right_shift(x, np.uint64(61), out=t)
    t += x
    np.copyto(out, t, casting="unsafe")  # the low 32 bits
    if len(block) and (out.min() <= 6 or out.max() == _MAX_HASH32):
        _exact_where_folded(out, block, perm_a, perm_b)
    return out


def _exact_where_folded(out: np.ndarray, block: np.ndarray, perm_a: np.ndarray, perm_b: np.ndarray) -> None:
    """``permuted_hashes``' elements that may need the subtraction of ``P``, recomputed in full."""
    i, j = np.nonzero((out <= 6) | (out == _MAX_HASH32))
    x = block[i] * perm_a[j] + perm_b[j]
    r = (x & MERSENNE_PRIME) + (x >> np.uint64(61))
    out[i, j] = np.where(r >= MERSENNE_PRIME, r - MERSENNE_PRIME, r) & MAX_HASH


def row_minima(hashes: np.ndarray, counts: np.ndarray, perm_a: np.ndarray, perm_b: np.ndarray) -> np.ndarray:
    """(rows, permutations) uint32: for row ``i``, the minimum over its ``counts[i]`` consecutive entries
    of ``hashes`` of each permutation's ``permuted_hashes`` value; ``2**32 - 1`` for a row without any."""
    out = np.empty((len(counts), len(perm_a)), dtype=np.uint32)
    for rows, minima in row_minima_groups(hashes, counts, perm_a, perm_b):
        out[rows] = minima
    return out


def row_minima_groups(
    hashes: np.ndarray, counts: np.ndarray, perm_a: np.ndarray, perm_b: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``row_minima`` a group of rows at a time: pairs ``(rows, minima)``, ``minima[k]`` being row
    ``rows[k]``'s, that cover every row once.  ``minima`` is a buffer the next pair reuses.

    Rows are taken in order of length, a block's rows padded to its longest by repeating each row's last
    hash (a minimum is unchanged by a repeat), so a block reduces as one (rows, length, permutations)
    array, without a per-segment ``reduceat``.  A row longer than a block is done alone, block by block.
    The buffers are allocated once: a (rows, permutations) array for all rows would cost as much in
    fresh pages as the arithmetic it holds."""
    p = len(perm_a)
    cap = max(1, _BLOCK_ELEMENTS // max(p, 1))  # shingles per block, and at most rows per block
    scratch = np.empty((2, cap * p), dtype=np.uint64)
    buf = np.empty(cap * p, dtype=np.uint32)
    group = np.empty((max(4096, cap), p), dtype=np.uint32)

    def permuted(block: np.ndarray) -> np.ndarray:
        k = len(block)
        return permuted_hashes(block, perm_a, perm_b, buf[: k * p].reshape(k, p), scratch[:, : k * p].reshape(2, k, p))

    empty = np.flatnonzero(counts == 0)
    for a in range(0, len(empty), len(group)):
        rows = empty[a : a + len(group)]
        group[: len(rows)] = _MAX_HASH32
        yield rows, group[: len(rows)]
    starts = np.cumsum(counts) - counts
    order = np.argsort(counts, kind="stable")[len(empty) :]
    lengths = counts[order]
    s, filled = 0, 0
    while s < len(order):
        shortest = int(lengths[s])
        # rows within 1/8 of this length, as many as fill a block at the longest one's length
        e = int(np.searchsorted(lengths, shortest + shortest // 8, side="right"))
        e = min(e, s + max(1, cap // int(lengths[e - 1])))
        if filled + e - s > len(group):
            yield order[s - filled : s], group[:filled]
            filled = 0
        if shortest > cap:  # e == s + 1
            row_min = group[filled]
            row_min[:] = _MAX_HASH32
            first = starts[order[s]]
            for a in range(0, shortest, cap):
                np.minimum(
                    row_min, permuted(hashes[first + a : first + min(shortest, a + cap)]).min(axis=0), out=row_min
                )
        else:
            width = int(lengths[e - 1])
            take = starts[order[s:e]][:, None] + np.minimum(np.arange(width), lengths[s:e, None] - 1)
            permuted(hashes[take.ravel()]).reshape(e - s, width, p).min(axis=1, out=group[filled : filled + e - s])
        filled += e - s
        s = e
    if filled:
        yield order[s - filled : s], group[:filled]


GOLDEN_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xBF58476D1CE4E5B9)
_K3 = np.uint64(0x94D049BB133111EB)


def mix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(30))
    h = h * _K2
    h = h ^ (h >> np.uint64(27))
    h = h * _K3
    return h ^ (h >> np.uint64(31))


def band_digests(values: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, >= bands * rows) values below 2**32 -> (bands, n) uint64: band ``i`` is the digest of values
    ``i * rows`` to ``(i + 1) * rows``; exact for ``rows <= 2``, else ``mix64`` chained over its values
    from ``rows * GOLDEN_K1``.  All bands are mixed at once, in place."""
    n = len(values)
    v = values[:, : bands * rows].reshape(n, bands, rows).transpose(1, 0, 2)
    if rows == 1:
        return v[:, :, 0].astype(np.uint64)
    if rows == 2:
        return v[:, :, 0].astype(np.uint64) | (v[:, :, 1].astype(np.uint64) << np.uint64(32))
    with np.errstate(over="ignore"):
        h = np.full((bands, n), np.uint64(rows) * GOLDEN_K1, dtype=np.uint64)
    tmp = np.empty_like(h)
    for j in range(rows):
        np.multiply(v[:, :, j], GOLDEN_K1, out=tmp)
        h += tmp
        h += np.uint64(j)
        for shift, k in ((30, _K2), (27, _K3), (31, None)):  # mix64, in place
            np.right_shift(h, np.uint64(shift), out=tmp)
            h ^= tmp
            if k is not None:
                h *= k
    return h


@register
class DocumentMinhashDeduplicator(SignatureDeduplicator):
    """Near-duplicate removal with MinHash-LSH (see the module docstring)."""

    name = "document_minhash_deduplicator"

    def __init__(
        self,
        *,
        tokenization: str = "space",
        window_size: int = 5,
        lowercase: bool = True,
        ignore_pattern: Optional[str] = None,
        num_permutations: int = 256,
        jaccard_threshold: float = 0.7,
        num_bands: Optional[int] = None,
        num_rows_per_band: Optional[int] = None,
        tokenizer_model: Optional[str] = None,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.shingler = _Shingler(tokenization, window_size, lowercase, ignore_pattern, self.name)
        self.tokenization, self.window_size, self.lowercase = tokenization, window_size, lowercase
        self.ignore_pattern = ignore_pattern
        self.num_permutations = num_permutations
        self.jaccard_threshold = float(jaccard_threshold)
        if num_bands is None or num_rows_per_band is None:
            num_bands, num_rows_per_band = optimal_param(self.jaccard_threshold, num_permutations)
        self.num_bands, self.num_rows_per_band = num_bands, num_rows_per_band
        self.perm_a, self.perm_b = minhash_permutations(num_permutations)

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        _check_common(cls.name, args, ())
        if args.get("tokenizer_model") is not None:
            raise OpArgumentError(
                "tokenizer_model",
                f"{cls.name}: tokenizer_model is only used by 'sentencepiece' "
                "tokenization, which this engine does not support (it needs a downloaded model)",
            )
        th = args.get("jaccard_threshold", 0.7)
        if not 0 <= th <= 1:
            raise OpArgumentError("jaccard_threshold", f"{cls.name}: jaccard_threshold must be in [0, 1], got {th!r}")
        b, r = args.get("num_bands"), args.get("num_rows_per_band")
        perms = args.get("num_permutations", 256)
        if b is not None and r is not None and b * r > perms:
            raise OpArgumentError(
                "num_bands",
                f"{cls.name}: num_bands * num_rows_per_band ({b} * {r}) must not exceed num_permutations ({perms})",
            )

    @property
    def band_columns(self) -> list[str]:
        return [f"band_{i}" for i in range(self.num_bands)]

    def signature_schema(self) -> pa.Schema:
        return pa.schema([(name, pa.uint64()) for name in self.band_columns])

    def minhash_values(self, table: pa.Table, permutations: int | None = None) -> np.ndarray:
        """(rows, permutations) uint32 MinHash values, as DJ computes them: its first ``permutations``
        (default: all ``num_permutations``)."""
        p = self.num_permutations if permutations is None else permutations
        hv, counts = text_shingle_hashes(self.shingler, _texts(table, self.text_key))
        return row_minima(hv, counts, self.perm_a[:p], self.perm_b[:p])

    def compute_hash(self, table: pa.Table) -> pa.Table:
        b, r = self.num_bands, self.num_rows_per_band
        hv, counts = text_shingle_hashes(self.shingler, _texts(table, self.text_key))
        digests = np.empty((b, len(counts)), dtype=np.uint64)
        # only the b * r values the bands use, digested a group of rows at a time
        for rows, minima in row_minima_groups(hv, counts, self.perm_a[: b * r], self.perm_b[: b * r]):
            digests[:, rows] = band_digests(minima, b, r)
        return pa.table({name: pa.array(digests[i], type=pa.uint64()) for i, name in enumerate(self.band_columns)})

    def duplicate_representatives(self, tables: list[pa.Table]) -> np.ndarray:
        """Each row's cluster representative (its lowest row; itself when kept).
        The keep mask and the tracer's dup1/dup2 pairs both derive from it."""
        total = int(sum(t.num_rows for t in tables))
        signed = _signed_rows(tables, self.band_columns[0])
        n = total if signed is None else len(signed)
        return _among_all_rows(self._representatives(tables, signed, n), signed, total)

    def _representatives(self, tables: list[pa.Table], signed: np.ndarray | None, n: int) -> np.ndarray:
        """``duplicate_representatives`` over the ``n`` rows ``signed`` (None: all), as positions among them."""
        if n <= 1:
            return np.arange(n)
        us: list[np.ndarray] = []
        vs: list[np.ndarray] = []
        for name in self.band_columns:
            col = _concat_column(tables, name)
            if signed is not None:
                col = col[signed]
            order = np.argsort(col, kind="stable")
            srt = col[order]
            del col
            new = np.empty(n, dtype=bool)
            new[0] = True
            np.not_equal(srt[1:], srt[:-1], out=new[1:])
            del srt
            head = order[new][np.cumsum(new) - 1]  # lowest row of each bucket (stable sort)
            dup = order != head
            if dup.any():
                us.append(order[dup])
                vs.append(head[dup])
            del order, head, dup, new
        if not us:
            return np.arange(n)
        return min_label_components(n, np.concatenate(us), np.concatenate(vs))

    def resolve_global(self, tables: list[pa.Table]) -> np.ndarray:
        rep = self.duplicate_representatives(tables)
        return rep == np.arange(len(rep))

    def keep_and_representatives(self, tables: list[pa.Table]) -> tuple[np.ndarray, np.ndarray]:
        rep = self.duplicate_representatives(tables)
        return rep == np.arange(len(rep)), rep

    def matching_band(self, tables: list[pa.Table], rows: np.ndarray, partners: np.ndarray) -> np.ndarray:
        """The first band whose digest ``rows[i]`` and ``partners[i]`` share (-1: none, a transitive match)."""
        band = np.full(len(rows), -1, dtype=np.int64)
        if not len(rows):
            return band
        for i, name in enumerate(self.band_columns):
            col = _concat_column(tables, name)
            hit = (band < 0) & (col[rows] == col[partners])
            band[hit] = i
            if (band >= 0).all():
                break
        return band


# --- SimHash ----------------------------------------------------------------
_BITS = np.arange(64, dtype=np.uint64)


def simhash_blocks(num_blocks: int) -> list[int]:
    """Bit masks of ``num_blocks`` contiguous blocks covering the 64 bits."""
    base, extra = divmod(64, num_blocks)
    masks, start = [], 0
    for i in range(num_blocks):
        width = base + (1 if i < extra else 0)
        masks.append(((1 << width) - 1) << start)
        start += width
    return masks


def close_pairs_in_runs(new: np.ndarray, values: np.ndarray, max_distance: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``(a, b)``, ``a < b``, within one run (``new`` marks where each run starts) whose
    ``values`` are at most ``max_distance`` bits apart; every pair of a run is compared (work: the sum
    of squared run sizes)."""
    n = len(new)
    if n < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], n]
    remaining = np.repeat(ends, ends - starts) - np.arange(n)  # positions left in each one's run
    active = np.flatnonzero(remaining > 1)
    firsts: list[np.ndarray] = []
    seconds: list[np.ndarray] = []
    k = 1
    while len(active):
        a, b = active, active + k
        close = np.bitwise_count(values[a] ^ values[b]) <= max_distance
        if close.any():
            firsts.append(a[close])
            seconds.append(b[close])
        k += 1
        active = active[remaining[active] > k]
    if not firsts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(firsts), np.concatenate(seconds)


def hamming_pairs(values: np.ndarray, num_blocks: int, max_distance: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j) of distinct ``values`` within ``max_distance`` bits.

    Any such pair agrees on at least ``num_blocks - max_distance`` blocks, so
    grouping by every choice of that many blocks and comparing within groups
    finds them all (simhash's find_all index).  Work is the sum of squared
    group sizes."""
    values = np.asarray(values, dtype=np.uint64)
    n = len(values)
    us: list[np.ndarray] = []
    vs: list[np.ndarray] = []
    masks = simhash_blocks(num_blocks)
    for combo in itertools.combinations(range(num_blocks), num_blocks - max_distance):
        mask = np.uint64(functools.reduce(lambda a, b: a | b, (masks[c] for c in combo), 0))
        key = values & mask
        order = np.argsort(key, kind="stable")
        ks = key[order]
        del key
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(ks[1:], ks[:-1], out=new[1:])
        del ks
        a, b = close_pairs_in_runs(new, values[order], max_distance)
        if len(a):
            us.append(order[a])
            vs.append(order[b])
    if not us:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(us), np.concatenate(vs)


@register
class DocumentSimhashDeduplicator(SignatureDeduplicator):
    """Near-duplicate removal with SimHash (see the module docstring)."""

    name = "document_simhash_deduplicator"

    def __init__(
        self,
        *,
        tokenization: str = "space",
        window_size: int = 6,
        lowercase: bool = True,
        ignore_pattern: Optional[str] = None,
        num_blocks: int = 6,
        hamming_distance: int = 4,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.shingler = _Shingler(tokenization, window_size, lowercase, ignore_pattern, self.name)
        self.tokenization, self.window_size, self.lowercase = tokenization, window_size, lowercase
        self.ignore_pattern = ignore_pattern
        self.num_blocks, self.hamming_distance = num_blocks, hamming_distance

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        _check_common(cls.name, args, ())
        nb, hd = args.get("num_blocks", 6), args.get("hamming_distance", 4)
        if nb > 64:
            raise OpArgumentError("num_blocks", f"{cls.name}: num_blocks must be at most 64, got {nb}")
        if hd >= nb:
            raise OpArgumentError(
                "hamming_distance",
                f"{cls.name}: hamming_distance ({hd}) must be less than num_blocks ({nb})",
            )

    def simhash_values(self, table: pa.Table) -> np.ndarray:
        texts = _texts(table, self.text_key)
        n = len(texts)
        md5 = hashlib.md5
        counts = np.zeros(n, dtype=np.int64)
        flat: list[int] = []
        for i, text in enumerate(texts):
            sh = self.shingler.shingles(text)
            counts[i] = len(sh)
            flat.extend(int.from_bytes(md5(s).digest()[:8], "big") for s in sh)
        votes = np.zeros((n, 64), dtype=np.int64)
        if flat:
            hv = np.asarray(flat, dtype=np.uint64)
            row_of = np.repeat(np.arange(n), counts)
            step = 1 << 16
            for start in range(0, len(hv), step):
                block, rows = hv[start : start + step], row_of[start : start + step]
                bits = ((block[:, None] >> _BITS) & np.uint64(1)).astype(np.int64)
                seg = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
                sums = np.add.reduceat(2 * bits - 1, seg, axis=0)
                np.add.at(votes, rows[seg], sums)
        set_bits = votes > 0
        return (set_bits.astype(np.uint64) << _BITS).sum(axis=1, dtype=np.uint64)

    def compute_hash(self, table: pa.Table) -> pa.Table:
        return pa.table({"simhash": pa.array(self.simhash_values(table), type=pa.uint64())})

    def signature_schema(self) -> pa.Schema:
        return pa.schema([("simhash", pa.uint64())])

    def duplicate_representatives(self, tables: list[pa.Table]) -> np.ndarray:
        """Each row's cluster representative (the cluster's lowest row; itself when kept).
        The keep mask and the tracer's dup1/dup2 pairs both derive from it."""
        fp = _concat_column(tables, "simhash")
        total = len(fp)
        signed = _signed_rows(tables, "simhash")
        if signed is not None:
            fp = fp[signed]
        return _among_all_rows(self._representatives(fp), signed, total)

    def _representatives(self, fp: np.ndarray) -> np.ndarray:
        """``duplicate_representatives`` of the fingerprints ``fp``, as positions in it."""
        n = len(fp)
        if n <= 1:
            return np.arange(n)
        uniq, inv = np.unique(fp, return_inverse=True)
        del fp
        u, v = hamming_pairs(uniq, self.num_blocks, self.hamming_distance)
        comp = min_label_components(len(uniq), u, v)
        row_comp = comp[inv.ravel()]
        _, first_row, which = np.unique(row_comp, return_index=True, return_inverse=True)
        return first_row[which.ravel()]

    def resolve_global(self, tables: list[pa.Table]) -> np.ndarray:
        rep = self.duplicate_representatives(tables)
        return rep == np.arange(len(rep))

    def keep_and_representatives(self, tables: list[pa.Table]) -> tuple[np.ndarray, np.ndarray]:
        rep = self.duplicate_representatives(tables)
        return rep == np.arange(len(rep)), rep
