"""Private files: `PICORTEX_HOME` and the folders the bot makes are 0700, its files 0600.

Modes are set with chmod after creation, so they hold whatever the process umask is: the
database holds every stored message, DMs included, and the log holds what people said.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` (and its parents) if needed and make it 0700; returns `path`.

    Only `path` itself is changed: parents that already existed keep their modes.

    Raises:
        OSError: the folder cannot be created or its mode cannot be changed.
    """
    path.mkdir(parents=True, exist_ok=True)
    if (path.stat().st_mode & 0o777) != DIR_MODE:
        os.chmod(path, DIR_MODE)
    return path


def private_file(path: Path) -> None:
    """Make an existing file 0600; a missing one, or one we may not change, is left alone."""
    with contextlib.suppress(FileNotFoundError, PermissionError):
        if (path.stat().st_mode & 0o777) != FILE_MODE:
            os.chmod(path, FILE_MODE)


def open_private(path: Path, flags: int) -> int:
    """`os.open(path, flags | O_CREAT)` with the file made 0600, whatever the umask.

    Raises:
        OSError: the file cannot be opened.
    """
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    try:
        if (os.fstat(fd).st_mode & 0o777) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd
