"""Exclusive file locks that are never waited for without a bound.

A lock is an `flock` on a file, held through an open descriptor: the kernel
releases it when the process ends, however it ends, so a killed holder never
leaves a stale lock behind.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from rltrack.core.posix import fcntl

POLL = 0.01


def hold(path: Path, wait: float, progress: Callable[[], object] | None = None) -> int | None:
    """The descriptor holding `path`'s lock (created 0600 if missing), or
    None if another process held it for `wait` seconds. `progress` (None:
    never looked at) says how far the holder has come (any value that
    changes as it works): each change starts the `wait` again, so a holder
    that advances is waited for as long as it advances, one that stalls for
    `wait` seconds is not. Closing the descriptor releases the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    seen = progress() if progress is not None else None
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            now = time.monotonic()
            if progress is not None and (current := progress()) != seen:
                seen, deadline = current, now + wait
            if now >= deadline:
                os.close(fd)
                return None
            time.sleep(POLL)
