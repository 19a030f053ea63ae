"""A tracker's coarser view: `[backends.<tracker>] every` / `max_values_per_second`, `thin`.

Read back from each tracker's real store (MLflow's embedded SQLite file,
trackio's store, W&B's offline `.wandb` file, Neptune's offline folder): one
value per key and window, the last or the mean, while the journal, the local
files (progress.csv) and storage keep every value and report.json counts
the rest as thinned, not dropped. Bad settings are config errors naming the
key, the value and the fix.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import wandb_reader
from mlflow_server import history, sqlite_store, tracker
from reliability_helpers import neptune_floats
from trackio_reader import store

import rltrack
from rltrack.core.events import Event
from rltrack.delivery.thinning import Thinning
from rltrack.trackers.remote import EventId

START = 1_800_000_000.0  # capture times of the test's events: whole windows from here


def logged(root: Path, name: str, settings: dict, tracker: str = "mlflow", **run: str) -> rltrack.Logger:
    """A run with 10 values a second of `loss` (1, 2, 3, ...) and of `reward` (negated) for 5 s."""
    backends = ["local", tracker] if run.get("storage") else [tracker]
    logger = rltrack.make_logger({"run": {"root": str(root), "name": name, **run}, "backends": {"use": backends, tracker: settings}})
    for i in range(50):
        logger.emit(Event(START + i / 10, {"loss": float(i + 1), "reward": -float(i + 1)}, "scalars", "learner", {"step": i}))
    logger.emit(Event(START + 5, {"note": "done"}, "text", "learner", {"step": 50}))
    assert logger.close(timeout=None)
    return logger


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("thinning")
    sqlite_store(root / "mlflow.db")
    return root


@pytest.mark.parametrize(("settings", "how"), [({"every": "1s"}, "last"), ({"max_values_per_second": 1, "thin": "mean"}, "mean")])
def test_the_tracker_gets_one_value_per_key_and_window_and_the_rest_is_counted_as_thinned(root, settings, how):
    logger = logged(root, f"thin_{how}", settings)
    client, run_id = tracker(logger.run_dir)
    windows = [list(range(10 * w + 1, 10 * w + 11)) for w in range(5)]  # the values of each second
    expected = [(values[-1] - 1, values[-1] if how == "last" else sum(values) / 10) for values in windows]  # at the step of the window's last value
    assert history(client, run_id, "learner/loss") == [(step, float(value)) for step, value in expected]
    assert history(client, run_id, "learner/reward") == [(step, -float(value)) for step, value in expected]
    journal = [json.loads(line) for line in (logger.run_dir / "journal.jsonl").read_text().splitlines()]
    assert sum(1 for line in journal if line.get("data", {}).get("loss") is not None) == 50  # the journal keeps every value
    counts = json.loads((logger.run_dir / "report.json").read_text())["counts"]
    assert counts["mlflow.thinned"] == {f"every 1 s, the {how} value per key and window": 90}  # 100 values, 10 sent
    assert counts["mlflow.delivered"]["metric values"] == 10 and "mlflow.dropped" not in counts


def thinned_view(how: str) -> list[tuple[int, float]]:
    """`loss` as a tracker thinned to one value a second holds it: (step, value) per window."""
    windows = [list(range(10 * w + 1, 10 * w + 11)) for w in range(5)]  # the values of each second
    return [(values[-1] - 1, float(values[-1] if how == "last" else sum(values) / 10)) for values in windows]  # at the step of the window's last value


def trackio_loss(root: Path, run_dir: Path) -> list[tuple[int, float]]:
    held = store(root / "trackio", "thinning")
    return [(row["step"], row["learner/loss"]) for run in held["runs"] for row in held["logs"][run] if "learner/loss" in row]


def wandb_loss(root: Path, run_dir: Path) -> list[tuple[int, float]]:
    rows = [row for path in wandb_reader.run_files(run_dir) for row in wandb_reader.history(path)]
    return [(row["step"], row["learner/loss"]) for row in rows if "learner/loss" in row]


def neptune_loss(root: Path, run_dir: Path) -> list[tuple[int, float]]:
    return neptune_floats(run_dir, "learner/loss")


@pytest.mark.parametrize(
    ("tracker", "settings", "held"),
    [
        pytest.param("trackio", {"project": "thinning", "every": "1s", "thin": "mean"}, trackio_loss, id="trackio"),
        pytest.param("wandb", {"project": "thinning", "max_values_per_second": 1}, wandb_loss, id="wandb", marks=pytest.mark.slow),
        pytest.param("neptune", {"every": "1s", "thin": "mean"}, neptune_loss, id="neptune", marks=pytest.mark.slow),
    ],
)
def test_every_tracker_takes_the_thinned_view_while_journal_files_and_storage_keep_every_value(tmp_path, tracker, settings, held):
    how = settings.get("thin", "last")
    logger = logged(tmp_path, tracker, settings, tracker, storage=f"file://{tmp_path / 'storage'}")
    assert held(tmp_path, logger.run_dir) == thinned_view(how)
    every = [(i, float(i + 1)) for i in range(50)]
    journal = logger.run_dir / "journal.jsonl"
    assert [(line["steps"]["step"], line["data"]["loss"]) for line in map(json.loads, journal.read_text().splitlines()) if "loss" in line.get("data", {})] == every
    table = pd.read_csv(logger.run_dir / "progress.csv")
    assert list(zip(table["step"], table["learner/loss"].dropna())) == every
    pulled = tmp_path / "pulled"
    assert subprocess.run([sys.executable, "-m", "rltrack.cli", "pull", f"file://{tmp_path / 'storage'}", str(pulled)], timeout=300).returncode == 0
    assert (pulled / tracker / "journal.jsonl").read_bytes() == journal.read_bytes()  # storage: every value, the journal byte for byte
    counts = json.loads((logger.run_dir / "report.json").read_text())["counts"]
    assert counts[f"{tracker}.thinned"] == {f"every 1 s, the {how} value per key and window": 90}  # 100 values, 10 sent
    assert f"{tracker}.dropped" not in counts


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"every": "soon"}, r"every = 'soon' must be a time such as \"10s\""),
        ({"every": 0}, r"every = 0 must be longer than 0 s"),
        ({"max_values_per_second": -1}, r"max_values_per_second = -1 must be a number above 0"),
        ({"every": "1s", "thin": "median"}, r"thin = 'median' must be \"last\""),
        ({"every": "1s", "max_values_per_second": 2}, r"every = '1s' and max_values_per_second = 2 both set the window: keep one"),
        ({"thin": "mean"}, r"thin = 'mean' needs a window: add every"),
    ],
)
def test_bad_settings_are_config_errors_naming_key_value_and_fix(root, settings, named):
    with pytest.raises(rltrack.ConfigError, match=r"backends\.mlflow: " + named):
        rltrack.make_logger({"run": {"root": str(root), "name": "bad"}, "backends": {"use": ["mlflow"], "mlflow": settings}})


def test_the_cursor_stops_before_a_window_still_open():
    """A delivery that resumes from the cursor reads the open window whole again: the same values go out."""
    thinning = Thinning(1.0, "mean")
    events = [Event(START + i / 4, {"x": float(i)}, "scalars", "n", {"s": i}) for i in range(6)]  # windows: 0-3, 4-5
    ids = [EventId(None, 100 * (i + 1)) for i in range(6)]
    sent, sent_ids, thinned = thinning.take(events, ids, [100 * i for i in range(6)])
    assert [e.data for e in sent] == [{"x": 1.5}] and sent_ids == [ids[3]] and thinned == 4
    assert thinning.held_from() == 400  # where the line of the open window's first value (i = 4) starts
    again = Thinning(1.0, "mean")
    assert again.take(events[4:], ids[4:], [400, 500])[:2] == ([], []) and [e.data for e in again.flush()[0]] == [{"x": 4.5}]


def test_a_key_logged_once_does_not_hold_the_cursor_for_the_rest_of_the_run():
    thinning = Thinning(1.0, "last")
    events = [Event(START, {"lr": 0.1}, "scalars", "config", {"s": 0})]
    events += [Event(START + 0.5 + i / 2, {"loss": float(i)}, "scalars", "learner", {"s": i}) for i in range(6)]  # windows 0, 1, 1, 2, 2, 3
    ids = [EventId(None, 100 * (i + 1)) for i in range(len(events))]
    sent, _, thinned = thinning.take(events, ids, [100 * i for i in range(len(events))])
    assert [(e.namespace, e.data) for e in sent] == [("config", {"lr": 0.1}), ("learner", {"loss": 0.0}), ("learner", {"loss": 2.0}), ("learner", {"loss": 4.0})]
    assert thinned == 2 and thinning.held_from() == 600  # only the last window (loss = 5) is open
