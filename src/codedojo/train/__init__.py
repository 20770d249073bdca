"""The local trainer: GRPO on one machine, its model forward, optimizer, checkpoints, metrics and report."""
