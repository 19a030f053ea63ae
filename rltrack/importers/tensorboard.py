"""`rltrack import tensorboard DIR`: folders of event files written without rltrack, made rltrack runs.

Why it exists: CleanRL, Tianshou, skrl, rsl_rl and DI-engine runs made
before rltrack was attached (or on a machine without it) hold their values
only in TensorBoard event files, which no tracker but W&B reads and MLflow
not at all. This module turns each such run into an rltrack run directory
under `root`, whose journal `rltrack sync RUN --to mlflow|wandb|trackio|neptune`
then delivers exactly once, as it delivers any run.

The values go through the same translation as a live writer's
(rltrack.frameworks.tensorboard's `Translator`, fed by
rltrack.runs.readers_tensorboard's reading of the files), so an imported
CleanRL run holds the same events, names, steps and typed hyperparameters as
one made with `rltrack run` or `attach`. The run is named after its folder
(CleanRL's `run_name`), its task (the experiment in the trackers, the start
of its id) is the one `rltrack runs ls` gives the folder (CleanRL's seeds of
one script and environment are one task; DI-engine's `exp_name` without its
seed); its events keep the files' wall times.

Which folders: every run `rltrack runs ls` would list under `DIR` as a
folder of event files (writer `tensorboard`), and DI-engine experiments
(their `log/serial`), or `DIR` itself when it is one. A folder already
imported into `root` (meta.json `info.tensorboard.imported_from`) is skipped;
importing again creates nothing.

Status: DI-engine's (finished or killed, as rltrack.runs reads it); event
files alone do not say how a run ended, so the others end "finished" (the
import finished), and meta.json says it was imported. Images are dropped and
counted (section "tensorboard" of report.json).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rltrack.frameworks.tensorboard import Translator
from rltrack.importers.imported import imported_runs
from rltrack.runs.readers import find_runs, format_of
from rltrack.runs.readers_foreign import DI_ENGINE_EVENTS, DIEngineFormat
from rltrack.runs.readers_tensorboard import TensorBoardFormat, read_protos, task_of
from rltrack.training.config import make_logger

#: The key of meta.json's `info` that records where a run was imported from.
INFO_KEY = "tensorboard"
#: The pipeline drains the logger's queue meanwhile; waiting now and then bounds its memory.
FLUSH_EVERY = 10_000


def find_folders(path: Path) -> list[tuple[Path, str, str, str]]:
    """The runs to import under `path` (or `path` itself): (the folder of event files,
    the run's name, its task as `rltrack runs ls` reads the folder, the status it ends with)."""
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory")
    itself = format_of(path)
    found = [(path, itself)] if itself is not None else [(p, f) for p, _, f in find_runs(path)]
    folders = []
    for folder, run_format in found:
        if isinstance(run_format, TensorBoardFormat):
            folders.append((folder, folder.name, task_of(folder), "finished"))
        elif isinstance(run_format, DIEngineFormat):
            info = run_format.info(folder)
            folders.append((folder / DI_ENGINE_EVENTS, folder.name, info.task, info.status))
    return folders


def import_folder(path: Path, root: Path) -> list[Path]:
    """Imports every folder of event files under `path` as a run directory under `root`;
    returns the run directories created."""
    path, root = Path(path), Path(root)
    folders = find_folders(path)
    if not folders:
        raise ValueError(
            f"{path}: no TensorBoard event files (events.out.tfevents.*) found in it or below it; "
            "point at a folder of event files (CleanRL's runs/<run_name>) or a folder holding such folders"
        )
    done = imported_runs(root, INFO_KEY, "imported_from")
    created = []
    for folder, name, task, status in folders:
        source = str(folder.resolve())
        if source in done:
            print(f"rltrack: {folder} was already imported as {done[source]}", file=sys.stderr)
        else:
            created.append(_import_run(folder, name, task, status, root))
    return created


def _import_run(folder: Path, name: str, task: str, status: str, root: Path) -> Path:
    logger = make_logger({"run": {"root": str(root), "name": name, "task": task}, "backends": {"use": ["local"]}})
    logger.set_run_info({INFO_KEY: {"imported_from": str(folder.resolve())}})
    translator = Translator(run=logger.name, root=folder, report=logger.report)
    emitted = 0
    for where, proto in read_protos(folder):
        for event in translator.add(proto, where):
            logger.emit(event)
            emitted += 1
            if emitted % FLUSH_EVERY == 0:
                logger.flush()
    for event in translator.flush():
        logger.emit(event)
    logger.close(status=status)
    return logger.run_dir
