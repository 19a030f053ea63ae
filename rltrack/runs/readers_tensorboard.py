"""Folders of TensorBoard event files written without rltrack, read where they lie.

CleanRL writes `runs/<run_name>/events.out.tfevents.*`, Tianshou
`log/<task>/<algo>/.../events.out.tfevents.*`, SB3's `tensorboard_log`
`PPO_1/events.out.tfevents.*`, skrl and rsl_rl their own `<experiment>/`
folders: any directory holding event files is a run (DI-engine's experiment
folders, which have a `total_config.py` beside `log/serial`, are read by
rltrack.runs.readers_foreign's DI-engine reader first). The folders below it
that hold event files belong to it: they are what `add_scalars` writes (one
writer per `<main_tag>/<tag>` or `<main_tag>_<tag>` folder, scalar tag
`<main_tag>`), so their values are read as `<main_tag>/<tag>`.

Task: the folder's name without CleanRL's `__<seed>__<unix time>` tail (so
CleanRL's seeds of one script and environment are one task); host: the event
file's name; start: the first event's wall time; status: "unknown" (event
files do not say how a run ended). A last record cut short by a writer that is
still writing (or was killed) is left out, never an error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterator

from rltrack.runs.records import RunInfo, Sample, with_canonical

EVENT_FILE_PREFIX = "events.out.tfevents."
UNKNOWN = "unknown"
#: CleanRL's run name: f"{env_id}__{exp_name}__{seed}__{int(time.time())}"; the tail is the seed and the time.
_CLEANRL_TAIL = re.compile(r"__\d+__\d{9,}$")


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


def read_events(path: Path) -> Iterator[tuple[str, Any]]:
    """Every Event proto of the run at `path`, as (folder, event): folder "" for the
    run's own files, else the `add_scalars` sub-directory's name; a torn last record is left out."""
    from tensorboard.backend.event_processing.event_file_loader import (
        EventFileLoader,
    )

    for folder in ["", *_scalars_folders(path)]:
        for file in event_files(path / folder):
            for event in EventFileLoader(str(file)).Load():
                yield folder, event


def scalar_of(value: Any) -> float | None:
    """The number in one Summary.Value: `simple_value`, or a scalar tensor (TensorBoard's
    `new_style` scalars, a one-element array); None for histograms, images, text."""
    if value.WhichOneof("value") == "simple_value":
        return float(value.simple_value)
    if value.WhichOneof("value") == "tensor" and value.metadata.plugin_data.plugin_name == "scalars":
        from tensorboard.util import tensor_util

        array = tensor_util.make_ndarray(value.tensor)
        return float(array.reshape(-1)[0]) if array.size == 1 else None
    return None


def scalars_tag(folder: str, tag: str) -> str:
    """The tag of a value: `add_scalars(main_tag, {tag: v})` writes `main_tag` into a
    writer of its own, in the folder `<main_tag>/<tag>` (tensorboardX) or
    `<main_tag with / as _>_<tag>` (torch); that value is `<main_tag>/<tag>`."""
    if not folder:
        return tag
    for prefix in (tag + "/", tag.replace("/", "_") + "_"):
        if folder.startswith(prefix) and len(folder) > len(prefix):
            return f"{tag}/{folder[len(prefix):]}"
    return f"{tag}/{folder}"


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
        files = event_files(path)
        start = next((event.wall_time for _, event in read_events(path) if event.wall_time), None)
        if start is None:  # files with no event yet
            start = min(f.stat().st_mtime for f in files)
        task = _CLEANRL_TAIL.sub("", path.name) or path.name
        return RunInfo(path, self.name, self.name, task, tfevents_host(files[0]), "", start, UNKNOWN)

    def samples(self, path: Path) -> list[Sample]:
        samples: list[Sample] = []
        for folder, event in read_events(path):
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                number = scalar_of(value)
                if number is None:
                    continue
                namespace, _, key = scalars_tag(folder, value.tag).partition("/")
                if not key:
                    namespace, key = "", namespace
                samples.append(Sample(namespace, key, number, {"step": int(event.step)}, float(event.wall_time)))
        return list(with_canonical(samples))

    def signature_files(self, path: Path) -> list[Path]:
        return [*event_files(path), *(f for folder in _scalars_folders(path) for f in event_files(path / folder))]
