"""Real small disks for the full-disk tests: a tmpfs of a given size, and a
file that fills it.

The disk must be real (a tmpfs mounted for the test, unmounted after it): a
full disk shows in `write` refusing part of a buffer, `ftruncate` still
working, SQLite saying "database or disk is full", and no simulation of
those is trustworthy. Mounting needs root; a test skips where it is not allowed.
"""

from __future__ import annotations

import errno
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


def mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} is not permitted here: {done.stderr.strip()}")


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))
    try:
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=True)  # lazy: a file the logger failed to close may still be open


def fill(disk: Path) -> Path:
    """Writes a file on `disk` until the disk refuses more; returns it."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    with filler.open("ab", buffering=0) as f:  # the last pages, a byte at a time
        try:
            while True:
                f.write(b"\0")
        except OSError:
            pass
    return filler
