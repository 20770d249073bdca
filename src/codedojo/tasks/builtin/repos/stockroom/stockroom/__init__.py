"""A small inventory."""
