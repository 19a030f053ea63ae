"""The operating system rltrack needs, said in one sentence where it is missing.

rltrack runs on Linux and macOS: its locks are `flock`s (the kernel drops them
with their process, however it ends) and its agent is a POSIX process of its
own. On another system, Windows say, the first module that takes a lock
imports `fcntl` from here, and `make_logger` fails with that sentence instead
of a `ModuleNotFoundError` deep in an import chain.

Linux's `/proc` (a process's start time, the files it holds open) makes some
checks sharper; every reader of it falls back to what any POSIX system offers
when it is absent (macOS): `PROC` is read at each call, so tests can point it
at a missing directory.
"""

from __future__ import annotations

import sys
from pathlib import Path


class UnsupportedPlatformError(RuntimeError):
    """rltrack cannot run on this operating system."""


try:
    import fcntl
except ImportError:  # not POSIX
    raise UnsupportedPlatformError(
        f"rltrack runs on Linux and macOS only: it needs POSIX file locks (the module fcntl), which {sys.platform} lacks."
    ) from None

#: Linux's process table; absent on macOS.
PROC = Path("/proc")

__all__ = ["PROC", "UnsupportedPlatformError", "fcntl"]
