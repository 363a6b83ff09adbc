"""Mappers: ops that rewrite a sample's text or fields."""
