"""Reading a run back from every place it lands, for the tests of the loggers
that plug into an RL library (TorchRL, Tianshou, rsl_rl; issue 35).

Each such test runs the library's own short training with rltrack as its
logger, records what the library handed over (name, step, value), and asks
`assert_once_everywhere` whether each of those values is in the run's
`progress.csv`, its MLflow run (read with `MlflowClient`) and W&B's run file
(read with wandb_reader), exactly once, at its step on the axis the library meant.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import wandb_reader
from mlflow import MlflowClient

from rltrack.delivery.cursor import tracker_state
from rltrack.trackers.mlflow.batch import mlflow_key

#: A value as the library meant it: (stored name, axis, step, value).
Logged = tuple[str, str, int, float]


def config(root: Path, **run: Any) -> dict[str, Any]:
    """An rltrack config writing under `root` to the local files, MLflow's
    SQLite store and W&B offline; `close` waits until every tracker has everything."""
    return {"run": {"root": str(root), "close_timeout": None, **run}, "backends": {"use": ["local", "mlflow", "wandb"], "wandb": {"project": "libraries"}}}


def _key(value: float) -> Any:
    return "nan" if isinstance(value, float) and math.isnan(value) else value


def assert_once_everywhere(run_dir: Path, logged: list[Logged]) -> None:
    """Every value of `logged` is in progress.csv, MLflow and W&B's run file
    exactly once, at its step on its axis; and nothing else under those names."""
    expected: dict[str, Counter[tuple[str, int, Any]]] = {}
    for name, axis, step, value in logged:
        expected.setdefault(name, Counter())[(axis, int(step), _key(float(value)))] += 1
    table = pd.read_csv(run_dir / "progress.csv", float_precision="round_trip")  # pandas < 3 parses floats inexactly by default
    client = MlflowClient(tracker_state(run_dir, "mlflow")["tracking_uri"])
    run_id = tracker_state(run_dir, "mlflow")["run_id"]
    (wandb_file,) = wandb_reader.run_files(run_dir)
    rows = wandb_reader.history(wandb_file)
    for name, values in expected.items():
        axes = {axis for axis, _, _ in values}
        (axis,) = axes  # one library name, one axis
        found_csv = Counter((axis, int(row[axis]), _key(float(row[name]))) for _, row in table.iterrows() if name in row and not pd.isna(row[name]))
        assert found_csv == values, f"progress.csv {name}: {found_csv} != {values}"
        found_mlflow = Counter((axis, m.step, _key(m.value)) for m in client.get_metric_history(run_id, mlflow_key(name)))  # within MLflow's character rules
        assert found_mlflow == values, f"MLflow {name}: {found_mlflow} != {values}"
        found_wandb = Counter((axis, int(row[axis]), _key(float(row[name]))) for row in rows if name in row)
        assert found_wandb == values, f"W&B {name}: {found_wandb} != {values}"


def tracker_hparams(run_dir: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """The run's MLflow params (text, as MLflow keeps them) and its W&B config
    (values with their JSON types), read back from the stores."""
    state = tracker_state(run_dir, "mlflow")
    params = MlflowClient(state["tracking_uri"]).get_run(state["run_id"]).data.params
    (wandb_file,) = wandb_reader.run_files(run_dir)
    return params, wandb_reader.config(wandb_file)
