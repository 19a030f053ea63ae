"""Exclusive file locks that are never waited for without a bound.

A lock is an `flock` on a file, held through an open descriptor: the kernel
releases it when the process ends, however it ends, so a killed holder never
leaves a stale lock behind.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rltrack.core.posix import fcntl

POLL = 0.01


def hold(path: Path, wait: float) -> int | None:
    """The descriptor holding `path`'s lock (created 0600 if missing), or
    None if another process held it for `wait` seconds. Closing the
    descriptor releases the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(POLL)
