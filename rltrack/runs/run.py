"""One run, whoever wrote it, as Python objects: `rltrack.runs.load(path_or_id) -> Run`.

`Run` reads lazily: its description (id, task, host, config, ...) when made,
its values on first use of `.metrics`, `.df`, `.timelog` or `.summary`, then
keeps them. The readable id is

    <task>/<YYYY>/<MM>/<DD>/<HH-MM-SS-ffffff> <host> <hp1=v1 hp2=v2 ...>

(local start time; the run's tracked hyperparameters, in the order the run
lists them; nothing after the host when it tracks none).
"""

from __future__ import annotations

import datetime as dt
import re
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rltrack.runs.readers import RunFormat, format_of
from rltrack.runs.records import RunInfo, Sample

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

#: The metrics whose final and best values the index keeps, and what "best" means for each.
MAIN_METRICS: dict[str, Callable[[float, float], float]] = {
    "collector/reward_mean": max,
    "evaluator/reward_mean": max,
    "collector/total_envstep_count": max,
    "learner/total_loss_avg": min,
}

_SPACE = re.compile(r"\s+")


def format_hparam(value: Any) -> str:
    """A hyperparameter's value as it appears in a run id: Python's shortest text, no spaces."""
    return _SPACE.sub("_", str(value))


def make_run_id(info: RunInfo) -> str:
    start = dt.datetime.fromtimestamp(info.start_unix)
    hparams = " ".join(f"{_SPACE.sub('_', key)}={format_hparam(value)}" for key, value in info.tracked.items())
    run_id = f"{info.task}/{start:%Y/%m/%d/%H-%M-%S-%f} {_SPACE.sub('_', info.host)}"
    return f"{run_id} {hparams}" if hparams else run_id


class Run:
    """A run directory and what it holds (see the module docstring)."""

    def __init__(self, path: Path, run_format: RunFormat) -> None:
        self.path = path
        self.format = run_format
        self.info = run_format.info(path)

    def __repr__(self) -> str:
        return f"Run({self.id!r}, path={str(self.path)!r})"

    # ---- the description ----------------------------------------------------

    @property
    def id(self) -> str:
        return make_run_id(self.info)

    @property
    def task(self) -> str:
        return self.info.task

    @property
    def host(self) -> str:
        return self.info.host

    @property
    def ip(self) -> str:
        return self.info.ip

    @property
    def start_time(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.info.start_unix).astimezone()

    @property
    def status(self) -> str:
        return self.info.status

    @property
    def source(self) -> str:
        """The framework: sb3, tune, rllib, acme, spinup, plain (rltrack's plain API), di-engine."""
        return self.info.source

    @property
    def writer(self) -> str:
        """What wrote the directory: "rltrack", or a foreign format (sb3, tune, spinup, di-engine, tensorboard)."""
        return self.info.writer

    @property
    def config(self) -> dict[str, Any]:
        return self.info.config

    @property
    def hparams(self) -> dict[str, Any]:
        """Flat (`a/b` keys) hyperparameters with comparable values (numbers, booleans, short text)."""
        return self.info.hparams

    @property
    def tracked(self) -> dict[str, Any]:
        """The hyperparameters named in the id."""
        return self.info.tracked

    @property
    def checkpoints(self) -> list[Path]:
        return sorted((self.path / "ckpt").glob("*.pth.tar"))

    # ---- the values -------------------------------------------------------------

    @cached_property
    def samples(self) -> list[Sample]:
        """Every numeric value of the run, in the order it was written."""
        return self.format.samples(self.path)

    @cached_property
    def metrics(self) -> dict[str, list[tuple[int, float]]]:
        """key (`namespace/key`) -> [(primary step, value), ...] for scalars; a value without
        any step axis gets its position in the series."""
        series: dict[str, list[tuple[int, float]]] = {}
        for sample in self.samples:
            if sample.kind == "scalars":
                points = series.setdefault(sample.tag, [])
                step = sample.step
                points.append((len(points) if step is None else step, sample.value))
        return series

    @cached_property
    def timelog(self) -> dict[str, list[float]]:
        """stage -> durations in seconds, from `timing` values (`with logger.timer("train")` -> "train")."""
        stages: dict[str, list[float]] = {}
        for sample in self.samples:
            if sample.kind == "timing":
                stages.setdefault(sample.key if sample.namespace == "time" else sample.tag, []).append(sample.value)
        return stages

    @cached_property
    def summary(self) -> dict[str, dict[str, float]]:
        """key -> {"final", "best", "count", "final_step"} for every scalar; "best" is the
        maximum, or the minimum for keys that are losses (MAIN_METRICS says which)."""
        out: dict[str, dict[str, float]] = {}
        for key, points in self.metrics.items():
            values = [v for _, v in points if v == v]  # NaN is not a result
            if not values:
                continue
            pick = MAIN_METRICS.get(key, min if "loss" in key else max)
            out[key] = {"final": values[-1], "best": pick(values), "count": len(values), "final_step": points[-1][0]}
        return out

    @property
    def df(self) -> pd.DataFrame:
        """One row per value: `key`, `value`, `namespace`, `kind`, `time`, and one column per step axis."""
        import pandas as pd

        axes = list(dict.fromkeys(axis for sample in self.samples for axis in sample.steps))
        columns: dict[str, list[Any]] = {"key": [], "value": [], "namespace": [], "kind": [], "time": []}
        columns.update({axis: [] for axis in axes})
        for sample in self.samples:
            columns["key"].append(sample.tag)
            columns["value"].append(sample.value)
            columns["namespace"].append(sample.namespace)
            columns["kind"].append(sample.kind)
            columns["time"].append(sample.time)
            for axis in axes:
                columns[axis].append(sample.steps.get(axis))
        frame = pd.DataFrame(columns)
        frame["time"] = frame["time"].astype("float64")
        for axis in axes:
            frame[axis] = frame[axis].astype("Int64")
        return frame

    # ---- figures (rltrack.runs.plot) ----------------------------------------------

    def plot_metrics(self, keys: list[str] | None = None) -> Figure:
        from rltrack.runs.plot import plot_metrics

        return plot_metrics(self, keys)

    def plot_timelog(self) -> Figure:
        from rltrack.runs.plot import plot_timelog

        return plot_timelog(self)


def open_run(path: Path) -> Run:
    """The run in directory `path`; ValueError naming the path when it is not one."""
    run_format = format_of(path)
    if run_format is None:
        raise ValueError(
            f"{path} is not a run directory: it has no meta.json (rltrack), progress.csv (SB3), "
            "result.json + params.json (Tune), progress.txt + config.json (SpinningUp) "
            "total_config.py + log/serial/events.out.tfevents.* (DI-engine) or events.out.tfevents.* (any TensorBoard writer)"
        )
    return Run(path, run_format)
