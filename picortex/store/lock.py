"""The home lock: one `picortex run` per `PICORTEX_HOME`, the holder's pid in the lock file.

An advisory `flock` on `picortex.lock`: the kernel drops it when the process dies, so a
SIGKILLed bot never leaves a stale lock behind, and the pid written in it names the holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from picortex.errors import HomeLocked
from picortex.files import open_private

LOCK_NAME: Final = "picortex.lock"


def lock_path(home: Path) -> Path:
    """Where the running bot holds its lock."""
    return home / LOCK_NAME


def running_pid(home: Path) -> int | None:
    """The pid of the `picortex run` holding `home`, or None when none does."""
    path = lock_path(home)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def hold_home(home: Path) -> Iterator[None]:
    """Hold `home` for this process while the block runs.

    Raises:
        HomeLocked: another process holds it (its pid is named when known).
        OSError: the lock file cannot be created.
    """
    path = lock_path(home)
    fd = open_private(path, os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            holder = f"pid {pid}" if pid is not None else "another process"
            raise HomeLocked(
                f"picortex is already running on {home} ({holder}); stop it first, or set "
                "PICORTEX_HOME to another folder",
                pid=pid,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        try:
            yield
        finally:
            # Emptied before unlocking, so a reader never takes our pid for a live holder.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
