"""SpinningUp's `EpochLogger`, rebuilt: SpinningUp's files and output, and
every row sent to rltrack (the package's docstring, rltrack.adapters.spinup,
says what and where it differs from SpinningUp's on purpose).
"""

from __future__ import annotations

import atexit
import json
import os
import os.path as osp
import sys
import time
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from rltrack.adapters.spinup.logx import colorize, dump_pickle, epoch_statistics
from rltrack.core.atomic_file import write_atomic
from rltrack.frameworks.canonical import names_mode, with_canonical_names
from rltrack.frameworks.hparams import settings
from rltrack.core.events import DEFAULT_STEP_AXIS
from rltrack.training.exits import exit_status
from rltrack.adapters.spinup.rows import (
    CANONICAL,
    EPISODE_KEYS,
    LEARNER_LOSSES,
    STEP_COLUMNS,
    Route,
    RowState,
    namespace_of,
    row_events,
)
from rltrack.training.logger import Logger


def convert_json(obj: Any, _active: frozenset[int] = frozenset()) -> Any:
    """`obj` made JSON-serialisable the way SpinningUp's `convert_json` does it
    (functions by name, objects as `{str(obj): vars}`), except that tuples
    become lists (SpinningUp returns a generator there, which json cannot
    write), a reference cycle ends in `str(obj)` instead of a RecursionError,
    and loggers show what SpinningUp's logger would (`save_config(locals())`
    sees the logger itself)."""
    if _is_json_serializable(obj):
        return obj
    if id(obj) in _active:
        return str(obj)
    active = _active | {id(obj)}
    if isinstance(obj, dict):
        return {convert_json(k, active): convert_json(v, active) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return [convert_json(x, active) for x in obj]
    if isinstance(obj, EpochLogger):
        return {str(obj): convert_json(obj.spinup_attributes(), active)}
    if _is_rltrack_logger(obj):
        return f"rltrack run {obj.run_dir}"
    if hasattr(obj, "__name__") and "lambda" not in obj.__name__:
        return convert_json(obj.__name__, active)
    if hasattr(obj, "__dict__") and obj.__dict__:
        return {str(obj): {convert_json(k, active): convert_json(v, active) for k, v in obj.__dict__.items()}}
    return str(obj)


def _is_rltrack_logger(obj: Any) -> bool:
    return isinstance(obj, Logger)


def _is_json_serializable(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except Exception:
        return False


class EpochLogger:
    """Drop-in for `spinup.utils.logx.EpochLogger` that also sends each row to rltrack.

    Same constructor (`output_dir`, `output_fname`, `exp_name`) and methods;
    the package docstring (rltrack.adapters.spinup) lists the files, what rltrack receives and the few
    deliberate differences from SpinningUp. Extra keyword arguments choose the
    rltrack Logger: `rltrack_logger`, `rltrack_config`, `send_to_rltrack`.
    """

    def __init__(
        self,
        output_dir: str | None = None,
        output_fname: str = "progress.txt",
        exp_name: str | None = None,
        *,
        rltrack_logger: Any = None,
        rltrack_config: Any = None,
        send_to_rltrack: bool = True,
    ) -> None:
        given_dir = output_dir
        self.output_dir = output_dir or "/tmp/experiments/%i" % int(time.time())
        if osp.exists(self.output_dir):
            print("Warning: Log dir %s already exists! Storing info there anyway." % self.output_dir)
        else:
            os.makedirs(self.output_dir)
        self.output_file = open(osp.join(self.output_dir, output_fname), "w")
        atexit.register(self._close_file)
        print(colorize("Logging data to %s" % self.output_file.name, "green", bold=True))
        self.first_row = True
        self.log_headers: list[str] = []
        self.log_current_row: dict[str, Any] = {}
        self.exp_name = exp_name
        self.epoch_dict: dict[str, list[Any]] = {}
        self._file_columns = 0  # how many header columns progress.txt has
        self._dumps = 0
        self._warned_empty: set[str] = set()
        #: column -> its route (`_route`). Replaced, never changed, when a column
        #: is added, so the pipeline thread can read the one a row was sent with.
        self._routes: dict[str, Route] = {}
        self._stage_values: dict[str, list[float]] = {}  # this epoch's raw values behind the stage blocks
        self._owns_rltrack = False
        self.rltrack: Any = None
        if send_to_rltrack:
            if rltrack_logger is not None:
                self.rltrack = rltrack_logger
            else:
                self.rltrack = _make_rltrack_logger(rltrack_config, given_dir, exp_name)
                self._owns_rltrack = True
                print(colorize("rltrack run: %s" % self.rltrack.run_dir, "green", bold=True))
            self.rltrack.set_run_info(
                {"framework": "spinup", "output_dir": osp.abspath(self.output_dir), "exp_name": exp_name}
            )
        self._names = names_mode(self.rltrack)
        self._rows = RowState(run=str(getattr(self.rltrack, "name", "")), names=self._names)

    # ---- SpinningUp's Logger ----------------------------------------------

    def log(self, msg: str, color: str = "green") -> None:
        """Print a colorized message to stdout."""
        print(colorize(msg, color, bold=True))

    def log_tabular(self, key: str, val: Any = None, with_min_and_max: bool = False, average_only: bool = False) -> None:
        """Log `val` under `key`, or (without `val`) the mean/std/min/max of what
        was `store`d under `key` this epoch: `Average<key>` (or `<key>` with
        `average_only`), `Std<key>` (not with `average_only`), then `Max<key>`
        and `Min<key>` with `with_min_and_max`. Either way what was stored under
        `key` is emptied, as SpinningUp does, so it cannot reach a later
        epoch's statistics or `get_stats`."""
        if val is not None:
            self._set(key, val, key, False)
            self.epoch_dict[key] = []
            return
        v = self.epoch_dict.get(key) or []
        if not v and key not in self._warned_empty:
            self._warned_empty.add(key)
            print(f"rltrack EpochLogger: nothing was stored under {key!r} this epoch; logging NaN for it", file=sys.stderr)
        vals = np.concatenate(v) if v and isinstance(v[0], np.ndarray) and len(v[0].shape) > 0 else v
        if key in EPISODE_KEYS or key in LEARNER_LOSSES:
            self._stage_values[key] = np.asarray(vals, dtype=np.float64).ravel().tolist()
        stats = epoch_statistics(vals, with_min_and_max=with_min_and_max)
        self._set(key if average_only else "Average" + key, stats[0], key, True)
        if not average_only:
            self._set("Std" + key, stats[1], key, True)
        if with_min_and_max:
            self._set("Max" + key, stats[3], key, True)
            self._set("Min" + key, stats[2], key, True)
        self.epoch_dict[key] = []

    def _set(self, column: str, val: Any, source: str, statistic: bool) -> None:
        if column not in self._routes:
            self.log_headers.append(column)  # late keys too: see the package docstring
            self._routes = {**self._routes, column: _route(column, source, statistic, self._names)}
        if column in self.log_current_row:
            raise AssertionError("You already set %s this iteration. Maybe you forgot to call dump_tabular()" % column)
        self.log_current_row[column] = val

    def save_config(self, config: Any) -> None:
        """Writes `config` (made JSON-safe) to config.json, prints it, and sends it to rltrack as hyperparameters."""
        config_json = convert_json(config)
        if self.exp_name is not None:
            config_json["exp_name"] = self.exp_name
        output = json.dumps(config_json, separators=(",", ":\t"), indent=4, sort_keys=True)
        print(colorize("Saving config:\n", color="cyan", bold=True))
        print(output)
        with open(osp.join(self.output_dir, "config.json"), "w") as out:
            out.write(output)
        if self.rltrack is not None:  # the logger, its kwargs, output paths: config.json keeps them, the trackers do not
            self.rltrack.log_hparams(settings(config_json) if isinstance(config_json, dict) else {"config": config_json})

    def save_state(self, state_dict: Any, itr: int | None = None) -> None:
        """Saves `state_dict` to vars.pkl (vars<itr>.pkl), the PyTorch objects of
        `setup_pytorch_saver` to pyt_save/model.pt (model<itr>.pt), and hands
        the latter to rltrack's `log_checkpoint`."""
        fname = "vars.pkl" if itr is None else "vars%d.pkl" % itr
        try:
            dump_pickle(state_dict, osp.join(self.output_dir, fname))
        except Exception:
            self.log("Warning: could not pickle state_dict.", color="red")
        if hasattr(self, "pytorch_saver_elements"):
            self._pytorch_simple_save(itr)
            if self.rltrack is not None:
                try:
                    self.rltrack.log_checkpoint(self.pytorch_saver_elements, iteration=self._dumps if itr is None else itr)
                except Exception as exc:  # a checkpoint rltrack cannot take must not stop training
                    self.log(f"Warning: rltrack could not take the checkpoint ({type(exc).__name__}: {exc}).", color="red")

    def setup_tf_saver(self, sess: Any, inputs: Any, outputs: Any) -> None:
        raise NotImplementedError(
            "rltrack's EpochLogger does not save TensorFlow 1 graphs; use setup_pytorch_saver, "
            "or SpinningUp's own logger for TF1 algorithms"
        )

    def setup_pytorch_saver(self, what_to_save: Any) -> None:
        """Remember what `save_state` saves with `torch.save` (a module, or an object holding modules)."""
        self.pytorch_saver_elements = what_to_save

    def _pytorch_simple_save(self, itr: int | None = None) -> None:
        import torch

        fpath = osp.join(self.output_dir, "pyt_save")
        fname = osp.join(fpath, "model" + ("%d" % itr if itr is not None else "") + ".pt")
        os.makedirs(fpath, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # as SpinningUp: whole objects are pickled, source warnings are noise
            torch.save(self.pytorch_saver_elements, fname)

    def dump_tabular(self) -> None:
        """Prints the row as a table, appends it to progress.txt, sends it to rltrack."""
        vals = []
        max_key_len = max([15] + [len(key) for key in self.log_headers])
        keystr = "%" + "%d" % max_key_len
        fmt = "| " + keystr + "s | %15s |"
        n_slashes = 22 + max_key_len
        print("-" * n_slashes)
        for key in self.log_headers:
            val = self.log_current_row.get(key, "")
            valstr = "%8.3g" % val if hasattr(val, "__float__") else val
            print(fmt % (key, valstr))
            vals.append(val)
        print("-" * n_slashes, flush=True)
        if self.output_file is not None:
            if self.first_row:
                self.output_file.write("\t".join(self.log_headers) + "\n")
                self._file_columns = len(self.log_headers)
            elif len(self.log_headers) > self._file_columns:
                self._widen_file()
            self.output_file.write("\t".join(map(str, vals)) + "\n")
            self.output_file.flush()
        if self.rltrack is not None and self.log_current_row:
            self._send_row(self.log_current_row)
        self.log_current_row.clear()
        self.first_row = False
        self._dumps += 1

    # ---- SpinningUp's EpochLogger -----------------------------------------

    def store(self, **kwargs: Any) -> None:
        """Save values into the current epoch's state (for `log_tabular(key)`)."""
        for k, v in kwargs.items():
            if k not in self.epoch_dict:
                self.epoch_dict[k] = []
            self.epoch_dict[k].append(v)

    def get_stats(self, key: str) -> tuple[Any, ...]:
        """(mean, std) of what was stored under `key` this epoch."""
        v = self.epoch_dict[key]
        vals = np.concatenate(v) if isinstance(v[0], np.ndarray) and len(v[0].shape) > 0 else v
        return epoch_statistics(vals)

    # ---- beyond SpinningUp -------------------------------------------------

    def spinup_attributes(self) -> dict[str, Any]:
        """The attributes SpinningUp's EpochLogger has (what config.json shows for a logger)."""
        names = ("output_dir", "output_file", "first_row", "log_headers", "log_current_row", "exp_name", "epoch_dict")
        return {name: getattr(self, name) for name in names}

    def close(self, status: str = "finished") -> None:
        """Closes progress.txt and, if this logger made it, the rltrack run."""
        self._close_file()
        if self._owns_rltrack and self.rltrack is not None:
            self.rltrack.close(status=status)

    def __enter__(self) -> EpochLogger:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.close(status=exit_status(exc))

    def _close_file(self) -> None:
        if self.output_file is not None and not self.output_file.closed:
            self.output_file.close()

    def _widen_file(self) -> None:
        """Rewrites progress.txt with the current (wider) header; old rows get empty cells."""
        path = self.output_file.name
        self.output_file.close()
        with open(path) as f:
            lines = f.read().splitlines()
        pad = "\t" * (len(self.log_headers) - self._file_columns)
        write_atomic(Path(path), "\t".join(self.log_headers) + "\n" + "".join(line + pad + "\n" for line in lines[1:]))
        self.output_file = open(path, "a")
        self._file_columns = len(self.log_headers)

    def _send_row(self, row: dict[str, Any]) -> None:
        """Training thread: copies the row and this epoch's raw values and hands
        them to rltrack's pipeline thread, where `row_events` builds the events."""
        steps: dict[str, Any] = {}
        for column, axis in STEP_COLUMNS.items():
            if column in row:
                steps[axis] = row[column]
        if not steps:
            steps[DEFAULT_STEP_AXIS] = self._dumps
        raw, self._stage_values = self._stage_values, {}
        self.rltrack.emit_deferred(partial(row_events, time.time(), dict(row), steps, raw, self._routes, self._rows))
        self.rltrack.dump(steps)


def _route(column: str, source: str, statistic: bool, names: str) -> Route:
    """Where a column goes: whether it is a statistic and its places, the
    column as written (filed under its stage) and its canonical twin per
    `run.names` (`names`); (None, ()) for step columns. `source` is the stored
    key the column came from."""
    if column in STEP_COLUMNS:
        return None, ()
    stage = namespace_of(source)
    places = []
    for flat in with_canonical_names({f"{stage}/{column}": None}, CANONICAL, names):
        namespace, _, key = flat.partition("/")
        places.append(("", column, stage) if key == column else (namespace, key, ""))
    return statistic, tuple(places)


def _make_rltrack_logger(config: Any, output_dir: str | None, exp_name: str | None) -> Any:
    from rltrack.training.config import load_config, make_logger

    cfg = load_config(config)
    if cfg["run"]["name"] is None:
        name = osp.basename(osp.normpath(output_dir)) if output_dir else None
        cfg["run"]["name"] = name or exp_name or "spinup"
    if cfg["run"]["task"] is None and exp_name:
        cfg["run"]["task"] = exp_name  # SpinningUp's experiment: its seeds are `<exp_name>_s<seed>` dirs
    return make_logger(cfg)
