"""Host-side preparation of the directories uploaded into a sandbox (/tests, /solution).

Harbor makes a task's scripts executable as root before running them (`chmod +x`), so a `test.sh` or
`solve.sh` committed as mode 644 still runs. codedojo does the same on the host, before the upload, so it
works on every backend and for every sandbox user (a non-root verifier user cannot chmod a root-owned
file, and the local backend's sandbox user owns nothing in /tests): the directories are copied into a
temporary staging directory in which every directory is 0755, every file readable by all, and the named
script executable by all. Several sources are merged in order (a multi-step task's shared tests/ and the
step's own tests/, the later winning on equal names), as Harbor uploads them one after the other.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path


@contextlib.contextmanager
def staged(sources: Sequence[Path], *, executable: str) -> Iterator[Path]:
    """A temporary copy of `sources` merged, with `executable` (a relative path) runnable; removed after."""
    with tempfile.TemporaryDirectory(prefix="codedojo-stage-") as tmp:
        root = Path(tmp) / "staged"
        root.mkdir()
        for source in sources:
            shutil.copytree(source, root, dirs_exist_ok=True)
        for dirpath, _dirnames, filenames in os.walk(root):
            os.chmod(dirpath, 0o755)
            for name in filenames:
                path = Path(dirpath) / name
                mode = stat.S_IMODE(path.stat().st_mode)
                os.chmod(path, (mode | 0o444) & ~0o022)
        script = root / executable
        if script.is_file():
            os.chmod(script, 0o755)
        yield root
