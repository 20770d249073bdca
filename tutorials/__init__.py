"""Tutorials: runnable scripts that walk through codedojo end to end (`python -m tutorials.<name>...`)."""
