"""report.json says where each tracker stands while another is stuck.

Issue 37 found MLflow delivered in 4 s still "pending" in report.json two
minutes later, because the agent wrote the file at the journal's end and
then only once the last tracker was done or given up. Now the agent rewrites
it whenever a tracker's condition changes (delivering, failing with its
error, delivered, given up), at most once a second. The tracker that stays
down is the stand-in (tests/helpers/stand_in_tracker.py, refusing while a
file exists); MLflow is the real one, on its SQLite store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import rltrack
from reliability_helpers import mlflow_history
from stand_in_tracker import received
from waiting import wait_until

pytestmark = pytest.mark.reliability
TRACKER = "stand_in_tracker:FileTracker"
#: Seconds a wait may take: beside busy loops the niced agent gets a few per cent of a core (see test_reliability_disk.py).
PATIENCE = 900


def report(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "report.json"
    return json.loads(path.read_text()) if path.is_file() else {"counts": {}, "trackers": {}}


@pytest.mark.slow
def test_report_json_says_each_trackers_condition_as_it_changes_while_another_is_down(tmp_path: Path) -> None:
    down = tmp_path / "down"
    down.touch()
    logger = rltrack.make_logger({
        "run": {"root": str(tmp_path / "runs"), "name": "r", "close_timeout": 1},
        "backends": {"use": ["local", "mlflow", TRACKER], TRACKER: {"fail_while": str(down)}},
    })  # fmt: skip
    run_dir = logger.run_dir
    for i in range(300):
        logger.write({"x": float(i)}, step=i)
    assert logger.close() is False  # the stand-in is down
    mlflow_done = wait_until(lambda: (r := report(run_dir))["trackers"].get("mlflow", {}).get("state") == "delivered" and r, PATIENCE,
                             lambda: f"report.json to say MLflow is delivered: {report(run_dir)}")  # fmt: skip
    assert "mlflow.pending" not in mlflow_done["counts"]
    assert mlflow_history(run_dir, "x") == [(i, float(i)) for i in range(300)]
    stuck = mlflow_done["trackers"]["filetracker"]
    assert stuck["state"] == "failing" and stuck["error"] == "ConnectionError: tracker down" and stuck["failing_since"] > 0, stuck
    assert "filetracker.pending" in mlflow_done["counts"]
    down.unlink()  # back: the agent delivers the rest by itself, and says so
    wait_until(lambda: report(run_dir)["trackers"]["filetracker"]["state"] == "delivered", PATIENCE,
               lambda: f"report.json to say the stand-in is delivered: {report(run_dir)}")  # fmt: skip
    assert [event.data["x"] for event in received(run_dir)] == [float(i) for i in range(300)]
    assert "filetracker.pending" not in report(run_dir)["counts"]
