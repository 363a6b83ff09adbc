"""Shared text kernels: vectorized string functions, Data-Juicer's regex semantics, tokenizers."""
