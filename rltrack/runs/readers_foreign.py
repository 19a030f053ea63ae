"""Run directories written without rltrack, read where they lie, never converted.

    di-engine    DI-engine / LightZero: `log/serial/events.out.tfevents.*` + `total_config.py`
    <library>    the reader each registered library declares (`Library.folders`): SB3's
                 `progress.csv` (rltrack.adapters.sb3.folders), a Ray Tune trial's
                 `result.json` + `params.json` (rltrack.adapters.tune.folders), SpinningUp's
                 `progress.txt` + `config.json` (rltrack.adapters.spinup.folders)
    tensorboard  any other folder of event files (CleanRL, Tianshou, skrl, rsl_rl): rltrack.runs.readers_tensorboard

A library's reader lives with the library, is imported here through the
registry when runs are looked for (`foreign_formats`), and builds on the
helpers below, which every tabular format shares.

Values keep their native names (namespace = the part before the first `/`)
and get canonical twins through the shared vocabulary (`with_canonical`), so
an SB3 dir and an rltrack run plot on one axis. Step axes follow the adapters:
`env_steps` (primary when known), `train_iter`, `epoch`. Event files (DI-engine's
and any other writer's) are read through the one translation of TensorBoard
events, rltrack.frameworks.tensorboard, which a live writer's hook uses too.

What a format does not record is said plainly rather than guessed: host
"unknown", status "unknown" (DI-engine: "finished" when the experiment holds
the `result.pkl` its pipelines write at their end or its learner log ends with
the learner's final checkpoint, else "killed"). Task: the config's `exp_name`
without a trailing `seed<N>` (DI-engine names seeds `cartpole_dqn_seed0`),
else the directory's name. The start time is the first recorded time, else
the time the first file was written.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable

from rltrack.frameworks.library import libraries
from rltrack.runs.records import (
    RunInfo,
    Sample,
    as_number,
    config_literal,
    event_samples,
    scalar_hparams,
    with_canonical,
)
from rltrack.runs.readers_tensorboard import TensorBoardFormat, event_files, first_event_time, tfevents_host, translated

UNKNOWN = "unknown"


def namespace_and_key(tag: str) -> tuple[str, str]:
    """A flat name's namespace (the part before the first `/`, "" for none) and key."""
    namespace, _, key = tag.partition("/")
    return (namespace, key) if key else ("", tag)


#: The seed at the end of an experiment's name: DI-engine's `cartpole_dqn_seed0`, `..._seed_1`.
_SEED_SUFFIX = re.compile(r"[_\-.]?seed[_\-]?\d+$", re.IGNORECASE)


def task(path: Path, config: dict[str, Any]) -> str:
    """The config's `exp_name` without a trailing seed (its seeds are one
    experiment), else the run directory's own name."""
    name = config.get("exp_name")
    return (_SEED_SUFFIX.sub("", name) or name) if isinstance(name, str) and name else path.name


def json_dict(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; {} when the file holds something else or bad JSON."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def earliest_mtime(files: Iterable[Path]) -> float:
    return min(f.stat().st_mtime for f in files if f.exists())


def columns(rows: list[dict[str, str]], step_columns: dict[str, str], namespace_of: Callable[[str], tuple[str, str]], steps_are_metrics: bool) -> list[Sample]:
    """Tabular rows (csv/tsv) to samples: `step_columns` maps a column to its step axis;
    with `steps_are_metrics` those columns are values too."""
    samples: list[Sample] = []
    for index, row in enumerate(rows):
        steps = {axis: int(v) for column, axis in step_columns.items() if (v := as_number(row.get(column))) is not None}
        for column, cell in row.items():
            value = as_number(cell)
            if value is None or column is None or (column in step_columns and not steps_are_metrics):
                continue
            namespace, key = namespace_of(column.strip())
            samples.append(Sample(namespace, key, value, steps or {"step": index}))
    return list(with_canonical(samples))


class DIEngineFormat:
    """A DI-engine / LightZero experiment dir: TensorBoard files under `log/serial`, `total_config.py`.

    The values are what rltrack.frameworks.tensorboard's translation makes of
    `log/serial`'s events, as for any folder of event files and as the live
    hook (rltrack.adapters.tensorboard) gives them: DI-engine's twins
    `<stage>_iter/<key>` (x = training iterations) and `<stage>_step/<key>`
    (x = env steps) are one value `<stage>/<key>` with both axes, env steps first."""

    name = "di-engine"

    def detect(self, path: Path) -> bool:
        return (path / "total_config.py").is_file() and bool(event_files(path / DI_ENGINE_EVENTS))

    def info(self, path: Path) -> RunInfo:
        try:
            config = config_literal(path / "total_config.py")
        except ValueError:
            config = {}
        events = path / DI_ENGINE_EVENTS
        return RunInfo(path, self.name, self.name, task(path, config), tfevents_host(event_files(events)[0]), "", first_event_time(events),
                       self._status(path), config, scalar_hparams(config))  # fmt: skip

    @staticmethod
    def _status(path: Path) -> str:
        """"finished" when the experiment holds `result.pkl`, which DI-engine's
        pipelines write once they end (`serial_pipeline`, the task pipeline's
        `final_ctx_saver`; its presence is read, never its content: unpickling
        runs code), or when the learner's log ends with its `after_run`
        checkpoint; "killed" otherwise: the pipeline stopped before its end (or
        is still running)."""
        ended = (path / "result.pkl").is_file() or _learner_log_ended(path / DI_ENGINE_LEARNER_LOG)
        return "finished" if ended else "killed"

    def samples(self, path: Path) -> list[Sample]:
        return event_samples(translated(path / DI_ENGINE_EVENTS))

    def signature_files(self, path: Path) -> list[Path]:
        return [path / "total_config.py", path / "result.pkl", path / DI_ENGINE_LEARNER_LOG, *event_files(path / DI_ENGINE_EVENTS)]


#: Where DI-engine and LightZero write their event files, under the experiment's folder.
DI_ENGINE_EVENTS = Path("log", "serial")
DI_ENGINE_LEARNER_LOG = Path("log", "learner", "learner_logger.txt")
#: The learner log's checkpoint line, and its table heading (both DI-engine's BaseLearner).
_CHECKPOINT_LINE = re.compile(r"learner save ckpt in \S*iteration_(\d+)\.pth\.tar\s*$")
_ITERATION_TABLE = re.compile(r"=== Training Iteration (\d+) Result ===")
#: Bytes read from the learner log's end: the last table and what follows it.
_LOG_TAIL = 64 * 1024


def _learner_log_ended(path: Path) -> bool:
    """Whether DI-engine's learner log ends as a serial pipeline's learner ends: with
    the `after_run` checkpoint, `iteration_<N>.pth.tar` for an N that was never
    trained (the learner counts an iteration after its `after_iter` hooks, which log
    iteration K's table and save the periodic `iteration_K` checkpoint after it),
    so the last table is of an earlier iteration."""
    try:
        with path.open("rb") as file:
            file.seek(max(file.seek(0, 2) - _LOG_TAIL, 0))
            tail = file.read().decode("utf-8", errors="replace")
    except OSError:
        return False
    lines = tail.rstrip().splitlines()
    last = _CHECKPOINT_LINE.search(lines[-1]) if lines else None
    tables = _ITERATION_TABLE.findall(tail)
    return last is not None and bool(tables) and int(tables[-1]) < int(last[1])


@functools.cache
def foreign_formats() -> tuple[Any, ...]:
    """The foreign formats (each a `rltrack.runs.readers.RunFormat`), in the
    order they are tried after rltrack's own: DI-engine's, whose experiment
    folder is the most particular; the reader each registered library declares
    (`Library.folders`), by the library's name; any folder of event files last
    (a DI-engine experiment or an SB3 folder may hold some too)."""
    found: list[Any] = [DIEngineFormat()]
    for _, library in sorted(libraries().items()):
        if library.folders:
            module, _, attribute = library.folders.partition(":")
            found.append(getattr(importlib.import_module(module), attribute))
    return (*found, TensorBoardFormat())
