"""MinHash's kernel against plain arithmetic: the permutations' folded modulus, including the rare
values that need the subtraction of the prime, and the per-row minima over blocks of any shape."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_provider_dj.ops.dedup import near as nd

P = (1 << 61) - 1


def reference(hashes, perm_a, perm_b) -> np.ndarray:
    """DJ's ``((h * a + b) wrapped at 64 bits) mod P & 0xFFFFFFFF`` in Python integers."""
    return np.array(
        [[((int(h) * int(a) + int(b)) % 2**64 % P) & 0xFFFFFFFF for a, b in zip(perm_a, perm_b)] for h in hashes],
        dtype=np.uint32,
    )


def test_permuted_hashes_equal_plain_arithmetic():
    rng = np.random.default_rng(1)
    hashes = rng.integers(0, 2**32, 200).astype(np.uint64)
    perm_a, perm_b = nd.minhash_permutations(64)
    assert np.array_equal(nd.permuted_hashes(hashes, perm_a, perm_b), reference(hashes, perm_a, perm_b))


def test_permuted_hashes_where_the_fold_reaches_the_prime():
    # b chosen so that h * a + b (for h = 1) lands on P, just past it, just below it, on 2P + k and where it
    # wraps: the values whose low 32 bits the fold leaves at 2**32 - 1 or 0..6.
    targets = [P, P + 1, P + 6, P - 1, P - 7, P - 8, 2 * P, 2 * P + 3, 7 * 2**61 + P, 2**64 - 1, 2**64 - 8, 0]
    perm_a = np.array([a for _t in targets for a in (1, 3, 2**40 + 1)], dtype=np.uint64)
    perm_b = np.array([(t - a) % 2**64 for t in targets for a in (1, 3, 2**40 + 1)], dtype=np.uint64)
    hashes = np.array([0, 1, 5, 7, 2**32 - 1], dtype=np.uint64)
    got = nd.permuted_hashes(hashes, perm_a, perm_b)
    assert np.array_equal(got, reference(hashes, perm_a, perm_b))
    assert (got[1] <= 7).sum() > 0 and (got[1] == 0).sum() > 0  # the corner was reached


@pytest.mark.parametrize("block_elements", [nd._BLOCK_ELEMENTS, 64, 7])
def test_row_minima_equal_a_per_row_minimum(monkeypatch, block_elements):
    monkeypatch.setattr(nd, "_BLOCK_ELEMENTS", block_elements)
    rng = np.random.default_rng(2)
    counts = rng.integers(0, 40, 300)
    counts[[3, 50, 51]] = 0
    counts[[7, 200]] = [1000, 333]  # longer than a small block
    hashes = rng.integers(0, 2**32, int(counts.sum())).astype(np.uint64)
    perm_a, perm_b = nd.minhash_permutations(16)
    got = nd.row_minima(hashes, counts, perm_a, perm_b)
    full = reference(hashes, perm_a, perm_b)
    starts = np.cumsum(counts) - counts
    for i, (s, c) in enumerate(zip(starts, counts)):
        want = full[s : s + c].min(axis=0) if c else np.full(16, 2**32 - 1, dtype=np.uint32)
        assert np.array_equal(got[i], want), i


def test_band_digests_equal_one_band_at_a_time():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 2**32, (50, 24)).astype(np.uint32)
    for bands, rows in [(24, 1), (12, 2), (8, 3), (2, 10)]:
        got = nd.band_digests(values, bands, rows)
        for i in range(bands):
            band = values[:, i * rows : (i + 1) * rows].astype(np.uint64)
            if rows == 1:
                want = band[:, 0]
            elif rows == 2:
                want = band[:, 0] | (band[:, 1] << np.uint64(32))
            else:
                with np.errstate(over="ignore"):
                    want = np.full(len(band), np.uint64(rows) * nd.GOLDEN_K1, dtype=np.uint64)
                    for j in range(rows):
                        want = nd.mix64(want + band[:, j] * nd.GOLDEN_K1 + np.uint64(j))
            assert np.array_equal(got[i], want), (bands, rows, i)


def test_row_minima_over_several_groups_of_rows():
    # more rows (empty ones too) than one group of minima holds
    rng = np.random.default_rng(4)
    counts = np.where(rng.random(20_000) < 0.5, 0, rng.integers(1, 4, 20_000))
    hashes = rng.integers(0, 2**32, int(counts.sum())).astype(np.uint64)
    perm_a, perm_b = nd.minhash_permutations(2)
    got = nd.row_minima(hashes, counts, perm_a, perm_b)
    full = nd.permuted_hashes(hashes, perm_a, perm_b)
    want = np.full((len(counts), 2), 2**32 - 1, dtype=np.uint32)
    rows = np.repeat(np.arange(len(counts)), counts)
    np.minimum.at(want, rows, full)
    assert np.array_equal(got, want)
