"""codedojo: train multi-turn coding agents with reinforcement learning.

Importing this package does nothing observable and loads no heavy dependency; the public names are
loaded on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"
