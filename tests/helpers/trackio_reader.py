"""Reads a trackio store back through trackio's own `SQLiteStorage`, in a child
process: trackio reads `TRACKIO_DIR` once, at import, so each store needs a
Python of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

READER = """
import json, sys
from trackio.sqlite_storage import SQLiteStorage as S
project, run_ids = sys.argv[1], sys.argv[2:]
runs = S.get_runs(project)
print(json.dumps({"runs": runs, "logs": {r: S.get_logs(project, r) for r in runs},
                  "config": {r: S.get_run_config(project, r) for r in runs},
                  "by_id": {i: S.get_logs(project, run_id=i) for i in run_ids}}, default=str))
"""


def store(directory: Path, project: str, *run_ids: str) -> dict[str, Any]:
    """Runs, rows and configs of `project` in the trackio store `directory`
    (by run name), and the rows of each of `run_ids` (`by_id`: runs of one
    name are told apart by their ids)."""
    env = {
        "TRACKIO_DIR": str(directory),
        "PATH": "/usr/bin:/bin",
        "HOME": str(directory.parent),
    }
    done = subprocess.run([sys.executable, "-c", READER, project, *run_ids], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def projects(directory: Path) -> list[str]:
    """The projects of the store: one SQLite database `<project>.db` each."""
    return sorted(path.stem for path in Path(directory).glob("*.db"))
