"""Ops that call a language model over HTTP, and the durable record that keeps calls paid once."""
