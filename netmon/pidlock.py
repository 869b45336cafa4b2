"""A process's exclusive lock on a file that names it: one pipeline per data directory, one
``netmon up`` per state directory.

The lock is ``flock`` on the file, held while the file stays open (the kernel drops it when the
process dies, so a crash leaves no stale lock); the file holds the holder's pid, for the message
that refuses a second one and for ``netmon status``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

__all__ = ["LockHeld", "holder", "release", "take"]


class LockHeld(RuntimeError):
    """Another process holds the lock; ``holder`` is the pid it wrote (``"?"``: unreadable)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is held by pid {holder}")
        self.path = path
        self.holder = holder


def take(path: Path) -> IO[str]:
    """Lock ``path`` (created with its directory) for this process; keep the handle open to hold it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held open until release()
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        held_by = handle.read().strip() or "?"
        handle.close()
        raise LockHeld(path, held_by) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def release(handle: IO[str]) -> None:
    """Give the lock up and close its file."""
    with contextlib.suppress(OSError):
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    handle.close()


def holder(path: Path) -> int | None:
    """The pid written in ``path`` while a process holds it locked (0: unreadable), else None."""
    if not path.exists():
        return None
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return None
