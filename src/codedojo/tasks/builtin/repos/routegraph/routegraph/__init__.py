"""Weighted graphs and the usual algorithms."""
