"""Training a coding agent: `dataset.py` prepares the tasks and subsets, `main.py` trains on them."""
