"""`rltrack show` reads a run directory back."""

from __future__ import annotations

import subprocess
import sys

import rltrack


def test_show_prints_status_and_last_values(tmp_path):
    with rltrack.make_logger({"run": {"root": str(tmp_path), "name": "cli"}}) as logger:
        for i in range(3):
            logger.write({"reward": 10.0 * i}, step=i, namespace="collector")
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "show", str(logger.run_dir)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "cli: finished" in done.stdout
    assert "3 events in the journal" in done.stdout
    row = next(line for line in done.stdout.splitlines() if "collector/reward" in line)
    assert row.split("|")[2].strip() == "20"


def test_show_refuses_a_directory_that_is_not_a_run(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "show", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert "not a run directory" in done.stderr
