"""Reading the Neptune 1.x client's on-disk queue: the `data-<first version>.log`
files of one folder, one JSON operation per line.

Two readers need it: the Neptune backend, which continues each series where
an earlier session's folders left it, and the importer (rltrack.importers.neptune),
which turns whole folders into run directories. It is plain file reading,
without the neptune package.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator


def operations(folder: Path, on_unreadable: Callable[[], None] | None = None) -> Iterator[tuple[dict[str, Any], float]]:
    """(operation, time queued) of one folder, in version order. A line that
    is not JSON (a torn write) is skipped, and `on_unreadable()` called for it."""
    for log in sorted(folder.glob("data-*.log"), key=_first_version):
        with log.open(encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line, strict=False)
                    op, at = entry["obj"], float(entry.get("at") or 0.0)
                except (ValueError, KeyError, TypeError):
                    if on_unreadable is not None:
                        on_unreadable()
                    continue
                yield op, at


def _first_version(log: Path) -> int:
    try:
        return int(log.stem.split("-", 1)[1])
    except (IndexError, ValueError):
        return 0
