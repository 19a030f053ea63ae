"""What a batch of journal events becomes in MLflow: metric, param and tag
names MLflow accepts (`mlflow_key`), and the requests within MLflow's limits
(`MlflowBatch`), with what the backend records once MLflow acknowledged them.

Pure: no MLflow call, no import of `mlflow` (the entity classes are passed
in). rltrack.trackers.mlflow.backend sends what this builds; the mapping itself (what
users see in MLflow) is described there.

A metric's timestamp (`MlflowBatch._stamp`) is its capture time, moved on by
a millisecond past the key's last value at the same step. That is no
duplicate guard: a batch delivered again is kept once by MLflow's primary key
(key, timestamp, step, value), which ignores a row it holds. It keeps apart
two events that key would merge: four vector envs ending equal-length
episodes in one millisecond. It is not derived from delivery's event id
(`EventId(writer, offset)`): the timestamp must stay the capture millisecond
for MLflow's time axis, and whether an event shares its key, step and
millisecond with an earlier one is known only from that earlier event, not
from an offset. The last stamps live in the delivering process
(`MlflowBackend._stamps`), so a delivery that resumes in a new process
between two such events stamps the later one with the earlier's
millisecond: an equal value is then ignored as the earlier's row (lost), and
a different value re-sent over a kill between the store's commit and the
cursor's save is held twice (its first stamp and this one). Making it exact
needs the last stamps saved with the cursor at each stored position, not yet
done.
"""

from __future__ import annotations

import functools
import hashlib
import math
import posixpath
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from rltrack.core.events import NUMERIC_KINDS, Event, tag
from rltrack.core.values import flatten

# MLflow's limits (mlflow.utils.validation, 3.17).
MAX_KEY_LENGTH = 250  # MLflow counts characters; rltrack counts UTF-8 bytes (see `mlflow_key`)
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_METRICS_PER_REQUEST = 1000
MAX_PARAMS_TAGS_PER_REQUEST = 100
MAX_ENTITIES_PER_REQUEST = 1000
REQUEST_BYTES_BUDGET = 900_000  # MLflow refuses requests over 1 MB; leave room for JSON framing

STEP_AXIS_PREFIX = "steps/"

_KEY_CHARS = re.compile(r"[\w\-. :/]*")  # MLflow's rule on POSIX (\w includes non-ASCII letters)
_BAD_KEY_CHAR = re.compile(r"[^\w\-. :/]")

#: Keys whose MLflow name `mlflow_key` remembers: a run's keys are few and
#: repeat every record, and checking one costs a regex and a `normpath`.
KEY_CACHE = 16_384


@functools.lru_cache(maxsize=KEY_CACHE)
def mlflow_key(key: str) -> str:
    """The name `key` gets in MLflow: itself when MLflow accepts it, else a
    cleaned form (bad characters to `_`, no empty, `.` or `..` path parts, no
    leading `/` or `..`) cut to fit, plus `-` and 8 hex digits of the original
    key's SHA-1. A pure function of the key, so the mapping is the same in
    every process and replay, and two different keys never share a name
    (remembered for the last `KEY_CACHE` keys). Lengths are UTF-8 bytes:
    a text's key names its artifact's folder, and a file name holds 255
    bytes (128 × "é" is 128 characters MLflow takes as a metric name, and
    a folder name the file system refuses)."""
    if _accepted(key):
        return key
    parts = [p if p not in (".", "..") else "_" * len(p) for p in _BAD_KEY_CHAR.sub("_", key).split("/") if p]
    clean = re.sub(r"^\.+", lambda m: "_" * len(m.group()), "/".join(parts))
    suffix = "-" + hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return _cut_utf8(clean, MAX_KEY_LENGTH - len(suffix)) + suffix


def _cut_utf8(text: str, size: int) -> str:
    """The longest start of `text` of at most `size` UTF-8 bytes."""
    return text.encode("utf-8")[:size].decode("utf-8", "ignore")


@functools.lru_cache(maxsize=KEY_CACHE)
def metric_names(namespace: str, keys: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(`<namespace>/<key>`, its MLflow name) for each of a record's keys:
    records repeat their keys, so these are kept rather than built per value."""
    return tuple((name, mlflow_key(name)) for name in (tag(namespace, key) for key in keys))


def _accepted(key: str) -> bool:
    """MLflow's own test for metric, param and tag names."""
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_LENGTH or not _KEY_CHARS.fullmatch(key):
        return False
    norm = posixpath.normpath(key)
    return norm == key and norm != "." and not norm.startswith(("..", "/"))


class MlflowBatch:
    """One delivered batch of events turned into what MLflow takes, plus what
    the backend records once MLflow has acknowledged it (new params, last
    step-axis points, report counts and renames)."""

    def __init__(
        self, events: list[Event], run_dir: Path, params: dict[str, str], axes: dict[str, tuple[int, float]], stamps: dict[str, tuple[int, int]]
    ) -> None:  # fmt: skip
        self.run_dir = run_dir
        self.held_params = params
        self.held_axes = axes
        self.held_stamps = stamps
        self.stamps: dict[str, tuple[int, int]] = {}  # key -> (step, ms) of its last value
        self.metrics: list[tuple[str, float, int, int]] = []  # key, value, ms, step
        self.params: dict[str, str] = {}
        self.tags: dict[str, str] = {}
        self.texts: dict[str, str] = {}  # artifact file -> content
        self.files: list[tuple[Path, str | None]] = []  # local file, artifact directory
        self.axes: dict[str, tuple[int, float]] = {}
        self.counts: Counter[tuple[str, str]] = Counter()
        self.renames: dict[str, str] = {}
        self.last_ms = 0
        self._text_files: dict[str, str] = {}  # key -> its artifact file in this batch
        for event in events:
            self._add(event)

    def _add(self, event: Event) -> None:
        ms = int(event.time * 1000)
        self.last_ms = max(self.last_ms, ms)
        step = event.primary_step or 0  # within 64 bits: an event with a step beyond is left out before (rltrack.core.refusals)
        if event.kind in NUMERIC_KINDS:
            self._numbers(event, ms, step)
        elif event.kind == "hparams":
            self._hparams(event)
        elif event.kind == "text":
            self._text(event, step)
        elif event.kind == "artifact":
            self._artifact(event)
        else:  # image, video; histograms MLflow has no type for (left out by delivery, `MlflowBackend.rules`)
            self._media(event)
        self.counts["delivered", f"{event.kind} events"] += 1

    def key(self, name: str) -> str:
        new = mlflow_key(name)
        if new != name:
            self.renames[name] = new
        return new

    def _numbers(self, event: Event, ms: int, step: int) -> None:
        delivered = 0
        metrics, stamp = self.metrics, self._stamp
        for (name, key), value in zip(metric_names(event.namespace, tuple(event.data)), event.data.values()):
            if value is None:
                self.counts["dropped", "None value (no number to log)"] += 1
                continue
            try:
                number = float(value)
            except OverflowError:
                self.counts["dropped", "integer too large for a 64-bit float"] += 1
                continue
            if math.isinf(number):
                self.counts["converted", "±inf stored by MLflow as ±1.8e308"] += 1
            if key != name:
                self.renames[name] = key
            metrics.append((key, number, stamp(key, step, ms), step))
            delivered += 1
        if delivered:
            self.counts["delivered", "metric values"] += delivered
        if len(event.steps) < 2:
            return
        for axis, value in list(event.steps.items())[1:]:
            key = self.key(STEP_AXIS_PREFIX + axis)
            point = (step, float(value))
            if self.axes.get(key, self.held_axes.get(key)) != point:
                self.axes[key] = point
                self.metrics.append((key, float(value), ms, step))

    def _stamp(self, key: str, step: int, ms: int) -> int:
        """The value's timestamp: its capture time, moved on by a millisecond
        past the key's last value at the same step. MLflow's store keeps one
        row per (key, timestamp, step, value): four vector envs ending
        equal-length episodes in one millisecond would otherwise be one value."""
        last = self.stamps.get(key) or self.held_stamps.get(key)
        if last is not None and last[0] == step and last[1] >= ms:
            ms = last[1] + 1
        self.stamps[key] = (step, ms)
        return ms

    def _hparams(self, event: Event) -> None:
        for name, value in flatten(event.data).items():
            key = self.key(name)
            text = str(value)
            if len(text) > MAX_PARAM_VALUE:
                text = text[:MAX_PARAM_VALUE]
                self.counts["converted", f"param value over {MAX_PARAM_VALUE} characters truncated"] += 1
            held = self.params.get(key, self.held_params.get(key))
            if held is None:
                self.params[key] = text
            elif held != text:
                self.tags[self.key(f"changed_param/{name}")] = text[:MAX_TAG_VALUE]
                self.counts["converted", "changed param kept its first value; the new one is in tag changed_param/<key>"] += 1

    def _text(self, event: Event, step: int) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.time))
        for name, text in event.data.items():
            key = self.key(event.tag(name))
            artifact_file = self._text_files.setdefault(key, f"text/{key}/step_{step}_{int(event.time * 1000)}.txt")
            self.texts[artifact_file] = self.texts.get(artifact_file, "") + f"--- step {step} ({stamp})\n{text}\n"

    def _artifact(self, event: Event) -> None:
        posix = self._file(event.data.get("path"), "artifact event")
        if posix is not None and event.data.get("best"):
            self.tags["rltrack.best_checkpoint"] = posix

    def _media(self, event: Event) -> None:
        """Images and videos, saved in the run directory by the adapter
        (`{key: {"path": "media/<namespace>/<key>_<step>.png", ...}}`), are
        uploaded as artifacts under the same relative directory. Not with
        `log_image(key=..., step=...)`: MLflow names those files with a random
        id, so a batch delivered again would show each image twice."""
        for value in event.data.values():
            if self._file(value.get("path") if isinstance(value, dict) else value, f"{event.kind} value") is not None:
                self.counts["delivered", f"{event.kind} files"] += 1

    def _file(self, relative: Any, what: str) -> str | None:
        """Queues the run directory's file at `relative` for upload under its
        own relative directory; its posix path, or None (counted) when it is no
        file of the run directory."""
        local = self.run_dir / relative if isinstance(relative, str) and relative else None
        if local is None or not local.is_file() or not local.resolve().is_relative_to(self.run_dir.resolve()):
            self.counts["dropped", f"{what} whose file is not in the run directory"] += 1
            return None
        posix = Path(relative).as_posix()
        self.files.append((local, posixpath.dirname(posix) or None))
        return posix

    def requests(self, entities: Any) -> Iterator[dict[str, list[Any]]]:
        """`log_batch` keyword arguments within MLflow's per-request limits:
        ≤ 1000 metrics, ≤ 100 params, ≤ 100 tags, ≤ 1000 in all, < 1 MB."""
        items: list[tuple[str, Any, int]] = [
            *(("params", entities.Param(k, v), _size(k, v)) for k, v in self.params.items()),
            *(("metrics", entities.Metric(k, v, ms, step), _size(k, "")) for k, v, ms, step in self.metrics),
            *(("tags", entities.RunTag(k, v), _size(k, v)) for k, v in self.tags.items()),
        ]
        request: dict[str, list[Any]] = {"metrics": [], "params": [], "tags": []}
        count = size = 0
        for kind, item, item_size in items:
            limit = MAX_METRICS_PER_REQUEST if kind == "metrics" else MAX_PARAMS_TAGS_PER_REQUEST
            if count and (
                count == MAX_ENTITIES_PER_REQUEST or len(request[kind]) == limit or size + item_size > REQUEST_BYTES_BUDGET
            ):
                yield request
                request = {"metrics": [], "params": [], "tags": []}
                count = size = 0
            request[kind].append(item)
            count += 1
            size += item_size
        if count:
            yield request


def _size(key: str, value: str) -> int:
    """An upper bound of the item's bytes in the request's JSON (non-ASCII
    characters may be escaped as \\uXXXX, six bytes each)."""
    text = key + value
    return 100 + (len(text) if text.isascii() else 6 * len(text))
