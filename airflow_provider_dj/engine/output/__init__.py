"""The export: fields kept, JSONL/Parquet writing, parallel parts, and checking a written file."""
