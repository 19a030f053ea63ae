"""Shared pieces of the reliability tests: child processes and tracker read-back.

Why a module: the crash, exit and environment tests all start a real Python
child that logs through rltrack (so it can be killed, interrupted or starved
without taking pytest down), and they all read back what each tracker really
stored: MLflow through its client, W&B from its `.wandb` files (also those a
killed process left torn), Neptune from the operations in `data-*.log`.
And they wait for the agent, which beside busy loops is slow but
not stuck: `close_delivered` bounds the time without progress.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable

import wandb_reader
from growing_files import whole_lines

import rltrack
from rltrack.delivery.cursor import tracker_state
from waiting import wait_until, wait_while_advancing

REPO = Path(__file__).resolve().parents[2]  # tests/helpers/ -> the repository
# where the rltrack under test is imported from: the checkout, or site-packages when the suite runs against the installed wheel (.ci/run)
PACKAGE_ROOT = Path(rltrack.__file__).resolve().parents[1]
PYTHON = sys.executable


def child_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a child: rltrack and the test helpers (`waiting`)
    importable, trackers offline, and every tracker's own directories
    (config, cache, HOME) under `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "NEPTUNE_", "MLFLOW_", "RLTRACK_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), str(REPO / "tests" / "helpers"), os.environ.get("PYTHONPATH", "")]),
        HOME=str(home),
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_CONFIG_DIR=str(home / "wandb_config"),
        WANDB_CACHE_DIR=str(home / "wandb_cache"),
        WANDB_DATA_DIR=str(home / "wandb_data"),
        MLFLOW_DISABLE_TELEMETRY="true",
        **extra,
    )
    return env


def run_child(script: str, *args: str, home: Path, timeout: float = 240, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-c", script, *args], capture_output=True, text=True, env=child_env(home, **env), timeout=timeout, cwd=home
    )


def sync_run(run_dir: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`rltrack sync RUN_DIR ...` as a user runs it."""
    return subprocess.run(
        [PYTHON, "-m", "rltrack.cli", "sync", str(run_dir), *args],
        capture_output=True, text=True, env=child_env(home), timeout=900, cwd=home,
    )  # fmt: skip


def read_run_dir(stdout: Iterable[str]) -> Path:
    """The run directory a child prints as `RUN_DIR=<path>` (trackers print to stdout too):
    `stdout` is its stream, or the lines of what it printed."""
    for line in stdout:
        if line.startswith("RUN_DIR="):
            return Path(line[len("RUN_DIR=") :].strip())
    raise AssertionError("the child ended without printing RUN_DIR=")


def wandb_files(run_dir: Path) -> list[Path]:
    """Every `.wandb` file of the run, complete or left torn by a killed process, oldest first."""
    return sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))


def wandb_history(path: Path) -> list[dict[str, Any]]:
    """History rows of one `.wandb` file; a torn tail ends the file, and an
    empty one (a session whose writer met a full disk at once) holds none."""
    rows = []
    try:
        for record in wandb_reader.records(path):
            if record.WhichOneof("record_type") == "history":
                rows.append({wandb_reader._item_key(i): json.loads(i.value_json) for i in record.history.item})
    except (ValueError, struct.error):  # a checksum broken by the kill, or no header: nothing after it was written whole
        pass
    return rows


def wandb_exit_codes(run_dir: Path) -> list[int]:
    """The exit codes of the run's W&B sessions that ended (a killed one has none)."""
    codes = []
    for path in wandb_files(run_dir):
        try:
            codes += [exit.exit_code for exit in wandb_reader.of_type(path, "exit")]
        except ValueError:
            pass
    return codes


def neptune_operations(run_dir: Path) -> list[dict[str, Any]]:
    """Every queued Neptune operation of every offline folder of the run: a
    torn last line (being written, or cut by a kill) is left out, a line
    damaged anywhere else fails the test."""
    folders = (run_dir / ".neptune" / "offline").iterdir()
    return [
        json.loads(line)["obj"]
        for folder in sorted(folders, key=lambda f: json.loads((f / "metadata.json").read_text())["createdAt"])
        for log in sorted(folder.glob("data-*.log"), key=lambda p: int(p.stem.split("-")[1]))
        for line in whole_lines(log)
    ]


def neptune_floats(run_dir: Path, path: str) -> list[tuple[int, float]]:
    """(step, value) of every point of the float series `path`, across the run's folders."""
    return [
        (int(v["step"]), v["value"])
        for op in neptune_operations(run_dir)
        if op["type"] == "LogFloats" and "/".join(op["path"]) == path
        for v in op["values"]
    ]


def neptune_failed(run_dir: Path) -> list[bool]:
    """Every value assigned to `sys/failed`, in order."""
    return [op["value"] for op in neptune_operations(run_dir) if op["type"] == "AssignBool" and op["path"] == ["sys", "failed"]]


def mlflow_run(run_dir: Path) -> tuple[Any, str]:
    from mlflow import MlflowClient

    state = tracker_state(run_dir, "mlflow")
    return MlflowClient(state["tracking_uri"]), state["run_id"]


def mlflow_history(run_dir: Path, key: str) -> list[tuple[int, float]]:
    client, run_id = mlflow_run(run_dir)
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def meta(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "meta.json").read_text()))


def failing_since(run_dir: Path, tracker: str) -> float | None:
    """Since when (wall time, whole seconds) the agent has been failing to
    deliver `run_dir` to `tracker`, as `rltrack status` shows it (the agent
    saves it every second); None while it is not failing. What an outage test
    waits for, in place of a fixed outage."""
    from rltrack.agent.files import agent_dir, read_json

    for run in (read_json(agent_dir() / "status.json") or {}).get("runs", []):
        if run["run_dir"] == str(run_dir.resolve()) and tracker in run["trackers"]:
            return run["trackers"][tracker].get("failing_since")
    return None


def reported(run_dir: Path, count: str, seconds: float = 120) -> dict[str, Any]:
    """report.json's counts once they hold `count`: the agent writes the file
    when it has read the run's journal to its end, not when `close` returns."""
    report = run_dir / "report.json"
    return wait_until(lambda: report.is_file() and count in (counts := json.loads(report.read_text())["counts"]) and counts,
                      seconds, f"the agent to write {count} into {report}")  # fmt: skip


#: Seconds the agent may show no progress (no file of the run root changed) before a test waiting for it fails.
STALL = 300


def delivery_progress(root: Path) -> tuple[int, int]:
    """How far the agent has come delivering the runs under `root`: the
    total size and the latest change of the files there (the runs' cursors
    and local files, and the trackers' stores kept beside them by default:
    MLflow's SQLite file grows for minutes while a starved agent creates its
    schema, before any cursor moves). The journals are left out: training
    writes them, not the agent."""
    size, latest = 0, 0
    for folder, _, names in os.walk(root):
        for name in names:
            if name.startswith("journal.") and name.endswith(".jsonl"):
                continue
            try:
                stat = os.stat(os.path.join(folder, name))
            except FileNotFoundError:  # replaced between the listing and the look
                continue
            size, latest = size + stat.st_size, max(latest, stat.st_mtime_ns)
    return size, latest


def close_delivered(logger: Any, timeout: float = 30) -> bool:
    """`logger.close(timeout)`, and then, while the agent still delivers the
    run and advances, the wait for it to finish (the agent shares the CPU: beside
    busy loops it gets a share of the cores, so a total bound would test
    the machine's load, not rltrack). True when everything is delivered."""
    if logger.close(timeout=timeout, quiet=True):
        return True
    if not logger.behind:  # not the agent's delivery: the journal itself is not whole
        return False
    wait_while_advancing(lambda: not logger.still_behind(time.monotonic() + 1), lambda: delivery_progress(logger.run_dir.parent), STALL,
                         lambda: f"the agent to deliver {logger.run_dir} (behind: {logger.behind})", every=1.0)  # fmt: skip
    return True
