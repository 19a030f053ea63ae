"""Every scalar of a TensorBoard folder, and of each tracker a run was delivered to, as
`{name: [(step, value), ...]}`, so a test compares them key by key, duplicates counted.

* `event_file_scalars(folder)`: what TensorBoard's own `EventAccumulator` reads in a
  folder of event files and the folders below it (tensorboardX's `add_scalars`
  writes `<folder>/<main tag>/<tag>/`: those values are `<main tag>/<tag>`),
  scalars and one-number tensors (torch's `new_style`, CleanRL's one-element arrays);
* `mlflow_scalars(run_dir)`: the metric histories of the MLflow run the run was delivered to;
* `wandb_scalars(run_dir, *axes)`: the history rows of the run's `.wandb` files, each value
  at the first of the `axes` columns the row has (rltrack logs the step axes as columns);
* `trackio_scalars(directory, project)`: the rows of the trackio store, at their `step`.
"""

from __future__ import annotations

import re
from pathlib import Path

import trackio_reader
import wandb_reader

Series = dict[str, list[tuple[int, float | str]]]


def _value(value: float) -> float | str:
    """NaN as the text "nan", so that two series holding NaN at one step compare equal."""
    return "nan" if value != value else value


def _sorted(points: list[tuple[int, float | str]]) -> list[tuple[int, float | str]]:
    """By step, then value (one order for every store, NaN's text included)."""
    return sorted(points, key=lambda point: (point[0], repr(point[1])))


def event_file_scalars(folder: Path) -> Series:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    series: Series = {}
    folders = sorted({p.parent for p in Path(folder).rglob("events.out.tfevents.*")})
    for where in folders:
        accumulator = EventAccumulator(str(where), size_guidance={"scalars": 0, "tensors": 0}, purge_orphaned_data=False)
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            name = tag if where == folder else f"{tag}/{where.name}"
            series.setdefault(name, []).extend((e.step, _value(e.value)) for e in accumulator.Scalars(tag))
        for tag in accumulator.Tags()["tensors"]:
            numbers = [(e.step, make_ndarray(e.tensor_proto)) for e in accumulator.Tensors(tag)]
            if all(array.size == 1 and array.dtype.kind in "fiu" for _, array in numbers):
                series.setdefault(tag, []).extend((step, _value(float(array.reshape(-1)[0]))) for step, array in numbers)
    return series


def mlflow_scalars(run_dir: Path) -> Series:
    from reliability_helpers import mlflow_run

    client, run_id = mlflow_run(run_dir)
    keys = client.get_run(run_id).data.metrics
    return {key: _sorted([(m.step, _value(m.value)) for m in client.get_metric_history(run_id, key)]) for key in keys}


def wandb_scalars(run_dir: Path, *axes: str) -> Series:
    series: Series = {}
    for path in wandb_reader.run_files(run_dir):
        for row in wandb_reader.history(path):
            axis = next((a for a in axes if a in row), None)
            for key, value in row.items():
                if axis is not None and not key.startswith("_") and key not in axes and isinstance(value, (int, float)):
                    series.setdefault(key, []).append((row[axis], _value(value)))
    return {key: _sorted(points) for key, points in series.items()}


def trackio_scalars(directory: Path, project: str) -> Series:
    held = trackio_reader.store(directory, project)
    series: Series = {}
    for run in held["runs"]:
        for row in held["logs"][run]:
            for key, value in row.items():
                if key not in ("step", "timestamp") and isinstance(value, (int, float)):
                    series.setdefault(key, []).append((row["step"], _value(value)))
    return {key: _sorted(points) for key, points in series.items()}


def expected_in_trackers(series: Series, library: str | None = None) -> Series:
    """What a tracker holds of `event_file_scalars`' series at their primary step: each
    under its tag as written and, where `library` (the writer's library: "cleanrl",
    "skrl", "ding", ...; None: unknown) has one, its canonical twin
    (rltrack.frameworks.tensorboard.route). DI-engine's twins `<stage>_iter/<k>` and
    `<stage>_step/<k>` are one value at its env steps, so the `_iter` halves are left
    out here: `at_iterations` gives them."""
    from rltrack.frameworks.tensorboard import route

    expected: Series = {}
    for tag, points in series.items():
        if library == "ding" and _ITERATION_TAG.match(tag):
            continue
        for namespace, key, _ in route(tag, "both", library).places:
            expected.setdefault(f"{namespace}/{key}" if namespace else key, []).extend(points)
    return {name: _sorted(points) for name, points in expected.items()}


def at_iterations(series: Series) -> Series:
    """DI-engine's `<stage>_iter/<k>` series under their stored names: what the values'
    `train_iter` axis holds (a value written only against iterations, such as
    `total_envstep_count`, also gets its block's env steps as its primary step)."""
    from rltrack.frameworks.tensorboard import stored_name

    return {stored_name(tag, library="ding"): _sorted(points) for tag, points in series.items() if _ITERATION_TAG.match(tag)}


_ITERATION_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9]*_iter/")
