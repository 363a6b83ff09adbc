"""The environment variables that keep a benchmarked run off the network (no hub look-ups, no telemetry).

Why one place: both our runs (``run_bench.py``) and Data-Juicer's (``_nightly_dj.py``) must be measured
offline, and a variable added for one must not be forgotten for the other.
"""

from __future__ import annotations

OFFLINE_ENV = {
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
