"""Which shipped recipe runs on which corpus, and which test module runs it.

Plain data, importable by both our venv and Data-Juicer's (generate.py):
imports nothing beyond the standard library.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
RECIPES = os.path.join(HERE, "recipes")
INPUTS = os.path.join(HERE, "inputs")


@dataclass(frozen=True)
class Case:
    source: str  #: path of the recipe in modelscope/data-juicer
    kind: str  #: the corpus it runs on (inputs/<kind>.jsonl)
    group: str  #: test module: pile, redpajama, code, other


_R = "configs/data_juicer_recipes/"
CASES: dict[str, Case] = {
    "pile-europarl-refine": Case(_R + "pile-europarl-refine.yaml", "prose", "pile"),
    "pile-freelaw-refine": Case(_R + "pile-freelaw-refine.yaml", "prose", "pile"),
    "pile-hackernews-refine": Case(_R + "pile-hackernews-refine.yaml", "prose", "pile"),
    "pile-nih-refine": Case(_R + "pile-nih-refine.yaml", "prose", "pile"),
    "pile-philpaper-refine": Case(_R + "pile-philpaper-refine.yaml", "prose", "pile"),
    "pile-pubmed-abstract-refine": Case(_R + "pile-pubmed-abstract-refine.yaml", "prose", "pile"),
    "pile-pubmed-central-refine": Case(_R + "pile-pubmed-central-refine.yaml", "prose", "pile"),
    "pile-uspto-refine": Case(_R + "pile-uspto-refine.yaml", "prose", "pile"),
    "redpajama-c4-refine": Case(_R + "redpajama-c4-refine.yaml", "prose", "redpajama"),
    "redpajama-cc-2019-30-refine": Case(_R + "redpajama-cc-2019-30-refine.yaml", "prose", "redpajama"),
    "redpajama-cc-2020-05-refine": Case(_R + "redpajama-cc-2020-05-refine.yaml", "prose", "redpajama"),
    "redpajama-cc-2021-04-refine": Case(_R + "redpajama-cc-2021-04-refine.yaml", "prose", "redpajama"),
    "redpajama-cc-2022-05-refine": Case(_R + "redpajama-cc-2022-05-refine.yaml", "prose", "redpajama"),
    "redpajama-cc-2023-06-refine": Case(_R + "redpajama-cc-2023-06-refine.yaml", "prose", "redpajama"),
    "redpajama-pile-stackexchange-refine": Case(_R + "redpajama-pile-stackexchange-refine.yaml", "prose", "redpajama"),
    "redpajama-wiki-refine": Case(_R + "redpajama-wiki-refine.yaml", "prose", "redpajama"),
    "redpajama-book-refine": Case(_R + "redpajama-book-refine.yaml", "prose", "redpajama"),
    "redpajama-arxiv-refine": Case(_R + "redpajama-arxiv-refine.yaml", "latex", "redpajama"),
    "redpajama-code-refine": Case(_R + "github_code/redpajama-code-refine.yaml", "code", "code"),
    "stack-code-refine": Case(_R + "github_code/stack-code-refine.yaml", "code_stack", "code"),
    "redpajama-stack-code-deduplicate": Case(_R + "github_code/redpajama-stack-code-deduplicate.yaml", "code", "code"),
    "redpajama-code": Case("configs/reproduced_redpajama/redpajama-code.yaml", "code", "code"),
    "alpaca-cot-en-refine": Case(_R + "alpaca_cot/alpaca-cot-en-refine.yaml", "alpaca_en", "other"),
    "alpaca-cot-zh-refine": Case(_R + "alpaca_cot/alpaca-cot-zh-refine.yaml", "alpaca_zh", "other"),
    "redpajama-arxiv": Case("configs/reproduced_redpajama/redpajama-arxiv.yaml", "latex", "other"),
    "redpajama-stackexchange": Case("configs/reproduced_redpajama/redpajama-stackexchange.yaml", "html", "other"),
    "redpajama-books": Case("configs/reproduced_redpajama/redpajama-books.yaml", "prose", "other"),
    "bloom-oscar": Case("configs/reproduced_bloom/bloom-oscar.yaml", "prose", "other"),
}

#: Shipped files under the same folders that are not text recipes, and why they are left out.
SKIPPED = {
    "configs/data_juicer_recipes/general-video-refine-example.yaml": "video",
    "configs/data_juicer_recipes/img-diff-recipe.yaml": "image",
    "configs/data_juicer_recipes/llava-pretrain-refine.yaml": "image-text (LLaVA)",
    "configs/data_juicer_recipes/data-juicer-sandbox-optimal.yaml": "sandbox (image-text)",
    "configs/data_juicer_recipes/data-juicer-sandbox-self-evolution.yaml": "sandbox (image-text)",
    "configs/data_juicer_recipes/sandbox/": "sandbox pipelines (video, image captioning, evaluation, prompt tuning)",
}


def recipe_path(name: str) -> str:
    return os.path.join(RECIPES, f"{name}.yaml")


def input_path(kind: str) -> str:
    return os.path.join(INPUTS, f"{kind}.jsonl")


def names_in_group(group: str) -> list[str]:
    return sorted(n for n, c in CASES.items() if c.group == group)
