"""A directory only this user can enter, for the small files workers on one host share.

Files under a world-writable ``/tmp`` with predictable names can be pre-created or replaced by
another user (a symlink that redirects a write, a file that feeds a worker false state). So
such files live in ``$XDG_RUNTIME_DIR`` (per user, already private) or else in
``<temp dir>/connectors-<uid>``, created mode 0700, and used only if it is a real directory
owned by this user that nobody else may enter.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["private_dir"]


def private_dir(name: str) -> Path:
    """``<private base>/<name>``, created if needed; raises PermissionError naming the directory
    when the base or ``name`` is not a real directory private to this user."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "connectors" if runtime else Path(tempfile.gettempdir()) / f"connectors-{os.getuid()}"
    directory = base / name
    for path in (base, directory):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        _check(path)
    return directory


def _check(path: Path) -> None:
    info = path.lstat()  # lstat: a symlink is refused, not followed
    problem = None
    if not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory (a symlink or a file)"
    elif info.st_uid != os.getuid():
        problem = f"is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    elif info.st_mode & 0o077:
        problem = f"has mode {stat.S_IMODE(info.st_mode):o}: other users may enter it (expected 700)"
    if problem:
        raise PermissionError(f"directory {path} {problem}; refusing to keep files there")
