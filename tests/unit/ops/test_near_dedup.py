"""Unit tests for the MinHash / SimHash near-dedup ops (no Data-Juicer needed)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.ops.base import OpArgumentError
from airflow_provider_dj.ops.dedup import near as nd
from airflow_provider_dj.ops.registry import create_op, get_op_class

MINHASH, SIMHASH = "document_minhash_deduplicator", "document_simhash_deduplicator"


@pytest.mark.parametrize(
    "op,args,key",
    [
        (MINHASH, {"tokenization": "sentencepiece", "tokenizer_model": "m.model"}, "tokenization"),
        (MINHASH, {"tokenization": "sentencepiece"}, "tokenization"),
        (MINHASH, {"tokenizer_model": "m.model"}, "tokenizer_model"),
        (MINHASH, {"tokenization": "words"}, "tokenization"),
        (MINHASH, {"window_size": 0}, "window_size"),
        (MINHASH, {"jaccard_threshold": 1.5}, "jaccard_threshold"),
        (MINHASH, {"num_permutations": 16, "num_bands": 5, "num_rows_per_band": 4}, "num_bands"),
        (MINHASH, {"ignore_pattern": "(["}, "ignore_pattern"),
        (MINHASH, {"num_bands": "4"}, "num_bands"),
        (MINHASH, {"hamming_distance": 3}, "hamming_distance"),
        (SIMHASH, {"tokenization": "sentencepiece"}, "tokenization"),
        (SIMHASH, {"hamming_distance": 6, "num_blocks": 6}, "hamming_distance"),
        (SIMHASH, {"num_blocks": 65, "hamming_distance": 3}, "num_blocks"),
        (SIMHASH, {"num_permutations": 64}, "num_permutations"),
    ],
)
def test_validation_errors(op, args, key):
    with pytest.raises(OpArgumentError) as err:
        get_op_class(op).validate_args(args)
    assert err.value.key == key
    if args.get("tokenization") == "sentencepiece":
        assert "download" in str(err.value)


def test_defaults_and_valid_args():
    get_op_class(MINHASH).validate_args({"tokenization": "character", "num_bands": 8, "num_rows_per_band": 4,
                                         "num_permutations": 32, "ignore_pattern": r"\d+"})  # fmt: skip
    get_op_class(SIMHASH).validate_args({"tokenization": "punctuation", "num_blocks": 5, "hamming_distance": 4})
    mh = create_op(MINHASH, {})
    assert (mh.num_permutations, mh.window_size, mh.jaccard_threshold) == (256, 5, 0.7)
    assert (mh.num_bands, mh.num_rows_per_band) == nd.optimal_param(0.7, 256)
    sh = create_op(SIMHASH, {})
    assert (sh.window_size, sh.num_blocks, sh.hamming_distance, sh.lowercase) == (6, 6, 4, True)


def _texts(n: int = 60, seed: int = 3) -> list[str | None]:
    rng = random.Random(seed)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    base = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 25))) for _ in range(n // 2)]
    out = base + [t + " " + rng.choice(words) if rng.random() < 0.5 else t.upper() for t in base]
    out[3] = None
    out[7] = "中文文本，测试。近似重复"
    return out


@pytest.mark.parametrize(
    "op_name,args",
    [
        (MINHASH, {"num_permutations": 64}),
        (MINHASH, {"tokenization": "character"}),
        (SIMHASH, {"window_size": 3}),
        (SIMHASH, {"tokenization": "punctuation"}),
    ],
)
def test_compute_hash_is_chunking_independent_and_resolve_is_split_independent(op_name, args):
    op = create_op(op_name, args)
    table = pa.table({"text": _texts()})
    whole = op.compute_hash(table)
    assert whole.num_rows == table.num_rows
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=7), table.schema)
    assert op.compute_hash(chunked).equals(whole)
    pieces = [op.compute_hash(table.slice(a, 13)) for a in range(0, table.num_rows, 13)]
    assert pa.concat_tables(pieces).equals(whole)
    one = op.resolve_global([whole])
    split = op.resolve_global([pieces[0], whole.slice(0, 0)] + pieces[1:])
    assert one.dtype == bool and len(one) == table.num_rows
    assert np.array_equal(one, split)
    assert 0 < one.sum() < len(one)


def test_signatures_are_small():
    op = create_op(MINHASH, {})
    sig = op.compute_hash(pa.table({"text": ["word " * 5000]}))
    assert sig.nbytes <= 8 * op.num_bands
    assert create_op(SIMHASH, {}).compute_hash(pa.table({"text": ["x " * 5000]})).nbytes == 8


def test_min_label_components_brute_force():
    rng = np.random.default_rng(0)
    n = 200
    u, v = rng.integers(0, n, 120), rng.integers(0, n, 120)
    lab = nd.min_label_components(n, u, v)
    comp = list(range(n))  # naive union-find rooted at the minimum

    def find(x):
        while comp[x] != x:
            x = comp[x]
        return x

    for a, b in zip(u.tolist(), v.tolist()):
        ra, rb = find(a), find(b)
        comp[ra] = comp[rb] = min(ra, rb)
    assert lab.tolist() == [find(i) for i in range(n)]


@pytest.mark.parametrize("blocks,dist", [(6, 4), (4, 1), (7, 5)])
def test_hamming_pairs_finds_exactly_the_close_pairs(blocks, dist):
    rng = np.random.default_rng(blocks)
    base = rng.integers(0, 2**63, 40, dtype=np.uint64)
    flips = [b ^ np.uint64(sum(1 << int(x) for x in rng.choice(64, rng.integers(0, 8), replace=False))) for b in base]
    vals = np.unique(np.concatenate([base, np.array(flips, dtype=np.uint64)]))
    u, v = nd.hamming_pairs(vals, blocks, dist)
    got = {(min(a, b), max(a, b)) for a, b in zip(u.tolist(), v.tolist())}
    want = {(i, j) for i in range(len(vals)) for j in range(i + 1, len(vals))
            if bin(int(vals[i]) ^ int(vals[j])).count("1") <= dist}  # fmt: skip
    assert got == want and want


def test_exact_and_case_duplicates_collapse_to_first():
    rows = ["The quick brown fox jumps over the lazy dog again", "x", "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG AGAIN",
            "", "", "the quick brown fox jumps over the lazy dog again"]  # fmt: skip
    table = pa.table({"text": rows})
    # 'x' and '' have no shingles: all-max MinHash / zero SimHash, one cluster.
    for name in (MINHASH, SIMHASH):
        op = create_op(name, {})
        assert op.resolve_global([op.compute_hash(table)]).tolist() == [True, True, False, False, False, False]
