"""Scheduling with time intervals."""
