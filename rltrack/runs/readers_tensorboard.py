"""Folders of TensorBoard event files written without rltrack, read where they lie.

CleanRL writes `runs/<run_name>/events.out.tfevents.*`, Tianshou
`log/<task>/<algo>/.../events.out.tfevents.*`, SB3's `tensorboard_log`
`PPO_1/events.out.tfevents.*`, skrl and rsl_rl their own `<experiment>/`
folders: any directory holding event files is a run (DI-engine's experiment
folders, which have a `total_config.py` beside `log/serial`, are read by
rltrack.runs.readers_foreign's DI-engine reader first). The folders below it
that hold event files belong to it (what `add_scalars` writes, one writer per
tag, or a second writer of the same process).

The values are what rltrack.frameworks.tensorboard's `Translator` makes of the
files' events, the same translation a live writer gets from
rltrack.adapters.tensorboard and `rltrack import tensorboard` writes into a run
directory: a CleanRL folder read here and a CleanRL run made with rltrack show
the same names, steps and hyperparameters.

Task: the folder's name without when or with which seed it ran (`task_of`:
CleanRL's `__<seed>__<unix time>` tail, skrl's and Isaac Lab's leading time,
Tianshou's `exp_seed=<n>` folders), so the seeds of one script and environment
are one task; a folder named only by its time or seed takes its parent's
name. The run is addressed by its folder's path under the root. Host: the event
file's name; start: the first event's wall time; status: "unknown" (event
files do not say how a run ended). A last record cut short by a writer that is
still writing (or was killed) is left out, never an error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterator

from rltrack.core.events import Event
from rltrack.frameworks.tensorboard import Translator
from rltrack.runs.records import RunInfo, Sample, event_samples, scalar_hparams

EVENT_FILE_PREFIX = "events.out.tfevents."
UNKNOWN = "unknown"
#: Tails of a run folder's name that say when or with which seed it ran: CleanRL's
#: f"{env_id}__{exp_name}__{seed}__{int(time.time())}", the `_<YYYYmmdd-HHMMSS>` of
#: Tianshou's high-level experiment names (sensai's `datetime_tag`).
_TAILS = re.compile(r"(__\d+__\d{9,}|_\d{8}-\d{6})$")
#: Names that start with the time the run began: skrl's `<yy-mm-dd_HH-MM-SS-ffffff>_<Agent>`,
#: Isaac Lab's `<YYYY-MM-DD_HH-MM-SS>[_<run_name>]` (rsl_rl, skrl); or that are only a
#: seed: Tianshou's `exp_seed=<n>`, `seed_<n>`, a bare number.
_HEADS = re.compile(r"^(\d{2,4}-\d\d-\d\d_\d\d-\d\d-\d\d(-\d+)?(_|$)|(exp_)?seed[=_-]?\d+$|\d+$)")


def task_of(path: Path) -> str:
    """The task of a folder of event files: its name without when or with which seed
    it ran (so the seeds and repeats of one experiment are one task); a folder named
    first by its time or seed takes its parent's name in front, as the parent says what ran:
    `runs/CartPole-v1__ppo__1__1764244800` -> `CartPole-v1__ppo`,
    `runs/torch/CartPole-v1/26-11-27_12-00-00-123456_PPO` -> `CartPole-v1_PPO`,
    `logs/rsl_rl/cartpole/2026-11-27_12-00-00` -> `cartpole`,
    `log/DQNExperiment_20261127-120000/exp_seed=0` -> `DQNExperiment`."""
    name = _TAILS.sub("", path.name)
    head = _HEADS.match(name)
    if head is None:
        return name or path.name
    parent = _TAILS.sub("", path.parent.name)
    return "_".join(part for part in (parent, name[head.end() :]) if part) or path.name


def event_files(directory: Path) -> list[Path]:
    """The event files directly in `directory`, in the order they were written (their names start with the time)."""
    try:
        names = [entry.name for entry in os.scandir(directory) if entry.name.startswith(EVENT_FILE_PREFIX) and entry.is_file()]
    except OSError:
        return []
    return [directory / name for name in sorted(names)]


def _scalars_folders(path: Path) -> list[str]:
    """The folders under a run (relative, with `/`) that hold event files: `add_scalars`' writers."""
    folders = []
    for directory, subdirectories, _ in os.walk(path):
        subdirectories.sort()
        if directory != str(path) and event_files(Path(directory)):
            folders.append(Path(os.path.relpath(directory, path)).as_posix())
    return folders


def read_protos(path: Path) -> Iterator[tuple[Path, Any]]:
    """Every Event proto of the run at `path` with the folder it was written in (the
    run's own first, then the folders below it); a torn last record is left out."""
    from tensorboard.backend.event_processing.event_file_loader import (
        EventFileLoader,
    )

    for folder in [path, *(path / sub for sub in _scalars_folders(path))]:
        for file in event_files(folder):
            for proto in EventFileLoader(str(file)).Load():
                yield folder, proto


def translated(path: Path, translator: Translator | None = None) -> Iterator[Event]:
    """The rltrack events of the run at `path`, as rltrack.frameworks.tensorboard translates them."""
    translator = translator or Translator(root=path)
    for folder, proto in read_protos(path):
        yield from translator.add(proto, folder)
    yield from translator.flush()


def first_event_time(path: Path) -> float:
    """When the run at `path` started: its first event's wall time, else (files
    with no event yet) the time its first event file was written."""
    start = next((proto.wall_time for _, proto in read_protos(path) if proto.wall_time), None)
    return start if start is not None else min(f.stat().st_mtime for f in event_files(path))


def tfevents_host(file: Path) -> str:
    """The host in `events.out.tfevents.<time>.<host>[.<pid>.<n>]` (tensorboardX, torch, TensorFlow)."""
    parts = file.name.split(".")[4:]
    while parts and parts[-1].isdigit():
        parts.pop()
    return ".".join(parts) or UNKNOWN


class TensorBoardFormat:
    """A directory of TensorBoard event files any writer made (see the module docstring)."""

    name = "tensorboard"

    def detect(self, path: Path) -> bool:
        return bool(event_files(path))

    def info(self, path: Path) -> RunInfo:
        hparams: dict[str, Any] = {}
        for event in translated(path):
            if event.kind == "hparams":
                hparams.update(event.data)
        return RunInfo(path, self.name, self.name, task_of(path), tfevents_host(event_files(path)[0]), "", first_event_time(path), UNKNOWN, hparams,
                       scalar_hparams(hparams))  # fmt: skip

    def samples(self, path: Path) -> list[Sample]:
        return event_samples(translated(path))

    def signature_files(self, path: Path) -> list[Path]:
        return [*event_files(path), *(f for folder in _scalars_folders(path) for f in event_files(path / folder))]
