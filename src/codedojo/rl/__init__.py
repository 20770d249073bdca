"""The RL math: pure functions of tensors and lists, each with hand-computed tests.

Shape letters used in this package: G groups (tasks), N samples per group, T tokens, B sequences.
"""
