"""The per-op benchmark (``python -m bench ops``): ours against Data-Juicer's op of the same name.

``dj_ops_worker`` runs under Data-Juicer's own interpreter and imports nothing
from this package; see bench/ops/README.md.
"""
