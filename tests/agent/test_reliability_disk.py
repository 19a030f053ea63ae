"""A disk that fills for a while: every journaled value reaches the local
files and the trackers exactly once, with no `rltrack sync`.

The disk is a real tmpfs (tests/helpers/disks.py) holding the run root, and in
one placement the trackers' stores (MLflow's SQLite file, trackio's
directory) too. The steps, as issue 37 found the doubled and lost rows:
1,000 values; the disk filled by another file; 1,000 more, while a little
space is freed once, so the journal takes part of them and the agent's
writes of the local files meet the full disk; the agent is seen refusing;
the filler removed; 1,000 more. Then every store is read back with its own
reader: progress.csv (pandas), TensorBoard (its `EventAccumulator`), MLflow
(`MlflowClient`), trackio (its `SQLiteStorage`). Each runs quiet here and
beside busy loops in the reliability lane (`make test-reliability`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import rltrack
from rltrack.agent.files import agent_dir, read_json
from disks import fill, tmpfs
from reliability_helpers import mlflow_history, wandb_files, wandb_history
from trackio_reader import store
from waiting import wait_until

VALUES = 3000
#: Seconds any wait may take: beside a busy loop on every core the agent (SCHED_BATCH) gets a share of
#: a core, and a machine shared with other test runs gives less (a lane run here at load 20-30 needed over 300 s).
PATIENCE = 900
pytestmark = pytest.mark.reliability

#: Where the trackers' stores are: the disk that fills, or another.
PLACEMENTS = {
    "local files only": ([], False),
    "run root full": (["mlflow", "trackio"], False),
    "stores full too": (["mlflow", "trackio"], True),
}


@pytest.fixture
def six_mb_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "six", "6m") as disk:
        yield disk


def agent_errors(run_dir: Path) -> list[str]:
    """The errors the agent has met serving `run_dir` (`rltrack status`, saved every second)."""
    status = read_json(agent_dir() / "status.json") or {}
    return [error for run in status.get("runs", []) if run["run_dir"] == str(run_dir) for error in run["errors"]]


def write(logger: rltrack.Logger, start: int, end: int) -> None:
    for i in range(start, end):
        logger.write({"x": float(i)}, step=i)


def fill_after_a_third(config: dict[str, Any], disk: Path) -> tuple[rltrack.Logger, Path]:
    """A logger of `config` that has written a third of the values (the local
    files hold them), then `disk` filled, then another third written."""
    logger = rltrack.make_logger(config)
    write(logger, 0, VALUES // 3)
    assert logger.flush(timeout=PATIENCE)
    filler = fill(disk)
    write(logger, VALUES // 3, 2 * VALUES // 3)
    return logger, filler


def once_each(got: list[Any], want: list[Any]) -> str:
    """What differs, for the assertion's message: how many values, which are missing and which doubled."""
    seen: dict[Any, int] = {}
    for value in got:
        seen[value] = seen.get(value, 0) + 1
    missing = [value for value in want if value not in seen]
    doubled = [value for value, times in seen.items() if times > 1]
    return f"{len(got)} values for {len(want)}; missing {missing[:20]}{'...' if len(missing) > 20 else ''}; doubled {doubled[:20]}"


def tensorboard_values(run_dir: Path) -> list[tuple[int, float]]:
    accumulator = EventAccumulator(str(run_dir / "log" / "serial"), size_guidance={"scalars": 0})
    accumulator.Reload()
    return [(event.step, event.value) for event in accumulator.Scalars("x")]


@pytest.mark.slow
@pytest.mark.parametrize("placement", list(PLACEMENTS))
def test_a_disk_full_for_a_while_puts_every_value_once_in_the_files_and_trackers(
    placement: str, six_mb_disk: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:  # fmt: skip
    trackers, stores_on_disk = PLACEMENTS[placement]
    stores = six_mb_disk if stores_on_disk else tmp_path / "stores"
    stores.mkdir(exist_ok=True)
    config: dict[str, Any] = {
        "run": {"root": str(six_mb_disk), "name": "full", "task": "disk", "stores": str(stores), "close_timeout": PATIENCE},
        "backends": {"use": ["local", *trackers]},
    }
    logger, filler = fill_after_a_third(config, six_mb_disk)
    run_dir = logger.run_dir
    wait_until(lambda: any("No space left" in reason for reason in logger.report.as_dict()["counts"].get("core.errors", {})), PATIENCE,
               "the journal to meet the full disk")  # fmt: skip
    os.truncate(filler, filler.stat().st_size - 64 * 1024)  # the journal takes some, then the agent's local files meet the full disk
    wait_until(lambda: any("No space left" in error for error in agent_errors(run_dir)), PATIENCE, "the agent to meet the full disk")
    filler.unlink()
    write(logger, 2 * VALUES // 3, VALUES)
    started = time.monotonic()
    assert logger.close(), f"close False; report: {(run_dir / 'report.json').read_text() if (run_dir / 'report.json').is_file() else None}"
    seconds = time.monotonic() - started
    written = [float(i) for i in range(VALUES)]
    journaled = [e.data["x"] for e in rltrack.read_journal(run_dir) if e.kind == "scalars"]
    assert journaled == written, once_each(journaled, written)
    csv = pd.read_csv(run_dir / "progress.csv")["x"].tolist()
    assert csv == written, once_each(csv, written)
    at_steps = list(enumerate(written))
    tensorboard = tensorboard_values(run_dir)
    assert tensorboard == at_steps, once_each(tensorboard, at_steps)
    if "mlflow" in trackers:
        mlflow = mlflow_history(run_dir, "x")
        assert mlflow == at_steps, once_each(mlflow, at_steps)
    if "trackio" in trackers:
        rows = store(stores / "trackio", "disk")["logs"]["full"]
        trackio = sorted((row["step"], row["x"]) for row in rows if "x" in row)
        assert trackio == at_steps, once_each(trackio, at_steps)
    report = json.loads((run_dir / "report.json").read_text())
    assert not [name for name, counts in report["counts"].items() if name.endswith(".pending") and counts], report
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("rltrack")]
    print(f"\n{placement}: {VALUES} of {VALUES} values once in progress.csv, TensorBoard{', ' if trackers else ''}{', '.join(trackers)}; "
          f"close took {seconds:.1f} s; errors counted: {[report['counts'][name] for name in report['counts'] if name.endswith('errors')]}; stderr: {said}")  # fmt: skip


def tracker_states(run_dir: Path) -> dict[str, str]:
    """Each tracker's state in report.json (the agent rewrites it when one changes)."""
    try:
        return {name: condition["state"] for name, condition in json.loads((run_dir / "report.json").read_text()).get("trackers", {}).items()}
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


@pytest.mark.slow
def test_trackers_whose_stores_disk_filled_for_a_while_come_back_by_themselves(tmp_path: Path, six_mb_disk: Path) -> None:
    """W&B's folder, MLflow's SQLite file and trackio's directory on a disk
    that fills while the run root has space. Before, W&B's writer stopped for
    good: 0 of 3,000 values stored, `close()` False, report.json only
    `wandb.pending`, until `rltrack sync`. Now the agent sees W&B store
    nothing (`STALL` seconds), lets the session go, starts another once
    there is space, and delivers the backlog from the journal; MLflow and
    trackio retry with backoff. No `rltrack sync`."""
    config: dict[str, Any] = {
        "run": {"root": str(tmp_path / "runs"), "name": "full", "task": "disk", "stores": str(six_mb_disk), "close_timeout": PATIENCE},
        "backends": {"use": ["local", "mlflow", "trackio", "wandb"], "wandb": {"dir": str(six_mb_disk)}},
    }
    logger, filler = fill_after_a_third(config, six_mb_disk)
    run_dir = logger.run_dir
    seen_failing: set[str] = set()
    wait_until(lambda: seen_failing.update(name for name, state in tracker_states(run_dir).items() if state == "failing") or "wandb" in seen_failing,
               PATIENCE, lambda: f"report.json to say W&B is failing: {tracker_states(run_dir)}")  # fmt: skip
    filler.unlink()
    write(logger, 2 * VALUES // 3, VALUES)
    started = time.monotonic()
    assert logger.close(), f"close False; trackers: {tracker_states(run_dir)}"
    seconds = time.monotonic() - started
    at_steps = [(i, float(i)) for i in range(VALUES)]
    mlflow = mlflow_history(run_dir, "x")
    assert mlflow == at_steps, once_each(mlflow, at_steps)
    rows = store(six_mb_disk / "trackio", "disk")["logs"]["full"]
    trackio = sorted((row["step"], row["x"]) for row in rows if "x" in row)
    assert trackio == at_steps, once_each(trackio, at_steps)
    sessions = wandb_files(six_mb_disk)
    wandb = sorted((row["step"], row["x"]) for path in sessions for row in wandb_history(path) if "x" in row)
    assert wandb == at_steps, once_each(wandb, at_steps)
    report = json.loads((run_dir / "report.json").read_text())
    assert {name: condition["state"] for name, condition in report["trackers"].items()} == dict.fromkeys(["mlflow", "trackio", "wandb"], "delivered")
    assert not [name for name in report["counts"] if name.endswith(".pending")], report["counts"]
    print(f"\nstores' disk full: {VALUES} of {VALUES} values once in MLflow, trackio and W&B ({len(sessions)} W&B sessions); "
          f"seen failing: {sorted(seen_failing)}; close took {seconds:.1f} s; "
          f"tracker errors: {[report['counts'][name] for name in report['counts'] if name.endswith('errors')]}")
