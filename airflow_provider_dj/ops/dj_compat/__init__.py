"""Data-Juicer compatibility: its own ops through the adapter, its op catalog, model and
word-list look-up."""
