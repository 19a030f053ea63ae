"""Reading files another process is still appending to.

A test that reads a tracker's store, a log or a record file while the
agent, a child or an environment worker appends to it may find the last
line half-written: the writer's `write` is not atomic for the reader. Every
such reader takes the whole lines only; the torn last one is read at the
next look, once its writer has finished it. A line damaged anywhere else is
still an error the test must see.
"""

from __future__ import annotations

from pathlib import Path


def whole_lines(path: Path) -> list[str]:
    """The lines of `path` that end with a newline (none if it does not exist); a torn last line is left out."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return data[: data.rfind(b"\n") + 1].decode().splitlines()
