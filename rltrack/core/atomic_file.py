"""Files that readers in other processes never see half-written.

The run directory's small state files (report.json, meta.json, cursors, the
trackers' state) are read by the training process, the agent and `rltrack`
commands while another of them may be rewriting them. Each is written to a
temporary file of its own (named by process and thread, so concurrent writers
never share one) and renamed over the old one: a reader sees the old file or
the new one, never a torn or empty one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_atomic(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    """Replaces `path` with `text` (UTF-8, or bytes as they are) in one rename; `mode` for a new file (0o600: the user alone)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
