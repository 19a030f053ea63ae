"""Which runs an importer already made in a runs root, so importing again creates nothing.

Each importer records where a run came from in the run's meta.json
(`info.<importer>.<field>`: Neptune's container id, the TensorBoard folder);
`imported_runs` reads them back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def imported_runs(root: Path, importer: str, field: str) -> dict[Any, Path]:
    """`info[importer][field]` -> run directory, for the runs directly under `root` that have it."""
    done = {}
    for meta in root.glob("*/meta.json") if root.is_dir() else []:
        try:
            info = json.loads(meta.read_text(encoding="utf-8")).get("info", {})
        except (OSError, ValueError, AttributeError):
            continue
        record = info.get(importer) if isinstance(info, dict) else None
        origin = record.get(field) if isinstance(record, dict) else None
        if origin:
            done[origin] = meta.parent
    return done
