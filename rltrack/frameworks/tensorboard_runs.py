"""Which library wrote a folder of event files, and what names its run, from
the folder alone: the files rltrack finds on disk (`rltrack runs`, `rltrack
import tensorboard`) have no live writer whose caller could say, so the
folders each library writes its runs in decide (rltrack.frameworks.tensorboard_tags:
`FOLDERS`, DI-engine's `log/serial`); and a run is named after the folder
that stands for it (CleanRL's `runs/<run_name>`, the experiment above
DI-engine's `log/serial` and rl_games' `summaries`, HF's `run_name`). The
translation (rltrack.frameworks.tensorboard) and the TensorBoard hook
(rltrack.adapters.tensorboard) both use it.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from rltrack.frameworks.tensorboard_tags import FOLDERS, HF_ARGS_TAG, LOGDIR_TAILS, RL_GAMES_SUMMARIES
from rltrack.frameworks.tensorboard_values import json_object


def folder_library(logdir: str, tag: str) -> str | None:
    """The library of event files found on disk, whose writer is gone, by the
    folder its runs are written in: DI-engine's (and rltrack's own DI
    layout's) `<exp_name>/log/serial`, the folders of `FOLDERS`; else unknown.
    A folder of `add_scalars` (below the run's) is its run's."""
    return _folder_library(os.path.normpath(logdir))


@functools.lru_cache(maxsize=1024)
def _folder_library(logdir: str) -> str | None:
    parts = _parts(logdir)
    if _below(parts, LOGDIR_TAILS):
        return "ding"
    for depth in (1, 2, 3):  # the run's folder, or one above an `add_scalars` writer's
        folder = os.sep.join(parts[: len(parts) - depth + 1])
        for library, (name, beside) in FOLDERS.items():
            if re.fullmatch(name, parts[-depth]) and (not beside or os.path.exists(os.path.join(folder, beside))):
                return library
        if len(parts) <= depth + 1:
            break
    return None


def _parts(logdir: str | os.PathLike[str]) -> list[str]:
    return os.path.normpath(os.path.abspath(os.fspath(logdir))).split(os.sep)


def _below(parts: list[str], tails: tuple[tuple[str, ...], ...]) -> str | None:
    """The folder above the first of `tails` that `parts` end with."""
    for tail in tails:
        if len(parts) > len(tail) + 1 and tuple(parts[-len(tail):]) == tail:
            return parts[-len(tail) - 1]
    return None


def run_name(logdir: str | os.PathLike[str], library: str | None = None, first: Any = None) -> str:
    """The name of the run a writer's log directory stands for: its folder
    (CleanRL's `runs/<run_name>`), the experiment's for DI-engine's
    `<exp_name>/log/serial` and rl_games' `<experiment>/summaries`; for
    transformers, the `run_name` (else the `output_dir`) of the
    TrainingArguments its callback writes first (`first`: that writer's first
    `Event` proto), else the `output_dir` above HF's `runs/<time>_<host>` folder."""
    parts = _parts(logdir)
    if library == "transformers":
        named = _hf_run_name(first)
        if named:
            return named
        if len(parts) > 2 and parts[-2] == "runs":
            return parts[-3]
    tails = (*LOGDIR_TAILS, (RL_GAMES_SUMMARIES,)) if library == "rl_games" else LOGDIR_TAILS
    return _below(parts, tails) or parts[-1] or "tensorboard"


def _hf_run_name(first: Any) -> str | None:
    """`run_name`, else the `output_dir` folder's name, of HF's args text in an `Event` proto."""
    if first is None or not first.HasField("summary"):
        return None
    for value in first.summary.value:
        if value.tag == HF_ARGS_TAG:
            args = json_object(b"".join(value.tensor.string_val).decode("utf-8", "replace"))
            for name in (args.get("run_name"), args.get("output_dir")):
                if isinstance(name, str) and name.strip():
                    return os.path.basename(os.path.normpath(name)) or None
    return None
