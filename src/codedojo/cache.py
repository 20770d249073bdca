"""Where codedojo keeps what it builds once and reuses: converted models, workspace layers, the bundled
task suite, warm-start models. One directory, from the environment: `$CODEDOJO_CACHE_DIR`, else
`$XDG_CACHE_HOME/codedojo`, else `~/.cache/codedojo`. Nothing is created here; each user makes its own
subdirectory."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """codedojo's cache directory (see the module docstring); it may not exist yet."""
    base = os.environ.get("CODEDOJO_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "codedojo")
    return Path(base)
