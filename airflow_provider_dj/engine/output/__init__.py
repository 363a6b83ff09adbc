"""The export's parts: the fields kept, row accounting, parallel JSONL parts, and checking a written
file.  The export step that uses them (and the history commit, the summary, retention) is
``engine/job/export.py``."""
