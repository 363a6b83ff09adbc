"""A recipe with every op of the library whose output holds floats from numeric libraries, and its
input, for the tests that check those floats are the same bytes whichever way a partition runs
(tests/integration/test_float_ops_dispatchers.py: in process, local pool, Ray;
tests/integration/test_ray_jobs_mode.py: a group as a Ray Job).

``keep_stats_in_res_ds`` brings the ops' stats into the export: ``language_id_score_filter``
(fastText), ``perplexity_filter`` (SentencePiece + KenLM), ``text_embedding_mapper`` (torch, MiniLM),
``alphanumeric_filter`` (a ratio), the image filters' ``aspect_ratios`` and ``image_deduplicator``
(phash: a DCT).  The input is three files of 150, 97 and 53 rows (``align: file``: six partitions of 50, 50,
50, 49, 48 and 53 rows), with English and other languages and images on a third of the rows, some images
named in several partitions.  Models come from this machine (the packaged fastText and MiniLM models,
the committed test KenLM/SentencePiece files); nothing is downloaded.
"""

from __future__ import annotations

import json
import os

from airflow_provider_dj.ops.dj_compat.model_files import packaged_lid_model
from tests.helpers_lm import COMMITTED_MODELS

FILE_ROWS = (150, 97, 53)
IMAGES = 24

RECIPE = """\
project_name: float_ops
dataset_path: {data}
export_path: {work}/unused.jsonl
work_dir: {work}
text_keys: text
image_key: images
keep_stats_in_res_ds: true
partition: {{mode: manual, size: 64, align: file, gpu_preflight_enabled: false}}
checkpoint: {{enabled: true, strategy: every_op}}
process:
  - language_id_score_filter: {{min_score: 0.2, model_path: {ftz}}}
  - perplexity_filter: {{sp_model_path: {sp}, kenlm_model_path: {lm}, max_ppl: 100000}}
  - alphanumeric_filter: {{min_ratio: 0.5}}
  - text_embedding_mapper: {{batch_size: 16, max_seq_length: 32, output_key: emb, num_gpus: 0}}
  - image_aspect_ratio_filter: {{min_ratio: 0.4, max_ratio: 2.5}}
  - image_deduplicator: {{method: phash}}
"""

OTHER_LANGUAGES = (
    "Über die Brücke gehen wir jeden Tag zur Arbeit und zurück, auch wenn es regnet.",
    "Le chat dort sur le canapé pendant que nous préparons le dîner pour les enfants.",
    "El mercado abre temprano y los vendedores colocan las frutas frescas en las mesas.",
    "Il treno per Milano parte alle otto e arriva poco prima di mezzogiorno.",
    "Tôi yêu Việt Nam. Hà Nội là thủ đô của Việt Nam và có nhiều hồ đẹp.",
    "De fiets staat achter het huis, naast de schuur met het oude gereedschap.",
)


def write_images(folder) -> list[str]:
    """``IMAGES`` small PNGs of smooth patterns in several shapes (a few too wide for the filter), and a
    JPEG copy of every sixth one (a near duplicate for phash)."""
    import numpy as np
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(7)
    paths = []
    for i in range(IMAGES):
        w, h = [(64, 64), (96, 48), (40, 120), (150, 40)][i % 4]
        yy, xx = np.mgrid[0:h, 0:w]
        fx, fy, phase = rng.uniform(0.02, 0.3), rng.uniform(0.02, 0.3), rng.uniform(0, 6)
        base = 127 + 100 * np.sin(fx * xx + phase) * np.cos(fy * yy)
        rgb = np.stack([base, base[::-1] if i % 2 else base, 255 - base], axis=-1)
        noise = rng.integers(-12, 13, rgb.shape)
        img = Image.fromarray(np.clip(rgb + noise, 0, 255).astype(np.uint8), "RGB")
        path = os.path.join(folder, f"img{i:02d}.png")
        img.save(path)
        paths.append(path)
        if i % 6 == 0:
            copy = os.path.join(folder, f"img{i:02d}_copy.jpg")
            img.save(copy, quality=85)
            paths.append(copy)
    return paths


def write_input(tmp_path) -> str:
    """Three JSONL files (``FILE_ROWS``): the sample corpus's English, every seventh row in another
    language, every third row with one or two images (cycling, so most images recur across partitions)."""
    from airflow_provider_dj.testing.sample_corpus import generate_rows

    images = write_images(tmp_path / "images")
    rows = list(generate_rows(sum(FILE_ROWS), seed=5))
    folder = tmp_path / "input"
    folder.mkdir()
    start = 0
    for f, n in enumerate(FILE_ROWS):
        with open(folder / f"part{f}.jsonl", "w", encoding="utf-8") as fh:
            for i in range(start, start + n):
                row = {"id": i, "text": rows[i]["text"]}
                if i % 7 == 3:
                    row["text"] = OTHER_LANGUAGES[i % len(OTHER_LANGUAGES)] + " " + str(i)
                if i % 3 == 0:
                    k = (i // 3) % len(images)
                    row["images"] = [images[k]] if i % 2 else [images[k], images[(k * 5 + 1) % len(images)]]
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        start += n
    return str(folder)


def write_recipe(tmp_path) -> str:
    """The float-ops recipe over a fresh input under ``tmp_path`` (a ``pathlib.Path``); its path."""
    path = tmp_path / "float_ops.yaml"
    path.write_text(
        RECIPE.format(
            data=write_input(tmp_path),
            work=tmp_path / "work",
            ftz=packaged_lid_model(),
            sp=COMMITTED_MODELS / "en.sp.model",
            lm=COMMITTED_MODELS / "en.arpa.bin",
        )
    )
    return str(path)


def export(recipe: str, job_id: str, **how) -> bytes:
    from airflow_provider_dj.engine import run_job

    export = os.path.join(os.path.dirname(recipe), f"{job_id}.jsonl")
    result = run_job(recipe, job_id=job_id, overrides={"export_path": export}, **how)
    assert result.rows > 0
    with open(export, "rb") as fh:
        return fh.read()


def check_reference(data: bytes) -> None:
    """The reference export holds what the comparison is about: every op's floats, rows of each kind."""
    rows = [json.loads(line) for line in data.splitlines()]
    assert 150 < len(rows) < sum(FILE_ROWS), len(rows)  # the filters and the dedup removed some, not most
    stats = [r["__dj__stats__"] for r in rows]
    assert all(isinstance(s["lang_score"], float) and s["perplexity"] > 0 for s in stats)
    assert len({s["lang"] for s in stats}) >= 4  # English and others
    assert all(len(r["emb"]) == 384 for r in rows)
    assert sum(1 for s in stats if s.get("aspect_ratios")) >= 10  # the rows whose images were kept
