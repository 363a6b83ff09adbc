"""Filters: ops that compute a statistic per sample and keep the samples inside its bounds."""
