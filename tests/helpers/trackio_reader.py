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
project = sys.argv[1]
runs = S.get_runs(project)
print(json.dumps({"runs": runs, "logs": {r: S.get_logs(project, r) for r in runs},
                  "config": {r: S.get_run_config(project, r) for r in runs}}, default=str))
"""


def store(directory: Path, project: str) -> dict[str, Any]:
    """Runs, rows and configs of `project` in the trackio store `directory`."""
    env = {
        "TRACKIO_DIR": str(directory),
        "PATH": "/usr/bin:/bin",
        "HOME": str(directory.parent),
    }
    done = subprocess.run([sys.executable, "-c", READER, project], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def projects(directory: Path) -> list[str]:
    """The projects of the store: one SQLite database `<project>.db` each."""
    return sorted(path.stem for path in Path(directory).glob("*.db"))
