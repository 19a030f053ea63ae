"""An rltrack event as a row of a W&B run's history, and the hyperparameters
and checkpoints that go to the W&B run beside its rows.

Why a module of its own: the W&B backend (rltrack.trackers.wandb.backend)
keeps the W&B run's life (`wandb.init`, resuming, the rows W&B has stored,
the rows to skip, `finish`); what W&B makes of each event is decided here:

* **Steps that go backwards are kept.** `run.log(..., step=n)` silently drops a
  row whose step is lower than the last one, which the event's own steps do on
  resume and with several workers. So they are not W&B's step: each row
  carries the event's step axes as ordinary keys, and every key is tied, the
  first time it is seen, to the primary axis of its event with
  `define_metric(key, step_metric=axis)`. Charts use that axis; rows are never
  dropped. A key of the empty namespace that has an axis's name but another
  value is renamed `<key>_value` (report).
* **Kinds as W&B types**: scalars and timings as numbers, histograms as
  `wandb.Histogram`, images as `wandb.Image` and videos as `wandb.Video` (a
  path relative to the run directory, or a nested list of pixels), text as
  `wandb.Html` (escaped, in `<pre>`), hyperparameters as the run's config
  (`config.update(..., allow_val_change=True)` when they change), checkpoints
  as `model` artifacts with aliases `latest`, `iteration_<N>` and `best`.
* **Names W&B refuses or owns**: a value with an empty name, or a text or
  media value whose name W&B cannot make a file name of, is left out before
  sending (delivery does, by the rules `WandbBackend.rules` declares, and counts it); a value named as one of
  W&B's own columns (`_step`, ...) is renamed `user<name>` (report).
"""

from __future__ import annotations

import html
import re
from typing import Any

from rltrack.sinks.base import RunContext
from rltrack.core.events import NUMERIC_KINDS, Event

_ARTIFACT_NAME = re.compile(r"[^A-Za-z0-9_.\-]+")
#: History keys W&B writes itself: the row number, seconds since the run began, wall time, its own data.
RESERVED = frozenset({"_step", "_runtime", "_timestamp", "_wandb"})
#: Kinds whose values W&B writes to a file named after the value's key:
#: `media/<kind>/<key>_<step>_<20 hex digits>.<ext>`, a folder per `/` of the key.
MEDIA_KINDS = ("text", "image", "video")
class RowMaker:
    """The rows, config and artifacts of one rltrack run's W&B run, made from
    its events. `begin` gives it each W&B session's run; the keys tied to a
    step axis (`define_metric`) are remembered across sessions."""

    def __init__(self, run: RunContext, name: str) -> None:
        self.run = run  # the rltrack run: its report and directory
        self.name = name  # the backend's name: its section of the report
        self._wandb: Any = None
        self._run: Any = None
        self._defined: set[str] = set()

    def begin(self, wandb: Any, run: Any) -> None:
        """A W&B session starts: its module, and its W&B run."""
        self._wandb, self._run = wandb, run

    def row(self, event: Event) -> dict[str, Any] | None:
        """Hyperparameters and checkpoints go to W&B here (repeating them is
        harmless); returns the history row of any other event, None if it has none."""
        if event.kind == "hparams":
            self._run.config.update(event.data, allow_val_change=True)
            return None
        if event.kind == "artifact":
            self._checkpoint(event)
            return None
        values = {}
        for key, value in event.data.items():
            try:
                converted = self._convert(event.kind, key, value)
            except Exception as exc:  # noqa: BLE001 - a value W&B refuses is counted, the rest still goes
                self.run.report.count("dropped", f"{event.kind} {event.tag(key)}: {type(exc).__name__}: {exc}", section=self.name)
                continue
            if converted is not None:
                values[self._own_name(event.tag(key))] = converted
        if not values:
            return None
        row = self._with_axes(values, event.steps)
        self._define(row, event.steps)
        return row

    def _convert(self, kind: str, key: str, value: Any) -> Any:
        """The W&B value of one event value, or None (counted) when it has none."""
        wandb = self._wandb
        if kind in NUMERIC_KINDS:
            if value is None:
                self.run.report.count("dropped", "None value", section=self.name)
            return value
        if kind == "histogram":
            return wandb.Histogram(value) if value else None  # NaN and ±inf are left out before (rltrack.core.refusals)
        if kind == "text":
            return wandb.Html(f"<pre>{html.escape(str(value))}</pre>", inject=False, data_is_not_path=True)
        if kind == "image":
            return wandb.Image(self._media(value))
        if kind == "video":
            media = self._media(value)
            return wandb.Video(media) if isinstance(media, str) else wandb.Video(media, format="gif")
        self.run.report.count("dropped", f"kind {kind!r} has no W&B type", section=self.name)
        return None

    def _media(self, value: Any) -> Any:
        """A file path (relative paths are inside the run directory) or a numpy array of pixels."""
        if isinstance(value, str):
            path = self.run.run_dir / value
            if not path.is_file():
                raise FileNotFoundError(f"no file {path}")
            return str(path)
        import numpy

        return numpy.asarray(value)

    def _own_name(self, tag: str) -> str:
        """`tag`, or `user<tag>` for a name W&B gives its own columns (`_step`,
        `_runtime`, `_timestamp`, `_wandb`): W&B would overwrite the value
        with its own, or its own with the value (renamed, in the report)."""
        if tag not in RESERVED:
            return tag
        new = f"user{tag}"
        self.run.report.rename(self.name, tag, new)
        return new

    def _with_axes(self, values: dict[str, Any], steps: dict[str, int]) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for tag, value in values.items():
            if tag in steps and value != steps[tag]:
                new = f"{tag}_value"
                self.run.report.rename(self.name, tag, new)
                tag = new
            row[tag] = value
        row.update(steps)
        return row

    def _define(self, row: dict[str, Any], steps: dict[str, int]) -> None:
        primary = next(iter(steps), None)
        for key in row:
            if key not in self._defined and key not in steps:
                self._run.define_metric(key, step_metric=primary)
                self._defined.add(key)

    def _checkpoint(self, event: Event) -> None:
        wandb = self._wandb
        path = self.run.run_dir / str(event.data.get("path", ""))
        if not path.is_file():
            self.run.report.count("dropped", "checkpoint file missing", section=self.name)
            return
        iteration = event.data.get("iteration")
        metadata = {"steps": event.steps, **{k: v for k, v in event.data.items() if k != "path"}}
        artifact = wandb.Artifact(_ARTIFACT_NAME.sub("_", f"{self._run.name}-{event.namespace or 'ckpt'}"), type="model", metadata=metadata)
        artifact.add_file(str(path), name=path.name, policy="immutable")
        aliases = ["latest"] + ([f"iteration_{iteration}"] if iteration is not None else []) + (["best"] if event.data.get("best") else [])
        self._run.log_artifact(artifact, aliases=aliases)

