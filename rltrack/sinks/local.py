"""The serial run directory that DI-engine and LightZero users know.

    log/<namespace>/<namespace>_logger.txt   a block per dump, plus text records
    log/serial/events.out.tfevents.*         TensorBoard, tag "<namespace>/<key>"
    progress.csv                             every scalar, late keys kept

Every line a text log starts is DI-engine's logging prefix
`[YYYY-mm-dd HH:MM:SS][<where>][INFO] <message>`; where DI-engine names the
source line that logged, rltrack names the record's steps (`env_steps=144
train_iter=50`, `-` for none). The collector, evaluator, learner and buffer
logs read as DI-engine's (see `rltrack.frameworks.stages`), keys in DI-engine's order:
the collector's `collect end:` and one `key: value` line per key; the
evaluator's and buffer's horizontal `Name`/`Value` grids (`{:.6f}` numbers,
see `rltrack.sinks.tables.grid_value`), the evaluator's per-episode returns
under DI-engine's `eval_episode_return` and `eval_episode_return_mean`; the
learner's `=== Training Iteration N Result ===` line, then its grids. The
histogram and text parts of a record (a block's `each_reward` and `ckpt_name`:
same namespace, time and steps as the numbers just tabled) join its block;
`INFO` text is printed one line per line, a learner's `model` as `model:` and
the structure under it. Other namespaces get a two-column box per dump, and
so do collector tables that hold none of the collector block's keys
(`rltrack.frameworks.stages.is_collection`: SB3's exploration rate at an evaluation's
dump is not a collection); other text records `key: value` lines. `tb_axes = ["iter", "step"]` writes each
value as `<namespace>_iter/<key>` against `train_iter` and
`<namespace>_step/<key>` against `env_steps`
(`rltrack.sinks.tfevents.check_tb_axes`); by default tags are
`<namespace>/<key>` at the primary step.

Each file holds whole records only: they are kept in memory until `flush`,
which writes them or, on a full disk, raises and keeps them for the next
(rltrack.sinks.records); the agent retries until the disk takes them
(rltrack.delivery.files).

The rest of the directory (journal, meta.json, total_config.py, ckpt/) is
written by `rltrack.sinks.rundir` for every run, whichever backends are chosen.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any, Sequence

from rltrack.sinks.base import Backend, RunContext
from rltrack.sinks.csvfile import GrowingCsv
from rltrack.sinks.records import RecordFile
from rltrack.sinks.tables import (
    TABLE_SECONDS,
    LatestValues,
    Pending,
    format_grids,
    format_lines,
    format_table,
)
from rltrack.sinks.tfevents import EventFileWriter, check_tb_axes
from rltrack.core.events import NUMERIC_KINDS, Event, tag
from rltrack.sinks.rundir import safe_filename
from rltrack.frameworks.stages import BLOCK_KEYS, INFO_KEY, ITER_AXIS, MODEL_KEY, RETURN_MEAN, is_collection

DEFAULT_NAMESPACE = "main"


class LocalBackend(Backend):
    name = "local"

    def __init__(self, tb_axes: Sequence[str] | None = None) -> None:
        self.tb_axes = None if tb_axes is None else tuple(tb_axes)

    @classmethod
    def validate(cls, settings: dict[str, Any]) -> None:
        check_tb_axes(settings["tb_axes"])

    def open(self, run: RunContext) -> None:
        super().open(run)
        self._log_dir = run.run_dir / "log"
        self._text_logs: dict[str, RecordFile] = {}
        self._tables = LatestValues(min_seconds=TABLE_SECONDS)
        self._row = LatestValues()
        self._tb = EventFileWriter(self._log_dir / "serial", self.tb_axes)
        self._suffix = "" if run.worker is None else f"_{run.worker}"  # several writers: files of their own
        self._csv = GrowingCsv(run.run_dir / f"progress{self._suffix}.csv")

    def write(self, events: list[Event]) -> None:
        """Takes all of `events` or, raising, none of them (see `Backend.write`)."""
        marks = self._tb.mark(), self._csv.mark(), self._tables.mark(), self._row.mark(), {n: log.mark() for n, log in self._text_logs.items()}
        try:
            for event in events:
                self._tb.write(event)
                if event.kind in NUMERIC_KINDS:
                    self._numeric(event)
                elif event.kind in ("text", "histogram") and not self._joined_table(event):
                    if event.kind == "text":
                        self._text_lines(event)
        except Exception:
            tb, csv, tables, row, logs = marks
            self._tb.undo(tb)
            self._csv.undo(csv)
            self._tables.undo(tables)
            self._row.undo(row)
            self._text_logs = {name: log for name, log in self._text_logs.items() if name in logs}
            for name, log in self._text_logs.items():
                log.undo(logs[name])
            raise

    def _joined_table(self, event: Event) -> bool:
        """Adds `event` to its namespace's pending table if it is another part of
        the record tabled last (same time and steps); True if it did."""
        pending = self._tables.pending.get(event.filed_under)
        if pending is None or pending.time != event.time or pending.other_step(event.steps):
            return False
        if event.kind == "text" and not event.data.keys().isdisjoint((INFO_KEY, MODEL_KEY)):
            return False
        pending.values.update(event.filed_data())
        return True

    def _text_lines(self, event: Event) -> None:
        prefix = _prefix(event.time, event.steps)
        lines = []
        for key, value in event.data.items():
            if key == INFO_KEY:
                lines += [f"{prefix}{line}\n" for line in str(value).splitlines()]
            elif key == MODEL_KEY:
                lines.append(f"{prefix}model:\n{value}\n")
            else:
                lines.append(f"{prefix}{event.tag(key) if event.stage else key}: {value}\n")
        self._text_log(event.filed_under).write("".join(lines))

    def _numeric(self, event: Event) -> None:
        data = event.data
        for namespace, pending in self._tables.add(event.filed_under, event.time, event.steps, event.filed_data()):
            self._write_table(namespace, pending)
        tags = _tags(event.namespace, tuple(data))
        if None in data.values():
            row = {tag: value for tag, value in zip(tags, data.values()) if value is not None}
        else:
            row = dict(zip(tags, data.values()))
        for _, pending in self._row.add("", event.time, event.steps, row):
            self._write_row(pending)

    def _write_table(self, namespace: str, pending: Pending) -> None:
        prefix = _prefix(pending.time, pending.steps)
        order = BLOCK_KEYS.get(namespace)
        if order is None or (namespace == "collector" and not is_collection(pending.values)):
            text = f"{prefix}\n{format_table(namespace or DEFAULT_NAMESPACE, pending.values)}\n"
        elif namespace == "collector":
            text = f"{prefix}collect end:\n{format_lines(_in_block_order(pending.values, order))}"
        else:
            values = _in_block_order(pending.values, order)
            if namespace == "evaluator":
                values = _evaluator_names(values)
            text = f"{prefix}\n{format_grids(values)}\n"
            if namespace == "learner" and ITER_AXIS in pending.steps:
                text = f"{prefix}=== Training Iteration {pending.steps[ITER_AXIS]} Result ===\n{text}"
        self._text_log(namespace).write(text)

    def _write_row(self, pending: Pending) -> None:
        self._csv.write_row({"time": pending.time, **pending.steps, **pending.values})

    def _text_log(self, namespace: str) -> RecordFile:
        """`log/<ns>/<ns>_logger.txt` (`<ns>_<worker>_logger.txt` when several
        processes write the run), `<ns>` made one safe path component:
        namespaces like `evaluation/env_runners` or `../x` stay inside `log/`."""
        name = safe_filename(namespace or DEFAULT_NAMESPACE)
        log = self._text_logs.get(name)
        if log is None:  # the folder and the file are made at its first flush
            log = self._text_logs[name] = RecordFile(self._log_dir / name / f"{name}{self._suffix}_logger.txt")
        return log

    def dump(self) -> None:
        for namespace, pending in self._tables.take_all():
            self._write_table(namespace, pending)
        for _, pending in self._row.take_all():
            self._write_row(pending)

    def outputs(self) -> list[Path]:
        return [self._tb.path, self._csv.path, *(log.path for log in self._text_logs.values())]

    def flush(self) -> None:
        self._every_file("flush")

    def close(self, status: str) -> None:
        """Writes the tables still pending and closes the files; on a full disk
        it raises, keeping what is not written for another `close`."""
        self.dump()
        self._every_file("close")

    def _every_file(self, method: str) -> None:
        """Calls `method` of every file, each whatever the others did; raises the first error."""
        first: OSError | None = None
        for file in (self._tb, self._csv, *self._text_logs.values()):
            try:
                getattr(file, method)()
            except OSError as exc:
                first = first or exc
        if first is not None:
            raise first


@functools.lru_cache(maxsize=4096)
def _tags(namespace: str, keys: tuple[str, ...]) -> tuple[str, ...]:
    """progress.csv's columns for a record's keys (`<namespace>/<key>`): records
    repeat their keys, so these are kept rather than built per record."""
    return tuple(tag(namespace, key) for key in keys)


def _prefix(when: float, steps: dict[str, int]) -> str:
    """DI-engine's `[time][<file>:<line>][INFO] `, with the record's steps where DI-engine names its source line."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    where = " ".join(f"{axis}={value}" for axis, value in steps.items()) or "-"
    return f"[{stamp}][{where}][INFO] "


def _evaluator_names(values: dict[str, Any]) -> dict[str, Any]:
    """The evaluator's table as DI-engine 0.5 prints it: the per-episode returns
    (`each_reward`, the block's last key) as `eval_episode_return`, then their
    mean as `eval_episode_return_mean` (the block's `reward_mean`), before the
    framework's own keys (SB3's `mean_reward`)."""
    if "each_reward" not in values:
        return values
    shown = {}
    for key, value in values.items():
        if key != "each_reward":
            shown[key] = value
            continue
        shown["eval_episode_return"] = value
        if "reward_mean" in values:
            shown[RETURN_MEAN] = values["reward_mean"]
    return shown


def _in_block_order(values: dict[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    """The block's canonical keys in DI-engine's order, then the others as they came."""
    known = {key: values[key] for key in order if key in values}
    return {**known, **{k: v for k, v in values.items() if k not in known}}
