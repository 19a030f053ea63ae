"""What the benchmarks share about rltrack's configuration and the trackers.

Why this exists: the calling-thread, throughput, training and memory
benchmarks all build rltrack with the same four filters and backend sets, open
the same native clients (W&B offline, Neptune offline, MLflow on a SQLite file
or a local `mlflow server`), and read back what a tracker holds to confirm
"everything arrived". One copy of each lives here.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from report import REPO

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "helpers"))  # mlflow_server.py, wandb_reader.py: the test suite's real-server helper and .wandb reader

import rltrack  # noqa: E402
from rltrack.delivery.cursor import pending_bytes  # noqa: E402

LOCAL = ["local"]
ALL = ["local", "mlflow", "wandb", "neptune"]
TRACKERS = ("mlflow", "wandb", "neptune", "trackio")

#: All four filter types on. The time filter's 0 s lets every record through
#: (1 ns did not: two writes can share a `time.time()` value, 0.24 µs apart at
#: today's epoch), so every backend gets every record (the heaviest case for the pipeline); the
#: aggregate emits every 100 records, so its output flows without dump() calls.
FILTERS = [
    {"type": "none"},
    {"type": "smoothing", "regex": "reward", "coeff": 0.9},
    {"type": "aggregate", "regex": "loss", "every": 100},
    {"type": "time", "seconds": 0},
]

NEPTUNE_OFF = {
    "capture_stdout": False, "capture_stderr": False, "capture_hardware_metrics": False,
    "capture_traceback": False, "git_ref": False, "source_files": [],
}  # fmt: skip


def isolate(tmp: Path) -> None:
    """Every file W&B or Neptune writes goes under `tmp`; their chatter is
    silenced. The bench gets a delivery agent of its own (started by this
    process, so its child), which exits 5 s after its last run."""
    os.environ.update(WANDB_SILENT="true", WANDB_MODE="offline", MLFLOW_DISABLE_TELEMETRY="true",
                      RLTRACK_AGENT_DIR=str(tmp / "agents"), RLTRACK_AGENT_IDLE="5")  # fmt: skip
    for var, sub in (("WANDB_CONFIG_DIR", "wandb_config"), ("WANDB_CACHE_DIR", "wandb_cache"), ("WANDB_DATA_DIR", "wandb_data"),
                     ("WANDB_ARTIFACT_DIR", "wandb_artifacts"), ("NEPTUNE_DATA_DIRECTORY", "direct/.neptune")):  # fmt: skip
        os.environ[var] = str(tmp / sub)
    os.environ.pop("RLTRACK_BACKENDS", None)
    for name in ("neptune", "mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def config(root: Path, name: str, backends: list[str], mlflow_uri: str | None = None, filters: bool = True) -> dict[str, Any]:
    """An rltrack config: `backends` under `root`, the four filters unless `filters=False`;
    MLflow on `mlflow_uri`, else rltrack's default SQLite file `<root>/mlflow.db`;
    `close()` waits for the agent to deliver everything (up to 600 s)."""
    settings: dict[str, Any] = {"use": backends}
    if mlflow_uri:
        settings["mlflow"] = {"tracking_uri": mlflow_uri}
    return {"run": {"root": str(root), "name": name, "close_timeout": 600}, "filters": FILTERS if filters else [], "backends": settings}


def make_logger(root: Path, name: str, backends: list[str], mlflow_uri: str | None = None, filters: bool = True) -> rltrack.Logger:
    return rltrack.make_logger(config(root, name, backends, mlflow_uri, filters))


def settle(log: rltrack.Logger, timeout: float = 600.0) -> None:
    """Waits until everything written so far is in the journal and every tracker has it."""
    log.flush()
    deadline = time.monotonic() + timeout
    used = log.config["backends"]["use"]
    while any(name in used and pending_bytes(log.run_dir, name) for name in TRACKERS):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{log.run_dir}: trackers still behind after {timeout:.0f} s")
        time.sleep(0.02)


# ---- the native clients ------------------------------------------------------


def wandb_run(root: Path, name: str) -> Any:
    """A W&B offline run with system metrics, console capture, git and code saving off (as rltrack's backend)."""
    import wandb

    settings = wandb.Settings(console="off", x_disable_stats=True, x_disable_machine_info=True, disable_git=True, save_code=False)
    return wandb.init(mode="offline", dir=str(root), project="bench", name=name, reinit="create_new", settings=settings)


def neptune_run() -> Any:
    import neptune

    logging.getLogger("neptune").setLevel(logging.WARNING)
    return neptune.init_run(mode="offline", **NEPTUNE_OFF)


def neptune_append(run: Any) -> Callable[[dict[str, float], int], None]:
    """What a Neptune user writes per record: one `append` per key."""

    def call(rec: dict[str, float], step: int) -> None:
        for key, value in rec.items():
            run[f"learner/{key}"].append(value, step=step)

    return call


def mlflow_run(uri: str, experiment: str) -> tuple[Any, str]:
    """(MlflowClient on `uri`, id of a new run in `experiment`)."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    return client, client.create_run(experiment_id).info.run_id


@contextmanager
def mlflow_server(directory: Path, wanted: bool) -> Iterator[str | None]:
    """A real local `mlflow server` (SQLite store behind it) for the block, or None when not wanted."""
    if not wanted:
        yield None
        return
    from mlflow_server import MlflowServer

    directory.mkdir(parents=True, exist_ok=True)
    server = MlflowServer(directory)
    server.start()
    try:
        yield server.uri
    finally:
        server.stop()


# ---- what arrived ------------------------------------------------------------


def mlflow_count(run_dir: Path, key: str) -> int:
    """Values of `key` the MLflow run of an rltrack run holds."""
    from mlflow_server import tracker

    client, run_id = tracker(run_dir)
    return len(client.get_metric_history(run_id, key))


def wandb_count(run_dir: Path, key: str) -> int:
    """History rows holding `key` in the .wandb files under `run_dir`."""
    import wandb_reader

    return sum(1 for f in wandb_reader.run_files(run_dir) for row in wandb_reader.history(f) if key in row)


def neptune_count(run_dir: Path, key: str) -> int:
    """Values of the series `key` in Neptune's offline data under `run_dir`."""
    path = key.split("/")
    count = 0
    for log in (run_dir / ".neptune" / "offline").glob("*/data-*.log"):
        for line in log.read_text().splitlines():
            op = json.loads(line)["obj"]
            if op["type"] == "LogFloats" and op["path"] == path:
                count += len(op["values"])
    return count


def journal_count(run_dir: Path, namespace: str) -> int:
    """Scalar records of `namespace` in the run's journal."""
    return sum(1 for e in rltrack.read_journal(run_dir) if e.kind == "scalars" and e.namespace == namespace and "fps" in e.data)


ARRIVED: dict[str, Callable[[Path, str], int]] = {"mlflow": mlflow_count, "wandb": wandb_count, "neptune": neptune_count}
