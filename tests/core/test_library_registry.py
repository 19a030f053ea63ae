"""A library declaration that cannot be loaded (a plug-in's broken entry
point, or a stale install whose metadata names a module that moved) is left
out with one line on stderr that names it and the fix, and every other
library keeps its tables: before, the first failure raised out of
`libraries()`, and writers whose meaning comes from the registry (every
TensorBoard writer) lost their translation without a word."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

READ = "import json; from rltrack.frameworks.library import libraries; print(json.dumps(sorted(libraries())))"


def _installed(site: Path, name: str, entries: str) -> None:
    """A distribution `name` in `site` whose only content is its metadata and `entries`."""
    dist = site / f"{name}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(entries)


def _libraries(site: Path) -> tuple[list[str], str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", READ], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout), done.stderr


def test_a_declaration_that_cannot_be_loaded_is_left_out_and_said_the_rest_kept(tmp_path: Path) -> None:
    baseline, quiet = _libraries(tmp_path / "empty")
    assert {"sb3", "tune", "skrl", "tensorboard"} <= set(baseline) and "rltrack:" not in quiet
    _installed(tmp_path / "site", "broken_plugin", "[rltrack.libraries]\nbroken = no_such_module_anywhere:LIBRARY\nnotalibrary = json:dumps\n")
    found, said = _libraries(tmp_path / "site")
    assert found == baseline  # every library of rltrack's own kept, the two broken ones left out
    lines = [line for line in said.splitlines() if line.startswith("rltrack: library")]
    assert len(lines) == 2, said
    assert "'broken'" in lines[0] and "ModuleNotFoundError" in lines[0] and "pip install --force-reinstall --no-deps broken_plugin" in lines[0]
    assert "'notalibrary'" in lines[1] and "not an rltrack Library" in lines[1]
